"""The text of alert notifications, and their delivery: the notifications one evaluation owes
are grouped per channel (several incidents of one cluster make one message, so twenty groups
stopping at once are one notification, not twenty) and each channel's outcome is recorded on
the deliveries (``groupscope.serve.incidents``). A channel that fails does not hold up the
others; its deliveries stay owed and are retried at the next evaluation.

Texts say what is wrong, how long, how bad, and what to open next::

    [FIRING] cluster prod, group payments-eu: STOPPED.
    12 of 12 partitions have not moved for 1 m 10 s; lag 48,112 records (about 6 m 40 s).
    Members: 0 (Empty since 12:03:10Z).
    Dashboard: <link>. Runbook: <line>.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from groupscope.serve.channels import Channel, ChannelError, Message
from groupscope.serve.incidents import Incident, Undelivered

log = logging.getLogger(__name__)

# At most this many incidents are listed in one grouped message; the rest are counted.
MAX_LISTED = 40
GROUP_DASHBOARD = "/d/groupscope-group/group-detail"
OVERVIEW_DASHBOARD = "/d/groupscope-overview/overview"


def duration(seconds: float | None) -> str:
    """``1 m 10 s``, ``2 h 5 m``, ``45 s``."""
    if seconds is None:
        return "?"
    total = round(max(seconds, 0.0))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} m"
    if minutes:
        return f"{minutes} m {secs} s" if secs else f"{minutes} m"
    return f"{secs} s"


def _count(value: Any) -> str:
    return f"{int(value):,}" if value is not None else "?"


def _clock(iso: str | None) -> str:
    """``12:03:10Z`` (UTC)."""
    if not iso:
        return "?"
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%H:%M:%SZ")


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def dashboard_link(base: str, incident: Incident) -> str:
    base = base.rstrip("/")
    if incident.group_id:
        return (f"{base}{GROUP_DASHBOARD}?var-cluster={quote(incident.cluster, safe='')}"
                f"&var-group={quote(incident.group_id, safe='')}")
    return f"{base}{OVERVIEW_DASHBOARD}?var-cluster={quote(incident.cluster, safe='')}"


def subject_of(incident: Incident) -> str:
    where = f"cluster {incident.cluster}"
    return f"{where}, group {incident.group_id}" if incident.group_id else where


def headline(incident: Incident) -> str:
    """What is wrong, in a word or a few (upper case for the states an on-call pages on)."""
    d, condition = incident.details, incident.details.get("condition", "")
    if condition == "group_status_err":
        stopped = (d.get("stop_partitions") or 0) > 0 and not d.get("member_count")
        return "STOPPED" if stopped else "STALLED"
    return {
        "partition_rewind": "REWIND (committed offsets moved back)",
        "lag_seconds": f"lag {duration(incident.value)} behind",
        "lag_records": f"lag {_count(incident.value)} records",
        "lag_beyond_retention": "LAG BEYOND RETENTION (data lost to the consumer)",
        "group_empty_lag_growing": "EMPTY while its lag grows",
        "rebalances_per_hour": f"REBALANCE STORM ({_count(incident.value)} in the last hour)",
        "collector_stale": "collector STALE",
        "snapshot_incomplete": "snapshots INCOMPLETE",
        "quality_gate_failed": "quality gate FAILED",
    }.get(condition, f"{incident.rule} {incident.value:g} > {incident.threshold:g}")


def detail_lines(incident: Incident) -> list[str]:
    """The facts behind the headline."""
    d, condition = incident.details, incident.details.get("condition", "")
    lag = f"lag {_count(d.get('lag'))} records"
    if d.get("time_lag_s") is not None:
        lag += (f" ({duration(d['time_lag_s'])} behind)" if d.get("time_lag_exact")
                else f" (about {duration(d['time_lag_s'])})")
    members = d.get("member_count")
    members_line = (f"Members: {_count(members)} ({d.get('state', '?')}"
                    + (f" since {_clock(d.get('no_members_since'))}"
                       if members == 0 and d.get("no_members_since") else "") + ").")
    if condition == "group_status_err":
        affected = (d.get("stop_partitions") or 0) + (d.get("stall_partitions") or 0)
        still = _seconds_between(d.get("unchanged_since"), d.get("snapshot_ts"))
        moved = (f" have not moved for {duration(still)}" if still is not None
                 else " are not moving")
        return [f"{affected} of {_count(d.get('partitions'))} partitions{moved}; {lag}.",
                members_line, f"Worst: {d.get('worst_topic')}[{d.get('worst_partition')}]: "
                              f"{d.get('worst_reason')}."]
    if condition == "group_empty_lag_growing":
        return [f"No member is consuming; lag grew by {_count(d.get('lag_growth'))} records "
                f"since the previous snapshot: {lag}.", members_line]
    if condition == "partition_rewind":
        return [f"{_count(d.get('rewind_partitions'))} of {_count(d.get('partitions'))} "
                f"partitions' committed offsets moved back (an offset reset or a replay); "
                f"{lag}.", members_line]
    if condition in ("lag_seconds", "lag_records"):
        unit = duration if condition == "lag_seconds" else _count
        return [f"Above the threshold of {unit(incident.threshold)}"
                f"{' records' if condition == 'lag_records' else ''} since "
                f"{_clock(incident.started_at.isoformat())}; {lag}, status "
                f"{d.get('status', '?')}.", members_line]
    if condition == "lag_beyond_retention":
        return [f"{_count(d.get('beyond_retention_partitions'))} partitions' committed offsets "
                "are below the log start: records the group had not read were deleted by "
                f"retention; {lag}.", members_line]
    if condition == "rebalances_per_hour":
        return [f"{_count(incident.value)} rebalances in the hour up to "
                f"{_clock(d.get('snapshot_ts'))} (threshold {_count(incident.threshold)}); "
                f"{lag}.", members_line]
    if condition == "collector_stale":
        return [f"No complete snapshot for {duration(d.get('since_s'))} "
                f"({incident.value:.1f} snapshot intervals of {duration(d.get('snapshot_every_s'))}"
                f"; threshold {incident.threshold:g}). Last complete snapshot: "
                f"{_clock(d.get('last_complete_snapshot'))}, last snapshot: "
                f"{_clock(d.get('last_snapshot'))}.",
                "Check the snapshot DAG's runs and the cluster's reachability."]
    if condition == "snapshot_incomplete":
        return [f"{_count(incident.value)} snapshots in a row are incomplete (threshold "
                f"{incident.threshold:g}); see raw.collection_errors for what failed."]
    if condition == "quality_gate_failed":
        suites = d.get("failed_suites") or []
        return [f"Suite {s['suite']} failed on {s['subject']} ({s['failed']} expectation(s))."
                for s in suites] or ["A quality suite failed; see ops.quality_results."]
    return [f"Value {incident.value:g}, threshold {incident.threshold:g}."]


def incident_fields(incident: Incident, notification: str, dashboard: str) -> dict[str, Any]:
    """One incident as the webhook's JSON carries it."""
    return {
        "incident_id": incident.incident_id, "notification": notification,
        "state": incident.state, "rule": incident.rule, "severity": incident.severity,
        "cluster": incident.cluster, "group": incident.group_id or None,
        "topic": incident.topic or None, "value": incident.value,
        "threshold": incident.threshold, "since": incident.started_at.isoformat(),
        "firing_since": incident.firing_at.isoformat() if incident.firing_at else None,
        "resolved_at": incident.resolved_at.isoformat() if incident.resolved_at else None,
        "summary": headline(incident), "details": " ".join(detail_lines(incident)),
        "dashboard": dashboard_link(dashboard, incident), "runbook": incident.runbook,
        "labels": dict(incident.labels),
    }


