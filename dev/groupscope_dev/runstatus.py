"""What ``./run`` prints while it runs: a table of the groups, the notifications as they are
sent, and a summary at the end.

Every figure of a group's row comes from one snapshot: the newest one the live marts have
computed (lag in records, lag in seconds and status alike), and the row says which. A group the
marts have not reached yet (new, or no analytics run so far) shows its lag from the newest
snapshot, with that snapshot's time and "not computed yet". Reasons are in group terms
("3 of 10 partitions falling behind; lag 12,100 -> 34,800 in 5 m; about 2 m 10 s behind"), an
Empty group says since when.

``read_groups`` and ``read_notifications`` are the warehouse edge; ``render_groups``,
``render_notification`` and ``render_summary`` are pure, and unit-tested on fixed rows
(tests/unit/test_run_status.py).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from groupscope.serve.alerting.notify import duration

TREND_OVER = timedelta(minutes=5)  # "lag 12,100 -> 34,800 in 5 m"
EMPTY_LOOKBACK = timedelta(days=1)  # how far back "Empty since" looks
NAME_WIDTH = 26


@dataclass(frozen=True)
class GroupNow:
    """One group's row: every figure from the snapshot at ``snapshot_ts``."""

    group_id: str
    snapshot_ts: datetime
    state: str | None
    members: int | None
    partitions: int
    lag: int | None
    time_lag_s: float | None = None
    time_lag_exact: bool = False
    status: str | None = None  # None: the marts have not computed this snapshot for it
    behind: int = 0  # partitions with a lag above the tolerance (1)
    stop_partitions: int = 0
    stall_partitions: int = 0
    warn_partitions: int = 0
    rewind_partitions: int = 0
    earlier_lag: int | None = None  # the lag about TREND_OVER before
    earlier_ts: datetime | None = None
    empty_since: datetime | None = None  # the first snapshot without members (after some)
    empty_since_known: bool = True  # False: no snapshot with members in the look-back
    worst_reason: str | None = None
    protocol_type: str | None = None  # '' for a group that only commits (assign())


# The groups at the newest snapshot the live marts computed, each figure from it.
_AT_MARTS = text("""
WITH at AS (SELECT max(snapshot_ts) AS ts FROM mart.group_status WHERE cluster = :cluster)
SELECT s.group_id, s.snapshot_ts, c.state, c.member_count AS members, c.protocol_type,
       s.status,
       s.ok_partitions + s.warn_partitions + s.stall_partitions + s.stop_partitions
         + s.rewind_partitions AS partitions,
       s.stop_partitions, s.stall_partitions, s.warn_partitions, s.rewind_partitions,
       s.worst_reason, l.lag,
       coalesce(l.max_time_lag_exact_s, l.max_time_lag_estimated_s) AS time_lag_s,
       l.max_time_lag_exact_s IS NOT NULL AS time_lag_exact,
       (SELECT count(*) FROM mart.partition_lag p
        WHERE p.cluster = s.cluster AND p.snapshot_ts = s.snapshot_ts
          AND p.group_id = s.group_id AND p.lag > 1) AS behind,
       earlier.snapshot_ts AS earlier_ts, earlier.lag AS earlier_lag
FROM mart.group_status s
JOIN at ON s.snapshot_ts = at.ts
LEFT JOIN mart.group_lag l
  ON l.cluster = s.cluster AND l.snapshot_ts = s.snapshot_ts AND l.group_id = s.group_id
LEFT JOIN raw.consumer_groups c
  ON c.cluster = s.cluster AND c.snapshot_ts = s.snapshot_ts AND c.group_id = s.group_id
LEFT JOIN LATERAL (
    SELECT e.snapshot_ts, e.lag FROM mart.group_lag e
    WHERE e.cluster = s.cluster AND e.group_id = s.group_id
      AND e.snapshot_ts >= s.snapshot_ts - CAST(:trend AS interval)
      AND e.snapshot_ts < s.snapshot_ts
    ORDER BY e.snapshot_ts LIMIT 1) earlier ON true
WHERE s.cluster = :cluster
""")

