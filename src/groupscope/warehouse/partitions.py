"""The time partitions of the warehouse's growing tables (migration 0010): created ahead of
time and by the writers, dropped whole by retention.

Three families, each with its retention: ``raw`` (the raw snapshot tables, a partition per UTC
day), ``mart`` (the per-snapshot marts and the rebalance events, per UTC day) and ``hourly``
(the hourly roll-ups, per UTC month). ``groupscope_meta.partitioned_tables`` lists the tables.

A partition is dropped when every row it can hold is older than its family's retention: its
range ends at or before ``now - retention``. The partition that holds a row younger than that
is kept, so a row is kept at least its retention (a day longer at most; a month for the
hourly roll-ups). Each drop is one transaction: detach, drop, and a row in
``ops.retention_drops``; running it again drops nothing more.

The partitions hold every cluster's rows, so every cluster's retention task runs the same drops
(at the same minute). A drop first takes its partition's lock without waiting
(``pg_try_advisory_xact_lock``): a partition another run is dropping is left to it, and one
that is gone by then was dropped; no run waits for another, and none fails on a partition it
no longer finds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)

FAMILIES = ("raw", "mart", "hourly")
DEFAULT_RETENTION = {"raw": timedelta(days=14), "mart": timedelta(days=90),
                     "hourly": timedelta(days=400)}
# The days after today whose partitions exist before any row arrives (migrate and every
# retention run make them): a writer normally finds its partition there.
DAYS_AHEAD = 3
# How long a drop waits for the table's lock (DETACH takes it exclusively, and every query of
# the table queues behind a waiting DETACH); a drop that cannot get it is left for the next run.
LOCK_TIMEOUT = "5s"


@dataclass(frozen=True)
class Partition:
    schema: str
    table: str
    name: str
    family: str
    start: datetime
    end: datetime

    @property
    def parent(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass
class RetentionRun:
    """What one retention run did."""

    created: int = 0
    dropped: list[Partition] = field(default_factory=list)
    deferred: list[Partition] = field(default_factory=list)  # busy: the next run drops them
    # Dropped by another run meanwhile (the retention task of another cluster, at once).
    elsewhere: list[Partition] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Small and XCom-safe."""
        return {"partitions_created": self.created,
                "dropped": [p.qualified_name for p in self.dropped],
                "deferred": [p.qualified_name for p in self.deferred],
                "dropped_elsewhere": [p.qualified_name for p in self.elsewhere]}


def check_retention(retention: Mapping[str, timedelta],
                    kinds: Sequence[str] = FAMILIES) -> dict[str, timedelta]:
    """The retention of every family (or of every one of ``kinds``); a missing one or a
    retention under a day is an error (a partition is a day)."""
    missing = [f for f in kinds if f not in retention]
    if missing:
        raise ValueError(f"no retention for {missing}")
    short = [f for f in kinds if retention[f] < timedelta(days=1)]
    if short:
        raise ValueError(f"retention under a day for {short}")
    return {f: retention[f] for f in kinds}


def days_ahead(now: datetime, days: int = DAYS_AHEAD) -> list[datetime]:
    """Midnight UTC of today and of the ``days`` after."""
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return [today + timedelta(days=i) for i in range(days + 1)]


def expired(partitions: Iterable[Partition], retention: Mapping[str, timedelta],
            now: datetime) -> list[Partition]:
    """The partitions every row of which is older than its family's retention, oldest first."""
    keep = check_retention(retention)
    return sorted((p for p in partitions if p.end <= now - keep[p.family]),
                  key=lambda p: (p.start, p.parent))


def create_partitions(conn: Any, times: Iterable[datetime],
                      tables: Sequence[str] | None = None) -> int:
    """Creates the partitions holding ``times`` of ``tables`` (``schema.table``; default: every
    partitioned table) where missing; returns how many. Other tables' names are ignored."""
    stamps = sorted({t.astimezone(UTC) for t in times})
    if not stamps:
        return 0
    return int(conn.execute(
        text("SELECT groupscope_meta.create_partitions(CAST(:times AS timestamptz[]),"
             " CAST(:tables AS text[]))"),
        {"times": stamps, "tables": list(tables) if tables is not None else None},
    ).scalar_one())