def _tag(notification: str) -> str:
    return "RESOLVED" if notification == "resolved" else "FIRING"


def _resolved_line(incident: Incident) -> str:
    began = incident.firing_at or incident.started_at
    lasted = (incident.resolved_at - began).total_seconds() if incident.resolved_at else None
    return (f"{headline(incident)} is over after {duration(lasted)} "
            f"(firing since {_clock(began.isoformat())}).")


def _now_line(incident: Incident) -> str:
    d = incident.details.get("now") or incident.details
    if not incident.group_id:
        return ""
    return (f"Now: lag {_count(d.get('lag'))} records, {_count(d.get('member_count'))} "
            f"member(s), status {d.get('status', '?')}.")


def single(item: Undelivered, dashboard: str, also: Sequence[Undelivered] = ()) -> Message:
    """One subject's message; ``also``: its other incidents of the same kind, in a line."""
    incident, tag = item.incident, _tag(item.notification)
    repeat = " (still firing)" if item.notification.startswith("repeat-") else ""
    others = [f"{headline(o.incident)} ({o.incident.rule})" for o in also]
    if tag == "RESOLVED":
        body = [f"[RESOLVED] {subject_of(incident)}: {_resolved_line(incident)}",
                *([f"Also resolved: {'; '.join(others)}."] if others else []),
                _now_line(incident)]
    else:
        body = [f"[FIRING] {subject_of(incident)}: {headline(incident)}.{repeat}",
                *detail_lines(incident),
                *([f"Also firing: {'; '.join(others)}."] if others else [])]
    body.append(f"Dashboard: {dashboard_link(dashboard, incident)}. "
                f"Runbook: {incident.runbook or '-'}")
    subject = (f"[{tag}] groupscope {incident.severity}: {subject_of(incident)}: "
               f"{headline(incident)}")
    return Message(subject, "\n".join(line for line in body if line),
                   [incident_fields(i.incident, i.notification, dashboard)
                    for i in (item, *also)], tag.lower())