# The groups of the newest snapshot the marts have not computed: lag from that snapshot.
_NOT_COMPUTED = text("""
WITH newest AS (SELECT max(snapshot_ts) AS ts FROM raw.snapshots WHERE cluster = :cluster)
SELECT c.group_id, c.snapshot_ts, c.state, c.member_count AS members, c.protocol_type,
       count(o.partition) AS partitions,
       sum(p.high_watermark - o.committed_offset) AS lag,
       count(*) FILTER (WHERE p.high_watermark - o.committed_offset > 1) AS behind
FROM raw.consumer_groups c
JOIN newest ON c.snapshot_ts = newest.ts
LEFT JOIN raw.committed_offsets o
  ON o.cluster = c.cluster AND o.snapshot_ts = c.snapshot_ts AND o.group_id = c.group_id
LEFT JOIN raw.partition_offsets p
  ON p.cluster = o.cluster AND p.snapshot_ts = o.snapshot_ts AND p.topic = o.topic
 AND p.partition = o.partition
WHERE c.cluster = :cluster AND c.group_id <> ALL(:computed)
GROUP BY c.group_id, c.snapshot_ts, c.state, c.member_count, c.protocol_type
""")

# Since when each Empty group has had no member: the first snapshot without one after the
# last snapshot with one (within EMPTY_LOOKBACK).
_EMPTY_SINCE = text("""
SELECT g.group_id, min(g.snapshot_ts) AS since,
       bool_or(EXISTS (
           SELECT 1 FROM raw.consumer_groups h
           WHERE h.cluster = g.cluster AND h.group_id = g.group_id AND h.snapshot_ts <= :at
             AND h.snapshot_ts >= CAST(:at AS timestamptz) - CAST(:lookback AS interval)
             AND h.member_count > 0)) AS known
FROM raw.consumer_groups g
WHERE g.cluster = :cluster AND g.group_id = ANY(:groups) AND g.snapshot_ts <= :at
  AND g.snapshot_ts >= CAST(:at AS timestamptz) - CAST(:lookback AS interval)
  AND g.member_count = 0
  AND g.snapshot_ts > coalesce((
      SELECT max(h.snapshot_ts) FROM raw.consumer_groups h
      WHERE h.cluster = g.cluster AND h.group_id = g.group_id AND h.snapshot_ts <= :at
        AND h.snapshot_ts >= CAST(:at AS timestamptz) - CAST(:lookback AS interval)
        AND h.member_count > 0), '-infinity')
GROUP BY g.group_id
""")


def read_groups(conn: Any, cluster: str) -> list[GroupNow]:
    """Every group of the cluster's newest snapshots, as ``render_groups`` shows them."""
    params = {"cluster": cluster, "trend": f"{int(TREND_OVER.total_seconds())} seconds"}
    rows = [dict(r) for r in conn.execute(_AT_MARTS, params).mappings()]
    computed = [r["group_id"] for r in rows]
    rows += [dict(r) for r in conn.execute(_NOT_COMPUTED,
                                           {"cluster": cluster, "computed": computed}).mappings()]
    groups = [GroupNow(**r) for r in rows]
    empty = {g.group_id: g.snapshot_ts for g in groups if g.members == 0}
    since: dict[str, tuple[datetime, bool]] = {}
    for at in set(empty.values()):
        names = [name for name, ts in empty.items() if ts == at]
        since |= {r.group_id: (r.since, bool(r.known)) for r in conn.execute(_EMPTY_SINCE, {
            "cluster": cluster, "groups": names, "at": at,
            "lookback": f"{int(EMPTY_LOOKBACK.total_seconds())} seconds"})}
    return sorted((_with_empty_since(g, since.get(g.group_id)) for g in groups),
                  key=lambda g: g.group_id)


def _with_empty_since(group: GroupNow, since: tuple[datetime, bool] | None) -> GroupNow:
    return group if since is None else replace(group, empty_since=since[0],
                                               empty_since_known=since[1])


# -- rendering (pure) ------------------------------------------------------------------------
def clock(ts: datetime) -> str:
    """``12:03:10Z`` (UTC), as the alert messages write times."""
    return ts.astimezone(UTC).strftime("%H:%M:%SZ")


def count(value: float | None) -> str:
    return "-" if value is None else f"{int(value):,}"


