"""P4, alert latency: from ``kill -9`` of a consumer auto-committing every 5 s to the webhook
notification that says it stopped, with the ``./run`` defaults (snapshots every 15 s, the live
DAG on the Spark Connect server, the alert rules as built in, the consumer's own defaults:
a 45 s session timeout).

Runs the main job (``dev/stack run``, the code ``./run`` runs) in a state folder of its own on
free ports, its webhook channel pointed at a catcher in this process. Then, ``--runs`` times: a
new group (one member in its own process, ``enable.auto.commit`` every 5 s) consumes a topic
this script keeps producing to, healthy for ``--healthy`` seconds, then gets SIGKILL (no
LeaveGroup). Timed from the kill, by polling the warehouse every second:

- empty:   the snapshot that first shows the group without members (the session timeout,
           then the wait for the next snapshot), if that came before the notification;
- status_snapshot: the snapshot of the first STOP row, and ``rule`` the rule that decided it
           (``progress_stopped`` when the commits stopping told it before the session timeout,
           ``group_empty`` when the empty group did);
- status:  when that STOP row is queryable in ``mart.partition_status`` (collect, quality
           gate, load, live marts);
- firing:  the incident's ``firing_at`` (the evaluation after the live marts);
- webhook: when the notification reached the catcher.

    .venv/bin/python bench/alert_latency_bench.py [--runs 5] [--healthy 150]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "p4-orders"


def _env(env_file: Path) -> dict[str, str]:
    if not env_file.exists():
        return {}
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)


def _produce(bootstrap: str, stopping: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    while not stopping.is_set():
        for partition in range(3):
            producer.produce(TOPIC, b"x", partition=partition)
        producer.poll(0)
        time.sleep(0.2)
    producer.flush(10)


def _member(bootstrap: str, group: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "member_process.py"),
                             bootstrap, group, TOPIC, "enable.auto.commit=true",
                             "auto.commit.interval.ms=5000"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _one(conn_engine: Any, catcher: Any, bootstrap: str, group: str, healthy_s: float,
         timeout_s: float) -> dict[str, Any]:
    from sqlalchemy import text

    member = _member(bootstrap, group)
    assert member.stdout is not None
    line = member.stdout.readline()
    if not line.startswith("ASSIGNED"):
        raise RuntimeError(f"member of {group} not assigned: {line!r}")
    time.sleep(healthy_s)
    with conn_engine.connect() as conn:
        false_alarms = conn.execute(text(
            "SELECT count(*) FROM ops.alert_incidents WHERE group_id = :g"),
            {"g": group}).scalar_one()
    killed = datetime.now(UTC)
    member.send_signal(signal.SIGKILL)
    member.wait()
    result: dict[str, Any] = {"group": group, "killed": killed.isoformat(),
                              "incidents_while_healthy": false_alarms}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = (datetime.now(UTC) - killed).total_seconds()
        with conn_engine.connect() as conn:
            if "empty" not in result:
                empty = conn.execute(text(
                    "SELECT min(snapshot_ts) FROM raw.consumer_groups WHERE group_id = :g"
                    " AND snapshot_ts > :k AND (state = 'Empty' OR member_count = 0)"),
                    {"g": group, "k": killed}).scalar_one()
                if empty is not None:
                    result["empty"] = (empty - killed).total_seconds()
            if "status" not in result:
                stop = conn.execute(text(
                    "SELECT snapshot_ts, rule FROM mart.partition_status WHERE group_id = :g"
                    " AND snapshot_ts > :k AND status IN ('STOP', 'STALL')"
                    " ORDER BY snapshot_ts LIMIT 1"), {"g": group, "k": killed}).one_or_none()
                if stop is not None:
                    result["status"] = now
                    result["status_snapshot"] = (stop.snapshot_ts - killed).total_seconds()
                    result["rule"] = stop.rule
            firing = conn.execute(text(
                "SELECT min(firing_at) FROM ops.alert_incidents WHERE group_id = :g"
                " AND firing_at > :k"), {"g": group, "k": killed}).scalar_one()
            if firing is not None:
                result["firing"] = (firing - killed).total_seconds()
        for body in list(catcher.bodies):
            if body.get("kind") == "firing" and any(
                    i.get("group") == group for i in body.get("incidents", [])):
                result["webhook"] = (datetime.fromisoformat(body["_received"])
                                     - killed).total_seconds()
                result["text"] = body.get("text", "")
                return result
    result["webhook"] = None
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--healthy", type=float, default=150.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--churn-every", type=float, default=240.0,
                        help="a false-alarm soak beside the runs: every so many seconds a member "
                             "joins a healthy demo group and leaves it cleanly (0: none)")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "dev"), str(ROOT / "src"), str(ROOT / "tests"),
                    str(ROOT / "bench")]
    from freshness_bench import _churn
    from kafkautil import create_topic

    from groupscope import warehouse
    from groupscope_dev.demo import HEALTHY
    from groupscope_dev.ports import free_port_block, free_ports
    from groupscope_dev.webhookcatcher import WebhookCatcher

    class Catcher(WebhookCatcher):
        def keep(self, body: dict[str, Any]) -> None:
            super().keep({**body, "_received": datetime.now(UTC).isoformat()})

    state = Path(tempfile.mkdtemp(prefix="alert-latency-"))
    catcher = Catcher(state / "webhook")  # webhook.log: the notifications as a person reads them
    catcher.start()
    env_file = state / "stack.env"
    pg, airflow_port, connect_port = free_ports(3)
    command = [sys.executable, "-m", "groupscope_dev", "--state-dir", str(state / "stack"),
               "--env-file", str(env_file), "run", "--kafka-port", str(free_port_block(1)),
               "--pg-port", str(pg), "--airflow-port", str(airflow_port),
               "--spark-connect-port", str(connect_port), "--duration", "86400"]
    log = (state / "run.log").open("ab")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'dev'}{os.pathsep}{ROOT / 'src'}",
           "GROUPSCOPE_ALERT_WEBHOOK_URL": catcher.url}
    print(f"main job starting; log {state / 'run.log'}", flush=True)
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    stopping = threading.Event()
    engine: Any = None
    results: list[dict[str, Any]] = []
    try:
        while engine is None or not _has_status(engine):
            if run.poll() is not None:
                raise RuntimeError(f"the main job exited {run.returncode}; see {state}/run.log")
            time.sleep(5)
            url = _env(env_file).get("WAREHOUSE_URL")
            if url and engine is None:
                engine = warehouse.engine_for(url)
        bootstrap = _env(env_file)["KAFKA_BOOTSTRAP"]
        create_topic(bootstrap, TOPIC, 3)
        threading.Thread(target=_produce, args=(bootstrap, stopping), daemon=True).start()
        churn: list[str] = []
        if args.churn_every > 0:
            threading.Thread(target=_churn, args=(bootstrap, args.churn_every, stopping, churn),
                             daemon=True).start()
        print("stack up; first status rows in the warehouse", flush=True)
        for n in range(args.runs):
            result = _one(engine, catcher, bootstrap, f"p4-payments-{n}", args.healthy,
                          args.timeout)
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "text"}), flush=True)
    finally:
        stopping.set()
        run.send_signal(signal.SIGTERM)
        try:
            run.wait(180)
        except subprocess.TimeoutExpired:
            run.kill()
        catcher.stop()
        if engine is not None:
            engine.dispose()
    (state / "alert_latency.json").write_text(json.dumps(results, indent=1))
    print(f"raw data: {state / 'alert_latency.json'}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.python_version()}, load average now {os.getloadavg()[0]:.1f}")
    delivered = [r for r in results if r.get("webhook") is not None]
    print(f"runs: {len(results)}, notified: {len(delivered)}, incidents while healthy: "
          f"{sum(r['incidents_while_healthy'] for r in results)}")
    print("rules that decided the STOP: " + ", ".join(
        sorted(str(r.get("rule")) for r in delivered)))
    for key, what in (("empty", "kill -> first snapshot without members"),
                      ("status_snapshot", "kill -> snapshot of the first STOP row"),
                      ("status", "kill -> that STOP row queryable"),
                      ("firing", "kill -> incident firing"),
                      ("webhook", "kill -> webhook notification")):
        values = [r[key] for r in delivered if r.get(key) is not None]
        if values:
            print(f"{what:<42} median {statistics.median(values):6.1f} s  "
                  f"min {min(values):6.1f} s  max {max(values):6.1f} s")
    healthy = [f"{i.get('group')}: {i.get('rule')} {i.get('notification')}"
               for body in catcher.bodies for i in body.get("incidents", [])
               if i.get("group") in HEALTHY]
    print(f"the soak: {len(churn)} joins and clean leaves of healthy demo groups; "
          f"notifications for the healthy groups ({', '.join(HEALTHY)}): {len(healthy)}"
          + "".join(f"\n  {line}" for line in healthy))
    if delivered:
        print("a notification as received:\n" + delivered[-1]["text"])
    return 0 if len(delivered) == len(results) else 1


def _has_status(engine: Any) -> bool:
    from sqlalchemy import text

    try:
        with engine.connect() as conn:
            return bool(conn.execute(text("SELECT count(*) FROM mart.group_status")
                                     ).scalar_one())
    except Exception:  # the warehouse is starting
        return False


if __name__ == "__main__":
    sys.exit(main())
