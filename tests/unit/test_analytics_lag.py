"""Lag, rates and time lag over tiny inline DataFrames with explicit schemas (Spark local).
Each case says why its answer is right."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

from groupscope.analyze import lag as L  # noqa: E402
from groupscope.analyze.io import spark_schema  # noqa: E402

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def frame(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> Any:
    schema = spark_schema(table)
    full = [{f.name: r.get(f.name) for f in schema.fields} for r in rows]
    return spark.createDataFrame([tuple(r.values()) for r in full], schema)


def committed(ts: float, offset: int | None, group: str = "g",
              partition: int = 0) -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(ts), "group_id": group, "topic": "t",
            "partition": partition, "committed_offset": offset}


def log(ts: float, hw: int | None, start: int = 0, partition: int = 0) -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(ts), "topic": "t", "partition": partition,
            "log_start_offset": start, "high_watermark": hw, "last_stable_offset": hw}


def topic(ts: float, retention_ms: int | None = 604_800_000,
          cleanup_policy: str | None = "delete") -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(ts), "topic": "t", "partition_count": 1,
            "retention_ms": retention_ms, "retention_bytes": -1, "segment_bytes": 1 << 30,
            "cleanup_policy": cleanup_policy}


def mart(spark: SparkSession, commits: list[dict[str, Any]], logs: list[dict[str, Any]],
         samples: list[dict[str, Any]] | None = None,
         assignments: list[dict[str, Any]] | None = None,
         topics: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    result = L.lag_mart(frame(spark, "committed_offsets", commits),
                        frame(spark, "partition_offsets", logs),
                        frame(spark, "member_assignments", assignments or []),
                        frame(spark, "record_timestamps", samples or []), rate_window_s=300,
                        topics=None if topics is None else frame(spark, "topics", topics))
    return sorted((r.asDict() for r in result.collect()),
                  key=lambda r: (r["group_id"], r["partition"], r["snapshot_ts"]))


def test_lag_flags_member_and_nulls(spark: SparkSession) -> None:
    rows = mart(spark, [committed(0, 5), committed(0, None, partition=1),
                        committed(0, 12, partition=2)],
                [log(0, 10, start=7), log(0, 10, partition=1), log(0, 10, partition=2)],
                assignments=[{"cluster": "c", "snapshot_ts": at(0), "group_id": "g",
                              "member_id": "m1", "kind": "current", "topic": "t",
                              "partition": 0}])
    p0, p1, p2 = rows
    assert (p0["lag"], p0["lag_beyond_retention"], p0["member_id"]) == (5, True, "m1")
    assert (p1["lag"], p1["time_lag_kind"], p1["time_lag_estimated_s"]) == (None, "unknown", None)
    # Committed beyond the high watermark: a negative lag, reported as is.
    assert (p2["lag"], p2["time_lag_kind"], p2["catch_up_s"]) == (-2, "caught_up", 0.0)


def test_rates_without_gain_never_catch_up(spark: SparkSession) -> None:
    # HW grows 15/s and the group commits 15/s: it keeps its lag of 100, never catching up.
    last = mart(spark, [committed(0, 0), committed(60, 900)], [log(0, 100), log(60, 1000)])[-1]
    assert last["production_rate"] == pytest.approx(15.0)
    assert last["consumption_rate"] == pytest.approx(15.0)
    assert (last["lag"], last["catch_up_s"]) == (100, None)


def test_rates_start_at_the_first_known_offset(spark: SparkSession) -> None:
    # The first snapshot saw the group before its first commit (no committed offset) and
    # the partition's offsets unread: the rates start at the first row that knows each,
    # not a window later. Committed 0 at 30 s, 600 at 60 s: 20/s; HW 400 at 30 s, 850 at
    # 60 s: 15/s.
    rows = mart(spark, [committed(0, None), committed(30, 0), committed(60, 600)],
                [log(0, None), log(30, 400), log(60, 850)])
    assert [r["consumption_rate"] for r in rows] == [None, None, pytest.approx(20.0)]
    assert [r["production_rate"] for r in rows] == [None, None, pytest.approx(15.0)]


def test_catch_up_when_gaining(spark: SparkSession) -> None:
    commits = [committed(0, 0), committed(100, 1500)]
    logs = [log(0, 500), log(100, 1600)]  # produce 11/s, consume 15/s, lag 100
    last = mart(spark, commits, logs)[-1]
    assert last["lag"] == 100
    assert last["catch_up_s"] == pytest.approx(100 / (15 - 11))


def test_time_lag_interpolates_the_append_time_of_the_committed_record(
        spark: SparkSession) -> None:
    # HW 0 at t=0, 100 at t=100: record 49 (v = 50) was appended at t = 50. At t=100 the group
    # has committed 49: time lag 50 s.
    rows = mart(spark, [committed(100, 49)], [log(0, 0), log(100, 100)])
    assert rows[0]["time_lag_kind"] == "interpolated"
    assert rows[0]["time_lag_estimated_s"] == pytest.approx(50.0)


def test_time_lag_extrapolates_beyond_the_window(spark: SparkSession) -> None:
    # The window starts at HW 1000 (t=0) and grows 10/s; committed 899 (v=900) lies 100
    # records before it: appended about 10 s before t=0; at t=60 the time lag is 70 s.
    rows = mart(spark, [committed(60, 899)], [log(0, 1000), log(60, 1600)])
    assert rows[0]["time_lag_kind"] == "extrapolated"
    assert rows[0]["time_lag_estimated_s"] == pytest.approx(70.0)


def test_time_lag_on_a_flat_history_is_a_lower_bound(spark: SparkSession) -> None:
    # Nothing produced in the window: the record is at least as old as the window.
    rows = mart(spark, [committed(0, 10), committed(120, 10)], [log(0, 50), log(120, 50)])
    assert [r["time_lag_kind"] for r in rows] == ["at_least", "at_least"]
    assert rows[1]["time_lag_estimated_s"] == pytest.approx(120.0)


def test_a_recreated_topic_starts_a_new_history(spark: SparkSession) -> None:
    # HW drops from 5000 to 10 at t=60 (re-created). The old segment must not be used: with it,
    # v=6 would interpolate to before t=0; within the new segment it is extrapolated.
    logs = [log(0, 4000), log(30, 5000), log(60, 10), log(90, 40)]
    rows = mart(spark, [committed(90, 5)], logs)
    assert rows[0]["time_lag_kind"] == "extrapolated"
    assert rows[0]["time_lag_estimated_s"] == pytest.approx(30 + (10 - 6) / 1.0)
    rates = mart(spark, [committed(60, 5), committed(90, 5)], logs)
    assert rates[0]["production_rate"] is None  # no rate across the re-creation
    assert rates[1]["production_rate"] == pytest.approx(1.0)


def test_a_collector_restart_gap_is_interpolated_across(spark: SparkSession) -> None:
    # No snapshots between t=0 and t=600 (the collector was down): linear across the gap.
    rows = mart(spark, [committed(600, 299)], [log(0, 0), log(600, 600)])
    assert rows[0]["time_lag_estimated_s"] == pytest.approx(300.0)


def test_exact_time_lag_from_the_sampled_record(spark: SparkSession) -> None:
    sample = {"cluster": "c", "snapshot_ts": at(100), "topic": "t", "partition": 0,
              "committed_offset": 49, "record_offset": 49, "record_ts": at(42),
              "timestamp_type": "create_time"}
    rows = mart(spark, [committed(100, 49), committed(100, 49, group="other-offset")],
                [log(0, 0), log(100, 100)], samples=[sample])
    by_group = {r["group_id"]: r for r in rows}
    assert by_group["g"]["time_lag_exact_s"] == pytest.approx(58.0)
    assert by_group["g"]["time_lag_estimated_s"] == pytest.approx(50.0)


def test_rollups_do_not_net_negative_lag(spark: SparkSession) -> None:
    commits = [committed(0, 5), committed(0, 20, partition=1)]
    logs = [log(0, 10), log(0, 10, partition=1)]
    result = L.lag_mart(frame(spark, "committed_offsets", commits),
                        frame(spark, "partition_offsets", logs),
                        frame(spark, "member_assignments", []),
                        frame(spark, "record_timestamps", []))
    group = L.rollups(result)["group_lag"].collect()[0]
    assert (group["lag"], group["negative_lag_partitions"], group["max_lag"]) == (5, 1, 5)


def unread(ts: float, partition: int = 0, hw: int | None = None,
           start: int | None = None) -> dict[str, Any]:
    """A partition whose offsets were not read (its leader down, a timeout, no access): by
    default neither its high watermark nor its log start."""
    return {**log(ts, hw, partition=partition), "log_start_offset": start}


def assigned(partitions: tuple[int, ...], member: str = "m1") -> list[dict[str, Any]]:
    return [{"cluster": "c", "snapshot_ts": at(0), "group_id": "g", "member_id": member,
             "kind": "current", "topic": "t", "partition": p} for p in partitions]


UNKNOWN_ROLLUP = {"lag": None, "max_lag": None, "beyond_retention_partitions": None,
                  "max_time_lag_estimated_s": None, "max_time_lag_exact_s": None}

# (case, committed offsets, logs, assigned partitions, expected figures of every roll-up)
ROLLUP_CASES = [
    ("every partition known: the sum", [committed(0, 5), committed(0, 7, partition=1)],
     [log(0, 10), log(0, 10, partition=1)], (0, 1),
     {"lag": 8, "max_lag": 5, "beyond_retention_partitions": 0, "lag_lower_bound": 8,
      "lag_unknown_partitions": 0}),
    ("one partition's high watermark and log start not read among known ones: unknown",
     [committed(0, 5), committed(0, 20, partition=1)], [log(0, 10), unread(0, partition=1)],
     (0, 1), {**UNKNOWN_ROLLUP, "lag_lower_bound": 5, "lag_unknown_partitions": 1}),
    ("only the log start not read: whether records are lost is unknown, so is the lag",
     [committed(0, 5), committed(0, 20, partition=1)],
     [log(0, 10), unread(0, partition=1, hw=30)], (0, 1),
     {**UNKNOWN_ROLLUP, "lag_lower_bound": 15, "lag_unknown_partitions": 1}),
    ("no partition has a position yet (a member's first assignment): unknown, not 0",
     [committed(0, None), committed(0, None, partition=1)],
     [log(0, 10), log(0, 10, partition=1)], (0, 1),
     {"lag": None, "max_lag": None, "beyond_retention_partitions": 0, "lag_lower_bound": 0,
      "lag_unknown_partitions": 0, "negative_lag_partitions": 0, "partitions": 2}),
    ("a partition assigned and never committed has no lag: the others' sum is the lag",
     [committed(0, 5)], [log(0, 10), log(0, 10, partition=1)], (0, 1),
     {"lag": 5, "max_lag": 5, "beyond_retention_partitions": 0, "lag_lower_bound": 5,
      "lag_unknown_partitions": 0, "partitions": 2}),
]


@pytest.fixture(scope="module")
def rollups_of_cases(spark: SparkSession) -> dict[str, dict[str, dict[str, Any]]]:
    """Every case of ROLLUP_CASES in one Spark run, each its own cluster: case -> roll-up ->
    its one row."""
    commits, logs, owned = [], [], []
    for case, case_commits, case_logs, partitions, _ in ROLLUP_CASES:
        commits += [{**r, "cluster": case} for r in case_commits]
        logs += [{**r, "cluster": case} for r in case_logs]
        owned += [{**r, "cluster": case} for r in assigned(partitions)]
    result = L.lag_mart(frame(spark, "committed_offsets", commits),
                        frame(spark, "partition_offsets", logs),
                        frame(spark, "member_assignments", owned),
                        frame(spark, "record_timestamps", []))
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for name, rollup in L.rollups(result).items():
        for row in rollup.collect():
            assert name not in found.setdefault(row["cluster"], {})
            found[row["cluster"]][name] = row.asDict()
    return found


@pytest.mark.parametrize(("case", "expected"), [(c[0], c[-1]) for c in ROLLUP_CASES],
                         ids=[c[0] for c in ROLLUP_CASES])
def test_rollups_of_partitions_whose_lag_is_unknown(
        rollups_of_cases: dict[str, dict[str, dict[str, Any]]], case: str,
        expected: dict[str, Any]) -> None:
    """A roll-up's lag is unknown when any of its partitions' is (their offsets not read): a
    partial sum would read as the group's lag and resolve its lag incidents. The known part
    is kept apart as a lower bound. Every roll-up (member, topic, group, cluster) says the
    same, and each still has its NOT NULL counts (the whole lag job failed on a null once)."""
    rows = rollups_of_cases[case]
    assert sorted(rows) == ["cluster_lag", "group_lag", "member_lag", "topic_lag"]
    for name, row in rows.items():
        assert {k: row[k] for k in expected} == expected, name
        assert row["negative_lag_partitions"] is not None and row["partitions"] is not None


def test_beyond_retention_is_unknown_when_the_log_start_was_not_read(
        spark: SparkSession) -> None:
    rows = mart(spark, [committed(0, 5), committed(0, None, partition=1)],
                [unread(0, hw=10), unread(0, partition=1, hw=10)])
    # A position and no log start: unknown. No position: nothing of the group's is lost.
    assert [r["lag_beyond_retention"] for r in rows] == [None, False]


def test_a_deleting_log_forecasts_the_loss_when_the_lag_eats_the_headroom(
        spark: SparkSession) -> None:
    # Production 10/s, consumption 4/s: the lag (300, 480, 660) grows 6/s between snapshots.
    # The log deletes by size (its start moves), so its start follows production: at 60 s the
    # committed offset (440) is 140 records ahead of it, lost in 140 / 6 s.
    rows = mart(spark, [committed(0, 200), committed(30, 320), committed(60, 440)],
                [log(0, 500, start=0), log(30, 800, start=150), log(60, 1100, start=300)],
                topics=[dict(topic(t), retention_bytes=1_000_000) for t in (0, 30, 60)])
    first, second, third = rows
    assert first["loss_in_s"] is None  # one point: no growth, and the log start has not moved
    assert second["lag_growth_rate"] == pytest.approx(6.0)
    assert second["loss_in_s"] == pytest.approx(170 / 6) and second["loss_basis"] == "log_start"
    assert third["loss_in_s"] == pytest.approx(140 / 6) and third["loss_basis"] == "log_start"


def test_the_forecast_starts_afresh_on_a_re_created_topic(spark: SparkSession) -> None:
    # Deleted and re-created at 60 s: the group starts again from 0 and consumes 4/s of the
    # new log's 10/s; the new log deletes by size from 120 s on. Its start (150) is below the
    # old log's (500, 650): compared with those, it never "moved"; the growth from the old
    # lag (480) to the new (10) is no rate either.
    rows = mart(spark, [committed(0, 700), committed(30, 820), committed(60, 0),
                        committed(90, 120), committed(120, 240)],
                [log(0, 1000, start=500), log(30, 1300, start=650), log(60, 10, start=0),
                 log(90, 310, start=0), log(120, 610, start=150)],
                topics=[dict(topic(t), retention_bytes=1_000_000) for t in (0, 30, 60, 90, 120)])
    recreated, _, last = rows[2:]
    assert recreated["lag_growth_rate"] is None
    # the lag grew (310 - 120) - (10 - 0) = 180 in 30 s; headroom 240 - 150 = 90
    assert last["lag_growth_rate"] == pytest.approx(6.0)
    assert last["loss_in_s"] == pytest.approx(15.0) and last["loss_basis"] == "log_start"
    assert "segment" not in rows[0]


def test_a_consumer_that_keeps_up_gets_no_forecast(spark: SparkSession) -> None:
    # The same deleting log, consumed at 10/s: the lag does not grow, nothing is lost.
    rows = mart(spark, [committed(0, 490), committed(30, 790), committed(60, 1090)],
                [log(0, 500, start=0), log(30, 800, start=150), log(60, 1100, start=300)],
                topics=[topic(0), topic(30), topic(60)])
    assert [r["loss_in_s"] for r in rows] == [None, None, None]
    # known to lose nothing once its rates are known; the first snapshot cannot tell
    assert [r["loss_basis"] for r in rows] == [None, "none", "none"]
    assert rows[-1]["lag_growth_rate"] == pytest.approx(0.0)
    # Keeping up, its lag swings by a commit interval's records: over the last minute it grew
    # (10 -> 70), but over the five minutes it consumed 97% of production. No forecast.
    swing = mart(spark, [committed(t, 10 * t + 490) for t in (0, 100, 200)]
                 + [committed(230, 2730)],
                 [log(t, 10 * t + 500, start=5 * t) for t in (0, 100, 200, 230)],
                 topics=[topic(t) for t in (0, 100, 200, 230)])
    assert swing[-1]["lag_growth_rate"] == pytest.approx(2.0)
    assert swing[-1]["loss_in_s"] is None


def test_retention_ms_bounds_the_loss_by_the_committed_records_age(spark: SparkSession) -> None:
    # A log that does not delete yet, retention.ms 10 min. The group stopped at offset 100
    # (appended at 10.1 s, when the high watermark, 0 -> 1000 over 0-100 s, reached 101), so
    # at 100 s its record is 89.9 s old and grows 1 s a second: lost at the earliest in
    # 600 - 89.9 = 510.1 s.
    rows = mart(spark, [committed(0, 100), committed(100, 100)],
                [log(0, 0), log(100, 1000)], topics=[topic(0, 600_000), topic(100, 600_000)])
    last = rows[-1]
    assert last["time_lag_estimated_s"] == pytest.approx(89.9)
    assert last["loss_in_s"] == pytest.approx(510.1) and last["loss_basis"] == "retention_ms"
    # Half as fast as production: the age (of offset 500: 49.9 s) grows half a second a
    # second.
    slower = mart(spark, [committed(0, 0), committed(100, 500)],
                  [log(0, 0), log(100, 1000)], topics=[topic(0, 600_000), topic(100, 600_000)])
    assert slower[-1]["loss_in_s"] == pytest.approx((600 - 49.9) / 0.5)


def test_no_time_bound_for_a_compacted_topic_or_unknown_settings(spark: SparkSession) -> None:
    commits, logs = [committed(0, 100), committed(100, 100)], [log(0, 0), log(100, 1000)]
    compacted = mart(spark, commits, logs,
                     topics=[topic(0, 600_000, "compact"), topic(100, 600_000, "compact")])
    unread = mart(spark, commits, logs)  # no topics table: the settings were not read
    assert compacted[-1]["loss_in_s"] is None and unread[-1]["loss_in_s"] is None
    # a compacted topic deletes nothing: known; unread settings: cannot be told
    assert (compacted[-1]["loss_basis"], unread[-1]["loss_basis"]) == ("none", None)


def test_a_log_start_moved_on_a_topic_without_size_retention_is_no_loss(
        spark: SparkSession) -> None:
    # DeleteRecords (Kafka Streams on its repartition topics) moves the log start up to the
    # group's own committed offset on a topic that keeps everything by size and by age: the
    # group falls behind, but nothing is deleted under it.
    commits = [committed(0, 200), committed(30, 320), committed(60, 440)]
    logs = [log(0, 500, start=0), log(30, 800, start=320), log(60, 1100, start=440)]
    never = [dict(topic(t, -1), retention_bytes=-1) for t in (0, 30, 60)]
    rows = mart(spark, commits, logs, topics=never)
    assert [r["loss_in_s"] for r in rows] == [None, None, None]
    assert rows[-1]["loss_basis"] == "none"


def test_records_already_lost_forecast_zero(spark: SparkSession) -> None:
    rows = mart(spark, [committed(0, 100)], [log(0, 1000, start=200)], topics=[topic(0)])
    assert (rows[0]["lag_beyond_retention"], rows[0]["loss_in_s"], rows[0]["loss_basis"]) == (
        True, 0.0, "lost")


def share(ts: float, start: int | None, lag: int | None = None,
          group: str = "queue") -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(ts), "group_id": group, "topic": "t",
            "partition": 0, "start_offset": start, "lag": lag}


def test_a_share_groups_lag_is_that_of_its_start_offset(spark: SparkSession) -> None:
    # A share group commits nothing: its start offset stands for the committed offset. HW 0
    # at t=0, 100 at t=100, 200 at t=200, start offset 149 at t=200: lag 51 from the start
    # offset; the record at 149 (v = 150) was appended at t = 150, so it is 50 s old. The
    # broker's own count (KIP-1226) is 30: some records above the start offset are
    # acknowledged already. Its member comes from the share assignment, as for other kinds.
    result = L.lag_mart(frame(spark, "committed_offsets", []),
                        frame(spark, "partition_offsets", [log(0, 0), log(100, 100),
                                                           log(200, 200)]),
                        frame(spark, "member_assignments", [{
                            "cluster": "c", "snapshot_ts": at(200), "group_id": "queue",
                            "member_id": "m1", "kind": "current", "topic": "t",
                            "partition": 0}]),
                        frame(spark, "record_timestamps", []),
                        share_offsets=frame(spark, "share_partition_offsets",
                                            [share(100, 90, 10), share(200, 149, 30)]))
    rows = sorted((r.asDict() for r in result.collect()), key=lambda r: r["snapshot_ts"])
    last = rows[-1]
    assert (last["committed_offset"], last["lag"], last["share_lag"], last["member_id"]) == (
        149, 51, 30, "m1")
    assert last["time_lag_kind"] == "interpolated"
    assert last["time_lag_estimated_s"] == pytest.approx(50.0)
    # The start offset moved 59 records in 100 s: the rates are those of any group.
    assert last["consumption_rate"] == pytest.approx(0.59)


def test_a_share_group_with_no_state_yet_has_an_unknown_lag(spark: SparkSession) -> None:
    # No start offset (the group never read the partition): the lag is unknown, not 0.
    result = L.lag_mart(frame(spark, "committed_offsets", [committed(0, 5)]),
                        frame(spark, "partition_offsets", [log(0, 10)]),
                        frame(spark, "member_assignments", []),
                        frame(spark, "record_timestamps", []),
                        share_offsets=frame(spark, "share_partition_offsets",
                                            [share(0, None)]))
    rows = {r["group_id"]: r for r in result.collect()}
    assert (rows["queue"]["lag"], rows["queue"]["time_lag_kind"]) == (None, "unknown")
    assert (rows["g"]["lag"], rows["g"]["share_lag"]) == (5, None)
