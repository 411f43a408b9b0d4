"""Landing and warehouse loading against a real PostgreSQL: hostile names arrive unchanged,
loads are idempotent, a warehouse that is down loses nothing, and two writers of the same
rows at once (the live path and the hourly job) leave what one alone would."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import unique
from kafkautil import commit_offsets, create_topic, produce_counts, take_snapshot
from overlap import hold_first
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import IntegrityError

from groupscope import pipeline, warehouse
from groupscope.contract.model import Snapshot
from groupscope.contract.tables import KEYS, SCHEMAS, to_tables
from groupscope.land.snapshots import LandedSnapshot, land, landed_snapshots
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.postgres import LocalPostgres

pytestmark = pytest.mark.integration

HOSTILE_GROUPS = [
    "quote'single",
    'quote"double',
    "back\\slash",
    "unicode-グループ-ünïcødé-😀",
    "semi;colon -- DROP TABLE raw.snapshots",
    "g" * 249,
]


def _dump(engine: Engine, cluster: str) -> dict[str, list[tuple[object, ...]]]:
    out = {}
    with engine.connect() as conn:
        for table, key in KEYS.items():
            order = ", ".join(key)
            out[table] = [tuple(r) for r in conn.execute(text(
                f"SELECT * FROM raw.{table} WHERE cluster = :c ORDER BY {order}"), {"c": cluster})]
    return out


def test_hostile_names_reach_the_warehouse_unchanged(
    kafka: KafkaCluster, warehouse_engine: Engine, tmp_path: Path
) -> None:
    # Topic names are restricted by Kafka to [a-zA-Z0-9._-], up to 249 characters.
    topic = ("t." + unique("x") + "_-" + "z" * 249)[:249]
    create_topic(kafka.bootstrap, topic, 1)
    produce_counts(kafka.bootstrap, topic, [5])
    groups = HOSTILE_GROUPS
    for i, g in enumerate(groups):
        commit_offsets(kafka.bootstrap, g, {(topic, 0): i})
    cluster = unique("hostile")
    snapshot = take_snapshot(kafka.bootstrap, cluster=cluster)
    landed = land(snapshot, tmp_path)
    warehouse.load_snapshot(warehouse_engine, landed.read())

    with warehouse_engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT group_id, committed_offset FROM raw.committed_offsets"
            " WHERE cluster = :c AND topic = :t"), {"c": cluster, "t": topic}).all()
        lag = dict(conn.execute(text(
            "SELECT group_id, lag FROM raw.latest_group_lag WHERE cluster = :c AND topic = :t"),
            {"c": cluster, "t": topic}).all())
    assert sorted(rows) == sorted((g, i) for i, g in enumerate(groups))
    assert lag == {g: 5 - i for i, g in enumerate(groups)}
    described = {row[2] for row in _dump(warehouse_engine, cluster)["consumer_groups"]}
    assert set(groups) <= described
    # the landing zone kept them unchanged too
    landed_groups = pq.read_table(landed.path("committed_offsets")).column("group_id")
    assert set(groups) <= set(landed_groups.to_pylist())


def test_loading_twice_changes_nothing(
    kafka: KafkaCluster, warehouse_engine: Engine, tmp_path: Path
) -> None:
    topic = unique("idem")
    create_topic(kafka.bootstrap, topic, 3)
    produce_counts(kafka.bootstrap, topic, [4, 5, 6])
    commit_offsets(kafka.bootstrap, unique("idem-group"), {(topic, 0): 1, (topic, 2): 3})
    cluster = unique("idem")
    snapshot = take_snapshot(kafka.bootstrap, cluster=cluster)
    landed = land(snapshot, tmp_path)
    warehouse.load_snapshot(warehouse_engine, landed.read())
    first = _dump(warehouse_engine, cluster)
    warehouse.load_snapshot(warehouse_engine, landed.read())
    warehouse.load_snapshot(warehouse_engine, to_tables(snapshot))
    assert _dump(warehouse_engine, cluster) == first
    assert len(first["snapshots"]) == 1 and first["snapshots"][0][3] is True  # complete
    # landing is append-only and idempotent as well: the same snapshot is one set of files
    assert land(snapshot, tmp_path) == landed
    assert len(landed_snapshots(tmp_path, cluster)) == 1


def test_landing_layout_and_round_trip(kafka: KafkaCluster, tmp_path: Path) -> None:
    snapshot = take_snapshot(kafka.bootstrap, cluster="layout")
    landed = land(snapshot, tmp_path)
    ts = snapshot.snapshot_ts
    for table in SCHEMAS:
        path = landed.path(table)
        assert path.exists()
        assert path.parent == (tmp_path / "snapshots" / table / "cluster=layout"
                               / f"date={ts:%Y-%m-%d}" / f"hour={ts:%H}")
    read = landed.read()
    for name, table in to_tables(snapshot).items():
        assert read[name].equals(table), name
    assert not list(tmp_path.rglob("*.tmp"))


def test_schema_matches_the_migrations(warehouse_engine: Engine) -> None:
    with warehouse_engine.connect() as conn:
        for table, schema in SCHEMAS.items():
            columns = conn.execute(text(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = 'raw' AND table_name = :t ORDER BY ordinal_position"),
                {"t": table}).scalars().all()
            assert columns == schema.names, table
            key = conn.execute(text(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
                " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
                " WHERE i.indrelid = ('raw.' || :t)::regclass AND i.indisprimary"),
                {"t": table}).scalars().all()
            assert set(key) == set(KEYS[table]), table


def test_mart_schema_matches_the_migrations(warehouse_engine: Engine) -> None:
    from groupscope.contract.tables import ADVICE_SCHEMA, WHATIF_SCHEMA

    with warehouse_engine.connect() as conn:
        for table, schema in (("assignment_whatif", WHATIF_SCHEMA),
                              ("assignment_advice", ADVICE_SCHEMA)):
            columns = conn.execute(text(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = 'mart' AND table_name = :t ORDER BY ordinal_position"),
                {"t": table}).scalars().all()
            assert columns == schema.names, table


def test_migrations_are_idempotent_and_guarded(warehouse_engine: Engine, tmp_path: Path) -> None:
    assert warehouse.migrate(warehouse_engine) == []
    edited = tmp_path / "migrations"
    edited.mkdir()
    for m in warehouse.migrations():
        (edited / f"{m.name}.sql").write_text(m.sql + "\n-- edited\n")
    with pytest.raises(RuntimeError, match="different contents"):
        warehouse.migrate(warehouse_engine, tmp_path)


def test_warehouse_down_is_a_clear_error_and_landed_data_is_kept(
    kafka: KafkaCluster, warehouse_engine: Engine, tmp_path: Path
) -> None:
    from groupscope_dev.ports import free_ports

    snapshot = take_snapshot(kafka.bootstrap, cluster=unique("down"))
    landed = land(snapshot, tmp_path)
    down = warehouse.engine_for(
        f"postgresql://groupscope:secret-pw@127.0.0.1:{free_ports(1)[0]}/groupscope")
    with pytest.raises(warehouse.WarehouseUnavailable, match="unreachable") as info:
        warehouse.load_snapshot(down, landed.read())
    assert "secret-pw" not in str(info.value)
    # later, with the warehouse back, the landed snapshot loads: nothing was lost
    pending = [s for s in landed_snapshots(tmp_path) if s.cluster == snapshot.cluster]
    assert len(pending) == 1
    warehouse.load_snapshot(warehouse_engine, pending[0].read())
    assert _dump(warehouse_engine, snapshot.cluster)["snapshots"]


def _tear(path: Path) -> None:
    """What a host crash leaves of a file renamed before its bytes reached the disk."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _landed_backlog(kafka: KafkaCluster, cluster: str, landing: Path, count: int,
                    lander: Callable[[Snapshot, Path], LandedSnapshot],
                    ) -> tuple[Snapshot, list[LandedSnapshot]]:
    """One real snapshot (a group committed on a topic of its own), landed ``count`` times a
    minute apart before it was taken, oldest first: a backlog."""
    topic = unique(cluster)
    create_topic(kafka.bootstrap, topic, 1)
    commit_offsets(kafka.bootstrap, unique(f"{cluster}-group"), {(topic, 0): 0})
    taken = take_snapshot(kafka.bootstrap, cluster=cluster)
    return taken, [lander(dataclasses.replace(
        taken, snapshot_ts=taken.snapshot_ts - timedelta(minutes=m)), landing)
        for m in range(count, 0, -1)]


