"""The pipeline's stages as the scheduled tasks call them. Each stage takes everything it needs
as arguments (the cluster, the landing root, the warehouse URL, the time), is one transaction
or idempotent, and fails with ``StageFailed`` and a one-line reason an operator can act on.
The Airflow DAGs (``dags/``) only wire these together; a test or a shell can call them alike.

Flow, per cluster: ``collect`` lands a snapshot; ``check_and_load`` checks every landed
snapshot not yet loaded (``gate_landed``: data-quality suite, ``groupscope.quality``), rejects
the bad ones, and loads those that passed (``load``). ``ingest`` lands
``__consumer_offsets``. The analytics jobs run on Spark (``spark_jobs/``) over an interval
(``analytics_interval``); ``gate_marts`` checks what they wrote.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groupscope.contract.cluster import ClusterConfig, ConfigError
from groupscope.contract.layout import MANIFEST_TABLE
from groupscope.contract.model import Snapshot
from groupscope.kafka.admin import ClusterUnavailable
from groupscope.land.snapshots import (
    READ_ERRORS,
    LandedSnapshot,
    expected_groups,
    land,
    landed_snapshots,
    quarantine,
    scan_landed,
)
from groupscope.settings import SettingsError, load_settings, reveal

if TYPE_CHECKING:
    from groupscope.analyze.jobs import JobArgs
    from groupscope.serve.alerting.channels import Channel
    from groupscope.serve.alerting.rules import RuleSet

log = logging.getLogger(__name__)

# How far back a run looks for landed snapshots not yet loaded (a warehouse outage shorter than
# this loses nothing; a longer one needs `groupscope warehouse load`).
DEFAULT_BACKLOG = timedelta(hours=24)
# At most this many snapshots are checked and loaded by one run; the rest wait for the next.
DEFAULT_MAX_PER_RUN = 240


class StageFailed(RuntimeError):
    """A stage could not do its work; the message says why and what was kept."""


class WarehouseFailed(StageFailed):
    """The warehouse cannot do a stage's work; ``kind`` says how, in an on-call's words
    (``warehouse_failure``): what the alert task tells every channel directly."""

    def __init__(self, message: str, kind: str = "failing") -> None:
        super().__init__(message)
        self.kind = kind


class WarehouseUnreachable(WarehouseFailed):
    """The warehouse cannot be reached (refused, gone mid-way, shutting down)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "unreachable")


class ClockSkewed(StageFailed):
    """This worker's clock is too far from the warehouse's to judge or delete anything."""

    kind = "clock skew"


# SQLSTATEs of a server that is not there to answer: connection exceptions (class 08), and an
# administrator's or a crash's shutdown. An OperationalError without one never got an answer.
_UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03")
# A warehouse that answers but cannot do the work, by SQLSTATE (or its class, two characters),
# named as an on-call would say it.
_FAILURE_KINDS = {
    "25006": "read-only",  # a replica promoted the other way, default_transaction_read_only
    "53100": "disk full",
    "53200": "out of memory",
    "53300": "too many connections",
    "57014": "statement timeout",
    "55P03": "lock not available",
    "42P01": "not migrated",  # a relation missing: a build deployed before its migration
    "42703": "not migrated",  # a column missing
    "42883": "not migrated",  # a function missing
    "28": "refused the credentials",
    "42501": "refused the privileges",
    "22": "refused the data",
    "23": "refused the data",
}


def warehouse_failure(sqlstate: str | None) -> str:
    """What a SQLSTATE means for the on-call: "read-only", "disk full", "statement timeout",
    "not migrated", ...; "failing (SQLSTATE X)" for the others."""
    if sqlstate is None:
        return "failing"
    return _FAILURE_KINDS.get(sqlstate) or _FAILURE_KINDS.get(sqlstate[:2]) or \
        f"failing (SQLSTATE {sqlstate})"


def cluster_config(name: str, client: Mapping[str, Any]) -> ClusterConfig:
    """A cluster from its librdkafka client settings (e.g. an Airflow connection's extra)."""
    try:
        return ClusterConfig(name, {k: str(v) for k, v in client.items()})
    except ConfigError as exc:
        raise StageFailed(str(exc)) from None


def land_snapshot(snapshot: Snapshot, landing: Path) -> LandedSnapshot:
    """Lands a snapshot with its assignment what-if (computed here: it needs the whole
    snapshot, and loading then needs nothing but the landing zone)."""
    from groupscope.simulate.whatif import mart_tables

    return land(snapshot, landing, mart_tables(snapshot))


