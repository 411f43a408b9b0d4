"""Lag in offsets and in seconds, per partition and snapshot, with rates and roll-ups: pure
DataFrame -> DataFrame functions over the landed snapshot tables.

Definitions (docs/definitions.md explains them for users):

- ``lag = high_watermark - committed_offset``, unclamped (negative: committed beyond the high
  watermark, reported, never hidden). ``lag_beyond_retention``: the committed offset is below
  the log start, so records the group never read are gone.
- Rates over a trailing window (``rate_window_s``): production = delta high watermark / delta
  t, consumption = delta committed / delta t, each from the window's first row where that
  offset is known (a group's first commit after the first snapshot). ``catch_up_s`` = lag /
  (consumption - production) when the group gains on the log, 0 when caught up, null when it
  does not gain.
- History segments: a high watermark that goes down (the topic was deleted and re-created)
  starts a new segment; rates and time lag never reach across one.

Time lag, estimated (``time_lag_estimated_s`` with ``time_lag_kind``): the record at the
committed offset c was appended when the high watermark passed c, i.e. reached v = c + 1. The
partition's (high watermark, time) history in the same segment gives that moment:

- ``interpolated``: between the last point with hw < v and the first with hw >= v, linearly.
- ``extrapolated``: v is below every point in the history window (the record is older than the
  window): back from the window's first point at the window's average production rate up to
  the snapshot. The window is the ``history_s`` seconds up to each snapshot (no later point is
  used), so a snapshot's answer does not depend on the interval a job computed it in.
- ``at_least``: as above but the history is flat (no production in the window), so no rate:
  the time since the window's first point, a lower bound.
- ``caught_up``: lag <= 0, time lag 0. ``unknown``: no lag (no commit or no high watermark).

Restarts of the collector only leave gaps between points; interpolation spans them.
Time lag, exact (``time_lag_exact_s``): snapshot time minus the timestamp of the record at the
committed offset, where the collector sampled it (raw ``record_timestamps``).

Share groups (KIP-932) commit no offsets: their start offset (the earliest offset still in
flight; every record below it is acknowledged) stands in the committed offset's place
(``with_share_positions``), so ``lag = high_watermark - start_offset`` (the records from the
start offset on, some of them maybe acknowledged already) and the time lag is the age of the
record at the start offset, estimated as above from the high-watermark history: it was
appended when the high watermark passed the start offset. ``share_lag`` keeps KIP-1226's lag,
the broker's own count of the records not acknowledged yet (Kafka 4.2+; at most ``lag``).

Loss forecast (``loss_in_s``, ``loss_basis``): the seconds until retention deletes the record
at the committed offset, at the current rates; 0 once it is lost (``lag_beyond_retention``,
basis ``lost``). Null with basis ``none`` when nothing will be lost (nothing unread, a group
that keeps up, a topic that deletes nothing), null with a null basis when it cannot be told
(no rates yet, a gap in the snapshots, settings not read). The earlier of two bounds:

- ``log_start``: the log deletes by size (``retention.bytes``, or settings not read) and its
  start moved in the history window, so its size is steady and its start follows
  production: the committed offset is lost when the lag has grown by the records between
  the log start and it, ``(committed - log start) / lag_growth_rate``, the lag's growth
  since the previous snapshot (production minus consumption as they are now: the rates'
  five minutes would answer a surge late), when over the five minutes the group consumes
  less than ``KEEPS_UP`` (95%) of production. Size retention is forecast only this way, by
  the observed movement of the log start: librdkafka has no DescribeLogDirs, so the log's
  bytes are not known before it deletes.
- ``retention_ms``: the topic deletes by age (``cleanup.policy`` with ``delete``): the
  committed record is lost once it is ``retention.ms`` old, at the earliest (Kafka deletes
  whole segments, once their newest record is that old). Its age is the time lag, growing 1 s
  a second when the group consumes nothing, ``1 - consumption / production`` when slower
  (and, as above, behind over the five minutes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from groupscope.contract.status import TimeLagKind

GROUP_PARTITION = ["cluster", "group_id", "topic", "partition"]
# A group consuming at least this share of production keeps up: no loss is forecast for it.
KEEPS_UP = 0.95
LOG_PARTITION = ["cluster", "topic", "partition"]

def _seconds(column: str) -> Column:
    return F.unix_micros(F.col(column)) / F.lit(1_000_000.0)


def with_share_positions(committed: DataFrame, share_offsets: DataFrame) -> DataFrame:
    """The committed offsets, plus each share group's start offset in their place, with
    ``share_lag``: KIP-1226's lag, the broker's count of the records not acknowledged yet
    (null for other kinds, and before Kafka 4.2). A share group commits no offsets; its start
    offset is where it stands the way a committed offset is (every record below it is
    acknowledged, some above it may be), so lag, rates, time lag, loss forecast and status are
    those of its start offset, computed by the same transforms."""
    keys = ["cluster", "snapshot_ts", "group_id", "topic", "partition"]
    share = share_offsets.select(*keys, F.col("start_offset").alias("committed_offset"),
                                 F.col("lag").alias("share_lag"))
    return (committed.select(*keys, "committed_offset",
                             F.lit(None).cast("long").alias("share_lag"))
            .unionByName(share))


def partition_lag(committed: DataFrame, partition_offsets: DataFrame,
                  assignments: DataFrame) -> DataFrame:
    """One row per snapshot and partition that a group committed or owns, with its member
    (by current assignment), offsets and lag (and ``share_lag`` where ``committed`` has it:
    ``with_share_positions``)."""
    keys = ["cluster", "snapshot_ts", "group_id", "topic", "partition"]
    share_lag = [c for c in ("share_lag",) if c in committed.columns]
    # Everything downstream is keyed by the log partition (and more): partition by it once.
    owned = (assignments.where(F.col("kind") == "current").repartition(*LOG_PARTITION)
             .groupBy(*keys).agg(F.min("member_id").alias("member_id")))
    rows = (committed.select(*keys, "committed_offset", *share_lag)
            .repartition(*LOG_PARTITION)
            .join(owned, keys, "full_outer"))
    logs = partition_offsets.select("cluster", "snapshot_ts", "topic", "partition",
                                    "log_start_offset", "high_watermark", "last_stable_offset")
    rows = rows.join(logs.repartition(*LOG_PARTITION),
                     ["cluster", "snapshot_ts", "topic", "partition"], "left")
    return rows.select(
        *keys, "member_id", "committed_offset", "log_start_offset", "high_watermark",
        "last_stable_offset", *share_lag,
        (F.col("high_watermark") - F.col("committed_offset")).alias("lag"),
        # Unknown (null) when the log start was not read: "not beyond" is a claim. Without a
        # position (no commit) nothing of the group's can be lost: false.
        F.when(F.col("committed_offset").isNull(), F.lit(False))
        .otherwise(F.col("committed_offset") < F.col("log_start_offset"))
        .alias("lag_beyond_retention"),
    )


def with_segments(frame: DataFrame, keys: list[str]) -> DataFrame:
    """Numbers the high-watermark history segments of each partition: +1 whenever the high
    watermark goes down (a re-created topic)."""
    # Ordered by microseconds, as the range windows after it are: one sort serves them all.
    order = Window.partitionBy(*keys).orderBy("_us")
    dropped = (F.col("high_watermark") < F.lag("high_watermark").over(order)).cast("int")
    return (frame.withColumn("_us", F.unix_micros("snapshot_ts"))
            .withColumn("_dropped", F.coalesce(dropped, F.lit(0)))
            .withColumn("segment", F.sum("_dropped").over(
                order.rowsBetween(Window.unboundedPreceding, 0)))
            .drop("_dropped"))


def with_rates(lag: DataFrame, rate_window_s: int = 300) -> DataFrame:
    """Adds production_rate, consumption_rate (per second) and catch_up_s."""
    frame = with_segments(lag, GROUP_PARTITION).withColumn("_t", _seconds("snapshot_ts"))
    trailing = (Window.partitionBy(*GROUP_PARTITION, "segment").orderBy("_us")
                .rangeBetween(-rate_window_s * 1_000_000, 0))

    def since_first_known(column: str) -> tuple[Column, Column]:
        """The change of ``column`` since the window's first row where it is known, and the
        seconds since that row. Not since the window's first row: a group that had not
        committed yet at the first snapshot (its committed offset null there) would have no
        consumption rate for a whole window, and every rule that reads it none either."""
        known = F.col(column).isNotNull()
        first_value = F.first(column, ignorenulls=True).over(trailing)
        first_t = F.first(F.when(known, F.col("_t")), ignorenulls=True).over(trailing)
        return F.col(column) - first_value, F.col("_t") - first_t

    produced, produced_dt = since_first_known("high_watermark")
    production = F.when(produced_dt > 0, produced / produced_dt)
    consumed, consumed_dt = since_first_known("committed_offset")
    consumption = F.when((consumed_dt > 0) & (consumed >= 0), consumed / consumed_dt)
    frame = frame.withColumns({"production_rate": production, "consumption_rate": consumption})
    gain = F.col("consumption_rate") - F.col("production_rate")
    catch_up = (F.when(F.col("lag") <= 0, F.lit(0.0))
                .when(gain > 0, F.col("lag") / gain))
    # The segment stays for the loss forecast's windows (with_loss_forecast drops it).
    return frame.withColumn("catch_up_s", catch_up).drop("_t", "_us")


def _appended_at(point_us: np.ndarray, point_hw: np.ndarray, query_us: np.ndarray,
                 query_value: np.ndarray, query_hw: np.ndarray, history_s: float,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The estimated time lag's search for one log partition (see the module doc): when its
    high watermark reached each query's value (v = committed offset + 1), from its (time in
    microseconds, high watermark) points. Returns the time in seconds (NaN: none) and the
    ``time_lag_kind`` (None: none) per query; a query's snapshot must be one of the points
    (else: none), and its high watermark is ``query_hw``.

    One sort and binary searches instead of window passes: within a segment the high
    watermark never goes down, so the last point below v and the first at or above it are the
    two sides of v's insertion point, and the history window's first point is the insertion
    point of the window's start in time. The arithmetic is the window version's, in its order
    (a long difference times a double, the division last): the answers are equal to the bit."""
    order = np.argsort(point_us, kind="stable")
    point_us, point_hw = point_us[order], point_hw[order]
    point_t = point_us / 1_000_000.0
    segment = np.concatenate(([0], np.cumsum(point_hw[1:] < point_hw[:-1])))
    appended = np.full(len(query_us), np.nan)
    kinds = np.full(len(query_us), None, dtype=object)
    # The query's own snapshot is a point: its segment is the query's.
    own = np.minimum(np.searchsorted(point_us, query_us), max(len(point_us) - 1, 0))
    found = np.flatnonzero(point_us[own] == query_us) if len(point_us) else own[:0]
    for seg in np.unique(segment[own[found]]):
        lo, hi = np.searchsorted(segment, [seg, seg + 1])
        queries = found[segment[own[found]] == seg]
        value, hw_now = query_value[queries], query_hw[queries]
        t = query_us[queries] / 1_000_000.0
        after = lo + np.searchsorted(point_hw[lo:hi], value, side="left")
        before = after - 1
        has_after, has_before = after < hi, before >= lo
        first = np.maximum(np.searchsorted(point_t, t - history_s, side="left"), lo)
        b_t, b_hw = point_t[np.maximum(before, lo)], point_hw[np.maximum(before, lo)]
        a_t, a_hw = point_t[np.minimum(after, hi - 1)], point_hw[np.minimum(after, hi - 1)]
        f_t, f_hw = point_t[first], point_hw[first]
        inside = has_before & (b_t >= t - history_s)
        with np.errstate(divide="ignore", invalid="ignore"):
            interpolated = b_t + (value - b_hw) * (a_t - b_t) / (a_hw - b_hw)
            rate = np.where(t > f_t, (hw_now - f_hw) / (t - f_t), np.nan)
            extrapolated = f_t - (f_hw - value) / rate
        is_interpolated = inside & has_after
        is_extrapolated = ~inside & (rate > 0)
        is_at_least = ~inside & ~is_extrapolated
        for chosen, at, kind in ((is_interpolated, interpolated, TimeLagKind.INTERPOLATED),
                                 (is_extrapolated, extrapolated, TimeLagKind.EXTRAPOLATED),
                                 (is_at_least, f_t, TimeLagKind.AT_LEAST)):
            appended[queries[chosen]] = at[chosen]
            kinds[queries[chosen]] = kind.value
    return appended, kinds


