"""Consumer status rules: a numbered table of cases, each a partition's observations (seconds,
committed offset, high watermark, members) and the status and rule expected at the last one
(or at every one, for the false alarms that must never fire), with the reason the answer is
right."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from groupscope.analyze.status import StatusSettings, group_status, partition_status
from groupscope.contract.status import RULES

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
# seconds, committed, high watermark, members (-1: the describe failed, so the row says 0
# members, state from the listing, described false)
Obs = tuple[float, int, int, int]
UNDESCRIBED = -1


def minutes(*points: tuple[int, int, int]) -> list[Obs]:
    """One observation a minute: (committed, hw, members)."""
    return [(60 * i, c, hw, m) for i, (c, hw, m) in enumerate(points)]


def bursts(until_minute: int) -> list[Obs]:
    """A batch consumer: observed every minute, it advances its offset every 20 minutes (at
    minutes 1, 21 and 41), the log growing steadily."""
    return [(60 * m, 300 * ((m + 19) // 20) if m <= 41 else 900, 900 + 10 * m, 0)
            for m in range(until_minute + 1)]


JITTER = (0, 2, -1, 3, -2, 1, -3, 2)  # seconds a snapshot is late (or early) against its grid


def grid(until_s: int, step: int = 30, jitter: Sequence[int] = JITTER) -> list[float]:
    """Snapshot times every ``step`` seconds up to ``until_s``, each off its grid by a jitter."""
    return [float(step * i + (jitter[i % len(jitter)] if i else 0))
            for i in range(until_s // step + 1)]


def sampled(snapshots: Sequence[float], commits: Sequence[float],
            hw: Callable[[float], int] = lambda t: 10 * int(t) + 1000,
            members: Callable[[float], int] = lambda t: 1, marker: int = 0) -> list[Obs]:
    """What the snapshots see of a consumer that commits at ``commits`` (each commit covers
    everything produced until then, less ``marker`` records: the transaction marker a
    consumer never commits past), the log end at ``hw(t)``, ``members(t)`` members."""
    observed = []
    for t in snapshots:
        last = max(c for c in commits if c <= t)
        observed.append((t, hw(last) - marker, hw(t), members(t)))
    return observed


def every(seconds: float, until: float, start: float = -1.0) -> list[float]:
    """Commit times every ``seconds`` from ``start`` (one commit before the first snapshot)."""
    return [start + seconds * k for k in range(int((until - start) // seconds) + 1)]


def idle_after(stop_s: int) -> Callable[[float], int]:
    """A log that grows 10 records/s until ``stop_s``, then no more (an idle topic)."""
    return lambda t: 10 * int(min(t, stop_s)) + 1000


def member_until(gone_s: float) -> Callable[[float], int]:
    return lambda t: 1 if t < gone_s else 0


# A 60 s timer committer (commits at 30, 90, 150...) against snapshots 30 s apart with a few
# seconds of jitter: the commit at 30 s is seen at 62 s, the one at 90 s at 90 s (a pause of
# 28 s as seen), the one at 150 s missed by the snapshot at 148 s. Judged by the pause as seen
# (2 x 28 s) it would be STALL at 148 s; as it can have been (62 s from 27 s: 63 s), it is not.
TIMER_SNAPSHOTS = [0.0, 27, 62, 90, 120, 148, 183, 212, 241, 268, 302, 331, 359, 390, 419, 447,
                   483, 512, 541, 572, 602]
KILLED_AT = 302.0  # killed after its commit at 299 s; the session times out 45 s later

CASES: list[tuple[int, str, list[Obs], str, str]] = [
    (1, "committing and keeping up: nothing to say",
     minutes(*[(100 * i, 100 * i + 5, 1) for i in range(10)]), "OK", "consuming"),
    (2, "caught up on an idle topic, commits long stopped: Burrow says STOP, it is fine",
     minutes(*[(500, 500, 0) for _ in range(30)]), "OK", "no_lag"),
    (3, "a lag of 1 that never goes away (a transaction marker): not an alarm",
     minutes(*[(499, 500, 1) for _ in range(30)]), "OK", "no_lag"),
    (4, "a single observation: no trend can be judged",
     [(0, 10, 500, 1)], "OK", "too_little_history"),
    (5, "behind, offset frozen for 10 minutes, no members ever: the consumer is gone (the "
        "300 s floor: no rhythm known)",
     minutes(*[(100, 200 + 10 * i, 0) for i in range(11)]), "STOP", "stopped"),
    (6, "behind, offset frozen for 10 minutes, members present: stuck, not gone",
     minutes(*[(100, 200 + 10 * i, 2) for i in range(11)]), "STALL", "stalled"),
    (7, "committing, but lag grows at every observation of the window",
     minutes(*[(100 * i, 150 * i + 10, 1) for i in range(10)]), "WARN", "falling_behind"),
    (8, "the committed offset moved back (a reset to earliest)",
     minutes((900, 1000, 1), (950, 1000, 1), (10, 1000, 1)), "REWIND", "rewind"),
    (9, "bursts: commits every 20 minutes, now 25 minutes into a pause; its own rhythm says "
        "wait (threshold 2 x 21 min)", bursts(65), "OK", "consuming"),
    (10, "bursts, but now silent for 50 minutes: beyond its rhythm (and, with only one advance "
         "left in the last hour, beyond the 300 s floor)", bursts(90), "STOP", "stopped"),
    (11, "frozen for only 4 minutes (below the 5 minute floor): not yet STOP",
     minutes(*[(100, 200 + 10 * i, 0) for i in range(5)]), "OK", "consuming"),
    (12, "lag grew but the offset also fell back first: REWIND is the news",
     minutes((500, 600, 1), (200, 700, 1), (300, 800, 1)), "REWIND", "rewind"),
    (13, "lag grows but only two observations: a trend needs three",
     minutes((100, 150, 1), (150, 300, 1)), "OK", "consuming"),
    (14, "auto-commit every 5 s, snapshots every 30 s with jitter, for 10 minutes: every "
         "snapshot sees an advance; never alarms",
     sampled(grid(600), every(5, 600)), "OK", "consuming"),
    (15, "an idle topic: the producer stopped at 5 min, the consumer caught up; 10 minutes "
         "with nothing to commit, far beyond its rhythm (120 s): never alarms",
     sampled(grid(900), every(5, 900), hw=idle_after(300)), "OK", "no_lag"),
    (16, "a transactional producer, then idle: the lag of 1 its last marker leaves stays for "
         "10 minutes, the offset frozen: never alarms",
     sampled(grid(900), every(5, 900), hw=idle_after(300), marker=1), "OK", "no_lag"),
    (17, "a single commit: a consumer that started 5 min behind commits once (at 20 s), then "
         "nothing for 4 min 30 s, lag growing, a member present: one advance is no rhythm, the "
         "300 s floor applies; never alarms",
     sampled(grid(300, jitter=(0,)), [-300, 20]), "OK", "consuming"),
    (18, "rhythm unknown: the offset never moved in 5 min 30 s, a member present, lag "
         "growing: STALL at the 300 s floor",
     sampled(grid(330, jitter=(0,)), [-1]), "STALL", "stalled"),
    (19, "a bursty committer (every 90 s), snapshots every 30 s with jitter, 10 minutes: the "
         "first pause against the 300 s floor, the next ones against 2 x its pauses; never "
         "alarms", sampled(grid(600), every(90, 600, start=-89.5)), "OK", "consuming"),
    (20, "a 60 s timer committer in phase with the snapshots (TIMER_SNAPSHOTS): a pause seen "
         "as 28 s was up to 63 s long; never alarms",
     sampled(TIMER_SNAPSHOTS, every(60, 600, start=-30)), "OK", "consuming"),
    (21, "a commit-only group (assign(), as Flink or Spark commit): always Empty, committing "
         "every 60 s; it never had members, so Empty is no news; never alarms",
     sampled(grid(600), every(60, 600, start=-50), members=lambda t: 0), "OK", "consuming"),
    (22, "kill -9 of the only member of a group committing every 5 s: it stays a member until "
         "the session timeout (45 s), then the group is Empty while the lag grows: STOP at the "
         "first Empty snapshot",
     sampled(grid(360, jitter=(0,)), every(5, KILLED_AT), members=member_until(KILLED_AT + 45)),
     "STOP", "group_empty"),
    (23, "the same member 28 s after the kill, still in the group (its session has 17 s to "
         "go): it committed at every snapshot of the last 10 minutes, and has not for 34 s "
         "(>= halt_after_s, 15 s), its lag growing, and no other partition of the group "
         "moves: STOP now, without waiting for the session timeout",
     sampled(grid(330), every(5, KILLED_AT), members=member_until(KILLED_AT + 45)),
     "STOP", "progress_stopped"),
    (24, "a member committing every 40 s (not at every snapshot: no steady rhythm) hangs (its "
         "heartbeats go on, nothing is committed): 240 s without an advance >= 2 x its longest "
         "pause of 90 s: STALL",
     sampled(grid(600, jitter=(0,)), every(40, 355, start=-5)), "STALL", "stalled"),
    (25, "a graceful shutdown: the member commits on its way out and leaves; the group is "
         "Empty and the lag grew since that last commit: STOP",
     sampled(grid(360, jitter=(0,)), [*every(5, 300), 310], members=member_until(310)),
     "STOP", "group_empty"),
    (26, "the describe failed (0 members on the row, but unknown: described false): the group "
         "is not known to be Empty, so no group_empty; 30 s without the commits it made at "
         "every snapshot is the whole group's progress stopped all the same",
     sampled(grid(330), every(5, 300), members=lambda t: UNDESCRIBED if t >= 330 else 1),
     "STOP", "progress_stopped"),
    (27, "the group is Empty but the producer stopped with its last commit: the lag of 50 it "
         "left does not grow, so it waits for the threshold (2 x 60 s) like any other pause",
     sampled(grid(390, jitter=(0,)), every(5, 300), hw=idle_after(299),
             members=member_until(330), marker=50), "OK", "consuming"),
    (28, "a healthy consumer committing every second: what is in flight when the snapshots come "
         "happens to grow (3, 7, 12, 15, 18 of 600 records a minute): noise, not a trend",
     minutes(*[(600 * i - lag, 600 * i, 1) for i, lag in enumerate([3, 7, 12, 15, 18], 1)]),
     "OK", "consuming"),
    (29, "a consumer at a quarter of the production rate: its lag grows by three quarters of "
         "what is produced, beyond two intervals' production from the fourth snapshot",
     minutes(*[(150 * i, 600 * i + 10, 1) for i in range(4)]), "WARN", "falling_behind"),
    (30, "a consumer at 90 % of the production rate: its lag grows slowly, but it grows; past "
         "two intervals' production (1,200) at the 20th minute it is WARN",
     minutes(*[(540 * i, 600 * i + 10, 1) for i in range(21)]), "WARN", "falling_behind"),
]

# The cases whose every observation must be OK: a false alarm fires at any snapshot.
NEVER_ALARM = {14, 15, 16, 17, 19, 20, 21, 28}

# What the reason of the last observation says (the threshold and why).
REASONS = {
    5: "unchanged for 600 s (threshold 300 s: commit rhythm not known yet",
    10: "(threshold 300 s: commit rhythm not known yet, fewer than 2 advances in the last "
        "3600 s), 0 member(s)",
    9: "unchanged for 1440 s (threshold 2520 s = 2 x longest pause 1260 s)",
    18: "lag 3310, committed offset unchanged for 330 s (threshold 300 s: commit rhythm not "
        "known yet",
    22: "group has no members (state Empty) and lag grew from 310 to 610 since its last member "
        "was seen 30 s ago",
    23: "1 of 1 partitions of the group: no commit for 34 s (their rhythm: an advance at every "
        "snapshot of the 600 s before); lag 0 → 340; 1 member(s) still listed",
    24: "committed offset unchanged for 240 s (threshold 180 s = 2 x longest pause 90 s), "
        "1 member(s)",
    25: "group has no members (state Empty) and lag grew from 200 to 500 since its last commit "
        "30 s ago",
}

SCHEMA = StructType([
    StructField("cluster", StringType(), False), StructField("snapshot_ts", TimestampType()),
    StructField("group_id", StringType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("committed_offset", LongType()),
    StructField("high_watermark", LongType()), StructField("lag", LongType()),
])
GROUPS = StructType([
    StructField("cluster", StringType(), False), StructField("snapshot_ts", TimestampType()),
    StructField("group_id", StringType()), StructField("state", StringType()),
    StructField("member_count", IntegerType()), StructField("described", BooleanType()),
])


def _group_row(ts: datetime, group: str, members: int) -> tuple[Any, ...]:
    if members == UNDESCRIBED:
        return ("c", ts, group, "Stable", 0, False)
    return ("c", ts, group, "Stable" if members else "Empty", members, True)


def _statuses(spark: SparkSession, cases: dict[str, list[Obs]],
              settings: StatusSettings | None = None) -> list[Any]:
    lag_rows, group_rows = [], []
    for group, observations in cases.items():
        for seconds, committed, hw, members in observations:
            ts = T0 + timedelta(seconds=seconds)
            lag_rows.append(("c", ts, group, "t", 0, committed, hw, hw - committed))
            group_rows.append(_group_row(ts, group, members))
    return partition_status(spark.createDataFrame(lag_rows, SCHEMA),
                            spark.createDataFrame(group_rows, GROUPS),
                            settings or StatusSettings()).collect()


def _evaluate(spark: SparkSession, settings: StatusSettings | None = None
              ) -> tuple[dict[int, Any], dict[int, list[Any]]]:
    """The last row of each case, and all its rows in time order."""
    rows = _statuses(spark, {f"case-{n}": obs for n, _, obs, _, _ in CASES}, settings)
    series: dict[int, list[Any]] = {}
    for row in sorted(rows, key=lambda r: r["snapshot_ts"]):
        series.setdefault(int(row["group_id"].split("-")[1]), []).append(row)
    return {n: rows[-1] for n, rows in series.items()}, series


def test_status_rules_table(spark: SparkSession) -> None:
    last, series = _evaluate(spark)
    got = {n: (last[n]["status"], last[n]["rule"]) for n, *_ in CASES}
    want = {n: (status, rule) for n, _, _, status, rule in CASES}
    assert got == want
    # Every rule exercised, by this table or the kinds' (KIND_CASES).
    assert {rule for *_, rule in CASES} | {rule for *_, rule in KIND_CASES} \
        == {name for name, _ in RULES}
    alarms = {n: [(r["snapshot_ts"], r["status"], r["reason"]) for r in series[n]
                  if r["status"] != "OK"] for n in NEVER_ALARM}
    assert alarms == {n: [] for n in NEVER_ALARM}
    assert {n: last[n]["reason"] for n in REASONS} == {
        n: last[n]["reason"] if text in last[n]["reason"] else f"... {text} ..."
        for n, text in REASONS.items()}


# --- the kinds: share groups (KIP-932) and streams groups (KIP-1071) -----------------------------

# One observation a minute: (committed (a share group's start offset), hw, members, state,
# and for streams groups whether the partition's task has an active owner, else None).
KindObs = tuple[int, int, int, str, bool | None]


def frozen(minutes_: int, members: int, state: str, owned: bool | None = None,
           hw_step: int = 10) -> list[KindObs]:
    """An offset frozen at 100 for ``minutes_`` + 1 minutes, the log at 200 growing
    ``hw_step`` records a minute."""
    return [(100, 200 + hw_step * i, members, state, owned) for i in range(minutes_ + 1)]


def caught_up(states: list[str], members: int = 2,
              owned: bool | None = None) -> list[KindObs]:
    """A group at the end of its log (lag 0), one state a minute."""
    return [(100 * i, 100 * i, members, state, owned) for i, state in enumerate(states)]


# (number, why, group type, observations, status and rule at the last one). The near misses
# (a rule of another kind, or a condition short of its threshold) fail on a wrong branch.
KIND_CASES: list[tuple[int, str, str, list[KindObs], str, str]] = [
    (31, "a share group with no members while records arrive: a queue nobody reads, STOP at "
         "once (members never seen, no threshold waited for)",
     "share", frozen(2, 0, "Empty"), "STOP", "share_no_members"),
    (32, "the same observations of a consumer group: never had members (commit-only), frozen "
         "only 2 minutes: not yet anything",
     "consumer", frozen(2, 0, "Empty"), "OK", "consuming"),
    (33, "a share group with no members and nothing arriving (the log stands still): no news "
         "yet",
     "share", frozen(2, 0, "Empty", hw_step=0), "OK", "consuming"),
    (34, "a share group with members whose start offset has not moved for 10 minutes while "
         "its lag grows: the earliest record in flight is never acknowledged",
     "share", frozen(10, 2, "Stable"), "STALL", "share_stalled"),
    (35, "the same share group with its lag not growing (nothing arrives): stuck, but not on "
         "arriving records: the general rule",
     "share", frozen(10, 2, "Stable", hw_step=0), "STALL", "stalled"),
    (36, "a consumer group frozen while its lag grows: the general rule, not the share one",
     "consumer", frozen(10, 2, "Stable"), "STALL", "stalled"),
    (37, "a streams group NotReady (an internal topic deleted), its lag 0: STOP all the same, "
         "nothing will be processed",
     "streams", caught_up(["Stable", "NotReady", "NotReady"]), "STOP", "streams_not_ready"),
    (38, "a streams group in Assigning for 3 minutes: stuck",
     "streams", caught_up(["Assigning"] * 4), "STALL", "streams_assigning_stuck"),
    (39, "a streams group in Assigning for 1 minute, after Stable: a rebalance under way",
     "streams", caught_up(["Stable", "Stable", "Stable", "Assigning", "Assigning"]),
     "OK", "no_lag"),
    (40, "a consumer group (KIP-848) in Assigning for 3 minutes: not a streams rule (its own "
         "is the rebalance_stuck alert)",
     "consumer", caught_up(["Assigning"] * 4), "OK", "no_lag"),
    (41, "a streams group with members, behind on a partition whose task nobody owns as "
         "active for 3 minutes",
     "streams", frozen(3, 2, "Stable", owned=False), "STALL", "streams_task_unowned"),
    (42, "the same partition with its task owned: frozen 3 minutes is below the 300 s floor",
     "streams", frozen(3, 2, "Stable", owned=True), "OK", "consuming"),
    (43, "a task unowned for the last minute only (revoked, not yet assigned): no alarm",
     "streams", [(o[0], o[1], o[2], o[3], i < 3) for i, o in
                 enumerate(frozen(4, 2, "Stable"))], "OK", "consuming"),
]
KIND_NEVER_ALARM = {32, 33, 39, 40, 42, 43}
KIND_REASONS = {
    31: "share group has no members while records arrive: high watermark 200 -> 220 in the "
        "last 600 s; lag 120 from start offset 100",
    34: "share group's start offset unchanged for 600 s (threshold 300 s: commit rhythm not "
        "known yet",
    37: "streams group NotReady: its topology cannot run (an internal or source topic is "
        "missing), 2 member(s); lag 0",
    38: "streams group in Assigning for 180 s (>= 120 s)",
    41: "no member owns the task of this partition as active for 180 s, 2 member(s); lag 130",
}
KIND_GROUPS = StructType([*GROUPS.fields, StructField("group_type", StringType())])
TASK_OWNERS = StructType([
    StructField("cluster", StringType(), False), StructField("snapshot_ts", TimestampType()),
    StructField("group_id", StringType()), StructField("topic", StringType()),
    StructField("active_partitions", ArrayType(IntegerType()))])


def test_kind_rules_table(spark: SparkSession) -> None:
    lag_rows, group_rows, owner_rows = [], [], []
    for number, _, kind, observations, _, _ in KIND_CASES:
        group = f"kind-{number}"
        for minute, (committed, hw, members, state, owned) in enumerate(observations):
            ts = T0 + timedelta(minutes=minute)
            lag_rows.append(("c", ts, group, "t", 0, committed, hw, hw - committed))
            group_rows.append(("c", ts, group, state, members, True, kind))
            if owned is not None:
                owner_rows.append(("c", ts, group, "t", [0] if owned else []))
    rows = partition_status(spark.createDataFrame(lag_rows, SCHEMA),
                            spark.createDataFrame(group_rows, KIND_GROUPS),
                            StatusSettings(),
                            spark.createDataFrame(owner_rows, TASK_OWNERS)).collect()
    series: dict[int, list[Any]] = {}
    for row in sorted(rows, key=lambda r: r["snapshot_ts"]):
        series.setdefault(int(row["group_id"].split("-")[1]), []).append(row)
    last = {n: rows_[-1] for n, rows_ in series.items()}
    assert {n: (last[n]["status"], last[n]["rule"]) for n, *_ in KIND_CASES} == {
        n: (status, rule) for n, _, _, _, status, rule in KIND_CASES}
    alarms = {n: [(r["snapshot_ts"], r["status"], r["reason"]) for r in series[n]
                  if r["status"] != "OK"] for n in KIND_NEVER_ALARM}
    assert alarms == {n: [] for n in KIND_NEVER_ALARM}
    assert {n: last[n]["reason"] for n in KIND_REASONS} == {
        n: last[n]["reason"] if text in last[n]["reason"] else f"... {text} ..."
        for n, text in KIND_REASONS.items()}
    # A share group with no members is STOP from its second snapshot (the first has no
    # history to see records arrive in), not after a threshold.
    assert [r["rule"] for r in series[31]] == ["too_little_history", "share_no_members",
                                               "share_no_members"]


def test_min_stop_s_raises_a_threshold_the_rhythm_sets_lower(spark: SparkSession) -> None:
    """A hung member of a group committing every 5 s, 153 s after the last advance seen: STALL
    against its rhythm (2 x 63 s), not yet with min_stop_s = 180 (progress_stopped off, to
    look at the stall threshold alone)."""
    hung = {"hung": sampled(grid(450), every(5, KILLED_AT))}
    off = StatusSettings(halt_after_s=math.inf)
    default = max(_statuses(spark, hung, off), key=lambda r: r["snapshot_ts"])
    assert (default["status"], default["rule"]) == ("STALL", "stalled")
    assert "unchanged for 153 s (threshold 126 s = 2 x longest pause 63 s)" in default["reason"]
    floor = max(_statuses(spark, hung, StatusSettings(min_stop_s=180, halt_after_s=math.inf)),
                key=lambda r: r["snapshot_ts"])
    assert (floor["status"], floor["rule"]) == ("OK", "consuming")
    assert "(threshold 180 s = min_stop_s; 2 x longest pause 63 s is less)" in floor["reason"]


def test_a_status_does_not_depend_on_the_rows_read_before_its_history(
        spark: SparkSession) -> None:
    """A job reads history_s (and a margin giving the oldest row its predecessor) before its
    interval: what it computes for its interval must not change with more rows read before.
    Bursts (pauses of 21 minutes) with 20 minutes of history: a pause straddling the start of
    the history must not count, whether its start was read or not."""
    settings = StatusSettings(history_s=1200)
    observations = bursts(90)
    full = {r["snapshot_ts"]: (r["status"], r["reason"])
            for r in _statuses(spark, {"full": observations}, settings)}
    seconds = dict(zip(sorted(full), sorted(o[0] for o in observations), strict=True))
    cuts = {f"from-{minute}": [o for o in observations if o[0] >= 60 * minute]
            for minute in range(0, 70, 3)}
    compared = 0
    for row in _statuses(spark, cuts, settings):
        start = int(row["group_id"].split("-")[1]) * 60
        if seconds[row["snapshot_ts"]] >= start + settings.history_s + 60:
            assert (row["status"], row["reason"]) == full[row["snapshot_ts"]], row
            compared += 1
    assert compared > 100


def test_group_status_rolls_up_the_worst_partition(spark: SparkSession) -> None:
    rows = [("c", T0, "g", "t", p, 100, 100 + lag, lag) for p, lag in ((0, 0), (1, 5))]
    rows += [("c", T0 + timedelta(minutes=m), "g", "t", 1, 100, 100 + 5 + m, 5 + m)
             for m in range(1, 12)]
    rows += [("c", T0 + timedelta(minutes=m), "g", "t", 0, 100 + m, 100 + m, 0)
             for m in range(1, 12)]
    groups = [_group_row(T0 + timedelta(minutes=m), "g", 0) for m in range(12)]
    partitions = partition_status(spark.createDataFrame(rows, SCHEMA),
                                  spark.createDataFrame(groups, GROUPS))
    latest = group_status(partitions).orderBy("snapshot_ts").collect()[-1]
    assert (latest["status"], latest["stop_partitions"], latest["ok_partitions"]) == ("ERR", 1, 1)
    assert (latest["worst_topic"], latest["worst_partition"]) == ("t", 1)


def test_group_status_picks_one_worst_partition_among_equals_whatever_the_row_order(
        spark: SparkSession) -> None:
    # Two stopped partitions of equal lag, arriving in either order in one task: the same one
    # named (the last by topic and partition), not whichever came first.
    rows = [("c", T0, "g", topic, 0, "STOP", "stopped", 7) for topic in ("a", "b")]
    columns = ["cluster", "snapshot_ts", "group_id", "topic", "partition", "status", "reason",
               "lag"]
    picks = set()
    for ordered in (rows, rows[::-1]):
        partitions = spark.createDataFrame(ordered, columns).coalesce(1)
        [latest] = group_status(partitions).collect()
        picks.add((latest["worst_topic"], latest["worst_partition"]))
    assert picks == {("b", 0)}


def _longest_pause_by_definition(rows: list[tuple[float, int]], history_s: float
                                 ) -> list[float | None]:
    """Straight from the definition, per row: the advances of the last ``history_s`` before
    it (strictly before, in microseconds), and the longest pause between two consecutive
    ones, each from the snapshot before the earlier advance to the later advance."""
    micros = [round(t * 1_000_000) for t, _ in rows]
    advances = [(micros[i], rows[i][0], rows[i - 1][0]) for i in range(1, len(rows))
                if rows[i][1] != rows[i - 1][1]]
    out: list[float | None] = []
    for us in micros:
        inside = [a for a in advances if us - round(history_s * 1_000_000) <= a[0] < us]
        pauses = [later[1] - earlier[2] for earlier, later in itertools.pairwise(inside)]
        out.append(max(pauses) if pauses else None)
    return out


def test_the_longest_pause_is_the_definition_at_every_row() -> None:
    """The longest pause is a range maximum over the advances (a sparse table; before it, a
    van Herk split along blocks of time, and before that a list of the window's advances per
    row, most of the job's time at scale). Irregular snapshots, advances at random, pauses
    longer than the history, and windows that start anywhere: every row equals the
    definition, computed naively."""
    import random

    import numpy as np

    from groupscope.analyze.status_history import history_columns

    history_s = 600.0
    rng = random.Random(11)
    cases: dict[str, list[tuple[float, int]]] = {}
    for case in range(12):
        t, committed, rows = 1_000_000 + rng.uniform(0, 600), 0, []
        for _ in range(rng.randrange(20, 120)):
            t += rng.choice([rng.uniform(5, 90), rng.uniform(90, 400), rng.uniform(600, 1500)]
                            if case % 3 == 0 else [rng.uniform(10, 120)])
            if rng.random() < (0.3 if case % 2 else 0.8):
                committed += rng.randrange(1, 50)
            rows.append((round(t, 6), committed))
        cases[f"g{case}"] = rows
    got: dict[str, list[float | None]] = {}
    for group, rows in cases.items():
        us = np.array([round(t * 1_000_000) for t, _ in rows])
        n = len(rows)

        def known(values: Any, n: int = n) -> tuple[Any, Any]:
            return np.asarray(values), np.ones(n, dtype=bool)

        columns = history_columns(
            {"_us": known(us), "committed_offset": known([c for _, c in rows]),
             "high_watermark": known([10**6] * n), "lag": known([1] * n),
             "member_count": known([1] * n), "_assigning": known([False] * n),
             "_unowned": known([False] * n)},
            window_s=60.0, history_s=history_s, steady_points=3)
        values, valid = columns["_longest_pause"]
        got[group] = [float(v) if ok else None for v, ok in zip(values, valid, strict=True)]
    compared = 0
    for group, rows in cases.items():
        expected = _longest_pause_by_definition(rows, history_s)
        assert got[group] == expected, group
        compared += sum(e is not None for e in expected)
    assert compared > 200  # most rows have a pause to compare, not only nulls


# --- progress_stopped: whole groups, several partitions ---------------------------------------

def _pause(commits: list[float], start: float, end: float) -> list[float]:
    """The commits, less those in [start, end): the consumer did not commit then."""
    return [c for c in commits if not start <= c < end]


STEADY = every(5, 600)  # auto-commit every 5 s (the clients' default)

# (number, why, snapshot step, {partition: commit times}, members(t), the status and rule of
# every partition behind when the stop is due, or None: no partition may alarm, STOP or STALL
# (what notifies), at any snapshot). With snapshots every 15 s the stop is due 15-30 s after
# the snapshot that saw the last commit: up to 45 s after a kill, with the session timeout.
GROUP_CASES: list[tuple[int, str, int, dict[int, list[float]], Callable[[float], int],
                        tuple[str, str] | None]] = [
    (101, "one member of three killed at 302 s: its partition stops, the others go on; the "
          "session expires at 347 s and a survivor resumes it at 352 s: never alarms",
     15, {0: [*every(5, KILLED_AT), *every(5, 600, start=352)], 1: STEADY, 2: STEADY},
     lambda t: 3 if t < KILLED_AT + 45 else 2, None),
    (102, "every member of three killed at 302 s, snapshots every 10 s: every partition stops "
          "at once; 15 s after the snapshot that saw their last commits the group is STOP, "
          "members still listed until their sessions expire (at 347 s)",
     10, {p: every(5, KILLED_AT) for p in range(3)}, lambda t: 3 if t < 347 else 0,
     ("STOP", "progress_stopped")),
    (103, "an eager rebalance (a member joins at 300 s): every partition pauses 6 s, snapshots "
          "every 15 s: never alarms",
     15, {p: _pause(STEADY, 300, 306) for p in range(3)}, lambda t: 3, None),
    (104, "the same rebalance with snapshots every 5 s: never alarms",
     5, {p: _pause(STEADY, 300, 306) for p in range(3)}, lambda t: 3, None),
    (105, "a 10 s GC pause of the only member (nothing committed from 300 s to 310 s), "
          "snapshots every 15 s: never alarms",
     15, {p: _pause(STEADY, 300, 310) for p in range(3)}, lambda t: 1, None),
    (106, "the same pause with snapshots every 5 s and commits every second: never alarms",
     5, {p: _pause(every(1, 600, start=-0.5), 300, 310) for p in range(3)}, lambda t: 1,
     None),
    (107, "a cooperative rebalance: only the moved partition pauses 8 s: never alarms",
     15, {0: _pause(STEADY, 300, 308), 1: STEADY, 2: STEADY}, lambda t: 3, None),
    (108, "a member killed whose partitions are the whole group's lag, the others caught up on "
          "idle partitions (no commits to make): the group's progress stopped",
     10, {0: every(5, KILLED_AT), 1: [-1.0], 2: [-1.0]}, lambda t: 3,
     ("STOP", "progress_stopped")),
]


def _group_rows(step: int, partitions: dict[int, list[float]], members: Callable[[float], int],
                until: float, group: str) -> tuple[list[Any], list[Any]]:
    """The lag and group rows of one group's snapshots every ``step`` seconds."""
    lag_rows, group_rows = [], []
    for t in grid(int(until), step):
        ts = T0 + timedelta(seconds=t)
        for partition, commits in partitions.items():
            # Partitions with a single commit before the start are idle: nothing produced.
            hw = (lambda _: 1000) if commits == [-1.0] \
                else (lambda u: 10 * math.floor(u) + 1000)
            committed = hw(max(c for c in commits if c <= t))
            lag_rows.append(("c", ts, group, "t", partition, committed, hw(t), hw(t) - committed))
        group_rows.append(_group_row(ts, group, members(t)))
    return lag_rows, group_rows


@pytest.fixture(scope="module")
def group_case_rows(spark: SparkSession) -> dict[str, list[Any]]:
    """Every group case's status rows, from one evaluation (one Spark job for all)."""
    lag_rows, group_rows = [], []
    for number, _, step, partitions, members, expected in GROUP_CASES:
        rows = _group_rows(step, partitions, members, 360 if expected else 600, f"g-{number}")
        lag_rows += rows[0]
        group_rows += rows[1]
    out: dict[str, list[Any]] = {}
    for row in partition_status(spark.createDataFrame(lag_rows, SCHEMA),
                                spark.createDataFrame(group_rows, GROUPS)).collect():
        out.setdefault(row["group_id"], []).append(row)
    return out


@pytest.mark.parametrize("case", GROUP_CASES, ids=[str(c[0]) for c in GROUP_CASES])
def test_progress_stopped_is_the_whole_groups_progress(group_case_rows: dict[str, list[Any]],
                                                       case: Any) -> None:
    number, _, _, partitions, _, expected = case
    rows = group_case_rows[f"g-{number}"]
    if expected is None:
        alarms = [(r["snapshot_ts"], r["partition"], r["status"], r["reason"]) for r in rows
                  if r["status"] in ("STOP", "STALL")]
        assert alarms == []
        return
    # Every partition that is behind is STOP from the first snapshot 15 s (halt_after_s) after
    # the one that saw its last commit: before the session timeout (45 s after the kill).
    snapshots = sorted({(r["snapshot_ts"] - T0.replace(tzinfo=None)).total_seconds()
                        for r in rows})
    last_commit = max(c for c in partitions[0] if c <= KILLED_AT)
    saw_it = min(t for t in snapshots if t >= last_commit)
    due = min(t for t in snapshots if t >= saw_it + StatusSettings().halt_after_s)
    stopped = {r["partition"]: (r["status"], r["rule"], r["reason"]) for r in rows
               if (r["snapshot_ts"] - T0.replace(tzinfo=None)).total_seconds() == due
               and r["lag"] > 1}
    assert {(s, rule) for s, rule, _ in stopped.values()} == {expected}, stopped
    assert not any(r["status"] == "STOP" for r in rows
                   if (r["snapshot_ts"] - T0.replace(tzinfo=None)).total_seconds() < due)
    assert due - KILLED_AT < 45
    reason = next(iter(stopped.values()))[2]
    assert f"{len(stopped)} of {len(partitions)} partitions of the group: no commit for" \
        in reason, reason


def test_a_partition_whose_high_watermark_is_unread_keeps_the_last_one_read(
        spark: SparkSession) -> None:
    """A member commits every 30 s, 10 records behind, until its partition's leader goes down
    at 300 s: from then on the high watermark cannot be read (null) and the committed offset
    is frozen. The lag is the last high watermark read minus the committed offset, so the
    partition STALLs as it would have with the offset known, and its reason says where the lag
    came from; a high watermark read longer than the history ago is not kept."""
    rows = []
    for seconds in range(0, 630, 30):
        offline = seconds > 300
        committed = min(seconds, 300) * 2
        hw = None if offline else committed + 10
        rows.append(("c", T0 + timedelta(seconds=seconds), "offline", "t", 0, committed, hw,
                     None if hw is None else hw - committed))
    groups = [_group_row(r[1], "offline", 1) for r in rows]
    statuses = sorted(partition_status(spark.createDataFrame(rows, SCHEMA),
                                       spark.createDataFrame(groups, GROUPS),
                                       StatusSettings(halt_after_s=math.inf)).collect(),
                      key=lambda r: r["snapshot_ts"])
    last = statuses[-1]
    assert (last["status"], last["rule"], last["lag"]) == ("STALL", "stalled", 10)
    assert "high watermark not read at this snapshot (its leader down?): lag from the one " \
           "read 300 s before" in last["reason"]
    assert ["not read" in r["reason"] for r in statuses] == [False] * 11 + [True] * 10
    short = max(partition_status(spark.createDataFrame(rows, SCHEMA),
                                 spark.createDataFrame(groups, GROUPS),
                                 StatusSettings(halt_after_s=math.inf, history_s=240)).collect(),
                key=lambda r: r["snapshot_ts"])
    assert short["lag"] is None and short["status"] == "OK"


def test_the_lag_before_a_row_is_the_one_read_before_when_its_high_watermark_was_unread(
        spark: SparkSession) -> None:
    """The previous row's lag (whether the lag fell) is computed from that row's own inputs
    in the same pass, also where that row's high watermark was not read and its lag is the one
    carried from before. A lag growing at every snapshot falls once between two snapshots whose
    high watermark was unread (the committed offset moved, the carried high watermark did not):
    so it did not grow at every observation, and is no falling_behind."""
    def rows(unread: set[int]) -> list[tuple[Any, ...]]:
        out = []
        for k in range(21):
            hw, committed = 10 + 100 * k, 450 if k == 10 else 50 * k
            read = None if k in unread else hw
            out.append(("c", T0 + timedelta(seconds=30 * k), f"unread-{len(unread)}", "t", 0,
                        committed, read, None if read is None else read - committed))
        return out

    lag_rows = rows(set()) + rows({10, 11})
    groups = [_group_row(r[1], r[2], 1) for r in lag_rows]
    last = {r["group_id"]: r for r in sorted(
        partition_status(spark.createDataFrame(lag_rows, SCHEMA),
                         spark.createDataFrame(groups, GROUPS)).collect(),
        key=lambda r: r["snapshot_ts"])}
    assert last["unread-0"]["rule"] == "falling_behind"  # read at every snapshot: it grew
    assert last["unread-2"]["rule"] == "consuming"  # the carried lag fell 460 -> 360 at 330 s