def collect(cluster: ClusterConfig, landing: Path, snapshot_ts: datetime,
            timeout_s: float, offset_fetch_connections: int = 3, group_kinds: str = "auto",
            java_classpath: str = "") -> dict[str, Any]:
    """Takes one snapshot and lands it; returns a summary (no secrets, small: XCom-safe).
    Both run in a child process: librdkafka can crash on a coordinator that moves
    (``collect.isolated``); a crash is tried again once, then is a failure of this stage."""
    from groupscope.collect.isolated import budget_for, run_isolated

    try:
        summary: dict[str, Any] = run_isolated(
            "groupscope.pipeline:collect_here",
            (cluster, landing, snapshot_ts, timeout_s, offset_fetch_connections, group_kinds,
             java_classpath),
            f"snapshot of cluster {cluster.name!r}", budget_s=budget_for(timeout_s))
    except (ConfigError, ClusterUnavailable) as exc:
        raise StageFailed(f"snapshot of cluster {cluster.name!r} failed: {exc}") from None
    return summary


def collect_here(cluster: ClusterConfig, landing: Path, snapshot_ts: datetime,
                 timeout_s: float, offset_fetch_connections: int = 3,
                 group_kinds: str = "auto", java_classpath: str = "") -> dict[str, Any]:
    """``collect`` in this process (what its child runs). Raises ConfigError or
    ClusterUnavailable. ``group_kinds`` and ``java_classpath``: the share and streams
    groups (CollectorSettings)."""
    from groupscope.collect.collector import CollectorSettings, take_snapshot

    settings = CollectorSettings(request_timeout_s=timeout_s,
                                 offset_fetch_connections=offset_fetch_connections,
                                 group_kinds=group_kinds, java_classpath=java_classpath)
    try:
        expected = expected_groups(landing, cluster.name, snapshot_ts)
    except READ_ERRORS as exc:
        # Costs the probe of the groups ListGroups no longer lists, this once; the quality
        # gate quarantines a torn snapshot.
        log.warning("the groups of the newest landed snapshot of %s cannot be read (%s): "
                    "groups no longer listed are not probed", cluster.name, exc)
        expected = frozenset()
    snapshot = take_snapshot(cluster, timeout_s, snapshot_ts, settings=settings,
                             expected_groups=expected)
    landed = land_snapshot(snapshot, landing)
    summary = {
        "cluster": cluster.name, "snapshot_id": landed.snapshot_id,
        "snapshot_ts": snapshot.snapshot_ts.isoformat(), "groups": len(snapshot.groups),
        "partitions": len(snapshot.partitions), "complete": snapshot.complete,
        "errors": len(snapshot.errors), "notes": list(snapshot.notes),
    }
    for note in snapshot.notes:
        log.info("snapshot %s: %s", landed.snapshot_id, note)
    if snapshot.errors:
        # Partial: landed with its errors (raw.collection_errors), visible, not fatal.
        log.warning("snapshot %s is partial: %d collection error(s), e.g. %s",
                    landed.snapshot_id, len(snapshot.errors),
                    "; ".join(f"{e.stage.value}: {e.message}" for e in snapshot.errors[:3]))
    return summary


def ingest(cluster: ClusterConfig, landing: Path, ingest_ts: datetime, timeout_s: float,
           run_timeout_s: float) -> dict[str, Any]:
    """Lands ``__consumer_offsets`` from where the last run stopped; returns its summary."""
    from groupscope.offsets.ingest import ingest_cluster

    try:
        result = ingest_cluster(cluster, landing, ingest_ts, timeout_s, run_timeout_s)
    except (ConfigError, ClusterUnavailable) as exc:
        raise StageFailed(f"offsets ingest of cluster {cluster.name!r} failed: {exc}") \
            from None
    # The run's time goes with its summary: load_generations records the feed as of it.
    summary: dict[str, Any] = {**result.as_dict(), "ingest_ts": ingest_ts.isoformat()}
    if not result.complete:
        log.warning("offsets ingest of %s is incomplete; what was read is landed and the next "
                    "run continues: %s", cluster.name, summary.get("incomplete"))
    return summary