_APPENDED = pa.schema([("_appended_t", pa.float64()), ("_appended_kind", pa.string())])


def _appended_per_partition(history_s: float) -> Any:
    """The Arrow function of ``estimated_time_lag``'s cogroup: one log partition's points and
    lag rows in, the lag rows out with ``_appended_t`` and ``_appended_kind`` (null where the
    row does not lag)."""

    def appended_at(points: pa.Table, rows: pa.Table) -> pa.Table:
        def column(table: pa.Table, name: str) -> np.ndarray:
            return np.asarray(pc.fill_null(table.column(name), 0).to_numpy())

        lag = rows.column("lag")
        lagging = np.asarray(pc.fill_null(pc.greater(lag, 0), False).to_numpy(
            zero_copy_only=False), dtype=bool)
        t = np.full(rows.num_rows, np.nan)
        kind = np.full(rows.num_rows, None, dtype=object)
        queries = np.flatnonzero(lagging)
        t[queries], kind[queries] = _appended_at(
            column(points, "_us"), column(points, "_hw"), column(rows, "_us")[queries],
            column(rows, "committed_offset")[queries] + 1,
            column(rows, "high_watermark")[queries], history_s)
        return (rows.append_column(_APPENDED.field("_appended_t"), pa.array(t, mask=np.isnan(t)))
                .append_column(_APPENDED.field("_appended_kind"), pa.array(kind, pa.string())))

    return appended_at