def reason(g: GroupNow) -> str:
    """Why the group has its status, in group terms; every figure from ``g.snapshot_ts``.
    A healthy group's in-flight lag (records produced since its last commit) is not called
    "behind"; a group in trouble gets how many partitions, the lag's trend and its time."""
    parts: list[str] = []
    of = f"of {g.partitions} partition{'s' if g.partitions != 1 else ''}"
    if g.protocol_type == "" and not g.members:
        parts.append("no members by design (assign() and commit)")
    elif g.state == "Empty" or g.members == 0:
        if g.empty_since is None:
            parts.append("Empty (no members)")
        elif g.empty_since_known:
            parts.append(f"Empty since {clock(g.empty_since)}")
        else:  # no snapshot with members in the look-back: since before it, at least
            parts.append(f"Empty, no member seen since {clock(g.empty_since)}")
    lead, n = "", 0  # what decided the status, on how many partitions
    if g.status is None:
        parts.append("not computed yet" if g.partitions else "no committed offset yet")
    elif g.stop_partitions:
        lead, n = "stopped" + (" (no members)" if not g.members else ""), g.stop_partitions
    elif g.stall_partitions:
        lead, n = f"not committing with {count(g.members)} members", g.stall_partitions
    elif g.rewind_partitions:
        lead, n = "rewound (committed offset moved back)", g.rewind_partitions
    elif g.warn_partitions:
        lead, n = "falling behind", g.warn_partitions
    elif g.lag is not None and g.partitions:
        caught_up = g.lag <= g.partitions  # at most the tolerance (1) per partition
        if g.members or g.protocol_type == "":
            parts.append("caught up" if caught_up else "consuming")
        else:
            parts.append("nothing left to read" if caught_up else "its lag is not growing")
    if lead:
        parts.append(f"{n} {of} {lead}" + (f", {g.behind} behind"
                                           if g.behind and g.behind != n else ""))
        if g.earlier_lag is not None and g.earlier_ts is not None and g.lag is not None:
            span = duration((g.snapshot_ts - g.earlier_ts).total_seconds())
            parts.append(f"lag {count(g.earlier_lag)} -> {count(g.lag)} in {span}")
        if g.time_lag_s is not None and g.time_lag_s >= 1:
            parts.append(("" if g.time_lag_exact else "about ")
                         + f"{duration(g.time_lag_s)} behind")
    return "; ".join(parts)


def render_groups(groups: Sequence[GroupNow]) -> str:
    """The table: a header, then a row a group. Figures of one row are of one snapshot; the
    snapshot is named once when all rows share it, else on every row."""
    if not groups:
        return "  no consumer group in the warehouse yet"
    times = {g.snapshot_ts for g in groups}
    shared = len(times) == 1
    head = (f"  {'group':<{NAME_WIDTH}} {'members':>7} {'lag':>9} {'behind by':>10}  "
            + ("" if shared else f"{'snapshot':<9}  ") + "status")
    lines = [head]
    for g in groups:
        time_lag = "-" if g.time_lag_s is None else (
            ("" if g.time_lag_exact else "~") + duration(g.time_lag_s))
        status = g.status or "-"
        why = reason(g)
        lines.append(
            f"  {cell(g.group_id, NAME_WIDTH)} {count(g.members):>7} {count(g.lag):>9} "
            f"{time_lag:>10}  " + ("" if shared else f"{clock(g.snapshot_ts):<9}  ")
            + status + (f": {why}" if why else ""))
    if shared:
        lines.insert(0, f"  every figure from the snapshot of {clock(times.pop())}"
                        " (lag in records, in time, status)")
    else:
        lines.insert(0, "  each row's figures from the snapshot it names (the marts have not "
                        "computed the newest one for every group yet)")
    return "\n".join(lines)


def cell(name: str, width: int) -> str:
    """``name`` in exactly ``width`` terminal columns: control characters escaped (a group name
    can hold a newline or an escape sequence), wide characters counted twice, an ellipsis where
    it is cut."""
    shown = "".join(ch.encode("unicode_escape").decode("ascii")
                    if unicodedata.category(ch) in _ESCAPED or ch == "\\" else ch for ch in name)
    if _width(shown) <= width:
        return shown + " " * (width - _width(shown))
    out, used = "", 0
    for ch in shown:
        if used + _width(ch) > width - 1:
            break
        out, used = out + ch, used + _width(ch)
    return out + "…" + " " * (width - used - 1)


# Control and format characters, and the line and paragraph separators (str.splitlines
# breaks on those too): shown escaped, as a backslash is, so an escape reads unambiguously.
_ESCAPED = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else
               0 if unicodedata.combining(ch) else 1 for ch in text)


# -- notifications ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Sent:
    """One notification of one incident, and where it went."""

    incident_id: str
    notification: str  # firing | repeat-N | resolved
    at: datetime
    group_id: str
    cluster: str
    headline: str
    channels: tuple[tuple[str, str, str | None], ...] = field(default_factory=tuple)
    # (channel, sent | failed | pending, error)