def load_generations(warehouse_url: str, landing: Path, cluster: str, now: datetime,
                     ingested: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Loads the rebalances of the landed offsets-topic batches not loaded yet into
    ``raw.group_generations`` (what the rebalance-storm condition counts); returns how many
    batches and rows. ``ingested``: the summary of the ``ingest`` run before it, recorded
    once its batches are loaded (``ops.offsets_feed``: what ``offsets_feed_stale`` reads)."""
    from groupscope.warehouse import generations

    with _warehouse(warehouse_url) as engine:
        loaded = generations.load_generations(engine, landing, cluster, now).as_dict()
        if ingested is not None:
            generations.record_feed(engine, cluster,
                                    datetime.fromisoformat(str(ingested["ingest_ts"])),
                                    list(ingested.get("incomplete") or []))
    return loaded


def pending_snapshots(engine: Any, landing: Path, cluster: str, now: datetime,
                      backlog: timedelta = DEFAULT_BACKLOG) -> tuple[list[Any], list[Any]]:
    """Landed snapshots of the last ``backlog`` not yet loaded and not rejected, oldest first;
    and the manifests found there that cannot be read (``land.snapshots.Unreadable``)."""
    from groupscope import quality, warehouse

    since = now - backlog
    loaded = warehouse.loaded_snapshot_keys(engine, cluster, since)
    rejected = quality.rejected_ids(landing, cluster)
    found, unreadable = scan_landed(landing, cluster, since)
    return [s for s in found
            if s.snapshot_ts >= since and (s.cluster, s.snapshot_ts) not in loaded
            and s.snapshot_id not in rejected], unreadable


def gate_landed(warehouse_url: str, landing: Path, cluster: str, checked_at: datetime,
                max_snapshots: int = DEFAULT_MAX_PER_RUN,
                backlog: timedelta = DEFAULT_BACKLOG) -> list[str]:
    """Checks the pending landed snapshots (at most ``max_snapshots``, oldest first); keeps
    every result in ``ops.quality_results``; rejects the failed ones (they stay landed, marked)
    and raises ``QualityGateFailed`` if there were any. Returns the ids that passed.

    A snapshot whose manifest or a data file cannot be read is quarantined instead (moved to
    ``_quarantine/`` with the reason; a failed ``landed_files`` result reports it) and the
    others pass or fail on their own: a torn file never holds up the backlog."""
    from groupscope import quality

    passed, results = _gate(warehouse_url, landing, cluster, checked_at, max_snapshots, backlog)
    if any(not r.success for r in results):
        raise quality.QualityGateFailed(results)
    return passed


def _gate(warehouse_url: str, landing: Path, cluster: str, checked_at: datetime,
          max_snapshots: int, backlog: timedelta) -> tuple[list[str], list[Any]]:
    """``gate_landed`` without its raise: the ids that passed, and the suites' results (the
    torn snapshots' aside: they are quarantined, not failed)."""
    from groupscope import quality

    with _warehouse(warehouse_url) as engine:
        pending, torn_manifests = pending_snapshots(engine, landing, cluster, checked_at,
                                                    backlog)
        pending = pending[:max_snapshots]
        checked = [(s.path(MANIFEST_TABLE), quality.check_landed(s)) for s in pending]
        torn = [*((u.manifest, quality.unreadable(u.cluster, u.snapshot_id, u.reason))
                  for u in torn_manifests),
                *((m, r) for m, r in checked if quality.is_unreadable(r))]
        results = [r for _, r in checked if not quality.is_unreadable(r)]
        if results or torn:
            quality.record(engine, results + [r for _, r in torn], checked_at)
    for manifest, result in torn:
        folder = quarantine(landing, manifest, result.failures[0].observed)
        log.error("quarantined landed snapshot %s, which cannot be read (in %s):\n%s",
                  result.subject, folder, result.summary())
    passed = [s for s, (_, r) in zip(pending, checked, strict=True) if r.success]
    for snapshot, (_, result) in zip(pending, checked, strict=True):
        if not result.success and not quality.is_unreadable(result):
            mark = quality.reject(snapshot, result)
            log.error("rejected landed snapshot %s (mark: %s):\n%s", snapshot.snapshot_id,
                      mark, result.summary())
    return [s.snapshot_id for s in passed], results


def load(warehouse_url: str, landing: Path, cluster: str, snapshot_ids: list[str],
         now: datetime, backlog: timedelta = DEFAULT_BACKLOG) -> int:
    """Loads the given landed snapshots (ids from ``gate_landed``) into the warehouse, each in
    one transaction; returns how many.

    A snapshot whose rows the warehouse refuses for their data (``warehouse.DataRefused``: a
    NUL byte in a group id, a value out of range) is quarantined with the reason, kept as a
    failed ``landed_files`` result (``quality_gate_failed`` tells the on-call), and the next
    ones load: retried, it would fail the same way and, the oldest pending, hold up every
    later load of the cluster. Any other error (unreachable, read-only, a lock not granted)
    stops the load with everything not yet loaded still pending."""
    return len(_load(warehouse_url, landing, cluster, snapshot_ids, now, backlog))


def _load(warehouse_url: str, landing: Path, cluster: str, snapshot_ids: list[str],
          now: datetime, backlog: timedelta) -> list[str]:
    """``load``; returns the ids loaded (those given, less the refused)."""
    from groupscope import quality, warehouse

    wanted = set(snapshot_ids)
    found = [s for s in landed_snapshots(landing, cluster, now - backlog)
             if s.snapshot_id in wanted]
    missing = wanted - {s.snapshot_id for s in found}
    if missing:
        raise StageFailed(f"landed snapshot(s) not found under {landing}: {sorted(missing)}")
    loaded: list[str] = []
    refused: list[tuple[LandedSnapshot, quality.SuiteResult]] = []
    with _warehouse(warehouse_url) as engine:
        for snapshot in found:
            try:
                warehouse.load_landed(engine, snapshot)
            except warehouse.DataRefused as exc:
                refused.append((snapshot, quality.refused(cluster, snapshot.snapshot_id,
                                                          str(exc))))
            else:
                loaded.append(snapshot.snapshot_id)
        if refused:
            quality.record(engine, [r for _, r in refused], now)
    for snapshot, result in refused:
        folder = quarantine(landing, snapshot.path(MANIFEST_TABLE), result.failures[0].observed)
        log.error("quarantined landed snapshot %s, whose rows the warehouse refused (in %s):"
                  "\n%s", snapshot.snapshot_id, folder, result.summary())
    return loaded


def check_and_load(warehouse_url: str, landing: Path, cluster: str, now: datetime,
                   max_snapshots: int = DEFAULT_MAX_PER_RUN,
                   backlog: timedelta = DEFAULT_BACKLOG) -> list[str]:
    """The snapshot DAG's second step, in one task: ``gate_landed``, then ``load`` of what
    passed (one task process fewer between a snapshot and its marts). Returns the ids loaded.
    A snapshot that fails the gate is rejected alone: the others of the run that passed are
    loaded first, then ``QualityGateFailed`` is raised (its ``loaded``: their ids), so the
    task fails and the incident fires without holding back good data. ``backlog``: how far
    back pending snapshots are looked for (the DAG's day; ``groupscope warehouse load`` looks
    at the whole landing zone)."""
    from groupscope import quality

    passed, results = _gate(warehouse_url, landing, cluster, now, max_snapshots, backlog)
    loaded = _load(warehouse_url, landing, cluster, passed, now, backlog)
    if any(not r.success for r in results):
        raise quality.QualityGateFailed(results, loaded)
    return loaded


def run_interval(start: datetime | None, end: datetime | None,
                 run_after: datetime) -> tuple[datetime, datetime]:
    """The interval a run processes: its data interval; a run without one (triggered by
    landed data, or by hand without a logical date) processes the hour up to the run."""
    if start is None or end is None or start >= end:
        end = end if end is not None and start is not None and start == end else run_after
        start = end - timedelta(hours=1)
    return start, end


def analytics_interval(start: datetime, end: datetime, hourly: bool) -> tuple[datetime, datetime]:
    """The interval a job processes for a run's data interval: the rebalance and skew jobs
    write hourly rows, so theirs is widened to whole hours (an hour is recomputed whole, never
    in part); the lag job takes the interval as it is."""
    if not hourly:
        return start, end
    floor = start.replace(minute=0, second=0, microsecond=0)
    ceiling = end.replace(minute=0, second=0, microsecond=0)
    if ceiling < end:
        ceiling += timedelta(hours=1)
    return floor, max(ceiling, floor + timedelta(hours=1))


def gate_marts(warehouse_url: str, cluster: str, start: datetime, end: datetime,
               checked_at: datetime) -> dict[str, Any]:
    """Checks the marts of [start, end); keeps the result; raises ``QualityGateFailed`` if
    the suite failed."""
    from groupscope import quality

    with _warehouse(warehouse_url) as engine:
        result = quality.check_marts(engine, cluster, start, end)
        quality.record(engine, [result], checked_at)
    if not result.success:
        raise quality.QualityGateFailed([result])
    return {"subject": result.subject, "expectations": result.expectations}


def analytics(spark: Any, job: JobArgs, kind: str, small: bool = False) -> dict[str, int]:
    """Computes one analytics job's marts for its interval and replaces the interval's rows in
    the warehouse (per time column, in one transaction: a rerun or a backfill leaves the same
    rows); returns the rows written per mart.

    Not Spark's JDBC writer: it cannot delete an interval and insert its replacement
    atomically. The marts of one interval are small (aggregates, or one hour of partition rows),
    so they are collected as Arrow and copied in with COPY on the driver. ``small``: the
    interval holds few rows (a live run's, at most ``LIVE_SMALL_ROWS``), whose frames are kept
    as local relations rather than cached (``analyze.jobs.lag_frames``)."""
    from groupscope import warehouse
    from groupscope.analyze.jobs import compute

    if not job.warehouse:
        raise StageFailed("no warehouse: give --warehouse or set WAREHOUSE_URL")
    written: dict[str, int] = {}
    with _warehouse(job.warehouse) as engine:
        for ts_column, frames in compute(spark, job, kind, small):
            tables = [(name, frame.toArrow()) for name, frame in frames]
            end = job.interval.end
            if ts_column == "snapshot_ts":
                end = min(end, _read_through(tables, ts_column, job.interval.start))
            warehouse.replace_interval_rows(engine, "mart", tables, job.cluster, ts_column,
                                            job.interval.start, end)
            written.update((name, table.num_rows) for name, table in tables)
    return written


def _read_through(tables: list[tuple[str, Any]], ts_column: str, start: datetime) -> datetime:
    """The end of what a job's per-snapshot rows cover: just after its newest snapshot (the
    interval's start when it has none). A snapshot of the interval that landed after the job
    listed the landing zone (a collect still writing at the hour's turn) is not among its
    rows; the live run wrote that snapshot's rows, and replacing the whole interval would
    delete them with nothing in their place. Snapshots land in the order they are taken, so
    what the job read is every snapshot up to its newest."""
    import pyarrow.compute as pc

    newest = [pc.max(table[ts_column]).as_py() for _, table in tables if table.num_rows]
    return max(newest) + timedelta(microseconds=1) if newest else start


def analytics_job(kind: str, argv: Sequence[str] | None = None) -> int:
    """The spark-submit entry point of one analytics job (``spark_jobs/<kind>_job.py``):
    prints the rows written per mart as JSON. The settings are validated before Spark starts;
    a bad one ends the job with its one-line message."""
    import dataclasses
    import json

    from groupscope.analyze.io import session
    from groupscope.analyze.jobs import parse_args

    job = parse_args(f"{kind}_job", argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise SystemExit(f"{kind}_job: error: {exc}") from None
    if not job.warehouse:
        # analyze sits below the settings, so the entry point supplies the default warehouse
        # (analyze.jobs.parse_args still reads WAREHOUSE_URL itself too: the same variable).
        job = dataclasses.replace(job, warehouse=reveal(settings.warehouse_url))
    spark = session(f"groupscope-{kind}")
    try:
        written = analytics(spark, job, kind)
    finally:
        spark.stop()
    print(json.dumps({"cluster": job.cluster, "start": job.interval.start.isoformat(),
                      "end": job.interval.end.isoformat(), "rows": written}))
    return 0


def _warehouse_clock(engine: Any, worker_clock: Callable[[], datetime] | None,
                     refused: str) -> datetime:
    """The warehouse's clock, checked against the worker's (``ClockSkewed`` past the bound)."""
    from groupscope import warehouse
    from groupscope.serve.alerting import evaluation

    try:
        with warehouse.connect(engine) as conn, conn.begin():
            return evaluation.warehouse_now(conn, worker_clock)
    except evaluation.ClockSkew as exc:
        raise ClockSkewed(f"{refused}: {exc}") from None


# The operational tables whose rows ``retention`` deletes past their age (how long: the
# settings' GROUPSCOPE_RETENTION_*_DAYS): resolved alert incidents with their deliveries,
# quality results, and the records of dropped partitions.
OPS_RETENTION = ("incidents", "quality", "drops")


def retention(warehouse_url: str, keep: Mapping[str, timedelta], now: datetime | None = None,
              *, worker_clock: Callable[[], datetime] | None = None) -> dict[str, Any]:
    """Warehouse housekeeping: creates the partitions of today and the coming days, then drops
    the partitions older than their family's retention (``keep``: raw, mart, hourly), each
    recorded in ``ops.retention_drops``; then deletes the operational rows older than theirs
    (``keep``: incidents, quality, drops; ``OPS_RETENTION``): resolved alert incidents that owe
    nothing, with their deliveries (never an open one), quality results, drop records.
    Idempotent: a second run drops nothing. Returns a summary (XCom-safe).

    Everything here is shared by the clusters, whose tasks all run it at the same minute: each
    partition and the operational rows are taken by one run (a lock taken without waiting);
    the others skip them, and none waits for another.

    ``now`` None: the warehouse's clock, and a ``worker_clock`` further from it than
    ``MAX_CLOCK_SKEW`` deletes nothing (``ClockSkewed``): a worker 14 days ahead would
    otherwise drop 14 days of data. A ``now`` given (a test, a replay) is taken as it is."""
    from sqlalchemy import text

    from groupscope import quality, warehouse
    from groupscope.serve.alerting import store
    from groupscope.warehouse import partitions

    try:
        families = partitions.check_retention(keep)
        ops = partitions.check_retention(keep, OPS_RETENTION)
    except ValueError as exc:
        raise StageFailed(f"retention: {exc}") from None
    with _warehouse(warehouse_url) as engine:
        if now is None:
            now = _warehouse_clock(engine, worker_clock, "retention: nothing deleted")
        run = partitions.apply_retention(engine, families, now)
        with warehouse.connect(engine) as conn, conn.begin():
            pruned: dict[str, int] | str = "by another run"
            if conn.execute(text("SELECT pg_try_advisory_xact_lock(hashtext(:key))"),
                            {"key": "groupscope-retention:ops"}).scalar_one():
                pruned = {"alert_incidents": store.prune(conn, now - ops["incidents"]),
                          "quality_results": quality.prune(conn, now - ops["quality"]),
                          "retention_drops": partitions.prune_drops(conn, now - ops["drops"])}
    return {**run.summary(), "ops_pruned": pruned}


# The live path computes at most this much after downtime (the newest snapshots first); what is
# older is the hourly lag job's (it recomputes every hour whole, gaps included).
LIVE_MAX_SPAN = timedelta(hours=1)
# Up to this many partition rows, a live run keeps its frames as local relations (a round trip
# of their rows through the driver, which collects them anyway, and back to the server inline):
# a large cluster, or an hour of snapshots after downtime, stays cached on the server.
LIVE_SMALL_ROWS = 50_000
LAG_MARTS = ("partition_lag", "member_lag", "topic_lag", "group_lag", "cluster_lag",
             "partition_status", "group_status")


def live_interval(warehouse_url: str, cluster: str) -> tuple[datetime, datetime, int] | None:
    """The interval the next live run computes, as (start, end, loaded snapshots in it), or
    None when no snapshot was loaded since the last one (``warehouse.live.next_interval``,
    starting no earlier than ``LIVE_MAX_SPAN`` before the newest)."""
    from groupscope import warehouse
    from groupscope.warehouse import live

    with _warehouse(warehouse_url) as engine, warehouse.connect(engine) as conn:
        return live.next_interval(conn, cluster, LIVE_MAX_SPAN)


def _committed_rows(warehouse_url: str, cluster: str, start: datetime, end: datetime) -> int:
    """The committed-offset rows loaded in [start, end): the partition rows a live run writes."""
    from sqlalchemy import text

    with _warehouse(warehouse_url) as engine, engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM raw.committed_offsets WHERE cluster = :c"
            " AND snapshot_ts >= :s AND snapshot_ts < :e"),
            {"c": cluster, "s": start, "e": end}).scalar_one())


