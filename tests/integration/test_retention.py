"""The partitioned warehouse against a real PostgreSQL: partitions are made ahead of time and by
the writers, retention drops the expired ones and keeps the current ones, a rerun across
midnight leaves the same rows, and converting an existing warehouse (migration 0010) leaves
every serve view, and so every dashboard query, with the same rows.

Two retention runs at once (every cluster's task at :00) drop each partition once and both
succeed; the operational tables keep their rows their retention, and never an open incident.

Each test has a database of its own: retention drops partitions of every cluster, and the
session warehouse is shared."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from conftest import unique
from overlap import Run, lock_waiters, until
from sqlalchemy import Engine, text

from groupscope import pipeline, warehouse
from groupscope.settings import Settings
from groupscope.warehouse import partitions
from groupscope_dev.postgres import READER_PASSWORD, READER_ROLE, LocalPostgres

pytestmark = pytest.mark.integration

# Before the clock: the partitions the stages make ahead of the real day are never old here.
NOW = datetime(2024, 6, 15, 10, 0, tzinfo=UTC)
# The migrations from the partitioning one on: what an old (0009) warehouse has pending.
FROM_0010 = sum(m.version >= 10 for m in warehouse.migrations())
TS = pa.timestamp("us", tz="UTC")
KEEP = Settings().retention  # the defaults: every family and operational table


@pytest.fixture
def fresh(postgres: LocalPostgres) -> Iterator[tuple[str, str, Engine]]:
    """A database of its own, not yet migrated: its name, URL and engine."""
    database = unique("ret").replace("-", "_")
    url = postgres.create_database(database)
    engine = warehouse.engine_for(url)
    yield database, url, engine
    engine.dispose()
    postgres.drop_database(database)


def _snapshots(cluster: str, stamps: list[datetime]) -> pa.Table:
    return pa.table({"cluster": [cluster] * len(stamps), "snapshot_ts": pa.array(stamps, TS),
                     "snapshot_id": [f"s{i}" for i in range(len(stamps))],
                     "complete": [True] * len(stamps), "group_count": [1] * len(stamps),
                     "partition_count": [1] * len(stamps), "error_count": [0] * len(stamps)})


def _group_lag(cluster: str, stamps: list[datetime], lag: int) -> pa.Table:
    n = len(stamps)
    return pa.table({"cluster": [cluster] * n, "snapshot_ts": pa.array(stamps, TS),
                     "group_id": ["g"] * n, "partitions": [1] * n, "lag": [lag] * n,
                     "negative_lag_partitions": [0] * n, "beyond_retention_partitions": [0] * n})


def _rebalance_hourly(cluster: str, hours: list[datetime]) -> pa.Table:
    n = len(hours)
    counts = {c: [0] * n for c in ("rebalances", "joined_only", "left_only", "joined_and_left",
                                   "no_membership_change", "eager", "cooperative",
                                   "consumer_protocol")}
    seconds = {c: [0.0] * n for c in ("stable_s", "rebalancing_s", "empty_s", "other_s")}
    return pa.table({"cluster": [cluster] * n, "group_id": ["g"] * n,
                     "period_start": pa.array(hours, TS), **counts, **seconds,
                     "source": ["snapshots"] * n, "estimated": [True] * n})


def _times(conn: Any, table: str, cluster: str, column: str = "snapshot_ts") -> list[datetime]:
    return list(conn.execute(text(f"SELECT {column} FROM {table} WHERE cluster = :c"
                                  f" ORDER BY 1"), {"c": cluster}).scalars())


def _partition_names(conn: Any, table: str) -> list[str]:
    schema, name = table.split(".")
    return list(conn.execute(text(
        "SELECT partition_name FROM groupscope_meta.partitions"
        " WHERE schema_name = :s AND table_name = :t ORDER BY range_start"),
        {"s": schema, "t": name}).scalars())


def test_partitions_are_created_ahead_of_time(fresh: tuple[str, str, Engine]) -> None:
    _, _, engine = fresh
    warehouse.migrate(engine, now=NOW)
    with engine.connect() as conn:
        tables = conn.execute(text(
            "SELECT schema_name || '.' || table_name, granularity"
            " FROM groupscope_meta.partitioned_tables")).all()
        assert len(tables) == 30  # raw.group_generations since 0012, the kinds' six since 0019
        for table, granularity in tables:
            name = table.split(".")[1]
            expected = ([f"{name}_p202406{d}" for d in range(15, 19)] if granularity == "day"
                        else [f"{name}_p202406"])
            assert _partition_names(conn, table) == expected, table
    # The retention task makes the days ahead of its own time, and nothing twice.
    later = NOW + timedelta(days=10)
    run = partitions.apply_retention(engine, partitions.DEFAULT_RETENTION, later)
    daily = sum(granularity == "day" for _, granularity in tables)
    assert run.created == daily * 4 and not run.dropped  # June's month exists
    assert partitions.apply_retention(engine, partitions.DEFAULT_RETENTION, later).created == 0
    with engine.connect() as conn:
        assert _partition_names(conn, "mart.partition_lag")[-4:] == [
            f"partition_lag_p202406{d}" for d in range(25, 29)]
        assert _partition_names(conn, "mart.rebalance_hourly") == ["rebalance_hourly_p202406"]


def test_retention_drops_old_partitions_and_keeps_current_ones(
        fresh: tuple[str, str, Engine], caplog: pytest.LogCaptureFixture) -> None:
    _, url, engine = fresh
    warehouse.migrate(engine, now=NOW)
    cluster = "ret"
    # Around each limit: younger, exactly at it, a little older (the day before), much older.
    raw_stamps = [NOW - d for d in (timedelta(0), timedelta(days=13), timedelta(days=14, hours=-1),
                                    timedelta(days=14), timedelta(days=14, hours=11),
                                    timedelta(days=20))]
    mart_stamps = [NOW - d for d in (timedelta(0), timedelta(days=89), timedelta(days=90),
                                     timedelta(days=90, hours=11), timedelta(days=100))]
    hours = [NOW.replace(minute=0) - timedelta(days=30 * i) for i in range(16)]  # 450 days
    for stamp in raw_stamps:  # one snapshot at a time, as the loads write them
        warehouse.replace_snapshot_rows(engine, "raw", [("snapshots", _snapshots(
            cluster, [stamp]))], cluster, stamp)
    warehouse.replace_interval_rows(engine, "mart", [("group_lag", _group_lag(
        cluster, mart_stamps, 1))], cluster, "snapshot_ts", mart_stamps[-1], NOW)
    warehouse.replace_interval_rows(engine, "mart", [("rebalance_hourly", _rebalance_hourly(
        cluster, hours))], cluster, "period_start", hours[-1], NOW)

    # Alert incidents: resolved before the marts' limit and owing nothing (pruned), resolved
    # as long ago but with a delivery still retried (kept), resolved recently (kept).
    with engine.begin() as conn:
        for incident_id, resolved_days_ago, owed in (("old", 91, None), ("owing", 91, "failed"),
                                                     ("recent", 10, None)):
            resolved = NOW - timedelta(days=resolved_days_ago)
            conn.execute(text(
                "INSERT INTO ops.alert_incidents (incident_id, fingerprint, rule, severity, "
                "cluster, group_id, topic, state, started_at, last_seen_at, evaluated_at, "
                "resolved_at, value, threshold, details, labels, runbook) VALUES (:i, :i, 'r', "
                "'critical', :c, 'g', '', 'resolved', :t, :t, :t, :t, 1, 0, '{}', '{}', '')"),
                {"i": incident_id, "c": cluster, "t": resolved})
            conn.execute(text(
                "INSERT INTO ops.alert_deliveries (incident_id, notification, channel, state, "
                "created_at) VALUES (:i, 'resolved', 'webhook', :s, :t)"),
                {"i": incident_id, "s": owed or "sent", "t": resolved})

    caplog.set_level("INFO", logger="groupscope.warehouse.partitions")
    summary = pipeline.retention(url, KEEP, NOW)
    assert summary["ops_pruned"]["alert_incidents"] == 1
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT incident_id FROM ops.alert_incidents ORDER BY 1")
                            ).scalars().all()
        deliveries = conn.execute(text("SELECT count(*) FROM ops.alert_deliveries")).scalar()
    assert (kept, deliveries) == (["owing", "recent"], 2)

    # raw: 14 days before NOW is 2024-06-01 10:00, and the 1st's partition holds younger rows;
    # marts: 90 days before is 03-17 10:00; hourly: 400 days before is 2023-05-12 10:00.
    expected = ["raw.snapshots_p20240526", "raw.snapshots_p20240531",
                "mart.group_lag_p20240307", "mart.group_lag_p20240316",
                "mart.rebalance_hourly_p202303", "mart.rebalance_hourly_p202304"]
    assert sorted(summary["dropped"]) == sorted(expected)
    assert summary["deferred"] == []
    with engine.connect() as conn:
        raw_cutoff = datetime(2024, 6, 1, tzinfo=UTC)
        assert _times(conn, "raw.snapshots", cluster) == sorted(
            s for s in raw_stamps if s >= raw_cutoff)
        assert _partition_names(conn, "raw.snapshots")[0] == "snapshots_p20240601"
        assert _times(conn, "mart.group_lag", cluster) == sorted(
            s for s in mart_stamps if s >= datetime(2024, 3, 17, tzinfo=UTC))
        assert _times(conn, "mart.rebalance_hourly", cluster, "period_start") == sorted(
            h for h in hours if h >= datetime(2023, 5, 1, tzinfo=UTC))
        # every row younger than its family's retention is there
        assert NOW - timedelta(days=14) in _times(conn, "raw.snapshots", cluster)
        assert NOW - timedelta(days=90) in _times(conn, "mart.group_lag", cluster)
        recorded = conn.execute(text(
            "SELECT schema_name || '.' || partition_name, family, retention_days, bytes,"
            " dropped_at FROM ops.retention_drops")).all()
    assert sorted(r[0] for r in recorded) == sorted(expected)
    assert {(r[0].split(".")[0] == "raw", r[1], r[2]) for r in recorded} == {
        (True, "raw", 14), (False, "mart", 90), (False, "hourly", 400)}
    assert all(r[3] > 0 and r[4] == NOW for r in recorded)
    assert "dropped raw.snapshots_p20240526" in caplog.text

    # Idempotent: again, nothing more goes.
    assert partitions.apply_retention(engine, partitions.DEFAULT_RETENTION, NOW).dropped == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM ops.retention_drops")).scalar_one() \
            == len(expected)


def test_an_interval_across_midnight_goes_to_both_days_and_reruns_leave_the_same_rows(
        fresh: tuple[str, str, Engine]) -> None:
    _, _, engine = fresh
    warehouse.migrate(engine, now=NOW)
    cluster = "midnight"
    start = datetime(2021, 3, 4, 23, 30, tzinfo=UTC)  # no partition of these days exists
    end = start + timedelta(hours=1)
    stamps = [start + timedelta(minutes=10 * i) for i in range(6)]

    def run(lag: int) -> list[tuple[Any, ...]]:
        warehouse.replace_interval_rows(engine, "mart", [("group_lag", _group_lag(
            cluster, stamps, lag))], cluster, "snapshot_ts", start, end)
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                "SELECT tableoid::regclass::text, snapshot_ts, lag FROM mart.group_lag"
                " WHERE cluster = :c ORDER BY snapshot_ts"), {"c": cluster})]

    first = run(5)
    assert [r[0] for r in first] == ["mart.group_lag_p20210304"] * 3 + \
        ["mart.group_lag_p20210305"] * 3
    assert [r[1] for r in first] == stamps
    assert run(5) == first  # a rerun
    assert run(7) == [(p, s, 7) for p, s, _ in first]  # a backfill with new values replaces


# -- converting an existing warehouse ----------------------------------------------------------

FILL = """
CREATE TEMP TABLE stamps AS
SELECT t FROM generate_series('2024-01-01 22:00+00'::timestamptz, '2024-01-02 02:00+00',
                              '30 minutes') t;
