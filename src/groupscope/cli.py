"""The ``groupscope`` command. Bad input ends in one line on stderr and a non-zero exit code."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from groupscope.contract.cluster import ClusterConfig, ConfigError
from groupscope.kafka.admin import ClusterUnavailable
from groupscope.serve.grafana import READER_PASSWORD_ENV
from groupscope.settings import Settings, SettingsError, load_settings, reveal

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


class CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _collector_settings(timeout_s: float) -> Any:
    """The collector's settings for a command: the request timeout given, and the share and
    streams groups' settings of the environment (GROUPSCOPE_GROUP_KINDS,
    GROUPSCOPE_KAFKA_JAVA_CLASSPATH)."""
    from groupscope.collect.collector import CollectorSettings

    settings = load_settings()
    return CollectorSettings(request_timeout_s=timeout_s, group_kinds=settings.group_kinds,
                             java_classpath=settings.kafka_java_classpath)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from groupscope.collect.isolated import take_snapshot_isolated as take_snapshot
    from groupscope.pipeline import land_snapshot
    from groupscope.serve.report import snapshot_json, snapshot_table

    cluster = ClusterConfig.from_cli(args.bootstrap, args.config or (), args.cluster)
    snapshot = take_snapshot(cluster, args.timeout, datetime.now(UTC),
                             settings=_collector_settings(args.timeout))
    landed = None
    if args.landing:
        landed = land_snapshot(snapshot, Path(args.landing))
    if args.warehouse:
        _load(args.warehouse, snapshot, landed)
    if args.format == "json":
        _print_json(snapshot_json(snapshot))
    else:
        print(snapshot_table(snapshot))
    return 0


def _load(url: str, snapshot: Any, landed: Any) -> None:
    """Loads the snapshot (raw tables and what-if): from the landing zone when it was landed."""
    from groupscope import warehouse
    from groupscope.contract.tables import to_tables

    engine = warehouse.engine_for(url)
    try:
        warehouse.check_migrated(engine)
        if landed is not None:
            warehouse.load_landed(engine, landed)
        else:
            warehouse.load_snapshot(engine, to_tables(snapshot))
            warehouse.load_whatif(engine, snapshot)
    except warehouse.WarehouseUnavailable as exc:
        raise CliError(f"{exc} (landed data, if any, is kept)", EXIT_UNAVAILABLE) from None
    except (warehouse.WarehouseNotMigrated, warehouse.LockTimeout,
            warehouse.WriterBusy) as exc:
        raise CliError(f"{exc} (landed data, if any, is kept)") from None
    finally:
        engine.dispose()


def cmd_warehouse(args: argparse.Namespace) -> int:
    from groupscope import warehouse

    if args.action == "create-reader":
        return cmd_warehouse_create_reader(args)
    if args.action == "load":
        return _load_backlog(args)
    engine = warehouse.engine_for(args.url)
    try:
        return _migrate(engine, args)
    except warehouse.WarehouseUnavailable as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    except (warehouse.WarehouseNotMigrated, warehouse.LockTimeout) as exc:
        raise CliError(str(exc)) from None
    finally:
        engine.dispose()


# ``warehouse load`` looks at the whole landing zone, not the DAG's last day.
ALL_LANDED = timedelta(days=36_500)


def _load_backlog(args: argparse.Namespace) -> int:
    """Every landed snapshot not yet loaded, through the snapshot DAG's own gate
    (``pipeline.check_and_load``): checked, quarantined when its files cannot be read,
    rejected (and marked) when it fails the checks; what passes is loaded."""
    from groupscope import pipeline, quality
    from groupscope.contract import layout

    landing = Path(args.landing)
    clusters = [args.cluster] if args.cluster else sorted(
        {layout.manifest_cluster(m) for m in layout.manifest_paths(landing)})
    loaded, rejected = 0, 0
    try:
        for cluster in clusters:
            # A run that rejects a snapshot loads the others and then says so.
            try:
                loaded += len(pipeline.check_and_load(
                    args.url, landing, cluster, datetime.now(UTC), sys.maxsize, ALL_LANDED))
            except quality.QualityGateFailed as exc:
                loaded += len(exc.loaded)
                rejected += sum(not r.success for r in exc.results)
                print(f"cluster {cluster}: {exc}", file=sys.stderr)
    except pipeline.WarehouseUnreachable as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    except pipeline.StageFailed as exc:
        raise CliError(str(exc)) from None
    print(f"loaded {loaded} landed snapshot(s) not yet in the warehouse"
          + (f"; {rejected} failed the checks and were rejected (marked in the landing zone)"
             if rejected else ""))
    return 1 if rejected else 0


def _migrate(engine: Any, args: argparse.Namespace) -> int:
    """The plan first (what is pending, how long and how much disk a copy takes), then the
    migrations with each step as it starts; ``--plan`` stops after the plan."""
    from groupscope import warehouse

    for line in warehouse.migration_plan(engine).describe():
        print(line, flush=True)
    if args.plan:
        return 0
    started = time.monotonic()
    applied = warehouse.migrate(engine, lock_timeout_s=args.lock_timeout
                                or warehouse.MIGRATION_LOCK_TIMEOUT_S,
                                progress=lambda line: print(line, flush=True))
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied
                                                   else "")
          + f" in {time.monotonic() - started:.1f} s")
    return 0


ADMIN_URL_ENV = "WAREHOUSE_ADMIN_URL"
# The sslmodes Grafana's PostgreSQL datasource takes.
GRAFANA_SSLMODES = ("disable", "require", "verify-ca", "verify-full")


def cmd_warehouse_create_reader(args: argparse.Namespace) -> int:
    """Creates or updates grafana_reader as a role that may create roles (a superuser or a
    DBA); the admin URL from WAREHOUSE_ADMIN_URL or --admin-url (without a password: PGPASSWORD
    or ~/.pgpass), the reader's password from GROUPSCOPE_READER_PASSWORD only."""
    import psycopg
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from groupscope import warehouse

    url = args.admin_url or os.environ.get(ADMIN_URL_ENV)
    if not url:
        raise CliError(f"no admin connection: set {ADMIN_URL_ENV} (a role that may create "
                       "roles) or give --admin-url", EXIT_USAGE)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise CliError(f"{ADMIN_URL_ENV}/--admin-url is not a database URL "
                       "(postgresql://user@host:port/database)", EXIT_USAGE) from None
    if args.admin_url and parsed.password:
        raise CliError(f"--admin-url must not hold a password (it would stay in the shell "
                       f"history): set {ADMIN_URL_ENV}, or PGPASSWORD, instead", EXIT_USAGE)
    password = os.environ.get(READER_PASSWORD_ENV, "")
    if not password:
        raise CliError(f"set {READER_PASSWORD_ENV}: the password grafana_reader logs in with "
                       "(Grafana's datasource reads the same variable)", EXIT_USAGE)
    engine = warehouse.engine_for(url)
    where = warehouse.safe_url(url)
    try:
        with warehouse.connect(engine) as conn:
            warehouse.create_reader_role(conn, password, owner=args.owner)
            conn.commit()
    except warehouse.WarehouseUnavailable as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    except (SQLAlchemyError, psycopg.Error) as exc:
        # (the role's SQL runs on the raw psycopg connection: its errors arrive unwrapped)
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise CliError(f"cannot create {warehouse.READER_ROLE} in {where}: {reason}") from None
    finally:
        engine.dispose()
    print(f"{warehouse.READER_ROLE} created or updated in {where} (read-only, SELECT on the "
          "serve views)")
    return 0