def grouped(items: Sequence[Undelivered], dashboard: str) -> Message:
    """Several incidents (one cluster, one channel, one kind) in one message."""
    tag = _tag(items[0].notification)
    clusters = sorted({i.incident.cluster for i in items})
    where = f"cluster {clusters[0]}" if len(clusters) == 1 else f"clusters {', '.join(clusters)}"
    by_rule: dict[str, int] = {}
    for item in items:
        by_rule[item.incident.rule] = by_rule.get(item.incident.rule, 0) + 1
    summary = ", ".join(f"{n} {rule}" for rule, n in sorted(by_rule.items()))
    lines = [f"[{tag}] {where}: {len(items)} incidents ({summary})."]
    for item in items[:MAX_LISTED]:
        incident = item.incident
        who = f"group {incident.group_id}" if incident.group_id else "the collector"
        if tag == "RESOLVED":
            lines.append(f"- {who}: {_resolved_line(incident)}")
        else:
            lines.append(f"- {who}: {headline(incident)}. {detail_lines(incident)[0]}")
    if len(items) > MAX_LISTED:
        lines.append(f"- ... and {len(items) - MAX_LISTED} more (groupscope alerts list).")
    overview = dashboard_link(dashboard, replace(items[0].incident, group_id=""))
    lines.append(f"Dashboard: {overview}.")
    runbooks = {i.incident.rule: i.incident.runbook for i in items if i.incident.runbook}
    lines += [f"Runbook ({rule}): {text}" for rule, text in sorted(runbooks.items())]
    worst = "critical" if any(i.incident.severity == "critical" for i in items) else \
        items[0].incident.severity
    subject = f"[{tag}] groupscope {worst}: {where}: {len(items)} incidents ({summary})"
    return Message(subject, "\n".join(lines),
                   [incident_fields(i.incident, i.notification, dashboard) for i in items],
                   tag.lower())


def messages(items: Iterable[Undelivered], dashboard: str) -> list[tuple[Message,
                                                                          list[Undelivered]]]:
    """The messages for one channel's owed deliveries: firing (and repeats) together, resolved
    together; one incident alone makes a single message."""
    kinds: dict[str, list[Undelivered]] = {}
    for item in items:
        kinds.setdefault(_tag(item.notification), []).append(item)
    result = []
    for tag in ("FIRING", "RESOLVED"):
        batch = kinds.get(tag, [])
        if not batch:
            continue
        subjects = {(i.incident.cluster, i.incident.group_id) for i in batch}
        if len(subjects) == 1:  # one group (or the collector): its message, all its rules
            ordered = sorted(batch, key=_importance)
            message = single(ordered[0], dashboard, also=ordered[1:])
        else:
            message = grouped(batch, dashboard)
        result.append((message, batch))
    return result


def _importance(item: Undelivered) -> tuple[int, str]:
    severity = {"critical": 0, "warning": 1}.get(item.incident.severity, 2)
    return severity, item.incident.rule


def deliver(owed: Sequence[Undelivered], channels: Mapping[str, Channel], dashboard: str,
            record: Callable[[list[Undelivered], str | None], None]) -> dict[str, str]:
    """Sends what is owed, channel by channel; ``record(items, error)`` keeps each outcome
    (error None: sent). Returns the outcome per channel ("sent N" or the error)."""
    per_channel: dict[str, list[Undelivered]] = {}
    for item in owed:
        per_channel.setdefault(item.channel, []).append(item)
    outcome: dict[str, str] = {}
    for name, items in per_channel.items():
        channel = channels.get(name)
        if channel is None:
            error = f"channel {name} is not configured (no such connection); kept for later"
            record(items, error)
            outcome[name] = error
            continue
        sent = 0
        for message, batch in messages(items, dashboard):
            try:
                channel.send(message)
            except ChannelError as exc:
                record(batch, str(exc))
                outcome[name] = str(exc)
                log.warning("alert delivery to %s failed, retried at the next evaluation: %s",
                            name, exc)
                continue
            except Exception as exc:  # a notifier's own error: recorded, never fatal
                error = f"channel {name}: {type(exc).__name__}: {_first_line(exc)}"
                record(batch, error)
                outcome[name] = error
                log.warning("alert delivery to %s failed, retried at the next evaluation: %s",
                            name, error)
                continue
            record(batch, None)
            sent += len(batch)
        outcome.setdefault(name, f"sent {sent}")
    return outcome


def _first_line(exc: BaseException) -> str:
    """The first line of an error, with any URL taken out (a webhook URL is a secret)."""
    lines = str(exc).strip().splitlines()
    return _URL.sub("<url>", lines[0])[:300] if lines else ""


_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
