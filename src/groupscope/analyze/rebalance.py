"""Rebalance metrics per group and hour (the daily figures are a view over the hours).

- **Exact** counts come from the offsets-topic timeline (``groupscope.offsets.timeline``):
  every completed generation of a classic group, every assignment epoch of a consumer-protocol
  group, with who joined and left and the partitions moved.
- **Estimated** counts, for groups without that history (offsets-topic ingest not running, or
  a group whose records are not there), come from snapshots: each change of the member set
  between two consecutive snapshots is counted as one rebalance (several rebalances between
  two snapshots count once: hence "estimated"), with joined and left from the set difference.
- **Streams groups** (KIP-1071), from snapshots too (the offsets topic's records of streams
  groups are not decoded): each change of the target assignment's epoch between consecutive
  snapshots is one rebalance (``generation``: the new epoch; ``estimated`` when the epoch moved
  by more than one, as several assignments may lie between), joined and left from the member
  sets, and ``partitions_moved`` the tasks whose active owner in the target assignment changed
  (to or from none too).
- **Share groups** (KIP-932) do not rebalance: their members share partitions, and a member
  joining or leaving moves nothing that another must give up. Their member churn is no event.
- **Cause**: ``joined`` (members only joined), ``left``, ``both``, ``none`` (no membership
  change: a subscription or partition-count change, or the second half of a cooperative
  rebalance; for a streams group, a topology or partition-count change).
- **Kinds**: eager (stop-the-world), cooperative (incremental), consumer (KIP-848), streams
  (KIP-1071).
- **Time in each group state** from the snapshots: each snapshot's state holds until the next
  snapshot, at most ``max_gap_s`` (a gap in collection is not time in a state; the latest
  snapshot holds ``max_gap_s``), attributed to the hour of the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from groupscope.offsets.timeline import Timeline

EVENT_SCHEMA = StructType([
    StructField("cluster", StringType(), False),
    StructField("event_ts", TimestampType(), False),
    StructField("group_id", StringType(), False),
    StructField("generation", IntegerType(), True),
    StructField("source", StringType(), False),  # offsets_topic | snapshots
    StructField("estimated", BooleanType(), False),
    StructField("protocol", StringType(), True),
    StructField("rebalance_type", StringType(), True),
    StructField("members", IntegerType(), False),
    StructField("joined", IntegerType(), False),
    StructField("left", IntegerType(), False),
    StructField("cause", StringType(), False),
    StructField("partitions_moved", IntegerType(), True),
])
REBALANCING_STATES = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def cause(joined: int, left: int) -> str:
    if joined and left:
        return "both"
    return "joined" if joined else "left" if left else "none"


def exact_events(cluster: str, timelines: Iterable[Timeline], start: datetime,
                 end: datetime) -> list[tuple[Any, ...]]:
    """Rows of EVENT_SCHEMA for the generations in [start, end), one per group, time and
    generation (the mart's key): a generation recorded twice in the same millisecond (a
    consumer group's epoch written again at once) is one event, as it stood last."""
    rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for t in timelines:
        for g in t.generations:
            if start <= g.timestamp < end:
                rows[(t.group_id, g.timestamp, g.generation)] = (
                    cluster, g.timestamp, t.group_id, g.generation, "offsets_topic", False,
                    g.protocol, g.rebalance_type, len(g.members), len(g.joined), len(g.left),
                    cause(len(g.joined), len(g.left)), g.partitions_moved)
    return list(rows.values())


AT_SNAPSHOT = ["cluster", "snapshot_ts", "group_id"]
# The kinds whose rebalances are not membership changes: streams groups have their own events
# (``streams_events``), share groups none.
OWN_EVENTS = ("share", "streams")


def _member_sets(members: DataFrame, groups: DataFrame, *columns: str) -> DataFrame:
    """Each described group's member set per snapshot (``_members``; empty for a group
    without members), with ``_prev``, the set at its previous snapshot (null at the first),
    and ``columns`` of ``groups``."""
    identity = F.coalesce(F.col("instance_id"), F.col("member_id"))
    sets = (groups.select(*AT_SNAPSHOT, *columns)
            .join(members.groupBy(*AT_SNAPSHOT).agg(F.collect_set(identity).alias("_members")),
                  AT_SNAPSHOT, "left")
            .withColumn("_members", F.coalesce(F.col("_members"), F.array().cast("array<string>"))))
    order = Window.partitionBy("cluster", "group_id").orderBy("snapshot_ts")
    return (sets.withColumn("_prev", F.lag("_members").over(order))
            .withColumn("joined", F.size(F.array_except("_members", "_prev")))
            .withColumn("left", F.size(F.array_except("_prev", "_members"))))


def _cause() -> Column:
    return (F.when((F.col("joined") > 0) & (F.col("left") > 0), "both")
            .when(F.col("joined") > 0, "joined").when(F.col("left") > 0, "left")
            .otherwise("none"))


def estimated_events(members: DataFrame, groups: DataFrame) -> DataFrame:
    """Membership changes between consecutive snapshots, as EVENT_SCHEMA rows. ``members``:
    group_members rows; ``groups``: consumer_groups rows (a described group with no members
    has an empty member set). Not of share and streams groups (``OWN_EVENTS``)."""
    kinds = groups.where(F.col("described")
                         & ~F.coalesce(F.col("group_type"), F.lit("")).isin(*OWN_EVENTS))
    changed = (_member_sets(members, kinds, "assignor", "group_type")
               .where(F.col("_prev").isNotNull())
               .where((F.col("joined") > 0) | (F.col("left") > 0)))
    kind = (F.when(F.col("group_type") == "consumer", "consumer")
            .when(F.col("assignor") == "cooperative-sticky", "cooperative")
            .when(F.col("assignor").isNotNull(), "eager"))
    return changed.select(
        "cluster", F.col("snapshot_ts").alias("event_ts"), "group_id",
        F.lit(None).cast("int").alias("generation"), F.lit("snapshots").alias("source"),
        F.lit(True).alias("estimated"), F.col("assignor").alias("protocol"),
        kind.alias("rebalance_type"), F.size("_members").cast("int").alias("members"),
        F.col("joined").cast("int"), F.col("left").cast("int"), _cause().alias("cause"),
        F.lit(None).cast("int").alias("partitions_moved"))


def streams_events(members: DataFrame, groups: DataFrame, epochs: DataFrame,
                   member_tasks: DataFrame) -> DataFrame:
    """Streams groups' rebalances, as EVENT_SCHEMA rows: each change of the target
    assignment's epoch between consecutive snapshots (see the module doc). ``epochs``:
    group_epochs rows; ``member_tasks``: streams_member_tasks rows."""
    streams = groups.where(F.col("described") & (F.col("group_type") == "streams"))
    order = Window.partitionBy("cluster", "group_id").orderBy("snapshot_ts")
    sets = (_member_sets(members, streams.join(epochs.select(*AT_SNAPSHOT, "assignment_epoch"),
                                               AT_SNAPSHOT, "left"), "assignment_epoch")
            .withColumns({"_prev_epoch": F.lag("assignment_epoch").over(order),
                          "_prev_ts": F.lag("snapshot_ts").over(order)}))
    changed = sets.where(F.col("_prev_epoch").isNotNull() & F.col("assignment_epoch").isNotNull()
                         & (F.col("assignment_epoch") != F.col("_prev_epoch")))
    # The target assignment changes with its epoch: the tasks it moved are those whose
    # active owner in it differs from the previous snapshot's.
    task = ["subtopology_id", "partition"]
    owners = (member_tasks.where((F.col("kind") == "target") & (F.col("role") == "active"))
              .groupBy(*AT_SNAPSHOT, *task).agg(F.min("member_id").alias("_owner")))
    pairs = changed.select(*AT_SNAPSHOT, "_prev_ts")
    now = pairs.join(owners, AT_SNAPSHOT)
    before = pairs.join(owners.withColumnsRenamed({"snapshot_ts": "_prev_ts",
                                                   "_owner": "_prev_owner"}),
                        ["cluster", "group_id", "_prev_ts"])
    moved = (now.join(before, [*AT_SNAPSHOT, "_prev_ts", *task], "full_outer")
             .where(~F.col("_owner").eqNullSafe(F.col("_prev_owner")))
             .groupBy(*AT_SNAPSHOT).agg(F.count("*").cast("int").alias("partitions_moved")))
    return changed.join(moved, AT_SNAPSHOT, "left").select(
        "cluster", F.col("snapshot_ts").alias("event_ts"), "group_id",
        F.col("assignment_epoch").cast("int").alias("generation"),
        F.lit("snapshots").alias("source"),
        (F.col("assignment_epoch") - F.col("_prev_epoch") != 1).alias("estimated"),
        F.lit("streams").alias("protocol"), F.lit("streams").alias("rebalance_type"),
        F.size("_members").cast("int").alias("members"), F.col("joined").cast("int"),
        F.col("left").cast("int"), _cause().alias("cause"),
        F.coalesce(F.col("partitions_moved"), F.lit(0)).alias("partitions_moved"))


def known_groups(spark: SparkSession, exact_groups: Iterable[tuple[str, str]]) -> DataFrame:
    """(cluster, group_id) of the groups with offsets-topic history."""
    return spark.createDataFrame(sorted(set(exact_groups)), "cluster string, group_id string")


def rebalance_events(spark: SparkSession, exact: list[tuple[Any, ...]],
                     estimated: DataFrame, known: DataFrame) -> DataFrame:
    """Exact events, plus the estimated ones of groups with no offsets-topic history."""
    exact_frame = spark.createDataFrame(exact, EVENT_SCHEMA)
    fallback = estimated.join(known, ["cluster", "group_id"], "left_anti")
    return exact_frame.unionByName(fallback)


MAX_STATE_GAP_S = 180.0


def state_durations(groups: DataFrame, max_gap_s: float = MAX_STATE_GAP_S,
                    start: datetime | None = None, end: datetime | None = None) -> DataFrame:
    """Seconds in each state class per group and hour, from consecutive snapshots. Only
    snapshots in [start, end) count; ``groups`` may reach past ``end`` (the next snapshot
    closes the last one's duration)."""
    order = Window.partitionBy("cluster", "group_id").orderBy("snapshot_ts")
    t = F.unix_micros("snapshot_ts") / 1_000_000.0
    # A snapshot's state holds until the next snapshot, at most max_gap_s; with no next
    # snapshot (yet, or within what was read) it holds max_gap_s. So the answer depends only on
    # the snapshots up to max_gap_s later: the job reads that far past its interval, and an
    # interval's rows are the same whichever run computed them.
    held = F.coalesce(F.least(F.lead(t).over(order) - t, F.lit(max_gap_s)), F.lit(max_gap_s))
    frame = groups.withColumn("_held", held)
    if start is not None:
        frame = frame.where(F.col("snapshot_ts") >= F.lit(start))
    if end is not None:
        frame = frame.where(F.col("snapshot_ts") < F.lit(end))
    state = F.col("state")

    def total(condition: Any) -> Any:
        return F.coalesce(F.sum(F.when(condition, F.col("_held"))), F.lit(0.0))

    return frame.groupBy("cluster", "group_id",
                         F.date_trunc("hour", "snapshot_ts").alias("period_start")).agg(
        total(state == "Stable").alias("stable_s"),
        total(state.isin(*REBALANCING_STATES)).alias("rebalancing_s"),
        total(state == "Empty").alias("empty_s"),
        total(~state.isin("Stable", "Empty", *REBALANCING_STATES)).alias("other_s"))


def hourly(events: DataFrame, durations: DataFrame, known: DataFrame) -> DataFrame:
    """mart.rebalance_hourly rows: counts by cause and kind, movement, time in states. A
    group's counts are exact when it has offsets-topic history, else estimated (a zero too)."""
    counts = events.groupBy("cluster", "group_id",
                            F.date_trunc("hour", "event_ts").alias("period_start")).agg(
        F.count("*").cast("int").alias("rebalances"),
        *[F.sum((F.col("cause") == c).cast("int")).cast("int").alias(name)
          for c, name in (("joined", "joined_only"), ("left", "left_only"),
                          ("both", "joined_and_left"), ("none", "no_membership_change"))],
        F.sum("partitions_moved").cast("long").alias("partitions_moved"),
        *[F.sum((F.col("rebalance_type") == k).cast("int")).cast("int").alias(k)
          for k in ("eager", "cooperative")],
        F.sum((F.col("rebalance_type") == "consumer").cast("int")).cast("int")
        .alias("consumer_protocol"),
        F.sum((F.col("rebalance_type") == "streams").cast("int")).cast("int")
        .alias("streams_protocol"))
    joined = counts.join(durations, ["cluster", "group_id", "period_start"], "full_outer")
    counted = ("rebalances", "joined_only", "left_only", "joined_and_left",
               "no_membership_change", "eager", "cooperative", "consumer_protocol",
               "streams_protocol")
    zero: dict[str, bool | float | int | str] = dict.fromkeys(counted, 0)
    flagged = joined.join(known.withColumn("_exact", F.lit(True)), ["cluster", "group_id"],
                          "left")
    exact = F.coalesce(F.col("_exact"), F.lit(False))
    return (flagged.fillna(zero)
            .fillna({"stable_s": 0.0, "rebalancing_s": 0.0, "empty_s": 0.0, "other_s": 0.0})
            .withColumn("source", F.when(exact, "offsets_topic").otherwise("snapshots"))
            .withColumn("estimated", ~exact)
            .drop("_exact"))