def times_in(tables: Iterable[pa.Table], column: str) -> set[datetime]:
    """The distinct values of ``column`` in the tables that have it (naive ones read as UTC)."""
    import pyarrow.compute as pc

    found: set[datetime] = set()
    for table in tables:
        if column in table.schema.names and table.num_rows:
            found.update(v if v.tzinfo else v.replace(tzinfo=UTC)
                         for v in pc.unique(table.column(column)).to_pylist() if v is not None)
    return found


def partitions(conn: Any) -> list[Partition]:
    rows = conn.execute(text(
        "SELECT schema_name, table_name, partition_name, family, range_start, range_end"
        " FROM groupscope_meta.partitions ORDER BY range_start, schema_name, table_name"))
    return [Partition(*row) for row in rows]


def apply_retention(engine: Engine, retention: Mapping[str, timedelta],
                    now: datetime) -> RetentionRun:
    """Creates the partitions of today and the next ``DAYS_AHEAD`` days, then detaches and
    drops every expired partition (``expired``), one transaction each, recording each in
    ``ops.retention_drops`` and the log. A partition whose table stays locked longer than
    ``LOCK_TIMEOUT`` is deferred to the next run; one another run is dropping, or dropped
    since the list was read, is that run's (``RetentionRun.elsewhere``)."""
    from groupscope.warehouse import connect

    keep = check_retention(retention)
    run = RetentionRun()
    with connect(engine) as conn:
        with conn.begin():
            run.created = create_partitions(conn, days_ahead(now))
            candidates = expired(partitions(conn), keep, now)
        for partition in candidates:
            try:
                with conn.begin():
                    dropped = _drop(conn, partition, keep[partition.family], now)
            except DBAPIError as exc:
                state = getattr(exc.orig, "sqlstate", None)
                if state == "42P01":  # undefined_table: dropped meanwhile, not by a run's lock
                    run.elsewhere.append(partition)
                    continue
                if state != "55P03":  # lock_not_available
                    raise
                log.warning("retention: %s is busy (its table stayed locked %s); the next run "
                            "drops it", partition.qualified_name, LOCK_TIMEOUT)
                run.deferred.append(partition)
                continue
            if dropped is None:
                log.info("retention: %s is dropped by another run", partition.qualified_name)
                run.elsewhere.append(partition)
            else:
                run.dropped.append(partition)
                log.info("retention: dropped %s (rows from %s to %s, %d bytes; %s retention "
                         "%d days)", partition.qualified_name, partition.start.isoformat(),
                         partition.end.isoformat(), dropped, partition.family,
                         keep[partition.family].days)
    return run


def _drop(conn: Any, partition: Partition, retention: timedelta, now: datetime) -> int | None:
    """Detaches and drops one partition and records it; returns its size in bytes, or None if
    another run has it: dropping it now (it holds the partition's lock), or dropped already."""
    from psycopg import sql

    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    if not conn.execute(text("SELECT pg_try_advisory_xact_lock(hashtext(:key))"),
                        {"key": f"groupscope-retention:{partition.qualified_name}"}).scalar_one():
        return None
    size = conn.execute(text("SELECT pg_total_relation_size(to_regclass(:name))"),
                        {"name": _quoted(partition.schema, partition.name)}).scalar_one()
    if size is None:
        return None
    driver = conn.connection.driver_connection
    parent = sql.Identifier(partition.schema, partition.table)
    child = sql.Identifier(partition.schema, partition.name)
    conn.exec_driver_sql(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(parent, child)
                         .as_string(driver))
    conn.exec_driver_sql(sql.SQL("DROP TABLE {}").format(child).as_string(driver))
    conn.execute(text(
        "INSERT INTO ops.retention_drops (dropped_at, schema_name, table_name, partition_name,"
        " family, range_start, range_end, retention_days, bytes) VALUES (:at, :schema, :table,"
        " :name, :family, :start, :end, :days, :bytes)"),
        {"at": now, "schema": partition.schema, "table": partition.table,
         "name": partition.name, "family": partition.family, "start": partition.start,
         "end": partition.end, "days": retention.days, "bytes": size})
    return int(size)


def prune_drops(conn: Any, dropped_before: datetime) -> int:
    """Deletes the records of the drops made before ``dropped_before``; returns how many."""
    return int(conn.execute(text("DELETE FROM ops.retention_drops WHERE dropped_at < :before"),
                            {"before": dropped_before}).rowcount or 0)


def _quoted(schema: str, name: str) -> str:
    return '"{}"."{}"'.format(schema.replace('"', '""'), name.replace('"', '""'))
