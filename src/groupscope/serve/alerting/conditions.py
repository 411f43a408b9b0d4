"""What the alert rules look at: the value of each condition kind
(``groupscope.serve.alerting.rules`` ``CONDITIONS``) for each subject of one cluster, read from
the warehouse at one evaluation.

A subject is a consumer group, or the cluster itself for the collector's own health. Group
conditions are read at the newest snapshot the live marts have computed
(``mart.group_status``), so every group is judged on one consistent snapshot; the collector
conditions are read against the evaluation time, because a collector that stopped lands no
snapshot to be judged on.

Every subject the marts know is returned with its value, holding or not: the incident
lifecycle (``groupscope.serve.alerting.incidents``) resolves an incident when its value no longer
exceeds the threshold, which is evidence that the condition cleared.

A value is a number or **unknown** (``Observation.unknown`` says why), never a guess:

- a value the marts hold as null (a time lag that cannot be computed);
- every group value while the analytics are stale (the newest status rows more than
  ``stale_intervals`` snapshot intervals behind the newest loaded snapshot: a hung or dead
  Spark), so frozen marts neither fire nor resolve anything;
- a group with an open incident that is missing from the newest status snapshot while that
  snapshot was partial (its coordinator restarting; or ListGroups hiding it, the monitor's
  Describe on it removed: ``collect.assemble.unlisted_errors``), or that is listed but has
  no status row, or that the snapshot before listed (a coordinator handing a group over
  lists nothing for it and reports no error);
- the collector's values of a cluster with no snapshot left in the warehouse.

A group with an open incident that two complete snapshots in a row no longer list was deleted:
it is not returned, and its incidents resolve.

groupscope also watches itself (``kinds.SELF_KINDS``): how far the analytics are behind the
snapshots, its own tasks' latest outcome, alert channels that keep failing, and a rules file
that is invalid.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from groupscope.serve.alerting import causes
from groupscope.serve.alerting.kinds import BY_NAME, COLLECTOR_KINDS, GROUP_KINDS

log = logging.getLogger(__name__)

# How far back the quality-gate condition looks for the latest result of each suite.
QUALITY_HORIZON = timedelta(hours=24)
# The groups whose probable causes one evaluation reads (those with an open incident first):
# a broker outage that stops a thousand groups must not stop the evaluation too. The others'
# messages say the causes were not read.
MAX_EXPLAINED = 50
# How many snapshot intervals before its offsets partition lost its leader a group must have
# been listed to be taken as hidden by that: a group deleted long before is not.
HIDDEN_LISTED = 5


@dataclass(frozen=True)
class Observation:
    """One condition's value for one subject (``group_id`` and ``topic`` are '' when the
    subject is the cluster or the whole group)."""

    condition: str
    cluster: str
    group_id: str
    value: float  # nan when unknown
    details: dict[str, Any] = field(default_factory=dict)
    topic: str = ""
    unknown: str | None = None  # why the value is unknown (None: the value is known)


def unknown(condition: str, cluster: str, group_id: str, why: str,
            details: dict[str, Any] | None = None, topic: str = "") -> Observation:
    return Observation(condition, cluster, group_id, math.nan, details or {}, topic, why)


# The group conditions' values, and what a notification says of the group, at the cluster's
# newest status snapshot: defined once, in the view (the exported Grafana rules read it too).
_GROUPS = text("SELECT * FROM serve.group_conditions WHERE cluster = :cluster")

# Since when the group's stopped or stalled partitions have not moved (the oldest snapshot,
# in the last `horizon`, at which each of them already had its current position; every
# partition when none is STOP or STALL), and since when it has had no member: what a stopped
# group's message says. (Over every partition, a STALL of one partition among advancing
# ones would read "not moved for 0 s".) A group's position on a partition is its committed
# offset, or a share group's start offset (as in the lag mart: analyze.lag's
# with_share_positions); `start_offsets` says which the message is about.
_STOPPED_SINCE = text("""
WITH positions AS NOT MATERIALIZED (
    SELECT snapshot_ts, topic, partition, committed_offset AS position,
           false AS start_offset
    FROM raw.committed_offsets
    WHERE cluster = :cluster AND group_id = :group_id
      AND snapshot_ts >= :since AND snapshot_ts <= :at
    UNION ALL
    SELECT snapshot_ts, topic, partition, start_offset, true
    FROM raw.share_partition_offsets
    WHERE cluster = :cluster AND group_id = :group_id
      AND snapshot_ts >= :since AND snapshot_ts <= :at AND start_offset IS NOT NULL
), stuck AS (
    SELECT topic, partition FROM mart.partition_status
    WHERE cluster = :cluster AND group_id = :group_id AND snapshot_ts = :at
      AND status IN ('STOP', 'STALL')
), now AS (
    SELECT p.topic, p.partition, p.position, p.start_offset FROM positions p
    WHERE p.snapshot_ts = :at
      AND ((p.topic, p.partition) IN (SELECT topic, partition FROM stuck)
           OR NOT EXISTS (SELECT 1 FROM stuck))
), moved AS (
    SELECT max(p.snapshot_ts) AS ts FROM positions p
    JOIN now USING (topic, partition)
    WHERE p.snapshot_ts < :at AND p.position <> now.position
)
SELECT (SELECT min(p.snapshot_ts) FROM positions p, moved
        WHERE p.snapshot_ts > coalesce(moved.ts, '-infinity')) AS unchanged_since,
       coalesce((SELECT bool_and(start_offset) FROM now), false) AS start_offsets,
       (SELECT min(g.snapshot_ts) FROM raw.consumer_groups g
        WHERE g.cluster = :cluster AND g.group_id = :group_id AND g.snapshot_ts <= :at
          AND g.snapshot_ts >= :since AND g.member_count = 0
          AND g.snapshot_ts > coalesce((
              SELECT max(h.snapshot_ts) FROM raw.consumer_groups h
              WHERE h.cluster = :cluster AND h.group_id = :group_id AND h.snapshot_ts <= :at
                AND h.member_count > 0), '-infinity')) AS no_members_since
