"""P5, freshness: how long after a snapshot is taken its status rows are queryable in the
warehouse, in steady state of ``./run`` (the demo workload, ``airflow standalone``, snapshots
every 15 s, the live DAG on the Spark Connect server, the analytics DAG on its schedule), and
the false-alarm soak with it: a member joins a healthy demo group and leaves it cleanly every
``--churn-every`` seconds; every notification is caught, and none may be for a healthy group.

Runs the main job (``dev/stack run``, the code ``./run`` runs) in a state folder of its own on
free ports for ``--minutes``, and polls the warehouse every ``--poll`` seconds: a snapshot's
freshness is the first poll that sees its rows in ``mart.group_status`` minus its
``snapshot_ts`` (the time the collector was started: the snapshot time the marts carry). The
first ``--warmup`` minutes after the first status rows are left out (first runs). Also reports the
``live_marts`` task durations on Spark Connect and where the time goes, hop by hop (from
Airflow's metadata database), then, with
the stack kept, the same interval through the spark-submit fallback (the lag job of one
snapshot, a JVM per run).

    .venv/bin/python bench/freshness_bench.py [--minutes 30] [--warmup 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _env(env_file: Path) -> dict[str, str]:
    if not env_file.exists():
        return {}
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)


def _task_durations(db: Path, task_id: str) -> list[tuple[str, float]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return [(r[0], float(r[1])) for r in conn.execute(
                "SELECT start_date, duration FROM task_instance WHERE task_id = ? AND"
                " state = 'success' AND duration IS NOT NULL ORDER BY start_date", (task_id,))]
    except sqlite3.Error:
        return []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--every", type=float, default=15.0)
    parser.add_argument("--fallback-runs", type=int, default=3,
                        help="spark-submit runs of the fallback to time at the end (0: none)")
    parser.add_argument("--churn-every", type=float, default=120.0,
                        help="the false-alarm soak: every so many seconds a member joins a "
                             "healthy demo group and leaves it cleanly a minute later (0: none)")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "dev"), str(ROOT / "src")]
    from sqlalchemy import text

    from groupscope import warehouse
    from groupscope_dev.demo import HEALTHY
    from groupscope_dev.ports import free_port_block, free_ports
    from groupscope_dev.webhookcatcher import WebhookCatcher

    state = Path(tempfile.mkdtemp(prefix="freshness-"))
    catcher = WebhookCatcher(state / "webhook")  # every notification of the run
    catcher.start()
    stopping = threading.Event()
    churn: list[str] = []
    env_file = state / "stack.env"
    pg, airflow_port, connect_port = free_ports(3)
    total_s = (args.warmup + args.minutes) * 60
    command = [sys.executable, "-m", "groupscope_dev", "--state-dir", str(state / "stack"),
               "--env-file", str(env_file), "run", "--kafka-port", str(free_port_block(1)),
               "--pg-port", str(pg), "--airflow-port", str(airflow_port),
               "--spark-connect-port", str(connect_port), "--every", str(args.every),
               "--duration", str(total_s), "--keep"]
    log = (state / "run.log").open("ab")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'dev'}{os.pathsep}{ROOT / 'src'}",
           "GROUPSCOPE_ALERT_WEBHOOK_URL": catcher.url}
    print(f"running the main job for {total_s / 60:.0f} min; log {state / 'run.log'}",
          flush=True)
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    seen: dict[datetime, float] = {}
    engine: Any = None
    durations: list[tuple[str, float]] = []
    db = state / "stack" / "airflow" / "airflow.db"
    started = time.time()
    last_tasks = 0.0
    try:
        while run.poll() is None:
            time.sleep(args.poll)
            if engine is None:
                url = _env(env_file).get("WAREHOUSE_URL")
                if not url:
                    continue
                engine = warehouse.engine_for(url)
                if args.churn_every > 0:
                    threading.Thread(target=_churn, daemon=True, args=(
                        _env(env_file)["KAFKA_BOOTSTRAP"], args.churn_every, stopping, churn,
                    )).start()
            try:
                with engine.connect() as conn:
                    rows = conn.execute(text(
                        "SELECT DISTINCT snapshot_ts FROM mart.group_status"
                        " WHERE snapshot_ts > now() - interval '10 minutes'")).scalars().all()
            except Exception:  # the warehouse is starting or going
                continue
            now = time.time()
            for ts in rows:
                seen.setdefault(ts, now)
            if now - last_tasks > 30:
                durations = _task_durations(db, "live_marts") or durations
                last_tasks = now
        with engine.connect() as conn:
            loaded = conn.execute(text("SELECT snapshot_ts FROM raw.snapshots ORDER BY 1")
                                  ).scalars().all()
        # Steady state: from --warmup minutes after the first snapshot had its status rows.
        first = min((ts for ts in seen), default=datetime.fromtimestamp(started, UTC))
        steady_from = first + timedelta(minutes=args.warmup)
        hops = _hops(db, [ts for ts in loaded if ts >= steady_from])
        fallback = _fallback(state, env_file, loaded, args.fallback_runs)
    finally:
        stopping.set()
        if run.poll() is None:
            run.terminate()
            run.wait(120)
        subprocess.run([sys.executable, "-m", "groupscope_dev", "--state-dir",
                        str(state / "stack"), "--env-file", str(env_file), "down"],
                       cwd=ROOT, env=env, check=False, capture_output=True)
        catcher.stop()  # after the stack: its last notifications count too
        if engine is not None:
            engine.dispose()
    raw = {"seen": {ts.isoformat(): at for ts, at in seen.items()},
           "loaded": [ts.isoformat() for ts in loaded], "live_marts": durations, "hops": hops,
           "fallback": fallback}
    (state / "freshness.json").write_text(json.dumps(raw))
    print(f"raw data: {state / 'freshness.json'}")
    lags = [seen[ts] - ts.timestamp() for ts in loaded if ts >= steady_from and ts in seen]
    missing = [ts for ts in loaded if ts >= steady_from and ts not in seen]
    steady = [d for start, d in durations
              if datetime.fromisoformat(start).replace(tzinfo=UTC) >= steady_from]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.python_version()}, load average now {os.getloadavg()[0]:.1f}")
    print(f"snapshots in steady state: {len(lags) + len(missing)} "
          f"({len(missing)} without status rows at the end)")
    if lags:
        print(f"freshness (status rows queryable after the snapshot): median "
              f"{statistics.median(lags):.1f} s, p95 {_pct(lags, 0.95):.1f} s, "
              f"min {min(lags):.1f} s, max {max(lags):.1f} s; within 60 s: "
              f"{sum(v <= 60 for v in lags)}/{len(lags)}")
    if steady:
        print(f"live_marts on Spark Connect ({len(steady)} runs): median "
              f"{statistics.median(steady):.1f} s, p95 {_pct(steady, 0.95):.1f} s")
    if hops:
        print("where the time goes (each hop's median and p95 over the steady state's snapshots):")
    for hop, values in hops.items():
        print(f"  {hop:<46} median {statistics.median(values):5.1f} s  p95 "
              f"{_pct(values, 0.95):5.1f} s  ({len(values)})")
    notified: dict[str, list[str]] = {}
    for body in catcher.bodies:
        for incident in body.get("incidents", []):
            notified.setdefault(str(incident.get("group") or incident.get("rule")), []).append(
                f"{incident.get('rule')} {incident.get('notification')}")
    print(f"the soak: {len(churn)} joins and clean leaves of healthy groups "
          f"({', '.join(sorted(set(churn)))}); notifications for the healthy groups "
          f"({', '.join(HEALTHY)}): {sum(len(notified.get(g, [])) for g in HEALTHY)}")
    for subject, what in sorted(notified.items()):
        print(f"  notified: {subject}: {', '.join(what)}")
    if fallback:
        print(f"the lag job of one snapshot through spark-submit ({len(fallback)} runs): "
              f"median {statistics.median(fallback):.1f} s")
    return 0


def _churn(bootstrap: str, every_s: float, stopping: threading.Event, done: list[str]) -> None:
    """A member joins a healthy demo group, consumes for a minute and leaves cleanly (a
    rebalance each way), every ``every_s``, taking the eager and the KIP-848 group in turn."""
    from confluent_kafka import Consumer

    from groupscope_dev.demo import DEMO_GROUPS

    specs = {spec.group_id: spec for spec in DEMO_GROUPS}
    turn = 0
    while not stopping.wait(every_s):
        spec = specs[("demo-range", "demo-kip848")[turn % 2]]
        turn += 1
        config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": spec.group_id,
                                  "enable.auto.commit": True, "auto.commit.interval.ms": 5000}
        if spec.protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:
            config["partition.assignment.strategy"] = spec.assignor
        consumer = Consumer(config)
        try:
            consumer.subscribe(list(spec.topics))
            until = time.monotonic() + 60
            while time.monotonic() < until and not stopping.is_set():
                consumer.poll(0.5)
        finally:
            consumer.close()  # a clean leave
        done.append(spec.group_id)


def _utc(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text).replace(tzinfo=UTC)


def _hops(db: Path, snapshots: list[datetime]) -> dict[str, list[float]]:
    """Where a snapshot's time goes on its way to its status rows, hop by hop, from the task
    instances of the snapshot DAG run that took it and of the live DAG run its load
    triggered (the first that started after the load ended)."""
    if not db.exists():
        return {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        rows = conn.execute(
            "SELECT dag_id, run_id, task_id, start_date, end_date FROM task_instance"
            " WHERE state = 'success' AND start_date IS NOT NULL").fetchall()
    runs: dict[tuple[str, str], dict[str, tuple[datetime, datetime]]] = {}
    for dag_id, run_id, task_id, start, end in rows:
        began, ended = _utc(start), _utc(end)
        if began is not None and ended is not None:
            runs.setdefault((dag_id, run_id), {})[task_id] = (began, ended)
    snapshot_runs = [t for (dag, _), t in runs.items()
                     if dag.startswith("groupscope_snapshot_") and {"collect", "load"} <= set(t)]
    live_runs = sorted((t for (dag, _), t in runs.items()
                        if dag.startswith("groupscope_live_") and "live_marts" in t),
                       key=lambda t: t["live_marts"][0])
    hops: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        hops.setdefault(name, []).append(seconds)

    for ts in snapshots:
        run = next((t for t in snapshot_runs
                    if t["collect"][0] <= ts <= t["collect"][1]), None)
        if run is None:
            continue
        live = next((t for t in live_runs if t["live_marts"][0] >= run["load"][1]), None)
        add("collect (snapshot taken -> task done)", (run["collect"][1] - ts).total_seconds())
        add("  wait for load", (run["load"][0] - run["collect"][1]).total_seconds())
        add("  load (the gate, then the load)", (run["load"][1] - run["load"][0]
                                                  ).total_seconds())
        previous = run["load"][1]
        if live is not None:
            add("  Asset event -> live_marts started",
                (live["live_marts"][0] - previous).total_seconds())
            add("  live_marts (task)", (live["live_marts"][1] - live["live_marts"][0]
                                        ).total_seconds())
            if "evaluate_alerts" in live:
                add("  live_marts done -> evaluate_alerts done",
                    (live["evaluate_alerts"][1] - live["live_marts"][1]).total_seconds())
    return hops


def _fallback(state: Path, env_file: Path, loaded: list[datetime], runs: int = 3) -> list[float]:
    """The fallback's work for the newest snapshot, timed: spark-submit of the lag job."""
    from groupscope.analyze import submit

    url = _env(env_file)["WAREHOUSE_URL"]
    landing = state / "stack" / "landing"
    newest = loaded[-1]
    times = []
    for _ in range(runs):
        argv = submit.command("lag_job.py", [
            "--landing", str(landing), "--cluster", "local", "--start", newest.isoformat(),
            "--end", (newest + timedelta(microseconds=1)).isoformat(), "--warehouse", url])
        began = time.monotonic()
        done = subprocess.run(argv, env=submit.environment(), capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            break
        times.append(time.monotonic() - began)
    return times


if __name__ == "__main__":
    sys.exit(main())