INSERT INTO raw.snapshots SELECT 'c', t, 's' || t, t <> '2024-01-02 01:00+00', 2, 2, 0, 50
FROM stamps;
INSERT INTO raw.consumer_groups SELECT 'c', t, g, 'classic', 'Stable', 'consumer', 'range',
       1 + mod(extract(hour FROM t)::int, 2), 1, false, true, 2
FROM stamps, (VALUES ('g1'), ('g2')) v (g);
INSERT INTO raw.group_members SELECT 'c', t, g, g || '-m' || m, 'client' || m, 'host', NULL
FROM stamps, (VALUES ('g1'), ('g2')) v (g), generate_series(1, 2) m;
INSERT INTO raw.member_assignments SELECT 'c', t, g, g || '-m' || p, 'current', 'orders', p
FROM stamps, (VALUES ('g1'), ('g2')) v (g), generate_series(1, 2) p;
INSERT INTO raw.committed_offsets SELECT 'c', t, g, 'orders', p, 10, 0, ''
FROM stamps, (VALUES ('g1'), ('g2')) v (g), generate_series(1, 2) p;
INSERT INTO raw.partition_offsets SELECT 'c', t, 'orders', p, 0, 20, 20
FROM stamps, generate_series(1, 2) p;
INSERT INTO raw.topics SELECT 'c', t, 'orders', 2 FROM stamps;
INSERT INTO raw.collection_errors SELECT 'c', t, 0, 'describe', 'TIMEOUT', 'slow', 'g2', NULL,
       NULL, true, 3 FROM stamps WHERE t = '2024-01-02 01:00+00';