def test_torn_files_are_quarantined_and_reported_and_the_backlog_still_loads(
        kafka: KafkaCluster, warehouse_engine: Engine, postgres: LocalPostgres,
        tmp_path: Path) -> None:
    cluster = unique("torn")
    taken, landed = _landed_backlog(kafka, cluster, tmp_path, 5, pipeline.land_snapshot)
    torn_manifest, torn_data, torn_whatif, *good = landed
    _tear(torn_manifest.path("snapshots"))
    _tear(torn_data.path("committed_offsets"))
    _tear(torn_whatif.whatif_path("assignment_whatif"))
    now = taken.snapshot_ts

    loaded = pipeline.check_and_load(postgres.url, tmp_path, cluster, now)
    assert loaded == [s.snapshot_id for s in good]
    assert [row[:2] for row in _dump(warehouse_engine, cluster)["snapshots"]] == [
        (cluster, s.snapshot_ts) for s in good]
    for torn in (torn_manifest, torn_data, torn_whatif):
        folder = tmp_path / "_quarantine" / f"cluster={cluster}" / torn.snapshot_id
        reason = json.loads((folder / "reason.json").read_text())
        assert reason["manifest"] == str(torn.path("snapshots"))
        # Every file of it moved out of the readers' way, the torn one among them.
        assert not torn.path("snapshots").exists() and not torn.path("topics").exists()
        assert sorted(p.name for p in (folder / "snapshots").iterdir()) == sorted(
            f"{t}.parquet" for t in SCHEMAS)
        assert not torn.whatif_path("assignment_whatif").exists()
        assert (folder / "whatif" / "assignment_whatif.parquet").exists()
    with warehouse_engine.connect() as conn:
        reported = conn.execute(text(
            "SELECT subject, success, failures->0->>'observed' FROM ops.quality_results"
            " WHERE cluster = :c AND suite = 'landed_files' ORDER BY subject"),
            {"c": cluster}).all()
        failed = conn.execute(text("SELECT quality_gate_failed FROM serve.cluster_conditions"
                                   " WHERE cluster = :c"), {"c": cluster}).scalar_one()
    assert [(s, ok) for s, ok, _ in reported] == sorted(
        (t.snapshot_id, False) for t in (torn_manifest, torn_data, torn_whatif))
    assert all("Parquet" in why or "parquet" in why for _, _, why in reported), reported
    assert failed == 1  # the quality_gate_failed alert condition: an incident
    # A second run finds nothing more to quarantine or load, and fails nothing.
    assert pipeline.check_and_load(postgres.url, tmp_path, cluster, now) == []
    with warehouse_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM ops.quality_results WHERE cluster = :c"
                                 " AND suite = 'landed_files'"), {"c": cluster}).scalar_one() == 3