def estimated_time_lag(lag: DataFrame, partition_offsets: DataFrame,
                       history_s: float = 3600.0) -> DataFrame:
    """Adds time_lag_estimated_s and time_lag_kind (see the module doc). Each snapshot uses
    the partition's high-watermark history of the ``history_s`` seconds up to it, no more and
    nothing later: the answer for a snapshot does not depend on which interval computed it.
    ``partition_offsets`` must reach ``history_s`` back before the first snapshot of interest.

    One Arrow-vectorized pass per log partition (``_appended_at``: a sort and binary searches
    in numpy) instead of three window passes over points and queries: on a day of 7.2M rows
    those took most of the lag mart's time (docs/benchmarks.md). The lag rows go through the
    pass whole, each lagging one with its answer: no join back, nor a cache of the rows for
    it (half the pass's time, issue 30)."""
    us = F.unix_micros("snapshot_ts").alias("_us")
    points = (partition_offsets.where(F.col("high_watermark").isNotNull())
              .select(*LOG_PARTITION, us, F.col("high_watermark").alias("_hw"))
              .repartition(*LOG_PARTITION))
    rows = lag.withColumn("_us", F.unix_micros("snapshot_ts"))
    found = (points.groupBy(*LOG_PARTITION).cogroup(rows.groupBy(*LOG_PARTITION))
             .applyInArrow(_appended_per_partition(history_s),
                           StructType(rows.schema.fields
                                      + from_arrow_schema(_APPENDED).fields)))
    appended = F.col("_appended_t")
    now = _seconds("snapshot_ts")
    time_lag = (F.when(F.col("lag").isNull(), F.lit(None))
                .when(F.col("lag") <= 0, F.lit(0.0))
                .when(appended.isNotNull(), F.greatest(now - appended, F.lit(0.0))))
    kind = (F.when(F.col("lag").isNull(), F.lit(TimeLagKind.UNKNOWN.value))
            .when(F.col("lag") <= 0, F.lit(TimeLagKind.CAUGHT_UP.value))
            .otherwise(F.coalesce(F.col("_appended_kind"), F.lit(TimeLagKind.UNKNOWN.value))))
    columns = [*LOG_PARTITION, *[c for c in lag.columns if c not in LOG_PARTITION]]
    return found.select(*columns, time_lag.alias("time_lag_estimated_s"),
                        kind.alias("time_lag_kind"))


