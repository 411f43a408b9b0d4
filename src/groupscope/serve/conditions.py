"""What the alert rules look at: the value of each condition kind (``groupscope.serve.rules``
``CONDITIONS``) for each subject of one cluster, read from the warehouse at one evaluation.

A subject is a consumer group, or the cluster itself for the collector's own health. Group
conditions are read at the newest snapshot the live marts have computed
(``mart.group_status``), so every group is judged on one consistent snapshot; the collector
conditions are read against the evaluation time, because a collector that stopped lands no
snapshot to be judged on.

Every subject the marts know is returned with its value, holding or not: the incident
lifecycle (``groupscope.serve.incidents``) resolves an incident when its value no longer
exceeds the threshold. A group absent from the newest snapshot (deleted) is not returned, so
its incidents resolve too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

# The condition kinds, by subject.
GROUP_CONDITIONS = (
    "group_status_err", "partition_rewind", "lag_seconds", "lag_records",
    "lag_beyond_retention", "group_empty_lag_growing", "rebalances_per_hour",
)
CLUSTER_CONDITIONS = ("collector_stale", "snapshot_incomplete", "quality_gate_failed")

# How far back the quality-gate condition looks for the latest result of each suite.
QUALITY_HORIZON = timedelta(hours=24)


@dataclass(frozen=True)
class Observation:
    """One condition's value for one subject (``group_id`` and ``topic`` are '' when the
    subject is the cluster or the whole group)."""

    condition: str
    cluster: str
    group_id: str
    value: float
    details: dict[str, Any] = field(default_factory=dict)
    topic: str = ""


_GROUPS = text("""
WITH latest AS (
    SELECT max(snapshot_ts) AS ts FROM mart.group_status WHERE cluster = :cluster
)
SELECT s.group_id, s.snapshot_ts, s.status,
       s.ok_partitions + s.warn_partitions + s.stall_partitions + s.stop_partitions
         + s.rewind_partitions AS partitions,
       s.stall_partitions, s.stop_partitions, s.rewind_partitions,
       s.worst_topic, s.worst_partition, s.worst_reason,
       l.lag, l.max_lag, l.beyond_retention_partitions,
       coalesce(l.max_time_lag_exact_s, l.max_time_lag_estimated_s) AS time_lag_s,
       l.max_time_lag_exact_s IS NOT NULL AS time_lag_exact,
       c.state, c.member_count, previous.lag AS previous_lag,
       (SELECT count(*) FROM mart.partition_status p
        WHERE p.cluster = s.cluster AND p.snapshot_ts = s.snapshot_ts
          AND p.group_id = s.group_id AND p.rule = 'group_empty') AS empty_partitions
FROM mart.group_status s
JOIN latest ON s.snapshot_ts = latest.ts
LEFT JOIN mart.group_lag l
  ON l.cluster = s.cluster AND l.snapshot_ts = s.snapshot_ts AND l.group_id = s.group_id
LEFT JOIN raw.consumer_groups c
  ON c.cluster = s.cluster AND c.snapshot_ts = s.snapshot_ts AND c.group_id = s.group_id
LEFT JOIN LATERAL (
    SELECT p.lag FROM mart.group_lag p
    WHERE p.cluster = s.cluster AND p.group_id = s.group_id AND p.snapshot_ts < s.snapshot_ts
    ORDER BY p.snapshot_ts DESC LIMIT 1) previous ON true
WHERE s.cluster = :cluster
""")

_REBALANCES = text("""
SELECT group_id, count(*) AS rebalances FROM mart.rebalance_events
WHERE cluster = :cluster AND event_ts > :since AND event_ts <= :until
GROUP BY group_id
""")

# Since when the group's committed offsets have not moved (the oldest snapshot, in the last
# `horizon`, at which every partition already had its current committed offset), and since
# when it has had no member: what a stopped group's message says.
_STOPPED_SINCE = text("""
WITH now AS (
    SELECT topic, partition, committed_offset FROM raw.committed_offsets
    WHERE cluster = :cluster AND group_id = :group_id AND snapshot_ts = :at
), moved AS (
    SELECT max(c.snapshot_ts) AS ts FROM raw.committed_offsets c
    JOIN now USING (topic, partition)
    WHERE c.cluster = :cluster AND c.group_id = :group_id AND c.snapshot_ts < :at
      AND c.snapshot_ts >= :since AND c.committed_offset <> now.committed_offset
)
SELECT (SELECT min(c.snapshot_ts) FROM raw.committed_offsets c, moved
        WHERE c.cluster = :cluster AND c.group_id = :group_id AND c.snapshot_ts <= :at
          AND c.snapshot_ts >= :since AND c.snapshot_ts > coalesce(moved.ts, '-infinity'))
         AS unchanged_since,
       (SELECT min(g.snapshot_ts) FROM raw.consumer_groups g
        WHERE g.cluster = :cluster AND g.group_id = :group_id AND g.snapshot_ts <= :at
          AND g.snapshot_ts >= :since AND g.member_count = 0
          AND g.snapshot_ts > coalesce((
              SELECT max(h.snapshot_ts) FROM raw.consumer_groups h
              WHERE h.cluster = :cluster AND h.group_id = :group_id AND h.snapshot_ts <= :at
                AND h.member_count > 0), '-infinity')) AS no_members_since
""")

_COLLECTOR = text("""
SELECT max(snapshot_ts) FILTER (WHERE complete) AS last_complete,
       max(snapshot_ts) AS last_snapshot,
       count(*) FILTER (WHERE NOT complete AND snapshot_ts > coalesce(
           (SELECT max(snapshot_ts) FROM raw.snapshots WHERE cluster = :cluster AND complete),
           '-infinity')) AS incomplete_in_a_row