class LiveReadNothing(StageFailed):
    """A live run computed none of the snapshots loaded since the last one: the watermark
    stays, so ``analytics_stale`` fires while the marts do not move."""


def record_live(warehouse_url: str, cluster: str, end: datetime, now: datetime) -> datetime:
    """Moves the live watermark towards ``end`` (never back), but only over the snapshots
    whose lag rows are in the marts (``warehouse.live.computed``): a run that read nothing
    of its interval (a worker that cannot see the landing zone) must not say the marts are
    fresh. Returns where the watermark now stands. Raises ``LiveReadNothing`` (logged as an
    error) when it could not move over any loaded snapshot; a run that read only the first
    ones moves it over those, and the next run computes the rest."""
    from groupscope import warehouse
    from groupscope.warehouse import live

    with _warehouse(warehouse_url) as engine, warehouse.connect(engine) as conn, conn.begin():
        first, through = live.computed(conn, cluster, end, LIVE_MAX_SPAN)
        if first is not None and through <= first:
            message = (f"the live marts of cluster {cluster!r} hold none of the snapshots "
                       f"loaded from {first.isoformat()} to {end.isoformat()}: the job read "
                       "none of their landed files (not visible where it ran?); the watermark "
                       "stays, and analytics_stale fires while this lasts")
            log.error(message)
            raise LiveReadNothing(message)
        live.record(conn, cluster, through, now)
    if through < end:
        log.warning("the live marts of cluster %r hold the snapshots before %s only (a later "
                    "one's files were not read); the watermark stops there and the next run "
                    "computes the rest", cluster, through.isoformat())
    return through