def _with_nul_group_ids(landed: LandedSnapshot) -> None:
    """Rewrites a landed snapshot's group ids with a NUL byte in each (Kafka takes any string
    as a group id; PostgreSQL's text cannot hold one), consistently in every table, so the
    snapshot still passes the quality checks."""
    for name in SCHEMAS:
        data = pq.read_table(landed.path(name))
        if "group_id" not in data.schema.names or not data.num_rows:
            continue
        index = data.schema.get_field_index("group_id")
        ids = pa.array([None if g is None else f"{g}\x00nul" for g in
                        data.column(index).to_pylist()], data.schema.field(index).type)
        pq.write_table(data.set_column(index, data.schema.field(index), ids),
                       landed.path(name))


def test_a_snapshot_the_warehouse_refuses_is_quarantined_and_the_next_ones_load(
        kafka: KafkaCluster, warehouse_engine: Engine, postgres: LocalPostgres,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = unique("refused")
    taken, landed = _landed_backlog(kafka, cluster, tmp_path, 3, pipeline.land_snapshot)
    refused, *good = landed
    _with_nul_group_ids(refused)
    now = taken.snapshot_ts
    ids = [s.snapshot_id for s in landed]
    # A warehouse that refuses every write (read-only after a failover) is not the data's
    # fault: nothing is quarantined, everything stays pending.
    read_only = make_url(postgres.url).set(
        query={"options": "-c default_transaction_read_only=on"}).render_as_string(False)
    with pytest.raises(Exception, match="read-only"):
        pipeline.load(read_only, tmp_path, cluster, ids, now)
    # Nor is a writer that holds the rows too long: the load fails, the warehouse still
    # writable (the refusal would be recorded, and the snapshots quarantined, were it taken
    # for the data's).
    monkeypatch.setattr(warehouse, "WRITER_LOCK_TIMEOUT", timedelta(seconds=0.3))
    with psycopg.connect(postgres.url) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))",
                       (f"groupscope-writer:{cluster}:raw.snapshots",))
        with pytest.raises(pipeline.StageFailed, match="another writer"):
            pipeline.load(postgres.url, tmp_path, cluster, ids, now)
    assert not (tmp_path / "_quarantine").exists()
    assert all(s.path("snapshots").exists() for s in landed)

    loaded = pipeline.check_and_load(postgres.url, tmp_path, cluster, now)
    assert loaded == [s.snapshot_id for s in good]
    assert [row[:2] for row in _dump(warehouse_engine, cluster)["snapshots"]] == [
        (cluster, s.snapshot_ts) for s in good]
    folder = tmp_path / "_quarantine" / f"cluster={cluster}" / refused.snapshot_id
    reason = json.loads((folder / "reason.json").read_text())["reason"]
    assert "refused" in reason and "NUL" in reason, reason
    assert not refused.path("snapshots").exists()
    with warehouse_engine.connect() as conn:
        reported = conn.execute(text(
            "SELECT subject, success, failures->0->>'observed' FROM ops.quality_results"
            " WHERE cluster = :c AND suite = 'landed_files'"), {"c": cluster}).all()
        failed = conn.execute(text("SELECT quality_gate_failed FROM serve.cluster_conditions"
                                   " WHERE cluster = :c"), {"c": cluster}).scalar_one()
    assert reported == [(refused.snapshot_id, False, reason)]
    assert failed == 1  # quality_gate_failed names it to the on-call
    # The next run has nothing left to retry: the backlog is not held up.
    assert pipeline.check_and_load(postgres.url, tmp_path, cluster, now) == []