""")

_COLLECTOR = text("SELECT * FROM serve.cluster_conditions WHERE cluster = :cluster")

# What the newest snapshot could not learn, by stage and error: what an incomplete snapshot's
# message names.
_LAST_ERRORS = text("""
SELECT stage, code, count(*) AS count, min(message) AS example
FROM raw.collection_errors WHERE cluster = :cluster AND snapshot_ts = :at
GROUP BY stage, code ORDER BY count(*) DESC, stage, code LIMIT 5
""")

_QUALITY = text("""
SELECT DISTINCT ON (suite) suite, subject, success, failed, checked_at
FROM ops.quality_results
WHERE cluster = :cluster AND checked_at > :since
ORDER BY suite, checked_at DESC
""")


# The newest loaded snapshot, and how far the live analytics have computed: their watermark
# (a snapshot with no committed partition has no status row, so the newest status row alone
# would call a cluster of idle groups stale) or the newest status row, whichever is later.
_ANALYTICS = text("""
SELECT (SELECT max(snapshot_ts) FROM raw.snapshots WHERE cluster = :cluster) AS newest_loaded,
       (SELECT min(snapshot_ts) FROM raw.snapshots WHERE cluster = :cluster) AS oldest_loaded,
       (SELECT max(snapshot_ts) FROM mart.group_status WHERE cluster = :cluster)
         AS newest_status,
       (SELECT computed_through FROM ops.live_analytics WHERE cluster = :cluster)
         AS computed_through
""")

# How far the offsets-topic feed has come (ops.offsets_feed, groupscope.warehouse.generations).
_OFFSETS_FEED = text("""
SELECT complete_at, checked_at, first_checked_at, incomplete
FROM ops.offsets_feed WHERE cluster = :cluster
""")

# Why a group with an open incident has no status row at the judged snapshot.
_ABSENT = text("""
SELECT s.complete, s.error_count,
       (SELECT count(*) FROM raw.consumer_groups g WHERE g.cluster = s.cluster
          AND g.snapshot_ts = s.snapshot_ts AND g.group_id = :group_id) AS listed,
       previous.complete AS complete_before,
       (SELECT count(*) FROM raw.consumer_groups g WHERE g.cluster = s.cluster
          AND g.group_id = :group_id AND g.snapshot_ts = previous.snapshot_ts) AS listed_before,
       (SELECT e.message FROM raw.collection_errors e WHERE e.cluster = s.cluster
          AND e.snapshot_ts = s.snapshot_ts ORDER BY (e.group_id = :group_id) DESC NULLS LAST,
          e.seq LIMIT 1) AS error