INSERT INTO mart.group_status SELECT 'c', t, g, 'WARN', 1, 1, 0, 0, 0, 'orders', 1, 'behind'
FROM stamps, (VALUES ('g1'), ('g2')) v (g);
INSERT INTO mart.group_lag SELECT 'c', t, g, 2, 20, 10, 0, 0, 5, 4, 1, 1
FROM stamps, (VALUES ('g1'), ('g2')) v (g);
INSERT INTO mart.topic_lag SELECT 'c', t, g, 'orders', 2, 20, 10, 0, 0, 5, 4, 1, 1
FROM stamps, (VALUES ('g1'), ('g2')) v (g);
INSERT INTO mart.member_lag SELECT 'c', t, g, g || '-m' || p, 1, 10, 10, 0, 0, 5, 4, 1, 1
FROM stamps, (VALUES ('g1'), ('g2')) v (g), generate_series(1, 2) p;
INSERT INTO mart.partition_lag SELECT 'c', t, g, 'orders', p, g || '-m' || p, 10, 0, 20, 20,
       10, false, 1, 1, 10, 5, 'interpolated', 4
FROM stamps, (VALUES ('g1'), ('g2')) v (g), generate_series(1, 2) p;
INSERT INTO mart.partition_status SELECT 'c', t, g, 'orders', p, 'WARN', 'lag_growing', 10,
       'behind' FROM stamps, (VALUES ('g1'), ('g2')) v (g), generate_series(1, 2) p;