def test_a_snapshot_failing_the_gate_is_rejected_alone_and_the_others_of_its_run_load(
        kafka: KafkaCluster, warehouse_engine: Engine, postgres: LocalPostgres,
        tmp_path: Path) -> None:
    from groupscope import quality

    cluster = unique("gate-one")
    taken, landed = _landed_backlog(kafka, cluster, tmp_path, 3, pipeline.land_snapshot)
    first, failing, last = landed
    topics = pq.read_table(failing.path("topics"))
    pq.write_table(pa.concat_tables([topics, topics]), failing.path("topics"))  # a duplicate
    with pytest.raises(quality.QualityGateFailed, match="the 2 that passed were loaded") as info:
        pipeline.check_and_load(postgres.url, tmp_path, cluster, taken.snapshot_ts)
    assert info.value.loaded == [first.snapshot_id, last.snapshot_id]
    assert [row[:2] for row in _dump(warehouse_engine, cluster)["snapshots"]] == [
        (cluster, first.snapshot_ts), (cluster, last.snapshot_ts)]
    assert quality.rejected_ids(tmp_path, cluster) == {failing.snapshot_id}


def test_the_load_command_takes_an_old_backlog_through_the_same_gate(
        kafka: KafkaCluster, warehouse_engine: Engine, postgres: LocalPostgres,
        tmp_path: Path) -> None:
    """``groupscope warehouse load``: snapshots older than the DAG's day, one of them torn and
    one failing the checks; the torn one is quarantined, the failing one rejected (marked),
    the rest loaded, in one run."""
    cluster = unique("backlog")

    def land_days_ago(snapshot: Snapshot, landing: Path) -> LandedSnapshot:
        return pipeline.land_snapshot(
            dataclasses.replace(snapshot, snapshot_ts=snapshot.snapshot_ts - timedelta(days=3)),
            landing)

    _, landed = _landed_backlog(kafka, cluster, tmp_path, 4, land_days_ago)
    torn, failing, *good = landed
    _tear(torn.path("committed_offsets"))
    topics = pq.read_table(failing.path("topics"))
    pq.write_table(pa.concat_tables([topics, topics]), failing.path("topics"))  # a duplicate
    result = subprocess.run(
        [sys.executable, "-m", "groupscope.cli", "warehouse", "load", "--url", postgres.url,
         "--landing", str(tmp_path), "--cluster", cluster],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr  # something was rejected: said, and non-zero
    assert result.stdout.strip() == ("loaded 2 landed snapshot(s) not yet in the warehouse; 1 "
                                     "failed the checks and were rejected (marked in the "
                                     "landing zone)"), result.stdout
    assert "Traceback" not in result.stderr
    assert [row[:2] for row in _dump(warehouse_engine, cluster)["snapshots"]] == [
        (cluster, s.snapshot_ts) for s in good]
    assert (tmp_path / "_quarantine" / f"cluster={cluster}" / torn.snapshot_id).is_dir()
    from groupscope import quality

    assert quality.rejected_ids(tmp_path, cluster) == {failing.snapshot_id}


def test_a_rejected_snapshot_is_never_read_by_spark(kafka: KafkaCluster, spark: Any,
                                                    tmp_path: Path) -> None:
    from groupscope import quality
    from groupscope.analyze.io import read_snapshot_table

    cluster = unique("rejected")
    taken, (kept, rejected) = _landed_backlog(kafka, cluster, tmp_path, 2, land)
    failure = quality.Failure("topics", "ExpectTableRowCountToEqual", {"value": 1}, "observed 2")
    quality.reject(rejected, quality.SuiteResult(quality.LANDED_SUITE, cluster,
                                                 rejected.snapshot_id, 1, (failure,)))
    start, end = taken.snapshot_ts - timedelta(hours=1), taken.snapshot_ts
    # The lag job's input (every job reads through read_snapshot_table alike).
    rows = read_snapshot_table(spark, tmp_path, "committed_offsets", cluster, start, end)
    # Spark gives back the UTC time without its zone (the session's zone is UTC).
    assert {r.snapshot_ts.replace(tzinfo=UTC) for r in rows.collect()} == {kept.snapshot_ts}


def test_a_lock_wait_is_bounded_and_names_the_holder(warehouse_engine: Engine,
                                                     postgres: LocalPostgres) -> None:
    with psycopg.connect(postgres.url, application_name="holder-of-locks") as holder:
        pid = holder.info.backend_pid
        holder.execute("SELECT pg_advisory_lock(%s)", (warehouse._LOCK_ID,))
        holder.execute("LOCK TABLE ops.quality_results IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(warehouse.LockTimeout,
                           match=rf"^the migration gave up waiting for a lock: held by pid "
                                 rf"{pid} \(.*holder-of-locks, idle in transaction"):
            warehouse.migrate(warehouse_engine, lock_timeout_s=0.3)
        with pytest.raises(warehouse.LockTimeout, match=rf"^a test's read gave up .*pid {pid}"), \
                warehouse.bounded_transaction(warehouse_engine, "a test's read", 0.3) as conn:
            conn.execute(text("SELECT count(*) FROM ops.quality_results"))
        holder.rollback()
        holder.execute("SELECT pg_advisory_unlock(%s)", (warehouse._LOCK_ID,))
    assert warehouse.migrate(warehouse_engine) == []


def test_a_migration_that_times_out_leaves_no_lock_timeout_and_names_its_holder(
        postgres: LocalPostgres, tmp_path: Path) -> None:
    """The advisory lock not granted, and a migration's own statement (run on the driver's
    cursor, whose error is psycopg's, not SQLAlchemy's) timing out: both are ``LockTimeout``,
    and the one pooled connection goes back without the migration's lock_timeout."""
    # One pooled connection (the migration's; the holders are looked up on an overflow one).
    engine = create_engine(make_url(postgres.url).set(drivername="postgresql+psycopg"),
                           pool_size=1, max_overflow=1)
    probe = f"ops.{unique('lock_probe').replace('-', '_')}"
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "9001_probe.sql").write_text(
        f"ALTER TABLE {probe} ADD COLUMN added integer;\n")
    try:
        with psycopg.connect(postgres.url, application_name="holder-of-locks") as holder:
            holder.execute(f"CREATE TABLE {probe} (id integer)")
            holder.commit()
            holder.execute("SELECT pg_advisory_lock(%s)", (warehouse._LOCK_ID,))
            with pytest.raises(warehouse.LockTimeout, match=r"held by pid .*last statement"):
                warehouse.migrate(engine, tmp_path, lock_timeout_s=0.3)
            with engine.connect() as conn:
                assert conn.exec_driver_sql("SHOW lock_timeout").scalar_one() == "0"
            holder.execute("SELECT pg_advisory_unlock(%s)", (warehouse._LOCK_ID,))
            holder.execute(f"LOCK TABLE {probe} IN ACCESS SHARE MODE")
            with pytest.raises(warehouse.LockTimeout,
                               match=r"^the migration gave up .*holder-of-locks"):
                warehouse.migrate(engine, tmp_path, lock_timeout_s=0.3)
            with engine.connect() as conn:
                assert conn.exec_driver_sql("SHOW lock_timeout").scalar_one() == "0"
                assert conn.execute(text(
                    "SELECT count(*) FROM groupscope_meta.schema_migrations WHERE version = 9001"
                )).scalar_one() == 0
            holder.rollback()
            holder.execute(f"DROP TABLE {probe}")
            holder.commit()
    finally:
        engine.dispose()


