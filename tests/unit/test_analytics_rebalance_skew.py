"""Rebalance and skew transforms over tiny inline DataFrames (Spark local)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession

from groupscope.analyze import rebalance as R
from groupscope.analyze import skew as S
from groupscope.analyze.io import spark_schema

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def naive(minutes: float) -> datetime:
    return at(minutes).replace(tzinfo=None)


def frame(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> Any:
    schema = spark_schema(table)
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows],
                                 schema)


def group(minute: float, state: str, members: int, group_id: str = "g",
          assignor: str | None = "range") -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(minute), "group_id": group_id,
            "group_type": "classic", "state": state, "protocol_type": "consumer",
            "assignor": assignor, "coordinator_mismatch": False, "described": True,
            "member_count": members}


def member(minute: float, member_id: str, group_id: str = "g",
           instance_id: str | None = None) -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(minute), "group_id": group_id,
            "member_id": member_id, "client_id": "c", "host": "/h", "instance_id": instance_id}


def test_exact_events_are_one_per_group_time_and_generation() -> None:
    from groupscope.offsets.timeline import Generation, Timeline, TimelineMember

    def epoch(number: int, minute: float, members: int) -> Generation:
        return Generation(number, at(minute), "uniform", None, "consumer",
                          [TimelineMember(f"m{i}", None, "c", "/h", ()) for i in range(members)])

    # Epoch 5 written twice in the same millisecond (the mart's key: one event, the last),
    # epoch 6 later; epoch 4 is before the interval.
    timeline = Timeline("g", "consumer", "consumer", [
        epoch(4, -1, 1), epoch(5, 1, 1), epoch(5, 1, 2), epoch(6, 2, 2)])
    rows = R.exact_events("c", [timeline], at(0), at(60))
    assert [(r[1], r[3], r[8]) for r in rows] == [(at(1), 5, 2), (at(2), 6, 2)]


def test_estimated_events_from_membership_changes(spark: SparkSession) -> None:
    groups = [group(m, "Stable", 1) for m in range(5)]
    members = [member(0, "a"), member(1, "a"), member(2, "a"), member(2, "b"),  # b joined
               member(3, "b"),  # a left
               member(4, "b", instance_id=None)]  # no change
    events = R.estimated_events(frame(spark, "group_members", members),
                                frame(spark, "consumer_groups", groups)).orderBy("event_ts")
    rows = [(r["event_ts"], r["joined"], r["left"], r["cause"], r["estimated"],
             r["rebalance_type"]) for r in events.collect()]
    # collect() gives naive datetimes in the session's time zone, UTC.
    assert rows == [(naive(2), 1, 0, "joined", True, "eager"),
                    (naive(3), 0, 1, "left", True, "eager")]


def test_static_member_restart_is_no_membership_change(spark: SparkSession) -> None:
    # A static member keeps its instance id across a restart (new member id): not a change.
    groups = [group(m, "Stable", 1) for m in range(2)]
    members = [member(0, "s-1", instance_id="static"), member(1, "s-2", instance_id="static")]
    events = R.estimated_events(frame(spark, "group_members", members),
                                frame(spark, "consumer_groups", groups))
    assert events.count() == 0


def kind_group(minute: float, group_id: str, group_type: str, members: int) -> dict[str, Any]:
    return {**group(minute, "Stable", members, group_id, assignor=None),
            "group_type": group_type}


def test_share_group_member_churn_is_no_rebalance(spark: SparkSession) -> None:
    # Share consumers come and go (b joins, a leaves): members share partitions, nothing is
    # revoked from anyone, so no event; the same churn in a consumer group is two.
    groups = [kind_group(m, g, kind, 1) for m in range(3)
              for g, kind in (("queue", "share"), ("g", "consumer"))]
    members = [member(m, mid, g) for g in ("queue", "g")
               for m, mid in ((0, "a"), (1, "a"), (1, "b"), (2, "b"))]
    events = R.estimated_events(frame(spark, "group_members", members),
                                frame(spark, "consumer_groups", groups))
    assert sorted((r["group_id"], r["cause"]) for r in events.collect()) == [
        ("g", "joined"), ("g", "left")]


def epoch(minute: float, assignment_epoch: int, group_id: str = "app") -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(minute), "group_id": group_id,
            "group_epoch": assignment_epoch, "assignment_epoch": assignment_epoch,
            "topology_epoch": 1}


def task(minute: float, member_id: str, subtopology: str, partition: int,
         kind: str = "target", role: str = "active") -> dict[str, Any]:
    return {"cluster": "c", "snapshot_ts": at(minute), "group_id": "app", "member_id": member_id,
            "kind": kind, "role": role, "subtopology_id": subtopology, "partition": partition}


def test_streams_rebalances_are_assignment_epochs_with_their_task_moves(
        spark: SparkSession) -> None:
    # Minute 0: instance a owns the 4 tasks (epoch 3). Minute 1: b joined, epoch 4 moves
    # 0_2 and 0_3 to it (a standby that appears is no move; a's current tasks lag behind
    # the target, they are not the assignment). Minute 2: nothing changes, same epoch: no
    # event. Minute 3: a left, epochs 5 and 6 passed since (two assignments at least:
    # estimated), 0_0 and 0_1 moved to b.
    groups = [kind_group(m, "app", "streams", n) for m, n in ((0, 1), (1, 2), (2, 2), (3, 1))]
    members = [member(0, "a", "app"), member(1, "a", "app"), member(1, "b", "app"),
               member(2, "a", "app"), member(2, "b", "app"), member(3, "b", "app")]
    epochs = [epoch(0, 3), epoch(1, 4), epoch(2, 4), epoch(3, 6)]
    tasks = [task(0, "a", "0", p) for p in range(4)]
    for m in (1, 2):
        tasks += [task(m, "a", "0", 0), task(m, "a", "0", 1), task(m, "b", "0", 2),
                  task(m, "b", "0", 3), task(m, "a", "0", 2, role="standby"),
                  *[task(m, "a", "0", p, kind="current") for p in range(4)]]
    tasks += [task(3, "b", "0", p) for p in range(4)]
    events = R.streams_events(frame(spark, "group_members", members),
                              frame(spark, "consumer_groups", groups),
                              frame(spark, "group_epochs", epochs),
                              frame(spark, "streams_member_tasks", tasks)).orderBy("event_ts")
    rows = [(r["event_ts"], r["generation"], r["estimated"], r["rebalance_type"], r["members"],
             r["cause"], r["partitions_moved"]) for r in events.collect()]
    assert rows == [(naive(1), 4, False, "streams", 2, "joined", 2),
                    (naive(3), 6, True, "streams", 1, "left", 2)]
    # The hourly mart counts them as streams-protocol rebalances, estimated (snapshots).
    durations = R.state_durations(frame(spark, "consumer_groups", groups))
    (hour,) = R.hourly(events, durations, R.known_groups(spark, [])).collect()
    assert (hour["rebalances"], hour["streams_protocol"], hour["consumer_protocol"],
            hour["partitions_moved"], hour["estimated"]) == (2, 2, 0, 4, True)


def test_state_durations_cap_collection_gaps(spark: SparkSession) -> None:
    # Stable 10:00-10:01, rebalancing 10:01-10:02, Stable from 10:02 until a 30-minute gap
    # in collection (capped at 3 minutes), then Empty at 10:32 and 10:33 (the last snapshot
    # holds the cap: 3 minutes).
    groups = [group(0, "Stable", 1), group(1, "PreparingRebalance", 1), group(2, "Stable", 1),
              group(32, "Empty", 0), group(33, "Empty", 0)]
    (row,) = R.state_durations(frame(spark, "consumer_groups", groups)).collect()
    assert (row["stable_s"], row["rebalancing_s"], row["empty_s"]) == (60 + 180, 60, 60 + 180)


def test_hourly_counts_causes_kinds_and_exactness(spark: SparkSession) -> None:
    events = spark.createDataFrame([
        ("c", at(5), "g", 1, "offsets_topic", False, "range", "eager", 1, 1, 0, "joined", 0),
        ("c", at(9), "g", 2, "offsets_topic", False, "range", "eager", 2, 1, 1, "both", 3),
        ("c", at(70), "g", 3, "offsets_topic", False, "cooperative-sticky", "cooperative", 2,
         0, 0, "none", 2),
        ("c", at(7), "h", None, "snapshots", True, "range", "eager", 1, 0, 1, "left", None),
    ], R.EVENT_SCHEMA)
    durations = R.state_durations(frame(spark, "consumer_groups", [
        group(0, "Stable", 1, "quiet"), group(1, "Stable", 1, "quiet")]))
    known = R.known_groups(spark, [("c", "g")])
    rows = {(r["group_id"], r["period_start"]): r for r in
            R.hourly(events, durations, known).collect()}
    first = rows[("g", naive(0))]
    assert (first["rebalances"], first["joined_only"], first["joined_and_left"],
            first["partitions_moved"], first["eager"], first["estimated"]) == (2, 1, 1, 3, 2,
                                                                              False)
    assert rows[("g", naive(60))]["cooperative"] == 1
    assert rows[("h", naive(0))]["estimated"] is True and rows[("h", naive(0))]["left_only"] == 1
    quiet = rows[("quiet", naive(0))]
    # Two snapshots a minute apart: 60 s, and the last holds the 180 s cap.
    assert (quiet["rebalances"], quiet["stable_s"], quiet["estimated"]) == (0, 240.0, True)


def test_group_skew_counts_idle_members_and_lag_share(spark: SparkSession) -> None:
    members = [member(0, m) for m in ("m1", "m2", "m3")]
    assignments = [{"cluster": "c", "snapshot_ts": at(0), "group_id": "g", "member_id": m,
                    "kind": "current", "topic": "t", "partition": p}
                   for m, p in (("m1", 0), ("m1", 1), ("m1", 2), ("m2", 3))]
    lag = spark.createDataFrame(
        [("c", at(0), "g", "t", p, m, lag) for m, p, lag in
         (("m1", 0, 10), ("m1", 1, 20), ("m1", 2, 0), ("m2", 3, 70))],
        "cluster string, snapshot_ts timestamp, group_id string, topic string, "
        "partition int, member_id string, lag long")
    (row,) = S.group_skew(frame(spark, "group_members", members),
                          frame(spark, "member_assignments", assignments),
                          frame(spark, "consumer_groups", [group(0, "Stable", 3)]),
                          lag).collect()
    assert (row["members"], row["partitions"], row["max_minus_min"], row["idle_members"]) == \
        (3, 4, 3, 1)
    assert row["coefficient_of_variation"] == pytest.approx((14 / 9) ** 0.5 / (4 / 3))
    assert (row["most_lagged_member"], row["most_lagged_share"]) == ("m2", 0.7)
    assert row["strategy"] == "range"