FROM raw.snapshots s
LEFT JOIN LATERAL (
    SELECT p.snapshot_ts, p.complete FROM raw.snapshots p
    WHERE p.cluster = s.cluster AND p.snapshot_ts < s.snapshot_ts
    ORDER BY p.snapshot_ts DESC LIMIT 1) previous ON true
WHERE s.cluster = :cluster AND s.snapshot_ts = :at
""")

# The groups listed in the snapshots of [since, until], each as it was last listed.
_LISTED_UNTIL = text("""
SELECT DISTINCT ON (group_id) group_id, snapshot_ts, state, member_count, coordinator_id
FROM raw.consumer_groups
WHERE cluster = :cluster AND snapshot_ts >= :since AND snapshot_ts <= :until
ORDER BY group_id, snapshot_ts DESC
""")

_TASKS = text("""
SELECT dag_id, task_id, state, run_id, try_number, at, failed_since, reason
FROM ops.task_runs WHERE cluster = :cluster
""")

# Per channel: since when it has been failing (its oldest delivery still retried, or given up
# after its last success), or nothing when it delivers.
_CHANNELS = text("""
WITH d AS (
    SELECT d.* FROM ops.alert_deliveries d JOIN ops.alert_incidents i USING (incident_id)
    WHERE i.cluster = :cluster
), sent AS (
    SELECT channel, max(sent_at) AS last_sent FROM d GROUP BY channel
)
SELECT d.channel, min(d.created_at) AS failing_since, count(*) AS undelivered,
       count(*) FILTER (WHERE d.state = 'given_up') AS given_up,
       (array_agg(d.error ORDER BY d.last_attempt_at DESC NULLS LAST))[1] AS last_error,
       max(sent.last_sent) AS last_sent
FROM d LEFT JOIN sent USING (channel)
WHERE d.state = 'failed'
   OR (d.state = 'given_up' AND d.last_attempt_at > coalesce(sent.last_sent, '-infinity')
       AND d.last_attempt_at > :given_up_since)