# -- writers of the same rows at once ----------------------------------------------------------

HOUR = datetime(2024, 1, 10, 10, tzinfo=UTC)
STAMPS = [HOUR + timedelta(minutes=10 * i) for i in range(6)]
TS = pa.timestamp("us", tz="UTC")


def _group_lag(cluster: str, start: datetime, end: datetime) -> pa.Table:
    stamps = [s for s in STAMPS if start <= s < end]
    n = len(stamps)
    return pa.table({"cluster": [cluster] * n, "snapshot_ts": pa.array(stamps, TS),
                     "group_id": ["g"] * n, "partitions": [2] * n,
                     "lag": [s.minute for s in stamps], "negative_lag_partitions": [0] * n,
                     "beyond_retention_partitions": [0] * n})


def _lag_rows(engine: Engine, cluster: str) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT snapshot_ts, group_id, lag FROM mart.group_lag WHERE cluster = :c"
            " ORDER BY snapshot_ts"), {"c": cluster})]


@pytest.mark.parametrize("first", ["hourly", "live"])
def test_live_and_hourly_writes_of_one_interval_take_turns(warehouse_engine: Engine,
                                                           first: str) -> None:
    # The hourly lag job replaces the hour; a live run at the same moment replaces its last
    # three snapshots (the same transforms: the same rows for them).
    intervals = {"hourly": (HOUR, HOUR + timedelta(hours=1)),
                 "live": (STAMPS[3], STAMPS[5] + timedelta(microseconds=1))}

    def write(cluster: str, which: str) -> None:
        start, end = intervals[which]
        warehouse.replace_interval_rows(warehouse_engine, "mart", [
            ("group_lag", _group_lag(cluster, start, end))], cluster, "snapshot_ts", start, end)

    alone, cluster = unique("lag-alone"), unique("lag-overlap")
    write(alone, "hourly")
    second = "live" if first == "hourly" else "hourly"
    # The first is held after its copy, uncommitted, until the second waits for it.
    hold_first(warehouse_engine, warehouse, "_copy", lambda: write(cluster, first),
               lambda: write(cluster, second))
    assert _lag_rows(warehouse_engine, cluster) == _lag_rows(warehouse_engine, alone)
    assert len(_lag_rows(warehouse_engine, cluster)) == len(STAMPS)


