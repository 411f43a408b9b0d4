"""Skew per group and snapshot, and per assignment strategy across groups and hours.

Per group: ``groupscope.contract.skew`` (the figures, their names and their edge cases),
implemented here as column expressions over every snapshot, where a Python call per group
would be far too slow; tests/unit/test_skew_parity.py checks both give the same figures. Per
strategy and hour: the averages over its groups' snapshots, and the movement per rebalance from
the rebalance events of the same hour.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from groupscope.contract.skew import FIELDS

SNAPSHOT_GROUP = ["cluster", "snapshot_ts", "group_id"]


def group_skew(members: DataFrame, assignments: DataFrame, groups: DataFrame,
               lag: DataFrame) -> DataFrame:
    """mart.group_skew rows for groups with members. ``lag`` is partition lag rows
    (``analyze.lag.partition_lag``): each names the one member a partition counts for."""
    owned = (assignments.where(F.col("kind") == "current")
             .groupBy(*SNAPSHOT_GROUP, "member_id").agg(F.count("*").alias("_partitions")))
    member_lag = (lag.where(F.col("member_id").isNotNull())
                  .groupBy(*SNAPSHOT_GROUP, "member_id")
                  .agg(F.sum(F.when(F.col("lag") > 0, F.col("lag"))).alias("_lag")))
    per_member = (members.select(*SNAPSHOT_GROUP, "member_id")
                  .join(owned, [*SNAPSHOT_GROUP, "member_id"], "left")
                  .join(member_lag, [*SNAPSHOT_GROUP, "member_id"], "left")
                  .fillna({"_partitions": 0, "_lag": 0}))
    mean = F.mean("_partitions")
    per_group = per_member.groupBy(*SNAPSHOT_GROUP).agg(
        F.count("*").alias("_members"), F.sum("_partitions").alias("_owned"),
        (F.max("_partitions") - F.min("_partitions")).alias("_max_minus_min"),
        F.when(mean > 0, F.stddev_pop("_partitions") / mean).alias("_cv"),
        F.sum((F.col("_partitions") == 0).cast("int")).alias("_idle"),
        # The most lag, then the smallest member id: deterministic among equals.
        F.min_by("member_id", F.struct(-F.col("_lag"), F.col("member_id"))).alias("_top_member"),
        F.max("_lag").alias("_top_lag"), F.sum("_lag").alias("_total_lag"))
    lagged = F.col("_total_lag") > 0
    figures: dict[str, Column] = {
        "members": F.col("_members").cast("int"),
        "partitions": F.col("_owned").cast("int"),
        "max_minus_min": F.col("_max_minus_min").cast("int"),
        "coefficient_of_variation": F.col("_cv"),
        "idle_members": F.col("_idle").cast("int"),
        "most_lagged_member": F.when(lagged, F.col("_top_member")),
        "most_lagged_share": F.when(lagged, F.col("_top_lag") / F.col("_total_lag")),
    }
    strategy = groups.select(*SNAPSHOT_GROUP, "group_type",
                             F.coalesce(F.col("assignor"), F.lit("unknown")).alias("strategy"))
    return per_group.join(strategy, SNAPSHOT_GROUP, "left").select(
        *SNAPSHOT_GROUP, "group_type", "strategy", *(figures[f].alias(f) for f in FIELDS))


def strategy_skew_hourly(skew: DataFrame, events: DataFrame) -> DataFrame:
    """mart.strategy_skew_hourly rows: per strategy and hour across its groups."""
    hour = F.date_trunc("hour", "snapshot_ts").alias("period_start")
    by_strategy = skew.groupBy("cluster", hour, "group_type", "strategy").agg(
        F.countDistinct("group_id").cast("int").alias("groups"),
        F.count("*").cast("int").alias("group_snapshots"),
        F.avg("max_minus_min").alias("avg_max_minus_min"),
        F.avg("coefficient_of_variation").alias("avg_coefficient_of_variation"),
        F.avg("idle_members").alias("avg_idle_members"),
        F.avg("most_lagged_share").alias("avg_most_lagged_share"))
    # Each group's strategy in that hour, to attribute its rebalances.
    group_strategy = skew.groupBy("cluster", "group_id", hour).agg(
        F.max_by("strategy", "snapshot_ts").alias("strategy"),
        F.max_by("group_type", "snapshot_ts").alias("group_type"))
    movement = (events.withColumn("period_start", F.date_trunc("hour", "event_ts"))
                .join(group_strategy, ["cluster", "group_id", "period_start"])
                .groupBy("cluster", "period_start", "group_type", "strategy").agg(
                    F.count("*").cast("int").alias("rebalances"),
                    F.avg("partitions_moved").alias("avg_partitions_moved")))
    return (by_strategy.join(movement, ["cluster", "period_start", "group_type", "strategy"],
                             "left")
            .fillna({"rebalances": 0}))
