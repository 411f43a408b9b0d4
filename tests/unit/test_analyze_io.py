"""Which landed files the Spark jobs read: those of snapshots whose manifest is landed, from the
folder listings alone. And the JVM the jobs run in: the throughput collector, however Spark
starts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kafkautil import wait_until

from groupscope.analyze import submit
from groupscope.analyze.io import JVM_OPTIONS, landed_files, local_relation
from groupscope.contract import layout

T0 = datetime(2026, 11, 20, 9, 58, tzinfo=UTC)


def _touch(root: Path, table: str, ts: datetime, snapshot_id: str) -> Path:
    path = layout.snapshot_file(root, table, "c", ts, snapshot_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_only_snapshots_with_a_landed_manifest_are_read(tmp_path: Path) -> None:
    landed = {}
    for minute, name in ((0, "s1"), (1, "s2"), (3, "s3"), (5, "s4")):  # s2, s3 cross the hour
        ts = T0 + timedelta(minutes=minute)
        landed[name] = _touch(tmp_path, "committed_offsets", ts, name)
        if name != "s3":  # s3: a crash after its tables, before its manifest
            _touch(tmp_path, layout.MANIFEST_TABLE, ts, name)
    # A manifest whose table file is absent (a table added to the landing zone later).
    _touch(tmp_path, layout.MANIFEST_TABLE, T0 + timedelta(minutes=6), "s5")
    # A temporary file being written beside the landed ones.
    (landed["s4"].parent / f".{landed['s4'].name}.tmp").write_bytes(b"")

    files = landed_files(tmp_path, "committed_offsets", "c", T0, T0 + timedelta(hours=1))

    assert files == [str(landed[name]) for name in ("s1", "s2", "s4")]
    assert landed_files(tmp_path, "committed_offsets", "other", T0, T0 + timedelta(hours=1)) == []
    # Hours outside [start, end) are not listed.
    assert landed_files(tmp_path, "committed_offsets", "c", T0 + timedelta(hours=1),
                        T0 + timedelta(hours=2)) == [str(landed["s4"])]


def test_a_local_session_starts_its_jvm_with_the_throughput_collector(spark: Any) -> None:
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}  # ParallelGC's, not G1's


def test_spark_submit_starts_the_driver_with_the_jvm_options() -> None:
    argv = submit.command("lag_job.py", ["--cluster", "c"], conf={"spark.x": "1"})
    confs = [argv[i + 1] for i, a in enumerate(argv) if a == "--conf"]
    assert f"spark.driver.extraJavaOptions={JVM_OPTIONS}" in confs
    assert "spark.x=1" in confs
    assert argv[-3:] == [str(submit.job_path("lag_job.py")), "--cluster", "c"]


def test_a_long_lived_session_keeps_only_recent_query_history(spark: Any) -> None:
    """Spark keeps past queries for its UI even with the UI off (1,000 by default, with their
    plans): spark_conf() bounds them, so a long-lived driver does not fill its heap."""
    for _ in range(60):
        spark.range(1).count()  # one SQL execution and two jobs each
    sql_store = spark._jsparkSession.sharedState().statusStore()

    def kept_jobs() -> int:
        return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))

    # the store trims once its listener has caught up
    wait_until(lambda: sql_store.executionsCount() <= 20 and kept_jobs() <= 50, 30,
               "Spark to trim its query history to 20 SQL executions and 50 jobs")
    assert sql_store.executionsCount() <= 20
    assert kept_jobs() <= 50


def test_a_local_relation_keeps_the_rows_and_the_schema_even_empty(spark: Any) -> None:
    frame = spark.sql(
        "SELECT timestamp'2026-11-20 09:58:00Z' AS snapshot_ts, id AS lag, "
        "CAST(NULL AS double) AS rate, array(1, 2) AS members FROM range(3)")
    kept = local_relation(frame.where("lag > 0"))
    assert kept.schema == frame.schema
    assert kept.collect() == frame.where("lag > 0").collect()
    assert len(kept.collect()) == 2
    # What reads it plans over the rows, not over the query that made them.
    assert "LocalTableScan" in kept._jdf.queryExecution().executedPlan().toString()
    empty = local_relation(frame.where("lag > 5"))
    assert empty.schema == frame.schema and empty.count() == 0


def test_work_in_a_child_process_is_stopped_when_it_hangs() -> None:
    """A hung Spark Connect call cannot be interrupted for good inside a process; a child
    process can be killed: the caller gets its answer in time, whatever the child does."""
    import time

    from groupscope.analyze.io import HungSpark, in_child_process

    assert in_child_process(lambda: {"rows": 3}, 30, "quick") == {"rows": 3}
    started = time.monotonic()
    with pytest.raises(HungSpark, match="hangs did not finish within 1 s"):
        in_child_process(lambda: time.sleep(120), 1, "hangs")
    assert time.monotonic() - started < 30
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        in_child_process(lambda: 1 // 0, 30, "fails")


def test_a_snapshot_the_quality_gate_rejected_is_not_read(tmp_path: Path) -> None:
    kept, rejected = (_touch(tmp_path, "committed_offsets", T0 + timedelta(minutes=m), name)
                      for m, name in ((0, "s1"), (1, "s2")))
    for minute, name in ((0, "s1"), (1, "s2")):
        _touch(tmp_path, layout.MANIFEST_TABLE, T0 + timedelta(minutes=minute), name)
    mark = layout.rejected_mark(tmp_path, "c", "s2")
    mark.parent.mkdir(parents=True)
    mark.write_text("{}")

    files = landed_files(tmp_path, "committed_offsets", "c", T0, T0 + timedelta(hours=1))

    assert files == [str(kept)] and rejected.exists()
