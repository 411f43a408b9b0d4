"""Consumer status per partition and per group: OK / WARN / STALL / STOP / REWIND (partition)
and OK / WARN / ERR (group), from Burrow's rules plus what only a coordinator-API monitor sees
(the group's state and members), evaluated at every snapshot (pure DataFrame functions).

The rules, first match wins (their names, order and statuses: ``groupscope.contract.status``;
tests/unit/test_analytics_status.py has a numbered table of cases, each with its reason):

1. ``rewind``   REWIND  the committed offset moved back within the last ``window_s``.
2. ``streams_not_ready`` STOP  a streams group in state NotReady: its topology cannot run (an
                        internal or source topic is missing), so none of its partitions is
                        processed, whatever its lag. A fact of the group, before ``no_lag``.
3. ``streams_assigning_stuck`` STALL  a streams group in state Assigning at every snapshot for
                        ``stuck_after_s`` (within ``history_s``): the broker computes a new
                        target assignment within a heartbeat or two, one that lasts holds the
                        group's processing up.
4. ``no_lag``   OK      lag <= ``lag_tolerance`` (1): a consumer at the end of its log is fine,
                        however long ago it committed. Fixes Burrow's false alarms on idle
                        topics and on the permanent lag of 1 a transaction marker leaves.
5. ``too_little_history`` OK  fewer than 2 observations within ``window_s``: no trend can be
                        judged yet (Burrow alarms on a single commit).
6. ``share_no_members`` STOP  a share group (whose start offset stands for the committed
                        offset: ``analyze.lag``) with no members (described, 0 members) while
                        records arrive (the high watermark rose within ``window_s``): a queue
                        nobody reads. At once, members seen before or not: a share group has no
                        commit-only use.
7. ``group_empty`` STOP the group lost all its members (state Empty, or a described group with
                        0 members, after members were seen within ``history_s``) and the lag
                        grew since the last snapshot with members (or since the last advance of
                        the committed offset, if later): STOP at the first snapshot that shows
                        it, without waiting for a threshold. A group that never had members
                        within ``history_s`` (a commit-only group: Flink, Spark, tools using
                        assign()) is left to ``stopped``; a group whose describe failed (its
                        member count unknown) is not Empty.
8. ``progress_stopped`` STOP  the whole group's progress stopped at once, before any
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
9. ``streams_task_unowned`` STALL  a streams group with members, behind on a partition whose
                        task (the subtopology that reads the topic, at that partition) no
                        member owns as active, at every snapshot for ``stuck_after_s``: the
                        members are there, nobody processes it (between a revocation and the
                        next assignment a task is briefly unowned: no alarm).
10. ``stopped``  STOP    behind, the committed offset unchanged for the stop threshold, and the
                        group has no members: nobody is consuming.
11. ``share_stalled`` STALL  a share group with members whose start offset has not moved for
                        the stop threshold while its lag grew since its last move (or over
                        ``window_s``): records arrive, the members acquire some, the earliest
                        one in flight is never acknowledged (a record redelivered until its
                        delivery limit, a member holding its acquisition locks).
12. ``stalled``  STALL   behind, the committed offset unchanged for the stop threshold, with
                        members present: they are there but not progressing.
13. ``falling_behind`` WARN  committing, but the lag grew at every observation of ``window_s``
                        (at least ``min_trend_points`` observations), and it is more than
                        ``in_flight_intervals`` snapshot intervals' worth of production (the
                        records produced over the window, per interval): a consumer keeping
                        up has at most what was produced since its last commit in flight, so
                        the noise of that small lag is no trend (a healthy group's lag going
                        1, 2, 3 over three snapshots is not falling behind). The guard is on
                        the lag's level, not its growth over the window, so a consumer only a
                        little slower than production is WARN too once its lag passes it.
14. ``consuming`` OK     otherwise.

The group's kind (``group_type``: classic, consumer, share, streams) and, for streams
groups, the tasks of their members (``streams_task_owners``) come with the group rows; rules
2, 3, 6, 9 and 11 apply to their kind only, every other rule to every kind.

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

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from groupscope.analyze.status_history import ADDED, per_group
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
# Streams groups' states (KIP-1071), as Kafka's Admin client names them.
NOT_READY_STATE = "NotReady"
ASSIGNING_STATE = "Assigning"


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
    # A streams group in Assigning, or a task of it without an active owner, this long is stuck:
    # the broker assigns within a heartbeat interval or two (5 s by default).
    stuck_after_s: float = 120.0


def streams_task_owners(subtopology_topics: DataFrame, member_tasks: DataFrame) -> DataFrame:
    """Per streams group, snapshot and topic its subtopologies read (source and repartition
    source topics): ``active_partitions``, the partitions whose task a member owns as active
    now (``kind`` current), empty when none. From the landed streams_subtopology_topics and
    streams_member_tasks."""
    at = ["cluster", "snapshot_ts", "group_id"]
    sources = (subtopology_topics.where(F.col("role").isin("source", "repartition_source"))
               .select(*at, "subtopology_id", "topic"))
    active = (member_tasks.where((F.col("kind") == "current") & (F.col("role") == "active"))
              .select(*at, "subtopology_id", "partition"))
    return (sources.join(active, [*at, "subtopology_id"], "left")
            .groupBy(*at, "topic").agg(F.collect_set("partition").alias("active_partitions")))


def partition_status(lag: DataFrame, groups: DataFrame,
                     settings: StatusSettings = StatusSettings(),
                     task_owners: DataFrame | None = None) -> DataFrame:
    """``lag``: partition lag rows (cluster, snapshot_ts, group_id, topic, partition,
    committed_offset, high_watermark, lag); ``groups``: consumer_groups rows (state,
    member_count, and ``described`` and ``group_type`` where present); ``task_owners``: the
    streams groups' tasks (``streams_task_owners``), None where there are none. One status per
    partition row with a committed offset (a share group's start offset)."""
    group_columns = ["state", "member_count"]
    group_columns += [c for c in ("described", "group_type") if c in groups.columns]
    # Only what the rules read: the history pass below ships every column to Python and back.
    frame = (lag.select(*KEYS, "snapshot_ts", "committed_offset", "high_watermark", "lag")
             .where(F.col("committed_offset").isNotNull())
             # Small (one row per group and snapshot): broadcast, keeping the rows where they are.
             .join(F.broadcast(groups.select("cluster", "snapshot_ts", "group_id",
                                             *group_columns)),
                   ["cluster", "snapshot_ts", "group_id"], "left")
             .withColumn("_us", F.unix_micros("snapshot_ts")))
    if task_owners is None:
        frame = frame.withColumn("active_partitions", F.lit(None).cast("array<int>"))
    else:
        frame = frame.join(F.broadcast(task_owners.select(
            "cluster", "snapshot_ts", "group_id", "topic", "active_partitions")),
            ["cluster", "snapshot_ts", "group_id", "topic"], "left")
    kind = F.coalesce(F.col("group_type"), F.lit("")) if "group_type" in groups.columns \
        else F.lit("")
    share, streams = kind == "share", kind == "streams"
    state = F.coalesce(F.col("state"), F.lit(""))
    assigning = streams & (state == ASSIGNING_STATE)
    # A partition a streams group reads whose task no member owns as active (while it has
    # members: an empty group owns nothing, and other rules say so).
    unowned = F.coalesce(streams & (F.col("member_count") > 0)
                         & ~F.array_contains("active_partitions", F.col("partition")),
                         F.lit(False))
    frame = (frame.withColumns({"_assigning": assigning, "_unowned": unowned})
             .drop("active_partitions"))
    # What the rules read of the rows before each snapshot, and of the group's other
    # partitions at it, in one sorted pass per group (status_history: Spark's window operator
    # took four passes over every row, and a fifth after a shuffle by snapshot). A partition
    # whose high watermark could not be read (its leader down: the partition is offline, so
    # nothing can be appended to it either) keeps the last one read within the history, as
    # Burrow keeps its last broker offset: an unknown lag would otherwise be no lag, and a
    # consumer stuck behind an offline partition would read as consuming.
    frame = frame.groupBy("cluster", "group_id").applyInArrow(
        per_group(window_s=settings.window_s, history_s=settings.history_s,
                  steady_points=settings.steady_points, lag_tolerance=settings.lag_tolerance,
                  halt_after_s=settings.halt_after_s),
        StructType(frame.schema.fields + from_arrow_schema(ADDED).fields))
    described = F.coalesce(F.col("described"), F.lit(False)) if "described" in groups.columns \
        else F.lit(True)
    members = F.coalesce(F.col("member_count"), F.lit(0))

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
        F.col("_last_adv_t") > F.col("_members_seen_t"), F.lit(False))
    anchor_t = F.when(anchor_is_advance, F.col("_last_adv_t")) \
        .otherwise(F.col("_members_seen_t"))
    anchor_lag = F.when(anchor_is_advance, F.col("_last_adv_lag")) \
        .otherwise(F.col("_members_seen_lag"))
    assigning_for = F.col("_t") - F.col("_assigning_since")
    unowned_for = F.col("_t") - F.col("_unowned_since")
    share_anchor_lag = F.coalesce(F.col("_last_adv_lag"), F.col("_lag_first"))
    conditions: dict[Rule, Column] = {
        Rule.REWIND: F.coalesce(F.col("_rewound"), F.lit(False)),
        Rule.STREAMS_NOT_READY: streams & (state == NOT_READY_STATE),
        Rule.STREAMS_ASSIGNING_STUCK: F.col("_assigning")
        & (assigning_for >= settings.stuck_after_s),
        Rule.NO_LAG: ~F.coalesce(behind, F.lit(True)),
        Rule.TOO_LITTLE_HISTORY: F.col("_n") < 2,
        Rule.SHARE_NO_MEMBERS: F.coalesce(
            share & described & (members == 0)
            & (F.col("high_watermark") > F.col("_hw_first")), F.lit(False)),
        Rule.GROUP_EMPTY: F.coalesce(empty & F.col("_members_seen_t").isNotNull()
                                     & (F.col("lag") > anchor_lag), F.lit(False)),
        Rule.PROGRESS_STOPPED: F.col("_halted") & (F.col("_group_moving") == 0),
        Rule.STREAMS_TASK_UNOWNED: F.col("_unowned") & (unowned_for >= settings.stuck_after_s),
        Rule.STOPPED: behind & not_moving & (members == 0),
        Rule.SHARE_STALLED: F.coalesce(share & behind & not_moving & (members > 0)
                                       & (F.col("lag") > share_anchor_lag), F.lit(False)),
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
        .when(applied == Rule.STREAMS_NOT_READY.value, F.format_string(
            "streams group NotReady: its topology cannot run (an internal or source topic is "
            "missing), %d member(s); lag %s", members,
            F.coalesce(F.col("lag").cast("string"), F.lit("unknown"))))
        .when(applied == Rule.STREAMS_ASSIGNING_STUCK.value, F.format_string(
            f"streams group in Assigning for %.0f s (>= {settings.stuck_after_s:.0f} s): no new "
            "target assignment reached its members, %d member(s)", assigning_for, members))
        .when(applied == Rule.SHARE_NO_MEMBERS.value, F.format_string(
            f"share group has no members while records arrive: high watermark %d -> %d in the "
            f"last {settings.window_s:.0f} s; lag %d from start offset %d",
            F.col("_hw_first"), F.col("high_watermark"), F.col("lag"),
            F.col("committed_offset")))
        .when(applied == Rule.STREAMS_TASK_UNOWNED.value, F.format_string(
            "no member owns the task of this partition as active for %.0f s, %d member(s); "
            "lag %d", unowned_for, members, F.col("lag")))
        .when(applied == Rule.SHARE_STALLED.value, F.format_string(
            "share group's start offset unchanged for %.0f s (%s) while its lag grew from %d to "
            "%d, %d member(s): the earliest record in flight is not acknowledged",
            since_advance, threshold_text, share_anchor_lag, F.col("lag"), members))
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
            F.col("_last_adv_lag"), F.col("lag"),
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
        " %.0f s before", F.col("_t") - F.col("_hw_read_t"))).otherwise(F.lit(""))
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
    # Of partitions equally bad (same severity and lag), the last by topic and partition: one
    # pick whatever order the rows arrive in, so reruns give the same row.
    worst = F.max_by(F.struct("topic", "partition", "status", "reason"),
                     F.struct(rank, F.col("lag"), F.col("topic"), F.col("partition")))
    return (partitions.groupBy("cluster", "snapshot_ts", "group_id")
            .agg(F.max(rank).alias("_severity"), *counts, worst.alias("_worst"))
            .select("cluster", "snapshot_ts", "group_id", rolled_up.alias("status"),
                    *(count_column(s) for s in PartitionStatus),
                    F.col("_worst")["topic"].alias("worst_topic"),
                    F.col("_worst")["partition"].alias("worst_partition"),
                    F.col("_worst")["reason"].alias("worst_reason")))