LOSS_SETTINGS = ["retention_ms", "retention_bytes", "cleanup_policy"]
# The lag's growth is read since the previous snapshot, if it is at most this far back.
GROWTH_WINDOW_S = 300.0


def with_loss_windows(lag: DataFrame, topics: DataFrame | None, history_s: float = 3600.0,
                      growth_window_s: float = GROWTH_WINDOW_S) -> DataFrame:
    """The loss forecast's windows over the group-partition's history (lag_growth_rate, and
    whether the log start moved) and the topic's retention settings: what
    ``with_loss_forecast`` reads besides the time lag. ``topics``: the landed topics table
    (retention settings per snapshot); None or a null setting drops the time bound only.
    Apart from the forecast, so that ``lag_mart`` runs them before the time lag's Arrow pass,
    whose output Spark cannot know to be partitioned for them."""
    # Within a history segment (with_rates'), where it has one: across a re-created topic the
    # lag's growth and the log start's movement compare two different logs.
    segment = [c for c in ("segment",) if c in lag.columns]
    in_order = Window.partitionBy(*GROUP_PARTITION, *segment).orderBy("_us")
    order = in_order.rangeBetween(-int(history_s * 1_000_000), 0)
    frame = lag.withColumn("_us", F.unix_micros("snapshot_ts"))
    # The lag's growth since the previous snapshot, not over the rates' 5 minutes, nor a
    # minute: a surge or a slowdown moves the forecast at the first snapshot after it (over a
    # minute, one 7 s after a surge read the growth at an eighth and forecast the loss 100 s
    # late). Not across a gap in the snapshots longer than ``growth_window_s``.
    elapsed = (F.col("_us") - F.lag("_us").over(in_order)) / F.lit(1_000_000.0)
    # The log deletes: its start moved in the history window. Its size is then steady, so its
    # start follows the high watermark and the committed offset is lost once the lag has
    # grown by the records between the two.
    # Computed before the join, in the same window operator as the growth (one sort).
    frame = frame.withColumns({
        "lag_growth_rate": F.when((elapsed > 0) & (elapsed <= growth_window_s),
                                  (F.col("lag") - F.lag("lag").over(in_order)) / elapsed),
        "_deleting": F.col("log_start_offset")
        > F.first("log_start_offset", ignorenulls=True).over(order)})
    if topics is None:
        frame = frame.select("*", *[F.lit(None).cast("long" if c != "cleanup_policy"
                                                     else "string").alias(c)
                                    for c in LOSS_SETTINGS])
    else:
        # Small (a row per topic and snapshot): broadcast, so the frame keeps its partitioning
        # by log partition for the windows.
        frame = frame.join(F.broadcast(topics.select("cluster", "snapshot_ts", "topic",
                                                     *LOSS_SETTINGS)),
                           ["cluster", "snapshot_ts", "topic"], "left")
    return frame