def live_rows(warehouse_url: str, cluster: str, start: datetime,
              end: datetime) -> dict[str, int]:
    """The lag marts' rows of [start, end) (what a live run wrote, when its job ran apart)."""
    from groupscope import warehouse
    from groupscope.warehouse import live

    with _warehouse(warehouse_url) as engine, warehouse.connect(engine) as conn:
        return live.rows_in(conn, cluster, start, end, LAG_MARTS)


def live_analytics(spark: Any, warehouse_url: str, landing: Path, cluster: str,
                   now: datetime) -> dict[str, Any]:
    """The lag and status marts of the snapshots loaded since the last live run
    (``live_interval``): the lag job's transforms (``analyze.jobs.lag_frames``, one
    definition: its rows for a snapshot are the hourly job's), reading only what their
    windows need, replacing only the interval's rows (``analytics``), then the watermark.
    Returns a small summary (XCom-safe): cluster, start, end, snapshots, rows per mart.

    ``spark`` is typically a session of a long-lived Spark Connect server
    (``analyze.io.session(remote=...)``). Its cache is shared by all its sessions and outlives
    them, so what this run cached is released at the end (``clearCache``: a run of another
    cluster at the same moment recomputes what it had cached; same rows).

    The watermark moves only over what the marts now hold (``record_live``); a run that read
    none of its snapshots fails (``LiveReadNothing``) and leaves it where it was. The
    summary's ``end`` is where it stands."""
    from groupscope.analyze.io import Interval
    from groupscope.analyze.jobs import JobArgs

    found = live_interval(warehouse_url, cluster)
    if found is None:
        return {"cluster": cluster, "start": None, "end": None, "snapshots": 0, "rows": {}}
    start, end, snapshots = found
    job = JobArgs(landing, cluster, Interval(start, end), warehouse_url, timedelta(0))
    from groupscope.analyze.io import bounded

    try:
        written = analytics(spark, job, "lag",
                            small=_committed_rows(warehouse_url, cluster, start, end)
                            <= LIVE_SMALL_ROWS)
    finally:
        bounded(spark.catalog.clearCache, 30.0, "clearCache")
    through = record_live(warehouse_url, cluster, end, now)
    return {"cluster": cluster, "start": start.isoformat(), "end": through.isoformat(),
            "snapshots": snapshots, "rows": written}