INSERT INTO mart.group_skew SELECT 'c', t, g, 'classic', 'range', 2, 2, 0, 0, 0, g || '-m1', 0.5
FROM stamps, (VALUES ('g1'), ('g2')) v (g);
INSERT INTO mart.assignment_whatif SELECT 'c', t, g, s, 'range', false, 2, 2, 0, 0, 0, NULL,
       NULL, 1 FROM stamps, (VALUES ('g1'), ('g2')) v (g), (VALUES ('current'), ('sticky')) w (s);
INSERT INTO mart.assignment_advice SELECT 'c', t, g, 1, 'keep', 'balanced'
FROM stamps, (VALUES ('g1'), ('g2')) v (g);
INSERT INTO mart.rebalance_events SELECT 'c', t, 'g1', 3, 'snapshots', true, 'consumer',
       'eager', 2, 1, 0, 'joined', 1 FROM stamps;
INSERT INTO mart.rebalance_hourly SELECT 'c', 'g1', date_trunc('hour', t), 12, 12, 0, 0, 0, 2,
       12, 0, 0, 3000, 600, 0, 0, 'snapshots', true FROM stamps WHERE extract(minute FROM t) = 0;
INSERT INTO mart.strategy_skew_hourly SELECT 'c', date_trunc('hour', t), 'classic', 'range', 2,
       4, 0, 0, 0, 0.5, 1, 1 FROM stamps WHERE extract(minute FROM t) = 0;
"""
# Columns that follow the clock (now()), not the data.
CLOCK_COLUMNS = {"last_snapshot_age_s", "last_complete_snapshot_age_s", "open_for_s"}


def _serve_views(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    views = [r[0] for r in conn.execute(
        "SELECT table_name FROM information_schema.views WHERE table_schema = 'serve'"
        " ORDER BY 1")]
    out = {}
    for view in views:
        cursor = conn.execute(f'SELECT * FROM serve."{view}"')
        names = [c.name for c in cursor.description or []]
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
        if view == "alert_conditions":  # the cluster rows are stamped now()
            rows = [r for r in rows if r["condition"] != "collector_stale_s"]
            for r in rows:
                if r["group_id"] == "":
                    r.pop("time")
        out[view] = sorted(tuple((k, v) for k, v in r.items() if k not in CLOCK_COLUMNS)
                           for r in rows)
    return out


def _dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title or variable, SQL) of every query of every dashboard."""
    from groupscope.serve.grafana.dashboards import build_all

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels") or [])

    found = []
    for uid, dashboard in build_all().items():
        found.extend((uid, panel["title"], t["rawSql"]) for panel in panels(dashboard["panels"])
                     for t in panel.get("targets") or [] if t.get("rawSql"))
        for variable in dashboard["templating"]["list"]:
            if variable.get("type") == "query":
                q = variable["query"]
                found.append((uid, f"variable {variable['name']}",
                              q if isinstance(q, str) else (q.get("rawSql") or q.get("query"))))
    return found


def _views_created_after_0009() -> set[str]:
    """The views a warehouse at 0009 does not have yet: panels over them have nothing to keep."""
    return {name for m in warehouse.migrations() if m.version > 9
            for name in re.findall(r"CREATE (?:OR REPLACE )?VIEW (\w+\.\w+)", m.sql)}


