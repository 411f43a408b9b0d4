"""The ``groupscope`` command. Bad input ends in one line on stderr and a non-zero exit code."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from groupscope.config import ClusterConfig, ConfigError

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


class CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def take_snapshot(cluster: ClusterConfig, timeout_s: float, snapshot_ts: datetime) -> Any:
    from groupscope.collector import ClusterUnavailable, Collector, CollectorSettings
    from groupscope.kafka_admin import AdminConnection

    try:
        connection = AdminConnection(cluster, timeout_s)
    except Exception as exc:  # a bad property is the user's input
        raise CliError(f"invalid client configuration: {_kafka_message(exc)}", EXIT_USAGE) \
            from None
    collector = Collector(connection.admin, cluster.name,
                          CollectorSettings(request_timeout_s=timeout_s),
                          diagnose=connection.diagnosis)
    try:
        return collector.snapshot(snapshot_ts)
    except ClusterUnavailable as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None


def cmd_snapshot(args: argparse.Namespace) -> int:
    from groupscope.report import snapshot_json, snapshot_table

    cluster = ClusterConfig.from_cli(args.bootstrap, args.config or (), args.cluster)
    snapshot = take_snapshot(cluster, args.timeout, datetime.now(UTC))
    if args.land:
        from groupscope.landing import land

        landed = land(snapshot, Path(args.land))
        if args.warehouse:
            _load(args.warehouse, landed.read(), snapshot)
    elif args.warehouse:
        from groupscope.tables import to_tables

        _load(args.warehouse, to_tables(snapshot), snapshot)
    if args.format == "json":
        _print_json(snapshot_json(snapshot))
    else:
        print(snapshot_table(snapshot))
    return 0


def _load(url: str, tables: Any, snapshot: Any) -> None:
    from groupscope import warehouse

    engine = warehouse.engine_for(url)
    try:
        warehouse.migrate(engine)
        warehouse.load_snapshot(engine, tables)
        warehouse.load_whatif(engine, snapshot)
    except warehouse.WarehouseUnavailable as exc:
        raise CliError(f"{exc} (landed data, if any, is kept)", EXIT_UNAVAILABLE) from None
    finally:
        engine.dispose()


def cmd_warehouse(args: argparse.Namespace) -> int:
    from groupscope import warehouse
    from groupscope.landing import landed_snapshots

    engine = warehouse.engine_for(args.url)
    try:
        if args.action == "migrate":
            applied = warehouse.migrate(engine)
            print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied)
                                                           if applied else ""))
            return 0
        warehouse.migrate(engine)
        loaded = warehouse.loaded_snapshot_keys(engine, args.cluster)
        pending = [
            s for s in landed_snapshots(Path(args.landing), args.cluster)
            if (s.cluster, s.snapshot_ts) not in loaded
        ]
        for landed in pending:
            warehouse.load_snapshot(engine, landed.read())
        print(f"loaded {len(pending)} landed snapshot(s) not yet in the warehouse")
        return 0
    except warehouse.WarehouseUnavailable as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    finally:
        engine.dispose()


def cmd_simulate(args: argparse.Namespace) -> int:
    from groupscope.assignors import STRATEGIES, assign
    from groupscope.whatif import advise, moved, skew, what_if

    if args.strategy not in STRATEGIES:
        raise CliError(f"unknown strategy {args.strategy!r}; choose one of "
                       f"{', '.join(STRATEGIES)}", EXIT_USAGE)
    if args.input:
        spec, lag = _simulation_input(args.input)
        result = assign(args.strategy, spec, args.ordering)
        previous = {m: tuple(sorted(p)) for m, p in spec.previous.items()}
        doc: dict[str, Any] = {
            "group_id": args.group, "strategy": args.strategy,
            "assignment": _assignment_json(result),
            "skew": skew(result, lag).as_record(),
            "moved_from_previous": moved(previous, result) if previous else None,
        }
        if previous:
            doc["previous_skew"] = skew(previous, lag).as_record()
        _print_json(doc)
        return 0
    if not args.bootstrap:
        raise CliError("give --bootstrap (a live group) or --input FILE", EXIT_USAGE)
    cluster = ClusterConfig.from_cli(args.bootstrap, args.config or (), args.cluster)
    snapshot = take_snapshot(cluster, args.timeout, datetime.now(UTC))
    group = next((g for g in snapshot.groups if g.group_id == args.group), None)
    if group is None:
        raise CliError(f"no group {args.group!r} in cluster {cluster.name!r}", EXIT_USAGE)
    analysis = what_if(group, snapshot, (args.strategy,))
    if analysis is None:
        raise CliError(f"group {args.group!r} has no members to assign to "
                       f"(state {group.state}, protocol type {group.protocol_type!r})",
                       EXIT_USAGE)
    current, simulated = analysis.scenarios[0], analysis.scenarios[1]
    _print_json({
        "group_id": group.group_id, "strategy": args.strategy,
        "current_strategy": group.assignor,
        "subscriptions_inferred": analysis.subscriptions_inferred,
        "assignment": _assignment_json(simulated.assignment),
        "skew": simulated.skew.as_record(),
        "current": {"assignment": _assignment_json(current.assignment),
                    "skew": current.skew.as_record()},
        "moved_from_current": moved(current.assignment, simulated.assignment),
        "recommendations": [{"recommendation": r, "reason": why}
                            for r, why in advise(group.assignor, list(analysis.scenarios))],
    })
    return 0


def _simulation_input(path: str) -> tuple[Any, Any]:
    """{"members": [{"member_id", "topics": [...], "instance_id"?}], "topics": {"t": 6},
    "previous": {member_id: [{"topic", "partition"}]}?, "lag": [{"topic", "partition",
    "lag"}]?}"""
    from groupscope.assignors import AssignmentInput, MemberSpec
    from groupscope.model import TopicPartition

    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
        members = tuple(
            MemberSpec(str(m["member_id"]), frozenset(map(str, m["topics"])),
                       m.get("instance_id"))
            for m in doc["members"]
        )
        topics = {str(t): int(n) for t, n in doc["topics"].items()}
        previous = {
            str(m): tuple(TopicPartition(str(p["topic"]), int(p["partition"])) for p in parts)
            for m, parts in (doc.get("previous") or {}).items()
        }
        lag = {TopicPartition(str(x["topic"]), int(x["partition"])): int(x["lag"])
               for x in doc.get("lag") or ()}
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", EXIT_USAGE) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CliError(f"{path} is not a simulation input ({type(exc).__name__}: {exc}); "
                       "see groupscope simulate --help", EXIT_USAGE) from None
    return AssignmentInput(members, topics, previous), lag


def _assignment_json(assignment: Any) -> dict[str, list[dict[str, Any]]]:
    return {m: [{"topic": p.topic, "partition": p.partition} for p in parts]
            for m, parts in sorted(assignment.items())}


def _print_json(doc: Any) -> None:
    # Indented for a person at a terminal, compact into a pipe. dumps, not dump: dump
    # streams through the pure-Python encoder, several times slower on a large cluster.
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=indent) + "\n")


def cmd_demo(args: argparse.Namespace) -> int:
    from groupscope.devstack.demo import Demo

    demo = Demo(args.bootstrap, Path(args.log_dir), kip848=not args.no_kip848)
    demo.start()
    print(f"demo workload running against {args.bootstrap}; logs in {args.log_dir}. "
          "Ctrl-C stops it.", flush=True)
    started = time.monotonic()
    try:
        while args.duration is None or time.monotonic() - started < args.duration:
            time.sleep(args.churn_every)
            if args.churn_every > 0:
                events = demo.churn_once()
                if events:
                    print(f"churn: {events}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="groupscope", description="Monitoring and analytics for Kafka consumer groups."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    snap = sub.add_parser("snapshot", help="snapshot every consumer group of a cluster")
    snap.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    snap.add_argument("--config", action="append", metavar="KEY=VALUE",
                      help="a librdkafka client property (repeatable), e.g. "
                           "security.protocol=SASL_SSL")
    snap.add_argument("--cluster", default="default", help="the name to record (default: default)")
    snap.add_argument("--format", choices=["json", "table"], default="table")
    snap.add_argument("--timeout", type=float, default=15.0,
                      help="seconds per admin request (default 15)")
    snap.add_argument("--land", metavar="DIR", help="also land the snapshot as Parquet under DIR")
    snap.add_argument("--warehouse", metavar="URL",
                      help="also load it into the PostgreSQL warehouse at URL")
    snap.set_defaults(func=cmd_snapshot)

    wh = sub.add_parser("warehouse", help="warehouse schema and loading")
    wh_sub = wh.add_subparsers(dest="action", required=True)
    mig = wh_sub.add_parser("migrate", help="apply the schema migrations in sql/")
    mig.add_argument("--url", default=os.environ.get("WAREHOUSE_URL"),
                     required="WAREHOUSE_URL" not in os.environ)
    load = wh_sub.add_parser("load", help="load landed snapshots not yet in the warehouse")
    load.add_argument("--url", default=os.environ.get("WAREHOUSE_URL"),
                      required="WAREHOUSE_URL" not in os.environ)
    load.add_argument("--landing", required=True, metavar="DIR")
    load.add_argument("--cluster")
    wh.set_defaults(func=cmd_warehouse)

    sim = sub.add_parser(
        "simulate",
        help="what an assignment strategy would do to a group, with skew and advice",
        description="Either a live group (--bootstrap, --group) or members and topics from a "
                    "JSON file (--input): {\"members\": [{\"member_id\", \"topics\": [...], "
                    "\"instance_id\"}], \"topics\": {\"name\": partitions}, "
                    "\"previous\": {member: [{\"topic\", \"partition\"}]}, "
                    "\"lag\": [{\"topic\", \"partition\", \"lag\"}]}",
    )
    sim.add_argument("--bootstrap")
    sim.add_argument("--config", action="append", metavar="KEY=VALUE")
    sim.add_argument("--cluster", default="default")
    sim.add_argument("--group", required=True)
    sim.add_argument("--strategy", required=True,
                     help="range, roundrobin, sticky, cooperative-sticky, uniform, server-range")
    sim.add_argument("--input", metavar="FILE", help="members and topics from a JSON file")
    sim.add_argument("--ordering", choices=["librdkafka", "java"], default="librdkafka",
                     help="member ordering of the client that leads the group (--input only)")
    sim.add_argument("--format", choices=["json"], default="json")
    sim.add_argument("--timeout", type=float, default=15.0)
    sim.set_defaults(func=cmd_simulate)

    demo = sub.add_parser("demo", help="run the demo workload (producers and consumer groups)")
    demo.add_argument("--bootstrap", required=True)
    demo.add_argument("--log-dir", default="dev/.stack/demo")
    demo.add_argument("--duration", type=float, help="stop after this many seconds")
    demo.add_argument("--churn-every", type=float, default=20.0,
                      help="seconds between membership changes (0: none)")
    demo.add_argument("--no-kip848", action="store_true",
                      help="leave out the group.protocol=consumer group (Kafka < 4.0)")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (head, less) went away: not an error of ours
        sys.stderr.close()
        return 0
    return code


def _fail(message: str, code: int) -> int:
    print(f"groupscope: error: {message}", file=sys.stderr)
    return code


def _kafka_message(exc: BaseException) -> str:
    error = exc.args[0] if exc.args else exc
    text = getattr(error, "str", None)
    return str(text()) if callable(text) else str(error)


if __name__ == "__main__":
    sys.exit(main())