@contextlib.contextmanager
def _warehouse(warehouse_url: str) -> Iterator[Any]:
    """An engine for one stage, on a warehouse checked to be migrated (a task never migrates
    it: ``groupscope warehouse migrate`` does; checked once per process); an unreachable
    warehouse becomes ``WarehouseUnreachable``; one that answers but cannot do the work
    (read-only, disk full, a statement timeout, not migrated, any other database error)
    ``WarehouseFailed`` with its kind; a lock not granted in time ``StageFailed``."""
    import psycopg
    from sqlalchemy.exc import DBAPIError, OperationalError

    from groupscope import warehouse

    engine = warehouse.engine_for(warehouse_url)
    try:
        warehouse.check_migrated(engine)
        yield engine
    except warehouse.WarehouseUnavailable as exc:
        raise WarehouseUnreachable(f"{exc} (landed data is kept and loads later)") from None
    except warehouse.WarehouseNotMigrated as exc:
        raise WarehouseFailed(str(exc), "not migrated") from None
    except (warehouse.LockTimeout, warehouse.WriterBusy) as exc:
        raise StageFailed(str(exc)) from None
    except (DBAPIError, psycopg.Error) as exc:  # no password in either
        orig = exc.orig if isinstance(exc, DBAPIError) else exc
        reason = str(orig).strip().splitlines()[0] if orig else type(exc).__name__
        where = engine.url.render_as_string(hide_password=True)
        state = getattr(orig, "sqlstate", None)
        unanswered = state is None and isinstance(exc, OperationalError
                                                  | psycopg.OperationalError)
        if unanswered or (state is not None and state.startswith(_UNREACHABLE_STATES)):
            raise WarehouseUnreachable(f"warehouse {where} is unreachable: {reason} (landed "
                                       "data is kept and loads later)") from None
        kind = warehouse_failure(state)
        raise WarehouseFailed(f"warehouse {where} is {kind} ({state}): {reason}", kind) \
            from None
    finally:
        engine.dispose()