def _dashboard_results(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    from groupscope.serve.grafana.macros import expand

    variables = {"cluster": "c", "group": "g1", "topic": ["orders"]}
    later_views = _views_created_after_0009()
    out = {}
    for uid, title, sql in _dashboard_queries():
        if any(c in sql for c in CLOCK_COLUMNS | {"now()", "collector_stale"}):
            continue
        if any(re.search(rf"\b{re.escape(view)}\b", sql) for view in later_views):
            continue
        query = expand(sql, time_from=datetime(2024, 1, 1, tzinfo=UTC),
                       time_to=datetime(2024, 1, 3, tzinfo=UTC),
                       variables={k: v for k, v in variables.items() if k in sql})
        out[f"{uid}: {title}"] = sorted(map(repr, conn.execute(query.encode()).fetchall()))
    return out


def _migrate_before(engine: Engine, version: int, tmp_path: Path) -> list[str]:
    """Migrates an empty warehouse as it was before migration ``version``: an old one."""
    before = tmp_path / "migrations"
    before.mkdir()
    for m in warehouse.migrations():
        if m.version < version:
            (before / f"{m.name}.sql").write_text(m.sql)
    return warehouse.migrate(engine, tmp_path, now=NOW)


def test_converting_a_filled_warehouse_keeps_every_view_and_panel_row(
        fresh: tuple[str, str, Engine], postgres: LocalPostgres, tmp_path: Path) -> None:
    database, _, engine = fresh
    assert _migrate_before(engine, 10, tmp_path)[-1] == "0009_serve_views"
    with engine.begin() as conn:
        conn.exec_driver_sql(FILL)
    reader_url = postgres.database_url(database, READER_ROLE, READER_PASSWORD)
    with psycopg.connect(reader_url, autocommit=True) as reader:
        views_before = _serve_views(reader)
        panels_before = _dashboard_results(reader)
    empty = sorted(v for v, rows in views_before.items() if not rows)
    # Every view over the converted tables has rows (coordinator moves too: the coordinator
    # changes every hour); the two empty ones read only ops tables, which stay as they are.
    assert empty == ["open_alert_incidents", "quality_results"], empty
    assert sum(bool(rows) for rows in panels_before.values()) > 40

    # 0010 converts the tables; the later migrations (alerting's own tables) come along.
    assert warehouse.migrate(engine, now=NOW)[0] == "0010_partition_by_time"
    with engine.connect() as conn:
        kinds = dict(conn.execute(text(
            "SELECT t.schema_name || '.' || t.table_name, c.relkind"
            " FROM groupscope_meta.partitioned_tables t"
            " JOIN pg_class c ON c.oid = to_regclass(t.schema_name || '.' || t.table_name)")).all())
        assert set(kinds.values()) == {"p"} and len(kinds) == 30
        assert _partition_names(conn, "raw.consumer_groups") == [
            "consumer_groups_p20240101", "consumer_groups_p20240102",
            *[f"consumer_groups_p202406{d}" for d in range(15, 19)]]
        leftovers = conn.execute(text(
            "SELECT relname FROM pg_class WHERE relname LIKE '%unpartitioned%'")).all()
        assert leftovers == []
    # The reader still reads every view (their privileges came back with them).
    with psycopg.connect(reader_url, autocommit=True) as reader:
        views_after = _serve_views(reader)
        # Conditions that later migrations add (rebalance_stuck in 0015) are new rows, not
        # changed ones: the rows of every condition the warehouse had are kept as they were.
        conditions_before = {dict(r)["condition"] for r in views_before["alert_conditions"]}
        views_after["alert_conditions"] = [r for r in views_after["alert_conditions"]
                                           if dict(r)["condition"] in conditions_before]
        # Columns later migrations add to a view (0020's share_lag, streams_protocol) are new
        # columns, not changed ones: the columns the view had keep their values.
        assert {v: _columns_of(views_after[v], views_before[v]) for v in views_before} \
            == views_before
        assert _dashboard_results(reader) == panels_before


def _columns_of(rows: list[tuple[tuple[str, Any], ...]],
                like: list[tuple[tuple[str, Any], ...]]) -> list[tuple[tuple[str, Any], ...]]:
    """``rows`` (a view's, as (column, value) pairs) with only the columns of ``like``'s."""
    if not like:
        return rows
    kept = {column for row in like for column, _ in row}
    return [tuple((c, v) for c, v in row if c in kept) for row in rows]


# An old warehouse: 1,200 days of one snapshot a day (raw.snapshots: 1,200 partitions, past
# create_partitions' thousand at once), and 4 days of ten-minute snapshots of 2,000 committed
# partitions, 1,000 partition offsets, 1,000 lag rows and a group's lag each.
OLD_DAYS, RECENT_SNAPSHOTS = 1200, 4 * 144
FILL_OLD = f"""
INSERT INTO raw.snapshots (cluster, snapshot_ts, snapshot_id, complete, group_count,
                           partition_count, error_count)
SELECT 'old', ts, 's' || extract(epoch FROM ts)::bigint, true, 20, 1000, 0
FROM generate_series(timestamptz '2021-01-01 12:00Z',
                     timestamptz '2021-01-01 12:00Z' + interval '{OLD_DAYS - 1} days',
                     interval '1 day') ts
UNION ALL
SELECT 'old', ts, 's' || extract(epoch FROM ts)::bigint, true, 20, 1000, 0
FROM generate_series(timestamptz '2024-04-20 00:05Z', timestamptz '2024-04-20 00:05Z'
                     + interval '10 minutes' * {RECENT_SNAPSHOTS - 1}, interval '10 minutes') ts;
INSERT INTO mart.group_lag (cluster, snapshot_ts, group_id, partitions, lag,
                            negative_lag_partitions, beyond_retention_partitions)
SELECT 'old', snapshot_ts, 'g', 1, 7, 0, 0 FROM raw.snapshots WHERE snapshot_ts >= '2024-04-20';
INSERT INTO raw.committed_offsets (cluster, snapshot_ts, group_id, topic, partition,
                                   committed_offset, leader_epoch)
SELECT 'old', s.snapshot_ts, 'g' || g, 'orders', p, p * 1000 + g, 3
FROM raw.snapshots s, generate_series(1, 20) g, generate_series(0, 99) p
WHERE s.snapshot_ts >= '2024-04-20';
INSERT INTO raw.partition_offsets (cluster, snapshot_ts, topic, partition, log_start_offset,
                                   high_watermark, last_stable_offset)
SELECT 'old', s.snapshot_ts, 't' || t, p, 0, p * 7, p * 7
FROM raw.snapshots s, generate_series(1, 10) t, generate_series(0, 99) p
WHERE s.snapshot_ts >= '2024-04-20';
INSERT INTO mart.partition_lag (cluster, snapshot_ts, group_id, topic, partition,
                                committed_offset, high_watermark, lag, lag_beyond_retention,
                                time_lag_kind)
SELECT cluster, snapshot_ts, group_id, topic, partition, committed_offset,
       committed_offset + 5, 5, false, 'interpolated'
FROM raw.committed_offsets WHERE group_id IN ('g1', 'g2', 'g3', 'g4', 'g5', 'g6', 'g7',
                                              'g8', 'g9', 'g10');
ANALYZE;
"""


def _table_sums(conn: Any, columns: dict[str, list[str]]) -> dict[str, tuple[int, int]]:
    """Per converted table: its row count and a sum of its rows' hashes over ``columns``
    (the columns it had before: later migrations add some)."""
    out = {}
    for table, names in columns.items():
        row = ", ".join(f'"{c}"' for c in names)
        out[table] = tuple(conn.execute(text(
            f"SELECT count(*), coalesce(sum(hashtextextended(ROW({row})::text, 0)), 0)"
            f" FROM {table}")).one())
    return out


def _columns(conn: Any) -> dict[str, list[str]]:
    tables = conn.execute(text(
        "SELECT table_schema || '.' || table_name FROM information_schema.tables"
        " WHERE table_schema IN ('raw', 'mart') AND table_type = 'BASE TABLE'")).scalars()
    return {t: list(conn.execute(text(
        "SELECT column_name FROM information_schema.columns WHERE table_schema || '.' ||"
        " table_name = :t ORDER BY ordinal_position"), {"t": t}).scalars()) for t in tables}


def _steps_done(conn: Any) -> int:
    return conn.execute(text("SELECT count(done_at) FROM groupscope_meta.migration_steps"
                             " WHERE version = 10")).scalar_one()


def test_an_old_warehouse_is_migrated_by_the_command_only_and_a_killed_migration_resumes(
        fresh: tuple[str, str, Engine], tmp_path: Path) -> None:
    """0009 to the latest by `groupscope warehouse migrate`, killed halfway and run again:
    every row is kept; the tasks refuse the warehouse until it is done, with the command."""
    database, url, engine = fresh
    assert _migrate_before(engine, 10, tmp_path)[-1] == "0009_serve_views"
    started = time.monotonic()
    with engine.begin() as conn:
        conn.exec_driver_sql(FILL_OLD)
    filled_s = time.monotonic() - started
    with engine.connect() as conn:
        columns = _columns(conn)
        before = _table_sums(conn, columns)
    assert len(columns) == 23
    assert sum(n for n, _ in before.values()) > 2_300_000
    landing = tmp_path / "landing"

    # A task against the old warehouse fails at once, naming the command, and changes nothing.
    with pytest.raises(pipeline.StageFailed,
                       match=rf"is not migrated \({FROM_0010} migration\(s\) pending, from "
                             r"0010_partition_by_time\): run `groupscope warehouse migrate`"):
        pipeline.gate_landed(url, landing, "old", NOW)

    command = [str(Path(sys.executable).parent / "groupscope"), "warehouse", "migrate",
               "--url", url]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        # Killed once the lag mart (step 8 of 24) is converted; raw.committed_offsets, the
        # largest, is still to come.
        with engine.connect() as conn:
            while (conn.execute(text("SELECT to_regclass('groupscope_meta.migration_steps')"))
                   .scalar_one() is None or _steps_done(conn) < 8):
                assert first.poll() is None, first.communicate()[0]
                conn.rollback()
                time.sleep(0.02)
        killed_after_s = time.monotonic() - started
        first.kill()
        plan = first.communicate()[0]
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == -signal.SIGKILL
    # The plan came first: what it copies, how long it takes, the disk it needs.
    assert re.search(r"copies about [\d,]+ rows \([\d.]+ MiB\), one table per transaction: "
                     r"about [\d,]+ s at .*; needs about [\d.]+ MiB free", plan), plan
    with engine.connect() as conn:  # the killed client's server side goes too (a host crash)
        # Client backends only: an autovacuum worker (a superuser's) on the filled tables
        # may be there too, and is not the test's to end.
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE datname = :d AND pid <> pg_backend_pid()"
                          " AND backend_type = 'client backend'"), {"d": database})
        done = _steps_done(conn)
    assert 8 <= done < 24
    with pytest.raises(pipeline.StageFailed,
                       match=rf"is half-migrated \(0010_partition_by_time: {done} of 24 steps "
                             r"done\): run `groupscope warehouse migrate` to finish it"):
        pipeline.gate_landed(url, landing, "old", NOW)

    resumed_at = time.monotonic()
    again = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True, timeout=300)
    resumed_s = time.monotonic() - resumed_at
    assert f"0010_partition_by_time: resuming after step {done} of 24" in again.stdout
    assert f"0010_partition_by_time: step {done + 1} of 24" in again.stdout
    assert "0010_partition_by_time: step 1 of 24" not in again.stdout
    assert f"applied {FROM_0010} migration(s): 0010_partition_by_time" in again.stdout
    with engine.connect() as conn:
        assert _table_sums(conn, columns) == before
        kinds = conn.execute(text(
            "SELECT DISTINCT c.relkind FROM groupscope_meta.partitioned_tables t JOIN pg_class c"
            " ON c.oid = to_regclass(t.schema_name || '.' || t.table_name)")).scalars().all()
        assert kinds == ["p"]
        assert len(_partition_names(conn, "raw.snapshots")) >= OLD_DAYS + 4
        leftovers = conn.execute(text(
            "SELECT relname FROM pg_class WHERE relname LIKE '%unpartitioned%'"
            " OR relname LIKE 'p0010%' UNION ALL SELECT proname FROM pg_proc"
            " WHERE proname LIKE 'p0010%' UNION ALL SELECT 'step ' || step"
            " FROM groupscope_meta.migration_steps")).all()
        assert leftovers == []
        # The views are back (raw.latest_group_lag reads raw.committed_offsets).
        assert conn.execute(text("SELECT count(*) FROM raw.latest_group_lag")).scalar_one() > 0
    warehouse.check_migrated(engine)  # what every task checks first
    print(f"\nold warehouse: {sum(n for n, _ in before.values()):,} rows filled in "
          f"{filled_s:.1f} s; the command killed after {killed_after_s - filled_s:.1f} s "
          f"(step {done} of 24), resumed and done in {resumed_s:.1f} s\n{again.stdout}")