_DELIVERIES = text("""
SELECT d.incident_id, d.notification, d.channel, d.state, d.error,
       coalesce(d.sent_at, d.last_attempt_at, d.created_at) AS at
FROM ops.alert_deliveries d
WHERE (d.state <> 'pending' OR d.attempts > 0) AND d.created_at >= :since
ORDER BY at, d.incident_id, d.notification, d.channel
""")


def read_notifications(conn: Any, seen: set[tuple[str, str, str, str]],
                       since: datetime) -> list[Sent]:
    """The notifications owed since ``since`` whose delivery outcome (sent, or failed) is
    new to ``seen`` (updated in place), one ``Sent`` per incident and notification."""
    from groupscope.serve.alerting.incidents import Incident
    from groupscope.serve.alerting.notify import headline
    from groupscope.serve.alerting.store import IN_FLIGHT, incidents_since

    # An attempt still sending is no outcome yet: its outcome is shown when it comes.
    new = [r for r in conn.execute(_DELIVERIES, {"since": since}).mappings()
           if (r["incident_id"], r["notification"], r["channel"], r["state"]) not in seen
           and not (r["error"] or "").startswith(IN_FLIGHT)]
    if not new:
        return []
    earliest = min(r["at"] for r in new) - timedelta(days=1)
    by_id: dict[str, Incident] = {i.incident_id: i for i in incidents_since(conn, earliest)}
    grouped: dict[tuple[str, str], list[Any]] = {}
    for r in new:
        seen.add((r["incident_id"], r["notification"], r["channel"], r["state"]))
        grouped.setdefault((r["incident_id"], r["notification"]), []).append(r)
    sent = []
    for (incident_id, notification), rows in grouped.items():
        incident = by_id.get(incident_id)
        if incident is None:
            continue
        sent.append(Sent(incident_id, notification, max(r["at"] for r in rows),
                         incident.group_id, incident.cluster, headline(incident),
                         tuple((r["channel"], r["state"], r["error"]) for r in rows)))
    return sorted(sent, key=lambda s: (s.at, s.group_id, s.notification))


def render_notification(s: Sent, where: dict[str, str]) -> str:
    """``12:03:10Z  FIRING    demo-roundrobin STOPPED -> webhook (dev/.stack/webhook/...)``:
    ``where`` names, per channel, where a person reads what it got."""
    subject = s.group_id or f"cluster {s.cluster}"
    went = []
    for channel, state, error in s.channels:
        place = f" {where[channel]}" if channel in where else ""
        went.append(f"{channel}{place}" if state == "sent" else
                    f"{channel} FAILED ({error or state}; retried at the next evaluation)")
    kind = s.notification.split("-")[0].upper()
    what = f"{s.headline} is over" if s.notification == "resolved" else s.headline
    return (f"{clock(s.at)}  {kind:<8}  {cell(subject, NAME_WIDTH).rstrip()} {what}"
            f" -> {', '.join(went)}")


def render_summary(snapshots: int, started: datetime, ended: datetime,
                   incidents: Sequence[Any], notifications: int, mails: int,
                   where: dict[str, str], dashboards: Sequence[str]) -> str:
    """What happened during the run, and where to look next."""
    from groupscope.serve.alerting.notify import headline

    lines = ["", f"groupscope ran for {duration((ended - started).total_seconds())}: "
             f"{snapshots} snapshot{'s' if snapshots != 1 else ''} in the warehouse."]
    from groupscope.serve.alerting.incidents import INHIBITED

    fired = [i for i in incidents if i.firing_at is not None and not i.details.get(INHIBITED)]
    held = len([i for i in incidents if i.details.get(INHIBITED)])
    resolved = [i for i in fired if i.resolved_at is not None]
    lines.append(f"  incidents      {len(fired)} fired, {len(resolved)} resolved, "
                 f"{len(fired) - len(resolved)} still firing"
                 + (f" ({held} more held: their group's STOPPED or STALLED said it)"
                    if held else ""))
    for i in fired:
        subject = i.group_id or f"cluster {i.cluster}"
        end = (f"resolved {clock(i.resolved_at)}" if i.resolved_at is not None
               else "still firing")
        lines.append(f"    {cell(subject, NAME_WIDTH)} {i.rule:<24} fired {clock(i.firing_at)},"
                     f" {end}: {headline(i)}")
    lines.append(f"  notifications  {notifications} deliveries (a notification to a channel each)")
    for channel, place in where.items():
        lines.append(f"    {channel:<12} {place}")
    lines.append(f"  e-mails        {mails} in {where.get('email', 'the e-mail folder')}")
    lines.append("  dashboards     " + "\n                 ".join(dashboards))
    return "\n".join(lines)