def evaluate_alerts(warehouse_url: str, cluster: str, rules: RuleSet,
                    channels: Mapping[str, Channel], now: datetime | None,
                    snapshot_every: timedelta, dashboard_url: str, **options: Any
                    ) -> dict[str, Any]:
    """``serve.alerting.evaluation.evaluate`` on the warehouse (its options as keywords): the
    cluster's rules evaluated, the incidents kept, what they owe sent, the heartbeat. A
    worker clock too far from the warehouse's (``ClockSkew``) is a ``StageFailed``."""
    from groupscope import warehouse
    from groupscope.serve.alerting import evaluation

    with _warehouse(warehouse_url) as engine, warehouse.connect(engine) as conn:
        try:
            return evaluation.evaluate(conn, cluster, rules, channels, now, snapshot_every,
                                       dashboard_url, **options)
        except evaluation.ClockSkew as exc:
            raise ClockSkewed(f"alert rules of cluster {cluster!r} not evaluated: {exc}") \
                from None


def alert_rules(warehouse_url: str, path: Path | None, now: datetime) -> Any:
    """The rules to evaluate with (``serve.rules_store.RulesInUse``): the file's when it is
    valid (kept in the warehouse as the last valid), else the last valid ones with the file's
    error, which the ``rules_invalid`` condition turns into an incident. Never fails on a bad
    file: a bad file must not stop alerting."""
    from groupscope import warehouse
    from groupscope.serve.alerting import rules_store

    with _warehouse(warehouse_url) as engine, warehouse.connect(engine) as conn, conn.begin():
        return rules_store.rules_in_use(conn, path, now)


def record_task_run(warehouse_url: str, cluster: str, dag_id: str, task_id: str, state: str,
                    run_id: str, try_number: int | None, at: datetime, reason: str = "") -> None:
    """Keeps a groupscope task's latest outcome (``serve.alerting.store.record_task_run``)."""
    from groupscope import warehouse
    from groupscope.serve.alerting import store

    with _warehouse(warehouse_url) as engine, warehouse.connect(engine) as conn, conn.begin():
        store.record_task_run(conn, cluster, dag_id, task_id, state, run_id, try_number, at,
                              reason)


def warehouse_outage(channels: Mapping[str, Channel], cluster: str, state_dir: Path,
                     now: datetime, error: str | None, kind: str = "unreachable"
                     ) -> dict[str, str]:
    """What every channel hears, straight, when alerts cannot be evaluated
    (``serve.alerting.evaluation.tell_outage``): once per outage, and once when it ends."""
    from groupscope.serve.alerting import evaluation

    return evaluation.tell_outage(channels, cluster, state_dir, now, error, kind)


def fallback_rules(rules_path: Path | None) -> RuleSet:
    """The rules when the warehouse (which keeps the last valid ones) cannot be read: the
    file's when it is valid, else the built-ins."""
    from groupscope.serve.alerting.rules import RulesError, builtin_rules, load_rules

    try:
        return load_rules(rules_path)
    except RulesError:
        return builtin_rules()