# -- two retention runs at once ------------------------------------------------------------------

# Holds every ALTER TABLE of the database (a DETACH) at its start while the test holds the
# advisory lock: both runs reach their DETACH before either drops anything.
GATE = 0x7265746E  # "retn"
GATE_SQL = f"""
CREATE FUNCTION public.gate() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_lock_shared({GATE});
    PERFORM pg_advisory_unlock_shared({GATE});
END $$;
CREATE EVENT TRIGGER gate ON ddl_command_start WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION public.gate();
"""


def test_two_retention_runs_drop_the_same_partition_once_and_both_succeed(
        fresh: tuple[str, str, Engine], postgres: LocalPostgres) -> None:
    database, url, engine = fresh
    warehouse.migrate(engine, now=NOW)
    old = [NOW - timedelta(days=100), NOW - timedelta(days=100, hours=1)]  # one day's partition
    warehouse.replace_interval_rows(engine, "mart", [("group_lag", _group_lag("a", old, 1))],
                                    "a", "snapshot_ts", old[1], NOW)
    expired = "mart.group_lag_p20240307"
    with psycopg.connect(postgres.superuser_url(database), autocommit=True) as root:
        root.execute(GATE_SQL)
        root.execute(f"SELECT pg_advisory_lock({GATE})")
        runs = [Run(lambda: pipeline.retention(url, KEEP, NOW)) for _ in range(2)]
        for run in runs:
            run.start()
        # Both runs at the gate, or one there and the other done (it left the partition to
        # the one that holds it).
        until(lambda: lock_waiters(engine) + sum(r.finished.is_set() for r in runs) == 2,
              "both retention runs at their first DETACH")
        root.execute(f"SELECT pg_advisory_unlock({GATE})")
        summaries = [run.outcome() for run in runs]
        root.execute("DROP EVENT TRIGGER gate")
    assert sorted(d for s in summaries for d in s["dropped"]) == [expired]
    assert sorted(d for s in summaries for d in s["dropped_elsewhere"]) == [expired]
    assert all(s["deferred"] == [] for s in summaries)
    with engine.connect() as conn:
        assert _times(conn, "mart.group_lag", "a") == []
        assert conn.execute(text("SELECT schema_name || '.' || partition_name"
                                 " FROM ops.retention_drops")).scalars().all() == [expired]


