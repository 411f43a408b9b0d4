"""Consumer status per partition and per group: OK / WARN / STALL / STOP / REWIND (partition)
and OK / WARN / ERR (group), from Burrow's rules, evaluated at every snapshot over the
partition's observations of the last ``window_s`` seconds (pure DataFrame functions).

The rules, first match wins (their names, order and statuses: ``groupscope.contract.status``;
tests/unit/test_analytics_status.py has a numbered table of cases, each with its reason):

1. ``rewind``   REWIND  the committed offset moved back inside the window.
2. ``no_lag``   OK      lag <= ``lag_tolerance`` (1): a consumer at the end of its log is fine,
                        however long ago it committed. Fixes Burrow's false alarms on idle
                        topics and on the permanent lag of 1 a transaction marker leaves.
3. ``too_little_history`` OK  fewer than 2 observations: no trend can be judged yet (Burrow
                        alarms on a single commit).
4. ``stopped``  STOP    behind, the committed offset has not moved for the stop threshold, and
                        the group has no members: nobody is consuming.
5. ``stalled``  STALL   the same, with members present: they are there but not progressing.
6. ``falling_behind`` WARN  committing, but the lag grew at every observation of a full window.
7. ``consuming`` OK     otherwise.

The stop threshold is ``max(stop_after_s, burst_factor x the longest earlier pause between two
advances of the committed offset)``: a consumer that commits in bursts (manual commits, batch
jobs) is judged against its own rhythm, not flagged in every pause (Burrow's burst false
alarm). Group status (``groupscope.contract.status.group_status``): ERR if any partition is
STOP or STALL, WARN if any is WARN or REWIND, else OK.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from groupscope.contract.status import (
    ROLL_UP,
    RULES,
    GroupStatus,
    PartitionStatus,
    Rule,
    count_column,
    severity,
)

KEYS = ["cluster", "group_id", "topic", "partition"]


@dataclass(frozen=True)
class StatusSettings:
    window_s: float = 600.0  # the observations a status is judged on (Burrow: 10 commits)
    history_s: float = 3600.0  # how far back pauses and the last advance are looked for
    lag_tolerance: int = 1
    stop_after_s: float = 300.0
    burst_factor: float = 2.0
    min_trend_points: int = 3


def _t(column: str) -> Column:
    return F.unix_micros(F.col(column)) / F.lit(1_000_000.0)


def partition_status(lag: DataFrame, groups: DataFrame,
                     settings: StatusSettings = StatusSettings()) -> DataFrame:
    """``lag``: partition lag rows (cluster, snapshot_ts, group_id, topic, partition,
    committed_offset, high_watermark, lag); ``groups``: consumer_groups rows (member_count).
    One status per partition row with a committed offset."""
    # Every window is bounded in time, never "all rows read": the status of a snapshot does
    # not depend on the interval a job computed it in (the job reads history_s more).
    micros = 1_000_000
    history = Window.partitionBy(*KEYS).orderBy("_us")
    recent_before = history.rangeBetween(-int(settings.history_s * micros), -1)
    window = history.rangeBetween(-int(settings.window_s * micros), 0)

    frame = (lag.where(F.col("committed_offset").isNotNull())
             # Small (one row per group and snapshot): broadcast, keeping the rows where they are.
             .join(F.broadcast(groups.select("cluster", "snapshot_ts", "group_id",
                                             "member_count")),
                   ["cluster", "snapshot_ts", "group_id"], "left")
             .withColumn("_us", F.unix_micros("snapshot_ts"))
             .withColumn("_t", _t("snapshot_ts"))
             .withColumn("_d_committed",
                         F.col("committed_offset") - F.lag("committed_offset").over(history))
             .withColumn("_d_lag", F.col("lag") - F.lag("lag").over(history)))
    advanced = F.col("_d_committed").isNotNull() & (F.col("_d_committed") != 0)
    horizon = F.col("_t") - F.lit(settings.history_s)
    upto = history.rowsBetween(Window.unboundedPreceding, 0)
    before = history.rowsBetween(Window.unboundedPreceding, -1)
    # The last advance (and the one before) as running "last" values, kept only within the
    # history horizon: incremental frames, unlike sliding maxima over an hour of rows.
    last_advance = F.last("_advance_t", ignorenulls=True).over(upto)
    previous_advance = F.last("_advance_t", ignorenulls=True).over(before)
    frame = (frame.withColumn("_advance_t", F.when(advanced, F.col("_t")))
             .withColumn("_last_advance", F.greatest(
                 F.when(last_advance >= horizon, last_advance),
                 F.greatest(F.min("_t").over(upto), horizon)))
             .withColumn("_previous_advance",
                         F.when(previous_advance >= horizon, previous_advance))
             .withColumn("_pause", F.when(advanced, F.col("_t") - F.col("_previous_advance")))
             .withColumn("_longest_pause", F.max("_pause").over(recent_before))
             .withColumn("_n", F.count("*").over(window))
             .withColumn("_rewound", F.min("_d_committed").over(window) < 0)
             .withColumn("_lag_first", F.first("lag").over(window))
             .withColumn("_committed_first", F.first("committed_offset").over(window))
             .withColumn("_lag_never_fell", F.min("_d_lag").over(window) >= 0))

    since_advance = F.col("_t") - F.col("_last_advance")
    threshold = F.greatest(F.lit(settings.stop_after_s),
                           F.coalesce(F.col("_longest_pause"), F.lit(0.0))
                           * F.lit(settings.burst_factor))
    behind = F.col("lag") > settings.lag_tolerance
    not_moving = since_advance >= threshold
    members = F.coalesce(F.col("member_count"), F.lit(0))
    conditions: dict[Rule, Column] = {
        Rule.REWIND: F.coalesce(F.col("_rewound"), F.lit(False)),
        Rule.NO_LAG: ~F.coalesce(behind, F.lit(True)),
        Rule.TOO_LITTLE_HISTORY: F.col("_n") < 2,
        Rule.STOPPED: behind & not_moving & (members == 0),
        Rule.STALLED: behind & not_moving & (members > 0),
        Rule.FALLING_BEHIND: behind & (F.col("_n") >= settings.min_trend_points)
        & (F.col("committed_offset") > F.col("_committed_first"))
        & F.coalesce(F.col("_lag_never_fell"), F.lit(False))
        & (F.col("lag") > F.col("_lag_first")),
        Rule.CONSUMING: F.lit(True),
    }
    rule: Column = F.lit(Rule.CONSUMING.value)
    for name, _ in reversed(RULES):
        rule = F.when(conditions[name], F.lit(name.value)).otherwise(rule)
    status_of = F.create_map(*[F.lit(x.value) for pair in RULES for x in pair])
    applied = F.col("_rule")
    reason = (
        F.when(applied == Rule.REWIND.value, F.format_string(
            "committed offset moved back in the last %d observations", F.col("_n")))
        .when(applied == Rule.NO_LAG.value, F.format_string("lag %d", F.col("lag")))
        .when(applied == Rule.TOO_LITTLE_HISTORY.value, F.lit("first observation"))
        .when(applied.isin(Rule.STOPPED.value, Rule.STALLED.value), F.format_string(
            "lag %d, committed offset unchanged for %.0f s (threshold %.0f s), %d member(s)",
            F.col("lag"), since_advance, threshold, members))
        .when(applied == Rule.FALLING_BEHIND.value, F.format_string(
            "lag grew from %d to %d over %d observations while committing",
            F.col("_lag_first"), F.col("lag"), F.col("_n")))
        .otherwise(F.format_string("lag %d, committing", F.col("lag"))))
    return (frame.withColumn("_rule", rule)
            .select("cluster", "snapshot_ts", "group_id", "topic", "partition",
                    status_of[F.col("_rule")].alias("status"), F.col("_rule").alias("rule"),
                    "lag", reason.alias("reason")))


def group_status(partitions: DataFrame) -> DataFrame:
    """The roll-up per group and snapshot (``groupscope.contract.status.group_status``, as
    column expressions: a Python function per group would be far slower), with the count of
    partitions in each status."""
    status = F.col("status")
    # A partition's severity is that of the group status it rolls up to; a value outside the
    # contract counts as OK, as it always has.
    rank: Column = F.lit(severity(GroupStatus.OK))
    rolled_up: Column = F.lit(GroupStatus.OK.value)
    for g in GroupStatus:
        rank = F.when(status.isin(*[p.value for p, to in ROLL_UP.items() if to is g]),
                      severity(g)).otherwise(rank)
        rolled_up = F.when(F.col("_severity") == severity(g), g.value).otherwise(rolled_up)
    counts = [F.sum((status == s.value).cast("int")).cast("int").alias(count_column(s))
              for s in PartitionStatus]
    worst = F.max_by(F.struct("topic", "partition", "status", "reason"),
                     F.struct(rank, F.col("lag")))
    return (partitions.groupBy("cluster", "snapshot_ts", "group_id")
            .agg(F.max(rank).alias("_severity"), *counts, worst.alias("_worst"))
            .select("cluster", "snapshot_ts", "group_id", rolled_up.alias("status"),
                    *(count_column(s) for s in PartitionStatus),
                    F.col("_worst")["topic"].alias("worst_topic"),
                    F.col("_worst")["partition"].alias("worst_partition"),
                    F.col("_worst")["reason"].alias("worst_reason")))