def alert_cycle(warehouse_url: Callable[[], str], cluster: str, rules_path: Path | None,
                build_channels: Callable[[RuleSet], Any], snapshot_every: timedelta,
                dashboard_url: str, outage_dir: Path,
                now: datetime | None = None,
                worker_clock: Callable[[], datetime] | None = None) -> dict[str, Any]:
    """One evaluation as the alert task runs it: the rules in use (``alert_rules``), their
    channels (``build_channels(rules)``: an object with ``channels``, ``skipped`` and
    ``unavailable``, as ``serve.airflow_channels.build_channels`` returns), the task failures
    that the warehouse could not take before (``replay_task_runs``), then ``evaluate_alerts``,
    then the end of an outage told. When the evaluation fails in any way (the warehouse
    unreachable, read-only, full, a statement timeout, not migrated; the worker's clock off;
    an error of groupscope's own), every channel is told straight (once per outage,
    ``warehouse_outage``) and the error is raised: an alert task that fails at every run is
    never silent. ``now`` None: the warehouse's clock, checked against ``worker_clock``
    (default: this process's clock)."""
    worker_clock = worker_clock or (lambda: datetime.now(UTC))
    started = now or worker_clock()
    try:
        url = warehouse_url()
        in_use = alert_rules(url, rules_path, started)
        replay_task_runs(url, cluster, outage_dir)
        built = build_channels(in_use.rules)
        for name, why in sorted(built.skipped.items()):
            log.info("alert channel %s has no connection: %s", name, why)
        summary = evaluate_alerts(url, cluster, in_use.rules, built.channels, now,
                                  snapshot_every, dashboard_url, worker_clock=worker_clock,
                                  unavailable=built.unavailable, missing=built.skipped,
                                  rules_error=in_use.error, rules_source=in_use.source)
        if not summary.get("skipped"):
            warehouse_outage(built.channels, cluster, outage_dir, started, None)
        return summary
    except Exception as exc:
        kind = getattr(exc, "kind", "failing to evaluate")
        why = str(exc) if isinstance(exc, StageFailed) else f"{type(exc).__name__}: {exc}"
        try:
            channels = build_channels(fallback_rules(rules_path)).channels
            told = warehouse_outage(channels, cluster, outage_dir, started, why, kind)
        except Exception as telling:  # the original error is the one to raise
            told = {"*": f"not told: {type(telling).__name__}"}
        log.error("alerts cannot be evaluated (%s); channels told: %s", kind,
                  told or "already")
        raise


# The task failures the warehouse could not take (``spool_task_run``), per cluster, replayed
# into ops.task_runs by the next evaluation that reaches it.
_SPOOL = "task-runs-{cluster}.jsonl"


def spool_task_run(state_dir: Path, cluster: str, run: Mapping[str, Any]) -> None:
    """Keeps a task outcome the warehouse refused (``record_task_run``'s arguments but the
    URL) beside the alert log, so that it is not lost: ``replay_task_runs`` records it once
    the warehouse takes writes again, and its ``task_failed`` incident follows."""
    import json
    import os

    from groupscope.serve.alerting.evaluation import file_key

    state_dir.mkdir(parents=True, exist_ok=True)
    line = json.dumps({k: (v.isoformat() if isinstance(v, datetime) else v)
                       for k, v in run.items()}, ensure_ascii=False) + "\n"
    with (state_dir / _SPOOL.format(cluster=file_key(cluster))).open("a",
                                                                       encoding="utf-8") as out:
        out.write(line)
        out.flush()
        os.fsync(out.fileno())


def replay_task_runs(warehouse_url: str, cluster: str, state_dir: Path) -> int:
    """Records the spooled task outcomes of the cluster (``spool_task_run``), oldest first,
    then removes the spool; returns how many. A line that cannot be read is dropped with a
    log line, never blocking the others."""
    import json
    import os

    from groupscope.serve.alerting.evaluation import file_key

    spool = state_dir / _SPOOL.format(cluster=file_key(cluster))
    if not spool.exists():
        return 0
    taken = spool.with_suffix(f".{os.getpid()}.replaying")
    spool.rename(taken)  # a failure spooled meanwhile starts a new file
    runs = []
    for line in taken.read_text(encoding="utf-8").splitlines():
        try:
            run = json.loads(line)
            run["at"] = datetime.fromisoformat(run["at"])
            runs.append(run)
        except (ValueError, KeyError, TypeError):
            log.error("a spooled task outcome cannot be read and is dropped: %r", line[:200])
    try:
        for run in runs:
            record_task_run(warehouse_url, **run)
    except Exception:
        # Put back for the next evaluation; the warehouse is failing again.
        with spool.open("a", encoding="utf-8") as out:
            out.write(taken.read_text(encoding="utf-8"))
        taken.unlink()
        raise
    taken.unlink()
    return len(runs)