# -- the operational tables ----------------------------------------------------------------------

def _incident(conn: Any, incident_id: str, state: str, started: datetime,
              resolved: datetime | None, deliveries: list[tuple[str, datetime]]) -> None:
    conn.execute(text(
        "INSERT INTO ops.alert_incidents (incident_id, fingerprint, rule, severity, cluster,"
        " group_id, topic, state, started_at, last_seen_at, evaluated_at, resolved_at, value,"
        " threshold, details, labels, runbook) VALUES (:i, :i, 'r', 'critical', 'c', 'g', '',"
        " :s, :t, :t, :t, :r, 1, 0, '{}', '{}', '')"),
        {"i": incident_id, "s": state, "t": started, "r": resolved})
    for n, (delivery_state, at) in enumerate(deliveries):
        conn.execute(text(
            "INSERT INTO ops.alert_deliveries (incident_id, notification, channel, state,"
            " created_at, last_attempt_at, sent_at) VALUES (:i, :n, 'webhook', :s, :t, :t,"
            " CASE WHEN :s = 'sent' THEN CAST(:t AS timestamptz) END)"),
            {"i": incident_id, "n": f"n{n}", "s": delivery_state, "t": at})


def test_ops_retention_deletes_what_is_past_its_limit_and_never_an_open_incident(
        fresh: tuple[str, str, Engine]) -> None:
    _, url, engine = fresh
    warehouse.migrate(engine, now=NOW)
    keep = {**KEEP, "incidents": timedelta(days=10), "quality": timedelta(days=5),
            "drops": timedelta(days=20)}
    days = lambda n: NOW - timedelta(days=n)  # noqa: E731
    with engine.begin() as conn:
        _incident(conn, "resolved-old", "resolved", days(40), days(11),
                  [("sent", days(30)), ("given_up", days(11))])
        _incident(conn, "resolved-recent", "resolved", days(40), days(9), [("sent", days(9))])
        # resolved long ago, but its RESOLVED is still retried, or was sent only lately
        _incident(conn, "resolved-owing", "resolved", days(40), days(30), [("failed", days(30))])
        _incident(conn, "resolved-sent-lately", "resolved", days(40), days(30),
                  [("sent", days(2))])
        # open for months: firing (its repeats owed), pending, never deleted
        _incident(conn, "firing-old", "firing", days(200), None, [("sent", days(199))])
        _incident(conn, "pending-old", "pending", days(200), None, [])
        for n, age in enumerate((6, 5, 4)):
            conn.execute(text(
                "INSERT INTO ops.quality_results (checked_at, cluster, suite, subject, success,"
                " expectations, failed, failures) VALUES (:t, 'c', 'marts', :s, true, 1, 0,"
                " '[]')"), {"t": days(age) - timedelta(seconds=1) * (age == 5), "s": f"s{n}"})
        for n, age in enumerate((21, 19)):
            conn.execute(text(
                "INSERT INTO ops.retention_drops VALUES (:t, 'mart', 'group_lag', :p, 'mart',"
                " :t, :t, 90, 1)"), {"t": days(age), "p": f"group_lag_p{n}"})

    summary = pipeline.retention(url, keep, NOW)
    assert summary["ops_pruned"] == {"alert_incidents": 1, "quality_results": 2,
                                     "retention_drops": 1}
    with engine.connect() as conn:
        incidents = conn.execute(text(
            "SELECT incident_id FROM ops.alert_incidents ORDER BY 1")).scalars().all()
        deliveries = conn.execute(text(
            "SELECT DISTINCT incident_id FROM ops.alert_deliveries ORDER BY 1")).scalars().all()
        quality = conn.execute(text(
            "SELECT subject FROM ops.quality_results ORDER BY 1")).scalars().all()
        drops = conn.execute(text(
            "SELECT partition_name FROM ops.retention_drops")).scalars().all()
    assert incidents == ["firing-old", "pending-old", "resolved-owing", "resolved-recent",
                         "resolved-sent-lately"]
    assert deliveries == ["firing-old", "resolved-owing", "resolved-recent",
                          "resolved-sent-lately"]
    assert quality == ["s2"]  # 4 days old; 5 days and a second, 6 days: past 5 days
    assert drops == ["group_lag_p1"]
    # Idempotent: again, nothing more goes.
    assert pipeline.retention(url, keep, NOW)["ops_pruned"] == {
        "alert_incidents": 0, "quality_results": 0, "retention_drops": 0}