def with_loss_forecast(frame: DataFrame) -> DataFrame:
    """Adds loss_in_s and loss_basis: when retention will delete the record at the committed
    offset, at the current rates (see the module doc), from ``with_loss_windows``' columns
    and the time lag (``estimated_time_lag``, ``exact_time_lag``)."""
    deleting = F.col("_deleting")
    production, consumption = F.col("production_rate"), F.col("consumption_rate")
    headroom = F.col("committed_offset") - F.col("log_start_offset")
    growth = F.col("lag_growth_rate")
    policy_deletes = F.col("cleanup_policy").contains("delete")
    # Falling behind over the rates' five minutes too: the lag of a group that keeps up
    # swings by a commit interval's records, and on a log of minutes that swing alone would
    # read as a loss within the hour.
    behind = (consumption == 0) | (consumption < F.lit(KEEPS_UP) * production)
    # A log start that moves by size retention (or settings not read). Not on a topic that
    # deletes only by age, nor where something else moves it (DeleteRecords, as Kafka Streams
    # does on its repartition topics, up to the very offset its group committed): that would
    # page "loss in 0 s" for a group that loses nothing.
    by_size = (F.coalesce(policy_deletes, F.lit(True))
               & F.coalesce(F.col("retention_bytes") > 0, F.lit(True)))
    by_log_start = F.when(deleting & by_size & behind & (growth > 0) & (headroom >= 0),
                          headroom / growth)
    # retention.ms: the committed record is deleted once it is that old (at the earliest: its
    # whole segment must be). Its age grows 1 s a second when the group consumes nothing, and
    # by 1 - consumption/production when it consumes slower than production.
    ageing = (F.when(consumption == 0, F.lit(1.0))
              .when(production > 0, F.lit(1.0) - consumption / production))
    age = F.coalesce(F.col("time_lag_exact_s"), F.col("time_lag_estimated_s"))
    deletes_by_time = (F.col("retention_ms") > 0) & F.coalesce(policy_deletes, F.lit(False))
    by_time = F.when(deletes_by_time & behind & (F.col("lag") > 0) & age.isNotNull()
                     & (ageing > 0),
                     F.greatest((F.col("retention_ms") / 1000.0 - age) / ageing, F.lit(0.0)))
    frame = frame.withColumns({"_by_log_start": by_log_start, "_by_time": by_time})
    lost = F.col("lag_beyond_retention")
    first, second = F.col("_by_log_start"), F.col("_by_time")
    loss = F.when(lost, F.lit(0.0)).otherwise(F.least(first, second))
    # Known to lose nothing: nothing unread, a group that keeps up, or a topic whose settings
    # delete nothing. Else, without a forecast, the answer is unknown (no rates yet, a gap in
    # the snapshots, settings not read): the basis stays null.
    never_deletes = ((~policy_deletes)
                     | ((F.col("retention_ms") < 0) & (F.col("retention_bytes") < 0)))
    safe = (F.coalesce(F.col("lag") <= 0, F.lit(True))
            | (production.isNotNull() & consumption.isNotNull() & ~behind)
            | F.coalesce(never_deletes, F.lit(False)))
    basis = (F.when(lost, F.lit("lost"))
             .when(first.isNotNull() & (second.isNull() | (first <= second)), F.lit("log_start"))
             .when(second.isNotNull(), F.lit("retention_ms"))
             .when(safe, F.lit("none")))
    return (frame.withColumns({"loss_in_s": loss, "loss_basis": basis})
            .drop("_us", "_deleting", "_by_log_start", "_by_time", *LOSS_SETTINGS, "segment"))