def cmd_grafana(args: argparse.Namespace) -> int:
    try:
        return int(args.grafana_func(args))
    except ModuleNotFoundError as exc:
        if exc.name not in ("grafana_foundation_sdk", "grafana_client"):
            raise
        raise CliError(f"the grafana commands need {exc.name}: install the grafana extra "
                       "(pip install 'groupscope[grafana]')", EXIT_USAGE) from None


def _grafana_common(args: argparse.Namespace) -> dict[str, Any]:
    """What provision and publish share: the rules, where Grafana reaches the warehouse,
    whether Grafana alerting is on and the snapshot interval."""
    from groupscope.serve.grafana.alerting import AlertingError, enabled_from_env
    from groupscope.serve.grafana.provision import Warehouse

    settings = load_settings()
    rules = _rules(args.rules or (str(settings.alert_rules) if settings.alert_rules else None))
    host, port, database, sslmode = "warehouse", 5432, "groupscope", "disable"
    sslrootcert = None
    url = reveal(settings.warehouse_url)
    if url:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        host, port = parsed.host or host, parsed.port or port
        database = parsed.database or database
        query_sslmode = parsed.query.get("sslmode")
        query_rootcert = parsed.query.get("sslrootcert")
        sslrootcert = query_rootcert if isinstance(query_rootcert, str) else None
        if isinstance(query_sslmode, str):
            # Grafana's datasource knows no libpq "prefer" or "allow": both may run without TLS.
            sslmode = ("disable" if query_sslmode in ("prefer", "allow") else query_sslmode)
        if sslmode not in GRAFANA_SSLMODES and not args.sslmode:
            raise CliError(f"WAREHOUSE_URL's sslmode={sslmode} is not one Grafana's PostgreSQL "
                           f"datasource takes ({', '.join(GRAFANA_SSLMODES)}): give --sslmode",
                           EXIT_USAGE)
    warehouse = Warehouse(args.db_host or host, args.db_port or port,
                          args.database or database, args.sslmode or sslmode, sslrootcert)
    enabled = args.grafana_alerting or enabled_from_env(os.environ)
    try:
        from groupscope.serve.grafana.alerting import grafana_rules

        grafana_rules(rules, enabled=enabled, snapshot_every=settings.snapshot_every)
    except AlertingError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return {"rules": rules, "warehouse": warehouse, "grafana_alerting": enabled,
            "snapshot_every": settings.snapshot_every}


