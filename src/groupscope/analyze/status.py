"""Consumer status per partition and per group: OK / WARN / STALL / STOP / REWIND (partition)
and OK / WARN / ERR (group), from Burrow's rules plus what only a coordinator-API monitor sees
(the group's state and members), evaluated at every snapshot (pure DataFrame functions).

The rules, first match wins (their names, order and statuses: ``groupscope.contract.status``;
tests/unit/test_analytics_status.py has a numbered table of cases, each with its reason):

1. ``rewind``   REWIND  the committed offset moved back within the last ``window_s``.
2. ``no_lag``   OK      lag <= ``lag_tolerance`` (1): a consumer at the end of its log is fine,
                        however long ago it committed. Fixes Burrow's false alarms on idle
                        topics and on the permanent lag of 1 a transaction marker leaves.
3. ``too_little_history`` OK  fewer than 2 observations within ``window_s``: no trend can be
                        judged yet (Burrow alarms on a single commit).
4. ``group_empty`` STOP the group lost all its members (state Empty, or a described group with
                        0 members, after members were seen within ``history_s``) and the lag
                        grew since the last snapshot with members (or since the last advance of
                        the committed offset, if later): STOP at the first snapshot that shows
                        it, without waiting for a threshold. A group that never had members
                        within ``history_s`` (a commit-only group: Flink, Spark, tools using
                        assign()) is left to ``stopped``; a group whose describe failed (its
                        member count unknown) is not Empty.
5. ``progress_stopped`` STOP  the whole group's progress stopped at once, before any
                        session timeout empties it: this partition committed at every
                        snapshot of the ``window_s`` before its last commit (a steady rhythm,
                        at least ``steady_points`` snapshots), has not committed for
                        ``halt_after_s`` since, its lag grew since, and **no partition of the
                        group** committed within ``halt_after_s``. A member killed in a group
                        of several stops only its own partitions: the others go on committing,
                        so this rule stays silent and the group rebalances by itself. A pause
                        shorter than ``halt_after_s`` (a rebalance, a GC pause) is no stop; a
                        committer slower than the snapshots (bursts, a timer) is not steady,
                        and waits for the thresholds below.
6. ``stopped``  STOP    behind, the committed offset unchanged for the stop threshold, and the
                        group has no members: nobody is consuming.
7. ``stalled``  STALL   the same, with members present: they are there but not progressing.
8. ``falling_behind`` WARN  committing, but the lag grew at every observation of ``window_s``
                        (at least ``min_trend_points`` observations), and it is more than
                        ``in_flight_intervals`` snapshot intervals' worth of production (the
                        records produced over the window, per interval): a consumer keeping
                        up has at most what was produced since its last commit in flight, so
                        the noise of that small lag is no trend (a healthy group's lag going
                        1, 2, 3 over three snapshots is not falling behind). The guard is on
                        the lag's level, not its growth over the window, so a consumer only a
                        little slower than production is WARN too once its lag passes it.
9. ``consuming`` OK     otherwise.

The stop threshold follows the partition's own commit rhythm (Burrow's window of commits):

- once the rhythm is known (at least 2 advances of the committed offset within ``history_s``
  before this snapshot): ``max(min_stop_s, burst_factor x the longest pause between two of
  those advances)``;
- before that (never advanced, or advanced once): ``stop_after_s`` (300 s), so the first pause
  of a consumer that commits in bursts, on a timer, or once is no alarm.

A pause is measured as long as it can have been: from the snapshot before the one that saw
the first advance to the snapshot that saw the second (snapshots only see commits to the
nearest snapshot interval), while the time since the last advance is measured from the snapshot
that saw it (as short as it can be). So a consumer committing on a timer never waits longer
than one measured pause, whatever the phase of its timer against the snapshots (with the
pauses as seen, a 60 s timer sampled every 30 s can be measured as 30 s once, then 90 s).
With 30 s snapshots a consumer committing more often than that has a pause of 60 s and a
threshold of 120 s; with snapshots every 15 s or less, ``min_stop_s`` (60 s) keeps the
threshold longer than a session timeout (45 s) and the rebalance that follows, so a member
killed in a group of several is not flagged while the group recovers by itself. A group that
lost its last member is ``group_empty`` at once, and one whose every partition stopped at
once is ``progress_stopped`` before its members' sessions expire.

A partition whose high watermark was not read at a snapshot (its leader down: ListOffsets
failed, the snapshot is partial) keeps the last one read within ``history_s``, its lag at least
0: an unknown lag would be no lag, and a consumer stuck behind an offline partition would read
as consuming. Its reason says so ("high watermark not read at this snapshot").

Every window is bounded in time (``window_s``, ``history_s``), never "all rows read": the
status of a snapshot does not depend on the interval a job computed it in (the job reads
``history_s`` more, and a margin that gives the oldest of those rows its predecessor).

Group status (``groupscope.contract.status.group_status``): ERR if any partition is STOP or
STALL, WARN if any is WARN or REWIND, else OK.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window, WindowSpec
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
EMPTY_STATE = "Empty"  # the coordinator's state of a group without members (classic and consumer)


@dataclass(frozen=True)
class StatusSettings:
    window_s: float = 600.0  # the observations a trend is judged on (Burrow: 10 commits)
    history_s: float = 3600.0  # how far back pauses, the last advance and members are looked for
    lag_tolerance: int = 1
    stop_after_s: float = 300.0  # the stop threshold while the commit rhythm is not known
    # The least stop threshold once the rhythm is known: longer than the clients' default
    # session timeout (45 s) and the rebalance after it, so the partitions of one dead member
    # of several are not STALL while the group hands them over, however often the snapshots.
    min_stop_s: float = 60.0
    burst_factor: float = 2.0
    min_trend_points: int = 3
    in_flight_intervals: float = 2.0  # a lag below this many intervals' production: in flight
    # progress_stopped: a steady committer's group silent this long is stopped. A 10 s GC
    # pause with a 5 s commit interval (the clients' default) is a silence of at most 15 s,
    # and the time since the last advance is counted from the snapshot that saw it, after the
    # commit: always less than the silence, so such a pause never reaches it.
    halt_after_s: float = 15.0
    steady_points: int = 3  # the least snapshots of a steady rhythm (all of them advancing)


def _t(column: str) -> Column:
    return F.unix_micros(F.col(column)) / F.lit(1_000_000.0)


def _with_longest_pause(frame: DataFrame, advanced: Column, history: WindowSpec,
                        history_us: int) -> DataFrame:
    """Adds ``_longest_pause``: the longest pause between two advances of the committed
    offset that both lie in the ``history_us`` before this snapshot (a pause ending in that
    window but starting before it may not have been read, so it never counts), null with
    fewer than two. A pause runs from the snapshot before the one that saw an advance
    (``_prev_t``) to the one that saw the next.

    The pauses in the window are those ending at its advances, less the one ending at its
    first advance. A sliding max cannot leave out one element, and a list of the window's
    advances per row (what this was) copies the whole window per row: most of the job's
    time at scale. So the window is split (van Herk / Gil-Werman) along blocks of time as
    long as it: [t - h, t) meets exactly two, B and B + 1 (t is in B + 1). Each advance
    carries the running max of its block so far (with and without the block's first
    advance) and the max of its block after it; the answer is the part of block B after
    the window's first advance plus the part of block B + 1 before t. The frames are running
    ones, or sliding ones over plain numbers: a frame of h never holds more than two
    blocks, so the parity of a block tells them apart without comparing structs (slow in a
    sliding frame, which Spark re-aggregates at every row)."""
    before = history.rowsBetween(Window.unboundedPreceding, -1)
    upto = history.rowsBetween(Window.unboundedPreceding, 0)
    block = F.expr(f"_us div {history_us}")
    previous = F.last(F.when(advanced, F.struct(F.col("_prev_t").alias("from_t"),
                                                block.alias("block"))),
                      ignorenulls=True).over(before)
    frame = (frame.withColumns({"_block": block, "_previous_advance": previous})
             .withColumns({
                 "_even": F.col("_block") % 2 == 0,
                 "_pause": F.when(advanced, F.col("_t") - F.col("_previous_advance")["from_t"]),
                 "_first_of_block": F.coalesce(
                     F.col("_previous_advance")["block"] != F.col("_block"), F.lit(True))})
             .drop("_previous_advance"))  # each window below copies whole rows: keep them narrow
    first_of_block = F.col("_first_of_block")
    # Structs ordered by block first: a running max is the max of the current block only.
    so_far = F.max(F.when(advanced, F.struct("_block", "_pause"))).over(upto)
    so_far_but_first = F.max(F.when(advanced, F.struct(
        "_block", F.when(~first_of_block, F.col("_pause")).alias("_pause")))).over(upto)

    def by_parity(name: str, value: Column) -> DataFrame:
        return frame.withColumns({f"{name}_even": F.when(advanced & F.col("_even"), value),
                                  f"{name}_odd": F.when(advanced & ~F.col("_even"), value)})

    def of_parity(name: str, even: Column) -> Column:
        return F.when(even, F.col(f"{name}_even")).otherwise(F.col(f"{name}_odd"))

    frame = by_parity("_pause", F.col("_pause"))
    after = history.rangeBetween(1, history_us)  # this block's later advances, and the next's
    frame = (frame
             .withColumns({
                 "_later_even": F.max("_pause_even").over(after),
                 "_later_odd": F.max("_pause_odd").over(after),
                 "_block_max": F.when(advanced, F.struct(
                     "_block", so_far["_pause"].alias("all"),
                     so_far_but_first["_pause"].alias("but_first")))})
             .drop("_pause_even", "_pause_odd", "_first_of_block"))
    # -1 (no pause is negative) keeps an advance with no later one in its block from being
    # skipped as a null by "the first advance in the window".
    frame = by_parity("_later", F.coalesce(of_parity("_later", F.col("_even")), F.lit(-1.0)))
    window = history.rangeBetween(-history_us, -1)
    frame = frame.withColumns({
        "_first_even": F.first("_later_even", ignorenulls=True).over(window),
        "_first_odd": F.first("_later_odd", ignorenulls=True).over(window),
        "_last_before": F.last("_block_max", ignorenulls=True).over(before)})
    first_in_block_b = of_parity("_first", ~F.col("_even"))  # block B = this block - 1
    last = F.col("_last_before")
    in_this_block = last["_block"] == F.col("_block")
    longest = (F.when(first_in_block_b.isNotNull(), F.greatest(
                   F.when(first_in_block_b >= 0, first_in_block_b),
                   F.when(in_this_block, last["all"])))
               .otherwise(F.when(in_this_block, last["but_first"])))
    return (frame.withColumn("_longest_pause", longest)
            .drop("_block", "_even", "_pause", "_block_max", "_later_even", "_later_odd",
                  "_first_even", "_first_odd", "_last_before"))


def partition_status(lag: DataFrame, groups: DataFrame,
                     settings: StatusSettings = StatusSettings()) -> DataFrame:
    """``lag``: partition lag rows (cluster, snapshot_ts, group_id, topic, partition,
    committed_offset, high_watermark, lag); ``groups``: consumer_groups rows (state,
    member_count, and ``described`` where present). One status per partition row with a
    committed offset."""
    micros = 1_000_000
    history = Window.partitionBy(*KEYS).orderBy("_us")
    window = history.rangeBetween(-int(settings.window_s * micros), 0)
    in_history = history.rangeBetween(-int(settings.history_s * micros), 0)
    upto = history.rowsBetween(Window.unboundedPreceding, 0)
    before = history.rowsBetween(Window.unboundedPreceding, -1)

    group_columns = ["state", "member_count"]
    if "described" in groups.columns:
        group_columns.append("described")
    # Only what the rules read: every window below buffers and copies whole rows.
    frame = (lag.select(*KEYS, "snapshot_ts", "committed_offset", "high_watermark", "lag")
             .where(F.col("committed_offset").isNotNull())
             # Small (one row per group and snapshot): broadcast, keeping the rows where they are.
             .join(F.broadcast(groups.select("cluster", "snapshot_ts", "group_id",
                                             *group_columns)),
                   ["cluster", "snapshot_ts", "group_id"], "left")
             .withColumns({"_us": F.unix_micros("snapshot_ts"), "_t": _t("snapshot_ts")}))
    # A partition whose high watermark could not be read (its leader down: the partition is
    # offline, so nothing can be appended to it either) keeps the last one read within the
    # history, as Burrow keeps its last broker offset: an unknown lag would otherwise be no
    # lag, and a consumer stuck behind an offline partition would read as consuming.
    hw_read = F.last(F.when(F.col("high_watermark").isNotNull(), F.struct(
        F.col("_t").alias("t"), F.col("high_watermark").alias("hw"))),
        ignorenulls=True).over(upto)
    # Each withColumns holds only columns that do not read one another: one analysis of the
    # plan per call, not per column (py4j round trips and analysis were most of a live run's
    # time to build the frames).
    frame = (frame
             .withColumns({
                 "_hw_read": F.when(hw_read["t"] >= F.col("_t") - settings.history_s, hw_read),
                 "_prev_t": F.lag("_t").over(history),
                 "_d_committed": F.col("committed_offset")
                 - F.lag("committed_offset").over(history)})
             .withColumns({
                 "_hw_carried": F.col("high_watermark").isNull() & F.col("_hw_read").isNotNull(),
                 # (a consumer that read past it had the records the broker appended since)
                 "lag": F.coalesce(F.col("lag"), F.when(
                     F.col("_hw_read").isNotNull(),
                     F.greatest(F.col("_hw_read")["hw"] - F.col("committed_offset"),
                                F.lit(0))))})
             .withColumn("_d_lag", F.col("lag") - F.lag("lag").over(history)))
    advanced = F.col("_d_committed").isNotNull() & (F.col("_d_committed") != 0)
    horizon = F.col("_t") - F.lit(settings.history_s)
    described = F.coalesce(F.col("described"), F.lit(False)) if "described" in groups.columns \
        else F.lit(True)
    members = F.coalesce(F.col("member_count"), F.lit(0))
    # The last advance and the last snapshot with members, as running "last" values kept only
    # within the history horizon (incremental frames).
    last_advance = F.last("_advance", ignorenulls=True).over(upto)
    last_with_members = F.last("_with_members", ignorenulls=True).over(before)
    # A steady rhythm: at an advance, every snapshot of the window before it advanced too.
    skipped = F.col("_d_committed").isNotNull() & (F.col("_d_committed") == 0)
    frame = (frame
             .withColumns({
                 "_advance": F.when(advanced, F.struct(
                     F.col("_t").alias("t"), F.col("_prev_t").alias("from_t"),
                     F.col("lag").alias("lag"))),
                 "_with_members": F.when(F.col("member_count") > 0, F.struct(
                     F.col("_t").alias("t"), F.col("lag").alias("lag")))})
             .withColumns({
                 "_last_adv": F.when(last_advance["t"] >= horizon, last_advance),
                 "_members_seen": F.when(last_with_members["t"] >= horizon, last_with_members),
                 "_n": F.count("*").over(window),
                 "_rewound": F.min("_d_committed").over(window) < 0,
                 "_lag_first": F.first("lag").over(window),
                 "_committed_first": F.first("committed_offset").over(window),
                 "_hw_first": F.first("high_watermark").over(window),
                 "_lag_never_fell": F.min("_d_lag").over(window) >= 0,
                 "_skips": F.sum(skipped.cast("int")).over(window)})
             .withColumns({
                 # Without an advance in the history: since the first snapshot within it, a
                 # row every job that computes this snapshot has read (however far back it
                 # read).
                 "_last_advance": F.greatest(F.col("_last_adv")["t"],
                                             F.min("_t").over(in_history)),
                 "_steady": F.when(advanced, (F.col("_skips") == 0) & (
                     F.count("_d_committed").over(window) >= settings.steady_points))})
             .withColumn("_steady_last", F.last("_steady", ignorenulls=True).over(upto))
             .drop("_skips", "_steady"))
    frame = _with_longest_pause(frame, advanced, history, int(settings.history_s * micros))

    since_advance = F.col("_t") - F.col("_last_advance")
    rhythm_known = F.col("_longest_pause").isNotNull()
    from_rhythm = F.col("_longest_pause") * F.lit(settings.burst_factor)
    threshold = F.when(rhythm_known, F.greatest(F.lit(settings.min_stop_s), from_rhythm)) \
        .otherwise(F.lit(settings.stop_after_s))
    factor = f"{settings.burst_factor:g}"
    threshold_text = (
        F.when(~rhythm_known, F.format_string(
            f"threshold %.0f s: commit rhythm not known yet, fewer than 2 advances in the last "
            f"{settings.history_s:.0f} s", threshold))
        .when(from_rhythm >= F.lit(settings.min_stop_s), F.format_string(
            f"threshold %.0f s = {factor} x longest pause %.0f s", threshold,
            F.col("_longest_pause")))
        .otherwise(F.format_string(
            f"threshold %.0f s = min_stop_s; {factor} x longest pause %.0f s is less",
            threshold, F.col("_longest_pause"))))
    behind = F.col("lag") > settings.lag_tolerance
    not_moving = since_advance >= threshold
    empty = (F.coalesce(F.col("state"), F.lit("")) == EMPTY_STATE) \
        | (described & (F.col("member_count") == 0))
    # Since the last snapshot with members, or the last advance if it came later (a member
    # that committed on its way out): the committed offset has not moved since either.
    anchor_is_advance = F.coalesce(
        F.col("_last_adv")["t"] > F.col("_members_seen")["t"], F.lit(False))
    anchor_t = F.when(anchor_is_advance, F.col("_last_adv")["t"]) \
        .otherwise(F.col("_members_seen")["t"])
    anchor_lag = F.when(anchor_is_advance, F.col("_last_adv")["lag"]) \
        .otherwise(F.col("_members_seen")["lag"])
    # progress_stopped: this partition halted, and no partition of its group moved lately.
    halted = (behind & F.coalesce(F.col("_steady_last"), F.lit(False))
              & F.col("_last_adv").isNotNull() & (since_advance >= settings.halt_after_s)
              & (F.col("lag") > F.col("_last_adv")["lag"]))
    at_snapshot = Window.partitionBy("cluster", "group_id", "snapshot_ts")
    frame = (frame
             .withColumns({
                 "_halted": F.coalesce(halted, F.lit(False)),
                 "_group_moving": F.max(
                     (since_advance < settings.halt_after_s).cast("int")).over(at_snapshot),
                 "_group_partitions": F.count("*").over(at_snapshot)})
             .withColumn("_group_halted", F.sum(F.col("_halted").cast("int")).over(at_snapshot)))
    conditions: dict[Rule, Column] = {
        Rule.REWIND: F.coalesce(F.col("_rewound"), F.lit(False)),
        Rule.NO_LAG: ~F.coalesce(behind, F.lit(True)),
        Rule.TOO_LITTLE_HISTORY: F.col("_n") < 2,
        Rule.GROUP_EMPTY: F.coalesce(empty & F.col("_members_seen").isNotNull()
                                     & (F.col("lag") > anchor_lag), F.lit(False)),
        Rule.PROGRESS_STOPPED: F.col("_halted")
        & (F.coalesce(F.col("_group_moving"), F.lit(0)) == 0),
        Rule.STOPPED: behind & not_moving & (members == 0),
        Rule.STALLED: behind & not_moving & (members > 0),
        Rule.FALLING_BEHIND: behind & (F.col("_n") >= settings.min_trend_points)
        & (F.col("committed_offset") > F.col("_committed_first"))
        & F.coalesce(F.col("_lag_never_fell"), F.lit(False))
        & (F.col("lag") > F.col("_lag_first"))
        & (F.col("lag") * (F.col("_n") - 1)
           > F.lit(settings.in_flight_intervals)
           * (F.col("high_watermark") - F.col("_hw_first"))),
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
        .when(applied == Rule.NO_LAG.value, F.format_string(
            f"lag %d <= {settings.lag_tolerance}: caught up", F.col("lag")))
        .when(applied == Rule.TOO_LITTLE_HISTORY.value, F.lit(
            f"first observation in the last {settings.window_s:.0f} s"))
        .when(applied == Rule.GROUP_EMPTY.value, F.format_string(
            "group has no members (state %s) and lag grew from %d to %d since %s %.0f s ago",
            F.coalesce(F.col("state"), F.lit("unknown")), anchor_lag, F.col("lag"),
            F.when(anchor_is_advance, F.lit("its last commit"))
            .otherwise(F.lit("its last member was seen")), F.col("_t") - anchor_t))
        .when(applied == Rule.PROGRESS_STOPPED.value, F.format_string(
            "%d of %d partitions of the group: no commit for %.0f s (their rhythm: an advance "
            f"at every snapshot of the {settings.window_s:.0f} s before); lag %,d → %,d; %s",
            F.col("_group_halted"), F.col("_group_partitions"), since_advance,
            F.col("_last_adv")["lag"], F.col("lag"),
            F.when(members > 0, F.format_string("%d member(s) still listed", members))
            .otherwise(F.lit("no member listed"))))
        .when(applied.isin(Rule.STOPPED.value, Rule.STALLED.value), F.format_string(
            "lag %d, committed offset unchanged for %.0f s (%s), %d member(s)",
            F.col("lag"), since_advance, threshold_text, members))
        .when(applied == Rule.FALLING_BEHIND.value, F.format_string(
            "lag grew from %d to %d over %d observations while committing",
            F.col("_lag_first"), F.col("lag"), F.col("_n")))
        .when(since_advance <= 0, F.format_string(
            "lag %d, committed offset moved at this snapshot", F.col("lag")))
        .otherwise(F.format_string("lag %d, committed offset unchanged for %.0f s (%s)",
                                   F.col("lag"), since_advance, threshold_text)))
    carried = F.when(F.col("_hw_carried"), F.format_string(
        "; high watermark not read at this snapshot (its leader down?): lag from the one read"
        " %.0f s before", F.col("_t") - F.col("_hw_read")["t"])).otherwise(F.lit(""))
    return (frame.withColumn("_rule", rule)
            .select("cluster", "snapshot_ts", "group_id", "topic", "partition",
                    status_of[F.col("_rule")].alias("status"), F.col("_rule").alias("rule"),
                    "lag", F.concat(reason, carried).alias("reason")))


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