def exact_time_lag(lag: DataFrame, record_timestamps: DataFrame) -> DataFrame:
    """Adds time_lag_exact_s where the collector sampled the record at the committed offset."""
    samples = record_timestamps.select(
        *LOG_PARTITION, "snapshot_ts", "committed_offset", "record_ts")
    joined = lag.join(samples.repartition(*LOG_PARTITION),
                      [*LOG_PARTITION, "snapshot_ts", "committed_offset"], "left")
    exact = F.when(F.col("lag") <= 0, F.lit(0.0)).otherwise(
        _seconds("snapshot_ts") - _seconds("record_ts"))
    return joined.withColumn("time_lag_exact_s", exact).drop("record_ts")


# The roll-ups' columns after their keys, as the mart tables have them (migrations 0005, 0024).
ROLLUP_COLUMNS = ["partitions", "lag", "max_lag", "negative_lag_partitions",
                  "beyond_retention_partitions", "max_time_lag_estimated_s",
                  "max_time_lag_exact_s", "production_rate", "consumption_rate",
                  "lag_lower_bound", "lag_unknown_partitions"]


def lag_unread() -> Column:
    """Whether a partition row's lag is unknown for want of a read: the group has a position
    there (a committed offset, or a share group's start offset) but the partition's high
    watermark or log start was not read (its leader down, a timeout, no access). A row
    without a position (assigned, never committed) has no lag, known or not: it is not part
    of the group's lag."""
    return (F.col("committed_offset").isNotNull()
            & (F.col("high_watermark").isNull() | F.col("log_start_offset").isNull()))