FROM raw.snapshots WHERE cluster = :cluster
""")

_QUALITY = text("""
SELECT DISTINCT ON (suite) suite, subject, success, failed, checked_at
FROM ops.quality_results
WHERE cluster = :cluster AND checked_at > :since
ORDER BY suite, checked_at DESC
""")


def observe(conn: Any, cluster: str, conditions: Iterable[str], now: datetime,
            snapshot_every: timedelta) -> list[Observation]:
    """The values of ``conditions`` (kinds) for every subject of ``cluster``."""
    wanted = set(conditions)
    observations: list[Observation] = []
    if wanted & set(GROUP_CONDITIONS):
        observations += _group_observations(conn, cluster, wanted, now)
    if wanted & set(CLUSTER_CONDITIONS):
        observations += _cluster_observations(conn, cluster, wanted, now, snapshot_every)
    return [o for o in observations if o.condition in wanted]


def _group_observations(conn: Any, cluster: str, wanted: set[str],
                        now: datetime) -> list[Observation]:
    rows = conn.execute(_GROUPS, {"cluster": cluster}).mappings().all()
    rebalances: dict[str, int] = {}
    at = max((r["snapshot_ts"] for r in rows), default=None)
    if "rebalances_per_hour" in wanted and at is not None:
        rebalances = {r.group_id: int(r.rebalances) for r in conn.execute(
            _REBALANCES, {"cluster": cluster, "since": at - timedelta(hours=1), "until": at})}
    observations: list[Observation] = []
    for row in rows:
        details = _group_details(row)
        growth = (row["lag"] - row["previous_lag"]
                  if row["lag"] is not None and row["previous_lag"] is not None else 0)
        # The status rule decides "lost its members" (groupscope.analyze.status, rule
        # group_empty): it knows the guards, e.g. a commit-only group is always Empty.
        no_members = row["empty_partitions"] > 0
        values = {
            "group_status_err": row["stop_partitions"] + row["stall_partitions"],
            "partition_rewind": row["rewind_partitions"],
            "lag_seconds": row["time_lag_s"],
            "lag_records": row["lag"],
            "lag_beyond_retention": row["beyond_retention_partitions"],
            "group_empty_lag_growing": max(growth, 0) if no_members else 0,
            "rebalances_per_hour": rebalances.get(row["group_id"], 0),
        }
        if values["group_status_err"] or values["group_empty_lag_growing"]:
            details.update(_stopped_since(conn, cluster, row["group_id"], row["snapshot_ts"]))
        details["rebalances_last_hour"] = rebalances.get(row["group_id"])
        details["lag_growth"] = growth
        observations += [Observation(kind, cluster, row["group_id"], float(value), details)
                         for kind, value in values.items() if value is not None]
    return observations


def _group_details(row: Any) -> dict[str, Any]:
    keys = ("status", "partitions", "stall_partitions", "stop_partitions", "rewind_partitions",
            "worst_topic", "worst_partition", "worst_reason", "lag", "max_lag",
            "beyond_retention_partitions", "time_lag_s", "time_lag_exact", "state",
            "member_count", "previous_lag")
    details = {k: row[k] for k in keys}
    details["snapshot_ts"] = row["snapshot_ts"].isoformat()
    return details


def _stopped_since(conn: Any, cluster: str, group_id: str, at: datetime) -> dict[str, Any]:
    row = conn.execute(_STOPPED_SINCE, {"cluster": cluster, "group_id": group_id, "at": at,
                                        "since": at - timedelta(hours=6)}).one()
    return {"unchanged_since": row.unchanged_since.isoformat() if row.unchanged_since else None,
            "no_members_since":
                row.no_members_since.isoformat() if row.no_members_since else None}


def _cluster_observations(conn: Any, cluster: str, wanted: set[str], now: datetime,
                          snapshot_every: timedelta) -> list[Observation]:
    observations: list[Observation] = []
    collector = conn.execute(_COLLECTOR, {"cluster": cluster}).one()
    if collector.last_snapshot is not None:
        # Never-complete clusters count from their first snapshot: a monitor that has only
        # ever taken partial snapshots is as blind as one that takes none.
        last_good = collector.last_complete
        if last_good is None:
            last_good = conn.execute(text(
                "SELECT min(snapshot_ts) FROM raw.snapshots WHERE cluster = :cluster"),
                {"cluster": cluster}).scalar_one()
        intervals = max((now - last_good) / snapshot_every, 0.0)
        common = {"last_complete_snapshot": _iso(collector.last_complete),
                  "last_snapshot": _iso(collector.last_snapshot),
                  "snapshot_every_s": snapshot_every.total_seconds()}
        observations.append(Observation("collector_stale", cluster, "", intervals,
                                        {**common, "since_s": (now - last_good)
                                         .total_seconds()}))
        observations.append(Observation("snapshot_incomplete", cluster, "",
                                        float(collector.incomplete_in_a_row), common))
    failed = [r for r in conn.execute(_QUALITY, {"cluster": cluster,
                                                 "since": now - QUALITY_HORIZON})
              if not r.success]
    observations.append(Observation(
        "quality_gate_failed", cluster, "", float(len(failed)),
        {"failed_suites": [{"suite": r.suite, "subject": r.subject, "failed": r.failed,
                            "checked_at": r.checked_at.isoformat()} for r in failed]}))
    return observations


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
