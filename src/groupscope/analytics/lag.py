"""Lag in offsets and in seconds, per partition and snapshot, with rates and roll-ups: pure
DataFrame -> DataFrame functions over the landed snapshot tables.

Definitions (DESIGN.md, "Analytics definitions"):

- ``lag = high_watermark - committed_offset``, unclamped (negative: committed beyond the high
  watermark, reported, never hidden). ``lag_beyond_retention``: the committed offset is below
  the log start, so records the group never read are gone.
- Rates over a trailing window (``rate_window_s``): production = delta high watermark / delta
  t, consumption = delta committed / delta t. ``catch_up_s`` = lag / (consumption -
  production) when the group gains on the log, 0 when caught up, null when it does not gain.
- History segments: a high watermark that goes down (the topic was deleted and re-created)
  starts a new segment; rates and time lag never reach across one.

Time lag, estimated (``time_lag_estimated_s`` with ``time_lag_kind``): the record at the
committed offset c was appended when the high watermark passed c, i.e. reached v = c + 1. The
partition's (high watermark, time) history in the same segment gives that moment:

- ``interpolated``: between the last point with hw < v and the first with hw >= v, linearly.
- ``extrapolated``: v is below every point in the history window (the record is older than the
  window): back from the window's first point at the window's average production rate.
- ``at_least``: as above but the history is flat (no production in the window), so no rate:
  the time since the window's first point, a lower bound.
- ``caught_up``: lag <= 0, time lag 0. ``unknown``: no lag (no commit or no high watermark).

Restarts of the collector only leave gaps between points; interpolation spans them.
Time lag, exact (``time_lag_exact_s``): snapshot time minus the timestamp of the record at the
committed offset, where the collector sampled it (raw ``record_timestamps``).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

GROUP_PARTITION = ["cluster", "group_id", "topic", "partition"]
LOG_PARTITION = ["cluster", "topic", "partition"]
TIME_LAG_KINDS = ("interpolated", "extrapolated", "at_least", "caught_up", "unknown")


def _seconds(column: str) -> Column:
    return F.unix_micros(F.col(column)) / F.lit(1_000_000.0)


def partition_lag(committed: DataFrame, partition_offsets: DataFrame,
                  assignments: DataFrame) -> DataFrame:
    """One row per snapshot and partition that a group committed or owns, with its member
    (by current assignment), offsets and lag."""
    keys = ["cluster", "snapshot_ts", "group_id", "topic", "partition"]
    owned = (assignments.where(F.col("kind") == "current")
             .groupBy(*keys).agg(F.min("member_id").alias("member_id")))
    rows = committed.select(*keys, "committed_offset").join(owned, keys, "full_outer")
    logs = partition_offsets.select("cluster", "snapshot_ts", "topic", "partition",
                                    "log_start_offset", "high_watermark", "last_stable_offset")
    rows = rows.join(logs, ["cluster", "snapshot_ts", "topic", "partition"], "left")
    return rows.select(
        *keys, "member_id", "committed_offset", "log_start_offset", "high_watermark",
        "last_stable_offset",
        (F.col("high_watermark") - F.col("committed_offset")).alias("lag"),
        F.coalesce(F.col("committed_offset") < F.col("log_start_offset"), F.lit(False))
        .alias("lag_beyond_retention"),
    )


def with_segments(frame: DataFrame, keys: list[str]) -> DataFrame:
    """Numbers the high-watermark history segments of each partition: +1 whenever the high
    watermark goes down (a re-created topic)."""
    order = Window.partitionBy(*keys).orderBy("snapshot_ts")
    dropped = (F.col("high_watermark") < F.lag("high_watermark").over(order)).cast("int")
    return (frame.withColumn("_dropped", F.coalesce(dropped, F.lit(0)))
            .withColumn("segment", F.sum("_dropped").over(
                order.rowsBetween(Window.unboundedPreceding, 0)))
            .drop("_dropped"))


def with_rates(lag: DataFrame, rate_window_s: int = 300) -> DataFrame:
    """Adds production_rate, consumption_rate (per second) and catch_up_s."""
    frame = with_segments(lag, GROUP_PARTITION).withColumn("_t", _seconds("snapshot_ts"))
    trailing = (Window.partitionBy(*GROUP_PARTITION, "segment").orderBy("_t")
                .rangeBetween(-rate_window_s, 0))
    first = {c: F.first(c).over(trailing) for c in ("_t", "high_watermark", "committed_offset")}
    dt = F.col("_t") - first["_t"]
    production = F.when(dt > 0, (F.col("high_watermark") - first["high_watermark"]) / dt)
    delta_committed = F.col("committed_offset") - first["committed_offset"]
    consumption = F.when((dt > 0) & (delta_committed >= 0), delta_committed / dt)
    frame = frame.withColumn("production_rate", production) \
        .withColumn("consumption_rate", consumption)
    gain = F.col("consumption_rate") - F.col("production_rate")
    catch_up = (F.when(F.col("lag") <= 0, F.lit(0.0))
                .when(gain > 0, F.col("lag") / gain))
    return frame.withColumn("catch_up_s", catch_up).drop("_t", "segment")


def estimated_time_lag(lag: DataFrame, partition_offsets: DataFrame) -> DataFrame:
    """Adds time_lag_estimated_s and time_lag_kind (see the module doc).
    ``partition_offsets`` is the high-watermark history: it should reach back further than the
    interval (the job's lookback), or old records come out ``extrapolated``."""
    history = with_segments(
        partition_offsets.select(*LOG_PARTITION, "snapshot_ts", "high_watermark")
        .where(F.col("high_watermark").isNotNull()), LOG_PARTITION)
    history = history.withColumn("_t", _seconds("snapshot_ts"))
    segment_keys = [*LOG_PARTITION, "segment"]
    span = history.groupBy(*segment_keys).agg(
        F.min_by("high_watermark", "_t").alias("_first_hw"), F.min("_t").alias("_first_t"),
        F.max_by("high_watermark", "_t").alias("_last_hw"), F.max("_t").alias("_last_t"))

    queries = (lag.withColumn("_qid", F.monotonically_increasing_id())
               .join(history.select(*LOG_PARTITION, "snapshot_ts", "segment"),
                     [*LOG_PARTITION, "snapshot_ts"], "left"))
    needs = queries.where((F.col("lag") > 0) & F.col("segment").isNotNull())
    points = history.select(*segment_keys, F.col("high_watermark").alias("_value"),
                            F.col("_t"), F.lit(1).alias("_kind"),
                            F.lit(None).cast("long").alias("_qid"))
    asks = needs.select(*segment_keys, (F.col("committed_offset") + 1).alias("_value"),
                        _seconds("snapshot_ts").alias("_t"), F.lit(0).alias("_kind"),
                        F.col("_qid"))
    # In value order, at equal values asks before points: the points before an ask are those
    # with hw < v, the ones after it those with hw >= v (the first of which is the earliest).
    order = Window.partitionBy(*segment_keys).orderBy("_value", "_kind", "_t")
    point = F.when(F.col("_kind") == 1, F.struct(F.col("_value").alias("hw"),
                                                   F.col("_t").alias("t")))
    found = (points.unionByName(asks)
             .withColumn("_before", F.last(point, ignorenulls=True).over(
                 order.rowsBetween(Window.unboundedPreceding, -1)))
             .withColumn("_after", F.first(point, ignorenulls=True).over(
                 order.rowsBetween(1, Window.unboundedFollowing)))
             .where(F.col("_kind") == 0)
             .select("_qid", "_value", "_before", "_after"))
    found = found.join(needs.select("_qid", *segment_keys), "_qid").join(span, segment_keys)

    b, a = F.col("_before"), F.col("_after")
    interpolated = b["t"] + (F.col("_value") - b["hw"]) * (a["t"] - b["t"]) / (a["hw"] - b["hw"])
    rate = F.when(F.col("_last_t") > F.col("_first_t"),
                  (F.col("_last_hw") - F.col("_first_hw"))
                  / (F.col("_last_t") - F.col("_first_t")))
    extrapolated = F.col("_first_t") - (F.col("_first_hw") - F.col("_value")) / rate
    appended_at = (F.when(b.isNotNull() & a.isNotNull(), F.struct(interpolated.alias("t"),
                                                                   F.lit("interpolated").alias("k")))
                   .when(b.isNull() & (rate > 0), F.struct(extrapolated.alias("t"),
                                                           F.lit("extrapolated").alias("k")))
                   .when(b.isNull(), F.struct(F.col("_first_t").alias("t"),
                                              F.lit("at_least").alias("k"))))
    found = found.select("_qid", appended_at.alias("_appended"))

    result = queries.join(found, "_qid", "left")
    now = _seconds("snapshot_ts")
    time_lag = (F.when(F.col("lag").isNull(), F.lit(None))
                .when(F.col("lag") <= 0, F.lit(0.0))
                .otherwise(F.greatest(now - F.col("_appended")["t"], F.lit(0.0))))
    kind = (F.when(F.col("lag").isNull(), F.lit("unknown"))
            .when(F.col("lag") <= 0, F.lit("caught_up"))
            .otherwise(F.coalesce(F.col("_appended")["k"], F.lit("unknown"))))
    return (result.withColumn("time_lag_estimated_s", time_lag)
            .withColumn("time_lag_kind", kind)
            .drop("_qid", "_appended", "segment"))


def exact_time_lag(lag: DataFrame, record_timestamps: DataFrame) -> DataFrame:
    """Adds time_lag_exact_s where the collector sampled the record at the committed offset."""
    samples = record_timestamps.select(
        *LOG_PARTITION, "snapshot_ts", F.col("offset").alias("committed_offset"), "record_ts")
    joined = lag.join(samples, [*LOG_PARTITION, "snapshot_ts", "committed_offset"], "left")
    exact = F.when(F.col("lag") <= 0, F.lit(0.0)).otherwise(
        _seconds("snapshot_ts") - _seconds("record_ts"))
    return joined.withColumn("time_lag_exact_s", exact).drop("record_ts")


def rollups(lag: DataFrame) -> dict[str, DataFrame]:
    """Per member (current assignment), topic, group and cluster, per snapshot. Negative lags
    are anomalies counted apart, never netted against other partitions' lag."""

    def agg(keys: list[str]) -> DataFrame:
        positive = F.when(F.col("lag") > 0, F.col("lag"))
        return lag.groupBy(*keys).agg(
            F.count("*").cast("int").alias("partitions"),
            F.coalesce(F.sum(positive), F.lit(0)).alias("lag"),
            F.max("lag").alias("max_lag"),
            F.sum((F.col("lag") < 0).cast("int")).cast("int").alias("negative_lag_partitions"),
            F.sum(F.col("lag_beyond_retention").cast("int")).cast("int")
            .alias("beyond_retention_partitions"),
            F.max("time_lag_estimated_s").alias("max_time_lag_estimated_s"),
            F.max("time_lag_exact_s").alias("max_time_lag_exact_s"),
            F.sum("production_rate").alias("production_rate"),
            F.sum("consumption_rate").alias("consumption_rate"),
        )

    return {
        "member_lag": agg(["cluster", "snapshot_ts", "group_id", "member_id"])
        .where(F.col("member_id").isNotNull()),
        "topic_lag": agg(["cluster", "snapshot_ts", "group_id", "topic"]),
        "group_lag": agg(["cluster", "snapshot_ts", "group_id"]),
        "cluster_lag": agg(["cluster", "snapshot_ts"]),
    }


def lag_mart(committed: DataFrame, partition_offsets: DataFrame, assignments: DataFrame,
             record_timestamps: DataFrame, rate_window_s: int = 300) -> DataFrame:
    """The partition lag mart: lag, rates, estimated and exact time lag. The inputs cover the
    interval plus a lookback (the rates' window and the time-lag history); the caller keeps
    the interval's rows with ``within``."""
    frame = partition_lag(committed, partition_offsets, assignments)
    frame = with_rates(frame, rate_window_s)
    frame = estimated_time_lag(frame, partition_offsets)
    return exact_time_lag(frame, record_timestamps)


def within(frame: DataFrame, start: Any, end: Any, column: str = "snapshot_ts") -> DataFrame:
    return frame.where((F.col(column) >= F.lit(start)) & (F.col(column) < F.lit(end)))