def cmd_grafana_provision(args: argparse.Namespace) -> int:
    from groupscope.serve.grafana.provision import write_tree

    common = _grafana_common(args)
    written = write_tree(Path(args.directory), common["rules"], warehouse=common["warehouse"],
                         grafana_alerting=common["grafana_alerting"],
                         snapshot_every=common["snapshot_every"], environ=os.environ,
                         all_channels=args.all_channels, mount_path=args.mount_path)
    for path in written:
        print(path)
    state = "ON (unpaused)" if common["grafana_alerting"] else "paused"
    print(f"Grafana alert rules: {state}; datasource {common['warehouse'].url}/"
          f"{common['warehouse'].database} as grafana_reader")
    return 0


def cmd_grafana_publish(args: argparse.Namespace) -> int:
    from groupscope.serve.grafana.publish import PublishError, credentials_from_env, publish

    common = _grafana_common(args)
    try:
        credentials = credentials_from_env(os.environ)
        outcomes = publish(args.url, common["rules"], credentials=credentials,
                           warehouse=common["warehouse"], environ=os.environ,
                           grafana_alerting=common["grafana_alerting"],
                           snapshot_every=common["snapshot_every"], timeout=args.timeout)
    except PublishError as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.action] = counts.get(outcome.action, 0) + 1
    print("published to " + args.url.rstrip("/") + ": " + ", ".join(
        f"{n} {action}" for action, n in sorted(counts.items())))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from groupscope.simulate.assignors import STRATEGIES, assign
    from groupscope.simulate.whatif import advise, moved, skew, what_if

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
    from groupscope.collect.isolated import take_snapshot_isolated as take_snapshot

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
    from groupscope.contract.model import TopicPartition
    from groupscope.simulate.assignors import AssignmentInput, MemberSpec

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


