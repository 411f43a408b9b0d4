"""The live analytics watermark (``ops.live_analytics``): per cluster, the end (exclusive) of the
last interval the live path computed, and the interval its next run computes. The watermark is
kept in a table of its own rather than derived from the marts: the hourly lag job writes the
same marts (so their newest row says nothing of what the live path did), and a snapshot with no
committed partition has no mart rows at all (derived from them, it would be recomputed at
every run)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

_EPSILON = timedelta(microseconds=1)  # the timestamps' resolution (Parquet, PostgreSQL)


def next_interval(conn: Any, cluster: str,
                  max_span: timedelta) -> tuple[datetime, datetime, int] | None:
    """(start, end, loaded snapshots in it) of the next live run, or None when no snapshot was
    loaded since the last one: from the first loaded snapshot at or after the watermark to just
    after the newest loaded one, starting no earlier than ``max_span`` before the newest. A
    snapshot loaded late, with a time before the watermark, is left to the hourly lag job."""
    newest = conn.execute(text("SELECT max(snapshot_ts) FROM raw.snapshots WHERE cluster = :c"),
                          {"c": cluster}).scalar_one()
    if newest is None:
        return None
    through = conn.execute(text("SELECT computed_through FROM ops.live_analytics"
                                " WHERE cluster = :c"), {"c": cluster}).scalar_one_or_none()
    if through is not None and newest < through:
        return None
    since = newest - max_span
    if through is not None:
        since = max(since, through)
    first, count = conn.execute(text(
        "SELECT min(snapshot_ts), count(*) FROM raw.snapshots WHERE cluster = :c"
        " AND snapshot_ts >= :since AND snapshot_ts <= :newest"),
        {"c": cluster, "since": since, "newest": newest}).one()
    return first, newest + _EPSILON, int(count)


def computed(conn: Any, cluster: str, end: datetime,
             max_span: timedelta) -> tuple[datetime | None, datetime]:
    """What the marts hold of the loaded snapshots the watermark could move over (those of
    ``next_interval``'s span, up to ``end``): (the first of them, or None when there is none;
    the end, exclusive, up to which every one that has committed partitions has its
    ``mart.partition_lag`` rows). A snapshot without committed partitions has nothing to
    compute and never holds the watermark back; one whose rows are missing (the live job did
    not read it: its files not visible where the job ran, or landed after the job listed
    them) does, and the ones after it."""
    through = conn.execute(text("SELECT computed_through FROM ops.live_analytics"
                                " WHERE cluster = :c"), {"c": cluster}).scalar_one_or_none()
    since = end - _EPSILON - max_span
    if through is not None:
        since = max(since, through)
    first, missing = conn.execute(text(
        "SELECT min(snapshot_ts), min(snapshot_ts) FILTER (WHERE missing) FROM ("
        " SELECT s.snapshot_ts, EXISTS (SELECT 1 FROM raw.committed_offsets c"
        "   WHERE c.cluster = s.cluster AND c.snapshot_ts = s.snapshot_ts)"
        "  AND NOT EXISTS (SELECT 1 FROM mart.partition_lag p"
        "   WHERE p.cluster = s.cluster AND p.snapshot_ts = s.snapshot_ts) AS missing"
        " FROM raw.snapshots s WHERE s.cluster = :c AND s.snapshot_ts >= :since"
        " AND s.snapshot_ts < :end) loaded"), {"c": cluster, "since": since, "end": end}).one()
    return first, missing if missing is not None else end


def record(conn: Any, cluster: str, end: datetime, now: datetime) -> None:
    """Moves the watermark to ``end`` (never back: a late run does not undo a newer)."""
    conn.execute(text(
        "INSERT INTO ops.live_analytics (cluster, computed_through, computed_at)"
        " VALUES (:c, :end, :now) ON CONFLICT (cluster) DO UPDATE SET computed_through ="
        " greatest(ops.live_analytics.computed_through, excluded.computed_through),"
        " computed_at = excluded.computed_at"), {"c": cluster, "end": end, "now": now})


def rows_in(conn: Any, cluster: str, start: datetime, end: datetime,
            tables: Iterable[str]) -> dict[str, int]:
    """The rows of each ``mart`` table in [start, end) (what a live run wrote, when its job
    ran apart)."""
    return {table: int(conn.execute(text(
        f"SELECT count(*) FROM mart.{table} WHERE cluster = :c"
        " AND snapshot_ts >= :start AND snapshot_ts < :end"),
        {"c": cluster, "start": start, "end": end}).scalar_one()) for table in tables}