def _events(cluster: str) -> pa.Table:
    n = 3
    return pa.table({
        "cluster": [cluster] * n, "event_ts": pa.array(STAMPS[1:1 + n], TS),
        "group_id": ["g", "g", "h"], "generation": pa.array([7, 8, None], pa.int32()),
        "source": ["offsets_topic", "offsets_topic", "snapshots"],
        "estimated": [False, False, True], "protocol": ["range"] * n,
        "rebalance_type": ["eager"] * n, "members": [2] * n, "joined": [1] * n,
        "left": [0] * n, "cause": ["joined"] * n, "partitions_moved": [1] * n})


def test_two_writes_of_the_same_rebalance_events_leave_them_once(
        warehouse_engine: Engine) -> None:
    cluster = unique("events")
    end = HOUR + timedelta(hours=1)

    def write() -> None:
        warehouse.replace_interval_rows(warehouse_engine, "mart", [
            ("rebalance_events", _events(cluster))], cluster, "event_ts", HOUR, end)

    hold_first(warehouse_engine, warehouse, "_copy", write, write)
    with warehouse_engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT event_ts, group_id, generation FROM mart.rebalance_events"
            " WHERE cluster = :c ORDER BY event_ts"), {"c": cluster}).all()
    assert [tuple(r) for r in rows] == [(STAMPS[1], "g", 7), (STAMPS[2], "g", 8),
                                        (STAMPS[3], "h", None)]
    # The key refuses what a writer that skips the lock would leave.
    with pytest.raises(IntegrityError, match="duplicate key"), \
            warehouse_engine.begin() as conn:
        conn.execute(text("INSERT INTO mart.rebalance_events SELECT * FROM mart.rebalance_events"
                          " WHERE cluster = :c"), {"c": cluster})


def test_a_writer_kept_waiting_too_long_fails_clearly_and_writes_nothing(
        warehouse_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = unique("busy")
    monkeypatch.setattr(warehouse, "WRITER_LOCK_TIMEOUT", timedelta(milliseconds=200))
    with warehouse_engine.begin() as holder:  # another writer, in the middle of its write
        warehouse.lock_writers(holder, cluster, ["mart.group_lag"])
        with pytest.raises(warehouse.WriterBusy, match=r"mart\.group_lag for cluster "
                           rf"'{cluster}' longer than 0\.2 s .*nothing was written"):
            warehouse.replace_interval_rows(
                warehouse_engine, "mart", [("group_lag", _group_lag(cluster, HOUR, STAMPS[2]))],
                cluster, "snapshot_ts", HOUR, STAMPS[2])
    assert _lag_rows(warehouse_engine, cluster) == []