def cmd_offsets(args: argparse.Namespace) -> int:
    from groupscope.offsets.ingest import ingest_cluster

    cluster = ClusterConfig.from_cli(args.bootstrap, args.config or (), args.cluster)
    result = ingest_cluster(cluster, Path(args.landing), datetime.now(UTC), args.timeout,
                            args.run_timeout, args.batch_records)
    _print_json(result.as_dict())
    if not result.complete:
        print("groupscope: warning: ingest is incomplete (see \"incomplete\"); what was read "
              "is landed and the next run continues from there", file=sys.stderr)
        return 1
    return 0


def cmd_rebalances(args: argparse.Namespace) -> int:
    import tempfile

    from groupscope.kafka.admin import reachable
    from groupscope.kafka.coordinator import offsets_partition_for
    from groupscope.offsets import store
    from groupscope.offsets.events import EVENT_SCHEMAS
    from groupscope.offsets.ingest import OFFSETS_TOPIC, ingest_cluster
    from groupscope.offsets.timeline import build_timeline
    from groupscope.serve.report import timeline_table

    cluster = ClusterConfig.from_cli(args.bootstrap, args.config or (), args.cluster)
    connection = reachable(cluster, args.timeout)
    topic = connection.admin.list_topics(OFFSETS_TOPIC, timeout=args.timeout).topics.get(
        OFFSETS_TOPIC)
    if topic is None or not topic.partitions:
        raise CliError("the cluster has no __consumer_offsets topic (no group has committed)",
                       EXIT_USAGE)
    partition = offsets_partition_for(args.group, len(topic.partitions))
    with tempfile.TemporaryDirectory(prefix="groupscope-rebalances-") as scratch:
        # With --landing, the landed history (which outlives compaction) is brought up to date
        # and read; without, the group's partition is read from the log into a scratch folder.
        landing = Path(args.landing) if args.landing else Path(scratch)
        result = ingest_cluster(cluster, landing, datetime.now(UTC), args.timeout,
                                args.run_timeout, 50_000, [partition])
        events = {name: store.read_events(landing, cluster.name, name, partition).to_pylist()
                  for name in EVENT_SCHEMAS}
    timeline = build_timeline(args.group, events)
    if timeline.type == "unknown" and not timeline.deleted_at:
        raise CliError(f"no membership records for group {args.group!r} in "
                       f"__consumer_offsets partition {partition} (no such group, a group "
                       "that only commits offsets, or history already compacted away)",
                       EXIT_USAGE)
    source = (f"landed history in {args.landing}" if args.landing else
              f"__consumer_offsets partition {partition}")
    if args.format == "json":
        _print_json({**timeline.as_dict(), "source": {
            "offsets_partition": partition, "history": "landed" if args.landing else "log",
            "complete": result.complete}})
    else:
        print(timeline_table(timeline, source))
    if not result.complete:
        print("groupscope: warning: the offsets topic was not read to its end; the timeline "
              "may miss the newest generations", file=sys.stderr)
        return 1
    return 0


def cmd_alerts(args: argparse.Namespace) -> int:
    return int(args.alerts_func(args))


def _rules(path: str | None) -> Any:
    from groupscope.serve.alerting.rules import RulesError, load_rules

    try:
        return load_rules(Path(path) if path else None)
    except RulesError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def cmd_alerts_check_rules(args: argparse.Namespace) -> int:
    from groupscope.serve.alerting.kinds import BELOW_KINDS
    from groupscope.serve.alerting.notify import duration

    rules = _rules(args.file)
    print(f"{args.file}: OK: {len(rules.rules)} rules, {len(rules.channels)} channels, "
          f"{len(rules.routes)} routes; repeat every "
          f"{duration(rules.repeat_interval.total_seconds())}, keep firing "
          f"{duration(rules.keep_firing_for.total_seconds())}")
    for rule in rules.rules:
        overrides = f", {len(rule.overrides)} override(s)" if rule.overrides else ""
        state = "" if rule.enabled else " (disabled)"
        compared = "<" if rule.condition in BELOW_KINDS else ">"
        print(f"  {rule.name:<26} {rule.severity:<8} {rule.condition} {compared} "
              f"{rule.threshold:g} "
              f"for {duration(rule.for_.total_seconds())}{overrides}{state}")
    for name, spec, state in _channel_connections(rules):
        print(f"  channel {name:<18} {spec.kind:<8} connection {spec.connection}: {state}")
    return 0