def rollups(lag: DataFrame) -> dict[str, DataFrame]:
    """Per member (current assignment), topic, group and cluster, per snapshot. Negative lags
    are anomalies counted apart, never netted against other partitions' lag.

    The lag is the sum over the partitions with a position, and it is unknown (null, as are
    ``max_lag``, the time lags and ``beyond_retention_partitions``) when the lag of any of
    them is unknown (``lag_unread``: ``lag_unknown_partitions`` of them), or when none has a
    position: a partial sum is never the lag. ``lag_lower_bound`` is the sum over the
    partitions whose lag is known, what the lag is at least."""

    def agg(keys: list[str]) -> DataFrame:
        positive = F.when(F.col("lag") > 0, F.col("lag"))
        rows = lag.groupBy(*keys).agg(
            F.count("*").cast("int").alias("partitions"),
            F.coalesce(F.sum(positive), F.lit(0)).alias("lag_lower_bound"),
            F.max("lag").alias("max_lag"),
            # 0, not null, when every lag is unknown (a member's first assignment, before
            # any commit): the column is NOT NULL, and one such member failed the whole job.
            F.coalesce(F.sum((F.col("lag") < 0).cast("int")), F.lit(0)).cast("int")
            .alias("negative_lag_partitions"),
            F.coalesce(F.sum(F.col("lag_beyond_retention").cast("int")), F.lit(0)).cast("int")
            .alias("beyond_retention_partitions"),
            F.max("time_lag_estimated_s").alias("max_time_lag_estimated_s"),
            F.max("time_lag_exact_s").alias("max_time_lag_exact_s"),
            # Rounded: a float sum depends on the order Spark adds in, and a rerun or a
            # backfill must give identical rows.
            F.round(F.sum("production_rate"), 6).alias("production_rate"),
            F.round(F.sum("consumption_rate"), 6).alias("consumption_rate"),
            F.sum(lag_unread().cast("int")).cast("int").alias("lag_unknown_partitions"),
            F.count("committed_offset").alias("_positions"),
        )
        known = F.col("lag_unknown_partitions") == 0
        partial = ("max_lag", "beyond_retention_partitions", "max_time_lag_estimated_s",
                   "max_time_lag_exact_s")
        return rows.withColumns({
            "lag": F.when(known & (F.col("_positions") > 0), F.col("lag_lower_bound")),
            **{c: F.when(known, F.col(c)) for c in partial},
        }).select(*keys, *ROLLUP_COLUMNS)

    return {
        "member_lag": agg(["cluster", "snapshot_ts", "group_id", "member_id"])
        .where(F.col("member_id").isNotNull()),
        "topic_lag": agg(["cluster", "snapshot_ts", "group_id", "topic"]),
        "group_lag": agg(["cluster", "snapshot_ts", "group_id"]),
        "cluster_lag": agg(["cluster", "snapshot_ts"]),
    }


def lag_mart(committed: DataFrame, partition_offsets: DataFrame, assignments: DataFrame,
             record_timestamps: DataFrame, rate_window_s: int = 300,
             history_s: float = 3600.0, topics: DataFrame | None = None,
             share_offsets: DataFrame | None = None) -> DataFrame:
    """The partition lag mart: lag, rates, estimated and exact time lag, loss forecast. The
    inputs cover the interval plus a lookback (the rates' window and the time-lag history);
    the caller keeps the interval's rows with ``within``. ``share_offsets``: the landed
    share_partition_offsets, whose groups get the rows of their start offsets
    (``with_share_positions``)."""
    if share_offsets is not None:
        committed = with_share_positions(committed, share_offsets)
    frame = partition_lag(committed, partition_offsets, assignments)
    frame = with_rates(frame, rate_window_s)
    frame = exact_time_lag(frame, record_timestamps)
    # Every window and join before the time lag's Arrow pass: Spark cannot tell that its
    # output is still partitioned by log partition, and would shuffle every row again.
    frame = with_loss_windows(frame, topics, history_s)
    return with_loss_forecast(estimated_time_lag(frame, partition_offsets, history_s))


def within(frame: DataFrame, start: Any, end: Any, column: str = "snapshot_ts") -> DataFrame:
    return frame.where((F.col(column) >= F.lit(start)) & (F.col(column) < F.lit(end)))