def test_an_operational_retention_missing_or_under_a_day_fails_the_task(
        fresh: tuple[str, str, Engine]) -> None:
    _, url, _ = fresh
    with pytest.raises(pipeline.StageFailed, match=r"retention: no retention for \['quality'\]"):
        pipeline.retention(url, {k: v for k, v in KEEP.items() if k != "quality"}, NOW)


# -- mart.rebalance_events' key on an old warehouse ----------------------------------------------

def test_the_key_migration_deletes_the_duplicate_rebalance_events_first(
        fresh: tuple[str, str, Engine], tmp_path: Path) -> None:
    _, _, engine = fresh
    assert _migrate_before(engine, 18, tmp_path)[-1] == "0017_partition_leaders"
    event = ("'c', '2024-06-15 09:10+00', 'g', {gen}, '{source}', {est}, 'range', 'eager', 2,"
             " 1, 0, 'joined', 1")
    rows = [event.format(gen=7, source="offsets_topic", est="false")] * 3 \
        + [event.format(gen=8, source="offsets_topic", est="false")] \
        + [event.format(gen="NULL", source="snapshots", est="true")] * 2
    with engine.begin() as conn:  # what two overlapping writes left: every event twice or more
        for row in rows:
            conn.exec_driver_sql(f"INSERT INTO mart.rebalance_events VALUES ({row})")
    assert warehouse.migrate(engine, now=NOW)[0] == "0018_rebalance_events_key"
    with engine.connect() as conn:
        left = conn.execute(text(
            "SELECT generation, source, count(*) FROM mart.rebalance_events"
            " GROUP BY 1, 2 ORDER BY 1, 2")).all()
    assert [tuple(r) for r in left] == [(7, "offsets_topic", 1), (8, "offsets_topic", 1),
                                        (None, "snapshots", 1)]