def _channel_connections(rules: Any) -> list[tuple[str, Any, str]]:
    """Each channel of the rules with its connection's state here: present, missing (what is
    routed to it is owed and fails, and channel_failing names it), or unreadable."""
    from groupscope.serve.alerting.airflow_channels import build_channels

    try:
        built = build_channels(rules, reveal(load_settings().alert_webhook_url))
    except ImportError:  # the connections are Airflow's
        return [(c.name, c, "not checked (Airflow is not installed here)") for c in rules.channels]
    states = []
    for spec in rules.channels:
        if spec.name in built.channels:
            state = "present"
        elif spec.name in built.unavailable:
            state = f"UNREADABLE: {built.unavailable[spec.name]}"
        else:
            state = f"MISSING: {built.skipped.get(spec.name, 'not defined')}"
        states.append((spec.name, spec, state))
    return states


def cmd_alerts_list(args: argparse.Namespace) -> int:
    from groupscope import warehouse
    from groupscope.serve.alerting import store
    from groupscope.serve.alerting.notify import duration, headline

    if not args.url:
        raise CliError("no warehouse: give --url or set WAREHOUSE_URL", EXIT_USAGE)
    engine = warehouse.engine_for(args.url)
    try:
        with warehouse.connect(engine) as conn:
            open_now = store.open_incidents(conn, args.cluster)
            delivered = store.deliveries(conn, [i.incident_id for i in open_now])
    except warehouse.WarehouseUnavailable as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    finally:
        engine.dispose()
    now = datetime.now(UTC)
    if args.format == "json":
        _print_json([{**{k: v for k, v in vars(i).items()},
                      "deliveries": delivered.get(i.incident_id, [])} for i in open_now])
        return 0
    if not open_now:
        print("no open incidents")
        return 0
    print(f"{'state':<8} {'severity':<8} {'since':>9}  {'cluster':<12} {'group':<28} "
          f"{'rule':<24} what / deliveries")
    for i in open_now:
        channels = ", ".join(f"{d['channel']} {d['notification']} {d['state']}"
                             for d in delivered.get(i.incident_id, [])) or "none owed yet"
        print(f"{i.state:<8} {i.severity:<8} {duration((now - i.started_at).total_seconds()):>9}"
              f"  {i.cluster[:12]:<12} {(i.group_id or '-')[:28]:<28} {i.rule[:24]:<24} "
              f"{headline(i)} (value {i.value:g}, threshold {i.threshold:g}) / {channels}")
    return 0


def cmd_alerts_test(args: argparse.Namespace) -> int:
    from groupscope.serve.alerting.airflow_channels import build_channels
    from groupscope.serve.alerting.channels import ChannelError, Message

    settings = load_settings()
    rules = _rules(args.rules or (str(settings.alert_rules) if settings.alert_rules else None))
    built = build_channels(rules, reveal(settings.alert_webhook_url))
    channels, skipped = built.channels, {**built.skipped, **built.unavailable}
    if args.channel not in channels:
        known = ", ".join(sorted(c.name for c in rules.channels))
        why = skipped.get(args.channel, f"no channel {args.channel!r} (known: {known})")
        raise CliError(f"channel {args.channel}: {why}", EXIT_USAGE)
    at = datetime.now(UTC).strftime("%H:%M:%SZ")
    message = Message(f"[TEST] groupscope: a test of channel {args.channel}",
                      f"[TEST] groupscope test message to channel {args.channel} at {at}. "
                      "If you read this, alerts reach you here.", [], "test")
    try:
        channels[args.channel].send(message)
    except ChannelError as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    print(f"sent a test message to channel {args.channel}")
    return 0