GROUP BY d.channel
""")


@dataclass(frozen=True)
class SelfState:
    """What groupscope knows of itself at an evaluation, beyond the warehouse: the rules file's
    error (the last valid rules are in use meanwhile) and the channels the rules name."""

    rules_error: str | None = None
    rules_source: str = ""
    channels: tuple[str, ...] = ()
    # The channels whose connection is not defined, and why: failing from the first
    # notification they miss (a typo in a connection id is no blip to ride out).
    missing: Mapping[str, str] = field(default_factory=dict)


def observe(conn: Any, cluster: str, conditions: Iterable[str], now: datetime,
            snapshot_every: timedelta, *, stale_intervals: float = math.inf,
            open_groups: Iterable[str] = (), me: SelfState | None = None,
            rebalance_window: timedelta = timedelta(hours=1),
            holds: Callable[[Observation], bool] | None = None) -> list[Observation]:
    """The values of ``conditions`` (kinds) for every subject of ``cluster``, read in the
    caller's transaction (``conn`` must be in one: the views' parameters are set for it).
    ``stale_intervals``: how far behind the newest snapshot (in snapshot intervals) the status
    rows may be before every group value is unknown; ``open_groups``: the groups with an open
    incident, so that one missing from the newest status snapshot is told apart as deleted
    (its incidents resolve) or unknown (they are kept); ``rebalance_window``: the sliding window
    rebalances_per_hour counts over (scaled to an hour); ``holds``: whether an observation
    exceeds its rule (the rules' thresholds, overrides applied): a group with one, or with an
    open incident, gets the probable causes (``groupscope.serve.alerting.causes``) of each of
    its values in their details, ``causes``."""
    wanted = set(conditions)
    # The views' parameters (serve.group_conditions, serve.cluster_conditions), for this
    # transaction only: a pooled connection never keeps an earlier evaluation's clock.
    conn.execute(text("SELECT set_config('groupscope.evaluated_at', :at, true), "
                      "set_config('groupscope.rebalance_window', :window, true)"),
                 {"at": now.isoformat(),
                  "window": f"{rebalance_window.total_seconds()!r} seconds"})
    observations: list[Observation] = []
    analytics = conn.execute(_ANALYTICS, {"cluster": cluster}).one()
    behind = _analytics_behind(analytics, snapshot_every)
    if wanted & set(GROUP_KINDS):
        stale = None
        if behind is not None and behind[0] > stale_intervals:
            stale = (f"the analytics are {_seconds(behind[1])} behind the newest snapshot "
                     f"({_iso(analytics.newest_loaded)}): the status rows are frozen")
        observations += _group_observations(conn, cluster, wanted & set(GROUP_KINDS),
                                            set(open_groups), stale, holds, snapshot_every)
    if wanted & set(COLLECTOR_KINDS):
        observations += _cluster_observations(conn, cluster, wanted, now, snapshot_every)
    if "analytics_stale" in wanted:
        if behind is None:
            observations.append(unknown("analytics_stale", cluster, "",
                                        "no snapshot of the cluster in the warehouse"))
        else:
            observations.append(Observation("analytics_stale", cluster, "", behind[0], {
                "newest_snapshot": _iso(analytics.newest_loaded),
                "computed_through": _iso(analytics.computed_through),
                "newest_status": _iso(analytics.newest_status),
                "behind_s": behind[1], "snapshot_every_s": snapshot_every.total_seconds()}))
    if "offsets_feed_stale" in wanted:
        observations.append(_offsets_feed_observation(conn, cluster, now))
    if "task_failed" in wanted:
        observations += _task_observations(conn, cluster)
    if "channel_failing" in wanted:
        observations += _channel_observations(conn, cluster, now, me or SelfState())
    if "rules_invalid" in wanted:
        me = me or SelfState()
        observations.append(Observation(
            "rules_invalid", cluster, "", 1.0 if me.rules_error else 0.0,
            {"error": me.rules_error, "source": me.rules_source}))
    return [o for o in observations if o.condition in wanted]


def _offsets_feed_observation(conn: Any, cluster: str, now: datetime) -> Observation:
    """Seconds since the offsets-topic feed was last whole in the warehouse (since its first
    recorded run while none has been complete); unknown when no run was ever recorded (a
    deployment without the offsets DAG, or before its first run)."""
    row = conn.execute(_OFFSETS_FEED, {"cluster": cluster}).one_or_none()
    if row is None:
        return unknown("offsets_feed_stale", cluster, "",
                       "no offsets-topic ingest of the cluster was ever recorded")
    since = row.complete_at or row.first_checked_at
    return Observation("offsets_feed_stale", cluster, "",
                       max((now - since).total_seconds(), 0.0), {
                           "complete_at": _iso(row.complete_at),
                           "checked_at": _iso(row.checked_at),
                           "incomplete": [{"partition": p.get("partition"),
                                           "error": p.get("error")}
                                          for p in (row.incomplete or [])[:5]]})


def _analytics_behind(row: Any, snapshot_every: timedelta) -> tuple[float, float] | None:
    """(snapshot intervals, seconds) the analytics are behind the newest loaded snapshot; None
    when no snapshot is loaded. Never computed: behind by all the loaded snapshots."""
    if row.newest_loaded is None:
        return None
    through = max([t for t in (row.newest_status, row.computed_through) if t is not None],
                  default=None)
    if through is None:
        seconds = (row.newest_loaded - row.oldest_loaded).total_seconds() \
            + snapshot_every.total_seconds()
    else:
        # computed_through is exclusive (just after the newest computed snapshot).
        seconds = max((row.newest_loaded - through).total_seconds(), 0.0)
    return seconds / snapshot_every.total_seconds(), seconds


def _seconds(value: float) -> str:
    return f"{value:.0f} s"


def _group_observations(conn: Any, cluster: str, wanted: set[str], open_groups: set[str],
                        stale: str | None, holds: Callable[[Observation], bool] | None = None,
                        every: timedelta = timedelta(seconds=30)) -> list[Observation]:
    rows = conn.execute(_GROUPS, {"cluster": cluster}).mappings().all()
    at = max((r["snapshot_ts"] for r in rows), default=None)
    observations: list[Observation] = []
    by_group: dict[str, list[Observation]] = {}
    for row in rows:
        details = _group_details(row)
        values = {kind: row[kind] for kind in GROUP_KINDS}
        if stale is None and (values["group_status_err"] or values["group_empty_lag_growing"]):
            details.update(_stopped_since(conn, cluster, row["group_id"], row["snapshot_ts"]))
        for kind, value in values.items():
            if stale is not None:
                observations.append(unknown(kind, cluster, row["group_id"], stale, details))
            elif value is None:
                observations.append(unknown(kind, cluster, row["group_id"],
                                            _why_null(kind, row, details), details))
            else:
                observations.append(Observation(kind, cluster, row["group_id"], float(value),
                                                details))
            by_group.setdefault(row["group_id"], []).append(observations[-1])
    seen = {r["group_id"] for r in rows}
    outages = causes.Outages()
    if stale is None and at is not None:
        try:
            # A query that fails must not stop the evaluation (as with the causes).
            with conn.begin_nested():
                outages = causes.coordinator_outages(conn, cluster, at)
                hidden = _without_coordinator(conn, cluster, wanted, at, every, outages,
                                              open_groups - seen)
        except Exception as exc:
            log.warning("the coordinator outages of cluster %s could not be read: %s",
                        cluster, exc, exc_info=True)
            hidden = {}
        for group_id, found in hidden.items():
            if group_id not in seen:
                observations += found
                by_group[group_id] = found
                seen.add(group_id)
    if stale is None:
        observations = _explained(conn, cluster, observations, by_group, open_groups, holds,
                                  at, every, outages)
    for group_id in sorted(open_groups - seen):
        why = _why_absent(conn, cluster, group_id, at) if stale is None else stale
        if why is not None:
            observations += [unknown(kind, cluster, group_id, why) for kind in wanted]
    return observations


def _explained(conn: Any, cluster: str, observations: list[Observation],
               by_group: dict[str, list[Observation]], open_groups: set[str],
               holds: Callable[[Observation], bool] | None, at: datetime | None,
               every: timedelta, outages: causes.Outages | None = None) -> list[Observation]:
    """The observations, those of the groups in trouble with their probable causes."""
    if at is None:
        return observations
    troubled = [g for g, obs in by_group.items()
                if g in open_groups or (holds is not None and any(holds(o) for o in obs))]
    troubled.sort(key=lambda g: (g not in open_groups, g))
    ranked: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for index, group_id in enumerate(troubled):
        kinds = [o.condition for o in by_group[group_id] if causes.explains(o.condition)]
        if index >= MAX_EXPLAINED:
            for kind in kinds:
                ranked[group_id, kind] = [{"kind": "not_read", "title": "causes not read",
                                           "evidence": f"more than {MAX_EXPLAINED} groups are in "
                                           "trouble at once; see the group's dashboard",
                                           "since": None}]
            continue
        try:
            # The causes are the message's detail: a query that fails (or times out) or a bug
            # in the ranking must not stop the evaluation, which pages on the values alone.
            with conn.begin_nested():
                evidence = causes.read_evidence(conn, cluster, group_id, at, every,
                                                outages=outages)
            for kind in kinds:
                ranked[group_id, kind] = [c.as_dict() for c in causes.rank(evidence, kind)]
        except Exception as exc:
            log.warning("the causes of group %r of cluster %s could not be read: %s",
                        group_id, cluster, exc, exc_info=True)
            for kind in kinds:
                ranked[group_id, kind] = [{"kind": "not_read", "title": "causes not read",
                                           "evidence": f"reading them failed: {exc!s:.200}",
                                           "since": None}]
    return [replace(o, details={**o.details, "causes": ranked[o.group_id, o.condition]})
            if (o.group_id, o.condition) in ranked else o for o in observations]




def _why_null(kind: str, row: Any, details: dict[str, Any]) -> str:
    """Why the view holds ``kind`` as null for the group of ``row``."""
    unread = row["lag_unknown_partitions"] or 0
    if BY_NAME[kind].reads_lag and unread > 0:
        # The lag of those partitions is unknown, so the group's is (analyze.lag, rollups):
        # the known part is only what it is at least, never evidence that it cleared.
        return (f"lag of {unread} partition(s) unknown (high watermark or log start not "
                f"read: leader down, timeout or no access); the others' lag is "
                f"{row['lag_lower_bound']} records, a lower bound")
    if kind == "group_empty_lag_growing" and row["lag"] is not None:
        return "its lag at the snapshot before is unknown (a partition's offsets not read)"
    return BY_NAME[kind].unknown or f"no {kind} value at the snapshot of {details['snapshot_ts']}"


def _without_coordinator(conn: Any, cluster: str, wanted: set[str], at: datetime,
                         every: timedelta, outages: causes.Outages,
                         open_groups: set[str]) -> dict[str, list[Observation]]:
    """The groups an offsets partition without a leader hides at ``at``: those listed in the
    snapshots up to the last at which it had a leader, and those with an open incident, whose
    id hashes to it. They have no coordinator: they can neither commit nor rebalance, and their
    members stop consuming once their sessions expire. A group that had members is in trouble
    (ERR) once two snapshots in a row saw its partition without a leader (one is a broker's
    start-up); an idle one, or one seen so once, is unknown, with the reason: not deleted, and
    not a page for an idle group."""
    if not outages.by_partition:
        return {}
    last: dict[str, Any] = {}
    for led_until in sorted({o.led_until for o in outages.by_partition.values()
                             if o.led_until is not None}):
        for row in conn.execute(_LISTED_UNTIL, {"cluster": cluster, "until": led_until,
                                                "since": led_until - HIDDEN_LISTED * every}):
            if (outage := outages.of(row.group_id)) is not None \
                    and outage.led_until == led_until:
                last[row.group_id] = row
    hidden: dict[str, list[Observation]] = {}
    for group_id in sorted(set(last) | {g for g in open_groups if outages.of(g)}):
        outage = outages.of(group_id)
        assert outage is not None
        row = last.get(group_id)
        details = {"status": "ERR", "coordinator_down": True,
                   "offsets_partition": outage.partition, "down_since": outage.since.isoformat(),
                   "down_since_text": outage.since_text(), "outage": outage.message,
                   "last_listed": row.snapshot_ts.isoformat() if row is not None else None,
                   "state": row.state if row is not None else None,
                   "member_count": row.member_count if row is not None else None,
                   "coordinator": row.coordinator_id if row is not None else None,
                   "snapshot_ts": at.isoformat()}
        why = f"its coordinator is down ({outage.message})"
        if outage.since == at:
            why += "; one snapshot so far"
        elif row is not None and not row.member_count:
            why += "; it had no member at its last listing"
        judged = outage.since < at and (row is None or row.member_count > 0)
        hidden[group_id] = [
            Observation(kind, cluster, group_id, 1.0, details)
            if judged and kind == "group_status_err"
            else unknown(kind, cluster, group_id, why, details)
            for kind in GROUP_KINDS if kind in wanted]
    return hidden


def _why_absent(conn: Any, cluster: str, group_id: str, at: datetime | None) -> str | None:
    """Why a group with an open incident has no status row at ``at`` (the judged snapshot);
    None when a complete snapshot, and the one before, no longer list it (deleted: its
    incidents resolve)."""
    if at is None:
        return "no status has been computed for the cluster yet"
    row = conn.execute(_ABSENT, {"cluster": cluster, "group_id": group_id, "at": at}).one_or_none()
    if row is None:
        return f"the snapshot of {at.isoformat()} is not in the warehouse"
    if row.listed:
        return (f"the snapshot of {at.isoformat()} lists the group but no status could be "
                "computed for it (no committed offset of a described partition)")
    if row.complete and row.complete_before and not row.listed_before:
        return None
    if row.complete:
        # A coordinator handing a group over lists nothing for it, without an error (Kafka
        # 4.3's ListGroups on a shard being unloaded): the snapshot is complete and misses a
        # group that exists. Deleted only when the snapshot before was complete and missed it
        # too.
        return (f"missing from the snapshot of {at.isoformat()} after the one before listed "
                "it (a coordinator moving lists nothing for a while); deleted if the next "
                "snapshot misses it too")
    return (f"missing from the partial snapshot of {at.isoformat()} ({row.error_count} "
            f"collection error(s), e.g. {row.error or 'unknown'})")


def _group_details(row: Any) -> dict[str, Any]:
    keys = ("status", "partitions", "stall_partitions", "stop_partitions", "rewind_partitions",
            "worst_topic", "worst_partition", "worst_reason", "lag", "max_lag",
            "beyond_retention_partitions", "time_lag_s", "time_lag_exact", "state",
            "member_count", "previous_lag", "lag_growth", "rebalances_source",
            "rebalance_window_s", "loss_topic", "loss_partition", "loss_basis", "loss_headroom",
            "loss_production_rate", "loss_consumption_rate", "loss_growth_rate",
            "loss_retention_ms",
            "loss_retention_bytes", "lag_unknown_partitions", "lag_lower_bound")
    details = {k: row[k] for k in keys}
    details["rebalances_in_window"] = row["rebalances"]
    details["rebalancing_since"] = _iso(row["rebalancing_since"])
    details["snapshot_ts"] = row["snapshot_ts"].isoformat()
    return details


def _stopped_since(conn: Any, cluster: str, group_id: str, at: datetime) -> dict[str, Any]:
    row = conn.execute(_STOPPED_SINCE, {"cluster": cluster, "group_id": group_id, "at": at,
                                        "since": at - timedelta(hours=6)}).one()
    return {"unchanged_since": row.unchanged_since.isoformat() if row.unchanged_since else None,
            "start_offsets": row.start_offsets,
            "no_members_since":
                row.no_members_since.isoformat() if row.no_members_since else None}


def _cluster_observations(conn: Any, cluster: str, wanted: set[str], now: datetime,
                          snapshot_every: timedelta) -> list[Observation]:
    observations: list[Observation] = []
    collector = conn.execute(_COLLECTOR, {"cluster": cluster}).one_or_none()
    if collector is not None and collector.last_snapshot is not None:
        common = {"last_complete_snapshot": _iso(collector.last_complete),
                  "last_snapshot": _iso(collector.last_snapshot),
                  "snapshot_every_s": snapshot_every.total_seconds()}
        observations.append(Observation(
            "collector_stale", cluster, "",
            float(collector.collector_stale_s) / snapshot_every.total_seconds(),
            {**common, "since_s": float(collector.collector_stale_s)}))
        failures = ([{"stage": r.stage, "code": r.code, "count": int(r.count),
                      "example": r.example}
                     for r in conn.execute(_LAST_ERRORS, {"cluster": cluster,
                                                          "at": collector.last_snapshot})]
                    if collector.snapshot_incomplete else [])
        observations.append(Observation("snapshot_incomplete", cluster, "",
                                        float(collector.snapshot_incomplete),
                                        {**common, "last_errors": failures}))
    else:
        # No snapshot left (retention emptied raw.snapshots, or none ever landed): the
        # collector's health cannot be judged, and is not "recovered" either.
        why = "no snapshot of the cluster in the warehouse"
        observations += [unknown("collector_stale", cluster, "", why),
                         unknown("snapshot_incomplete", cluster, "", why)]
    failed = [r for r in conn.execute(_QUALITY, {"cluster": cluster,
                                                 "since": now - QUALITY_HORIZON})
              if not r.success]
    observations.append(Observation(
        "quality_gate_failed", cluster, "",
        float(collector.quality_gate_failed) if collector is not None else 0.0,
        {"failed_suites": [{"suite": r.suite, "subject": r.subject, "failed": r.failed,
                            "checked_at": r.checked_at.isoformat()} for r in failed]}))
    return observations


def _task_observations(conn: Any, cluster: str) -> list[Observation]:
    return [Observation("task_failed", cluster, "", 1.0 if row.state == "failed" else 0.0, {
        "dag_id": row.dag_id, "task_id": row.task_id, "run_id": row.run_id,
        "try_number": row.try_number, "at": _iso(row.at), "failed_since": _iso(row.failed_since),
        "reason": row.reason}, topic=f"{row.dag_id}.{row.task_id}")
        for row in conn.execute(_TASKS, {"cluster": cluster})]


def _channel_observations(conn: Any, cluster: str, now: datetime,
                          me: SelfState) -> list[Observation]:
    # A given-up notification says the channel failed then; an hour on, with nothing newer
    # owed to it, it is no evidence that it still fails (a quiet channel would page forever).
    failing = {row.channel: row for row in conn.execute(_CHANNELS, {
        "cluster": cluster, "given_up_since": now - timedelta(hours=1)})}
    observations = []
    # Only the rules' channels: one removed from the rules is not failing, it is gone (its
    # incident, unobserved, resolves).
    for channel in sorted(me.channels):
        row: Any = failing.get(channel)
        if row is None:
            observations.append(Observation("channel_failing", cluster, "", 0.0,
                                            {"channel": channel}, topic=channel))
            continue
        failing_s = max((now - row.failing_since).total_seconds(), 0.0)
        no_connection = me.missing.get(channel)
        observations.append(Observation(
            "channel_failing", cluster, "", math.inf if no_connection else failing_s,
            {"channel": channel, "failing_since": _iso(row.failing_since),
             "no_connection": no_connection,
             "undelivered": int(row.undelivered), "given_up": int(row.given_up),
             "last_error": row.last_error, "last_sent": _iso(row.last_sent)}, topic=channel))
    return observations


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
