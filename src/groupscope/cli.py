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
            _load(args.warehouse, landed.read())
    elif args.warehouse:
        from groupscope.tables import to_tables

        _load(args.warehouse, to_tables(snapshot))
    if args.format == "json":
        # Indented for a person at a terminal, compact into a pipe. dumps, not dump: dump
        # streams through the pure-Python encoder, several times slower on a large cluster.
        indent = 2 if sys.stdout.isatty() else None
        sys.stdout.write(json.dumps(snapshot_json(snapshot), ensure_ascii=False, indent=indent))
        sys.stdout.write("\n")
    else:
        print(snapshot_table(snapshot))
    return 0


def _load(url: str, tables: Any) -> None:
    from groupscope import warehouse

    engine = warehouse.engine_for(url)
    try:
        warehouse.migrate(engine)
        warehouse.load_snapshot(engine, tables)
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