def build_parser(settings: Settings | None = None) -> argparse.ArgumentParser:
    """The parser; ``settings`` give the defaults that come from the environment."""
    default_url = reveal(settings.warehouse_url) if settings else None
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
    snap.add_argument("--landing", metavar="DIR",
                      help="also land the snapshot as Parquet under DIR")
    snap.add_argument("--warehouse", metavar="URL",
                      help="also load it into the PostgreSQL warehouse at URL")
    snap.set_defaults(func=cmd_snapshot)

    wh = sub.add_parser("warehouse", help="warehouse schema and loading")
    wh_sub = wh.add_subparsers(dest="action", required=True)
    mig = wh_sub.add_parser("migrate", help="apply the schema migrations in sql/")
    mig.add_argument("--url", default=default_url, required=default_url is None,
                     help="the warehouse (default: WAREHOUSE_URL)")
    mig.add_argument("--plan", action="store_true",
                     help="print what would be applied, how long a table copy would take and "
                          "the disk it needs, and change nothing")
    mig.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                     help="give up waiting for a lock after this long, naming who holds it "
                          "(default: half a minute)")
    load = wh_sub.add_parser("load", help="load landed snapshots not yet in the warehouse, "
                             "of any age, through the snapshot DAG's quality gate")
    load.add_argument("--url", default=default_url, required=default_url is None,
                      help="the warehouse (default: WAREHOUSE_URL)")
    load.add_argument("--landing", required=True, metavar="DIR")
    load.add_argument("--cluster")
    reader = wh_sub.add_parser(
        "create-reader", help="create or update grafana_reader, the read-only role Grafana "
                              "logs in as",
        description=f"Runs as an admin role that may create roles: {ADMIN_URL_ENV} (or "
                    "--admin-url without a password; then PGPASSWORD or ~/.pgpass). The "
                    f"reader's password comes from {READER_PASSWORD_ENV} only.")
    reader.add_argument("--admin-url", metavar="URL",
                        help=f"the warehouse as the admin role (default: {ADMIN_URL_ENV}); "
                             "no password in it")
    reader.add_argument("--owner", help="the role owning the warehouse schemas (default: the "
                                        "database's owner)")
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

    offsets = sub.add_parser(
        "offsets", help="ingest __consumer_offsets: commits, generations, epochs, deletions")
    offsets_sub = offsets.add_subparsers(dest="action", required=True)
    oi = offsets_sub.add_parser("ingest", help="land every record since the last run")
    oi.add_argument("--bootstrap", required=True)
    oi.add_argument("--config", action="append", metavar="KEY=VALUE")
    oi.add_argument("--cluster", default="default")
    oi.add_argument("--landing", required=True, metavar="DIR",
                    help="the landing folder (events and the read positions live there)")
    oi.add_argument("--batch-records", type=int, default=50_000,
                    help="records per landed batch (default 50000)")
    oi.add_argument("--timeout", type=float, default=15.0, help="seconds per request")
    oi.add_argument("--run-timeout", type=float, default=600.0,
                    help="seconds for the whole run; the rest lands next run (default 600)")
    offsets.set_defaults(func=cmd_offsets)

    reb = sub.add_parser("rebalances",
                         help="the exact rebalance history of a group from __consumer_offsets")
    reb.add_argument("--bootstrap", required=True)
    reb.add_argument("--config", action="append", metavar="KEY=VALUE")
    reb.add_argument("--cluster", default="default")
    reb.add_argument("--group", required=True)
    reb.add_argument("--format", choices=["json", "table"], default="table")
    reb.add_argument("--landing", metavar="DIR",
                     help="use (and update) the landed history under DIR, which keeps "
                          "generations that log compaction has removed")
    reb.add_argument("--timeout", type=float, default=15.0, help="seconds per request")
    reb.add_argument("--run-timeout", type=float, default=300.0)
    reb.set_defaults(func=cmd_rebalances)

    alerts = sub.add_parser("alerts", help="alert incidents, channels and rules files")
    alerts_sub = alerts.add_subparsers(dest="action", required=True)
    al = alerts_sub.add_parser("list", help="open incidents (pending and firing), with the "
                                            "delivery state of each channel")
    al.add_argument("--url", default=default_url, help="the warehouse (default: WAREHOUSE_URL)")
    al.add_argument("--cluster", help="only this cluster")
    al.add_argument("--format", choices=["table", "json"], default="table")
    al.set_defaults(alerts_func=cmd_alerts_list)
    at = alerts_sub.add_parser("test", help="send a test message through one channel")
    at.add_argument("--channel", required=True, help="a channel name (webhook, slack, email "
                                                     "or one of the rules file)")
    at.add_argument("--rules", metavar="FILE",
                    help="the rules file naming the channels (default: GROUPSCOPE_ALERT_RULES)")
    at.set_defaults(alerts_func=cmd_alerts_test)
    ac = alerts_sub.add_parser("check-rules", help="validate a rules file")
    ac.add_argument("file", metavar="FILE")
    ac.set_defaults(alerts_func=cmd_alerts_check_rules)
    alerts.set_defaults(func=cmd_alerts)

    grafana = sub.add_parser("grafana", help="Grafana: the provisioning tree, or publish to a "
                                             "running Grafana (docs/grafana.md)")
    grafana_sub = grafana.add_subparsers(dest="action", required=True)
    gp = grafana_sub.add_parser(
        "provision", help="write the provisioning tree (datasource, dashboards, alerting) for "
                          "a Grafana to mount at /etc/grafana/provisioning")
    gp.add_argument("directory", metavar="DIR")
    gp.add_argument("--mount-path", default="/etc/grafana/provisioning",
                    help="where Grafana sees DIR (default /etc/grafana/provisioning)")
    gp.add_argument("--all-channels", action="store_true",
                    help="a contact point for every channel, even those whose "
                         "GROUPSCOPE_ALERT_<NAME>_URL is not set here")
    gp.set_defaults(grafana_func=cmd_grafana_provision)
    gpub = grafana_sub.add_parser(
        "publish", help="push the datasource, folder, dashboards and alerting to a running "
                        "Grafana (by uid; GRAFANA_TOKEN or GRAFANA_USER/GRAFANA_PASSWORD)")
    gpub.add_argument("--url", required=True, help="Grafana's base URL, e.g. "
                                                   "http://localhost:3000 (no credentials)")
    gpub.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    gpub.set_defaults(grafana_func=cmd_grafana_publish)
    for command in (gp, gpub):
        command.add_argument("--rules", metavar="FILE",
                             help="the alert rules file (default: GROUPSCOPE_ALERT_RULES)")
        command.add_argument("--db-host", help="the warehouse host as Grafana reaches it "
                                               "(default: WAREHOUSE_URL's, else warehouse)")
        command.add_argument("--db-port", help="default: WAREHOUSE_URL's, else 5432")
        command.add_argument("--database", help="default: WAREHOUSE_URL's, else groupscope")
        command.add_argument("--sslmode", choices=GRAFANA_SSLMODES,
                             help="default: WAREHOUSE_URL's sslmode, else disable")
        command.add_argument("--grafana-alerting", action="store_true",
                             help="unpause the Grafana alert rules (also "
                                  "GROUPSCOPE_GRAFANA_ALERTING=1); then turn the Airflow "
                                  "channels off, or both notify")
    grafana.set_defaults(func=cmd_grafana)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        return _fail(str(exc), EXIT_USAGE)
    parser = build_parser(settings)
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
    except ClusterUnavailable as exc:
        return _fail(str(exc), EXIT_UNAVAILABLE)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (head, less) went away: not an error of ours
        sys.stderr.close()
        return 0
    return code


def _fail(message: str, code: int) -> int:
    print(f"groupscope: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
