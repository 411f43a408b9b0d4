"""The text of alert notifications, and their delivery: the notifications one evaluation owes are
grouped per channel (several incidents of one cluster make one message, so twenty groups
stopping at once are one notification, not twenty) and each channel's outcome is recorded on
the deliveries (``groupscope.serve.alerting.incidents``), each outcome committed on its own. A
channel that fails does not hold up the others; its deliveries stay owed and are retried with
exponential backoff until they are given up (``RuleSet.retry_delay``, ``delivery_max_age``).
Per incident the order holds: no RESOLVED before its FIRING was delivered (a resolution owed
with its firing is one message that says both). Every incident in a payload carries a
``dedup_key`` (incident id and notification), stable across retries: delivery is at least once,
and a receiver drops a repeat by that key.

Texts say what is wrong, how long, how bad, and what to open next::

    [FIRING] cluster prod, group payments-eu: STOPPED.
    12 of 12 partitions have not moved for 1 m 10 s; lag 48,112 records (about 6 m 40 s).
    Members: 0 (Empty since 12:03:10Z).
    Dashboard: <link>. Runbook: <line>.

Names (a cluster, group id, topic, client id, member id, host) come from Kafka and are chosen by
whoever creates a group: they enter a text only through ``safe_text.shown`` (the incident's own
names) or ``_facts`` (its details, every string of them), escaped and cut, so a newline in a
group id cannot forge a line of the message, nor a bidi control reorder it
(``groupscope.serve.alerting.safe_text``). The webhook's structured fields
(``incident_fields``) keep them raw.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import quote

from groupscope.kafka.adapter import OFFSETS_TOPIC
from groupscope.serve.alerting import causes
from groupscope.serve.alerting.channels import Channel, ChannelError, Message
from groupscope.serve.alerting.incidents import Incident, Undelivered, is_unknown_notice
from groupscope.serve.alerting.kinds import BY_NAME
from groupscope.serve.alerting.rules import RuleSet
from groupscope.serve.alerting.safe_text import TEXT_LIMIT, shown, shown_values

log = logging.getLogger(__name__)

# At most this many incidents are listed in one grouped message; the rest are counted.
MAX_LISTED = 40
GROUP_DASHBOARD = "/d/groupscope-group/group-detail"
OVERVIEW_DASHBOARD = "/d/groupscope-overview/overview"


def duration(seconds: float | None) -> str:
    """``1 m 10 s``, ``2 h 5 m``, ``45 s``."""
    if seconds is None or not math.isfinite(seconds):
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
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "?"
    return f"{int(value):,}"


def _lag(d: Mapping[str, Any]) -> str:
    """The group's lag as a message says it: unknown, with its lower bound, while some
    partition's offsets were not read (analyze.lag.rollups), never the partial sum."""
    unread = d.get("lag_unknown_partitions") or 0
    if d.get("lag") is None and unread > 0:
        return (f"lag unknown ({_count(unread)} partition(s) not read; at least "
                f"{_count(d.get('lag_lower_bound'))} records)")
    return f"lag {_count(d.get('lag'))} records"


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
    where = f"cluster {shown(incident.cluster)}"
    return f"{where}, group {shown(incident.group_id)}" if incident.group_id else where


def _facts(incident: Incident) -> dict[str, Any]:
    """The incident's details as a text quotes them: every string escaped and cut (they hold
    names from Kafka, and texts that quote them: errors, a cause's evidence)."""
    facts: dict[str, Any] = shown_values(incident.details, TEXT_LIMIT)
    return facts


def headline(incident: Incident) -> str:
    """What is wrong, in a word or a few (upper case for the states an on-call pages on)."""
    d, condition = _facts(incident), incident.details.get("condition", "")
    if condition == "group_status_err" and d.get("coordinator_down"):
        return "COORDINATOR DOWN (it can neither commit nor rebalance)"
    if condition == "group_status_err":
        # STOP: nobody commits (the group is empty, or its progress stopped as a whole while
        # its members are still listed); STALL: members are there, some partitions are not.
        return "STOPPED" if (d.get("stop_partitions") or 0) > 0 else "STALLED"
    if condition == "loss_forecast_s" and d.get("loss_basis") == "lost":
        return "DATA LOSS now (retention is deleting records it has not read)"
    kind = BY_NAME.get(condition)
    if kind is None:  # a stored incident of a kind this version no longer has
        return f"{shown(incident.rule)} {incident.value:g} > {incident.threshold:g}"
    fields = _Fields({**d, "channel": d.get("channel") or shown(incident.topic),
                      "duration": duration(incident.value), "count": _count(incident.value)})
    return kind.headline.format_map(fields)


class _Fields(dict[str, Any]):
    """A headline's fields: a detail that is missing reads ``?``."""

    def __missing__(self, key: str) -> str:
        return "?"


def _size(value: Any) -> str:
    if value is None:
        return "?"
    if value < 0:
        return "unlimited"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{int(value)} B"


def _loss_lines(incident: Incident) -> list[str]:
    """Which partition loses first, when, why: the topic's retention and the two rates."""
    d = _facts(incident)
    where = f"{d.get('loss_topic')}[{d.get('loss_partition')}]"
    retention_ms = d.get("loss_retention_ms")
    by_age = ("?" if retention_ms is None else "unlimited" if retention_ms < 0
              else duration(retention_ms / 1000))
    retention = f"retention.ms {by_age}, retention.bytes {_size(d.get('loss_retention_bytes'))}"
    produced, consumed = d.get("loss_production_rate"), d.get("loss_consumption_rate")
    rates = (f"production {_per_second(produced)}, consumption {_per_second(consumed)}")
    at = ""
    if d.get("snapshot_ts") and not math.isnan(incident.value):
        at = " at " + _clock((datetime.fromisoformat(d["snapshot_ts"])
                              + timedelta(seconds=incident.value)).isoformat())
    if d.get("loss_basis") not in ("lost", "retention_ms", "log_start"):
        # no forecast behind the value (unknown, or no loss forecast within 7 days)
        first = f"No partition's loss is forecast at the latest snapshot; {_lag(d)}."
    elif d.get("loss_basis") == "lost":
        first = (f"{where}: records the group had not read are being deleted now "
                 f"({retention}); {rates}.")
    elif d.get("loss_basis") == "retention_ms":
        first = (f"{where}: the record at its committed offset reaches the topic's "
                 f"retention.ms in about {duration(incident.value)}{at}, when its segment "
                 f"may be deleted ({retention}); {rates}.")
    else:
        first = (f"{where}: the log deletes as fast as it grows and its start is "
                 f"{_count(d.get('loss_headroom'))} records behind the committed offset; "
                 f"the lag grows by {_per_second(d.get('loss_growth_rate'))}, so "
                 f"retention reaches unread records in about {duration(incident.value)}{at} "
                 f"({retention}); {rates}.")
    return [first, f"Threshold {duration(incident.threshold)}; lag_beyond_retention fires "
                   "once records are lost."]


def _per_second(rate: Any) -> str:
    if rate is None or (isinstance(rate, float) and math.isnan(rate)):
        return "? records/s"
    return f"{rate:,.1f} records/s"


def detail_lines(incident: Incident) -> list[str]:
    """The facts behind the headline."""
    d, condition = _facts(incident), incident.details.get("condition", "")
    lag = _lag(d)
    if d.get("time_lag_s") is not None:
        lag += (f" ({duration(d['time_lag_s'])} behind)" if d.get("time_lag_exact")
                else f" (about {duration(d['time_lag_s'])})")
    members = d.get("member_count")
    members_line = (f"Members: {_count(members)} ({d.get('state', '?')}"
                    + (f" since {_clock(d.get('no_members_since'))}"
                       if members == 0 and d.get("no_members_since") else "") + ").")
    if condition == "group_status_err" and d.get("coordinator_down"):
        coordinator = d.get("coordinator")
        since = d.get("down_since_text") or f"since {_clock(d.get('down_since'))}"
        lines = [f"Its offsets partition, {OFFSETS_TOPIC}-{d.get('offsets_partition')}, has "
                 f"had no leader {since}: no broker coordinates the group, so its commits fail "
                 "and no broker lists it."]
        if d.get("last_listed"):
            lines.append(f"Last listed {_clock(d.get('last_listed'))} with "
                         f"{_count(d.get('member_count'))} member(s) ({d.get('state') or '?'})"
                         + (f", coordinated by broker {coordinator}." if coordinator is not None
                            else "."))
        return lines
    if condition == "group_status_err":
        affected = (d.get("stop_partitions") or 0) + (d.get("stall_partitions") or 0)
        still = _seconds_between(d.get("unchanged_since"), d.get("snapshot_ts"))
        moved = (f" have not moved for {duration(still)}" if still is not None
                 else " are not moving")
        # A share group's position is its start offset: the earliest record not yet
        # acknowledged.
        what = "partitions' start offsets" if d.get("start_offsets") else "partitions"
        return [f"{affected} of {_count(d.get('partitions'))} {what}{moved}; {lag}.",
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
        window = d.get("rebalance_window_s") or 3600.0
        source = {"offsets_topic": "the generations in __consumer_offsets",
                  "rebalance_events": "the hourly rebalance events (no offsets-topic history)"}
        counted = (f"{_count(d.get('rebalances_in_window'))} rebalances in the "
                   f"{duration(window)} up to {_clock(d.get('snapshot_ts'))}")
        if window != 3600.0:
            counted += f", {_count(incident.value)} an hour"
        return [f"{counted} (threshold {_count(incident.threshold)} an hour; counted from "
                f"{source.get(d.get('rebalances_source') or '', 'the rebalance events')}); "
                f"{lag}.", members_line]
    if condition == "rebalance_stuck":
        return [f"{d.get('state', '?')} since {_clock(d.get('rebalancing_since'))} "
                f"({duration(incident.value)}; threshold {duration(incident.threshold)}): the "
                "group consumes nothing until every member has rejoined, which it waits for up "
                "to its rebalance timeout (max.poll.interval.ms for a classic group, 5 min by "
                f"default; rebalance.timeout.ms for a consumer-protocol group); {lag}.",
                members_line]
    if condition == "loss_forecast_s":
        return [*_loss_lines(incident), members_line]
    if condition == "collector_stale":
        return [f"No complete snapshot for {duration(d.get('since_s'))} "
                f"({incident.value:.1f} snapshot intervals of {duration(d.get('snapshot_every_s'))}"
                f"; threshold {incident.threshold:g}). Last complete snapshot: "
                f"{_clock(d.get('last_complete_snapshot'))}, last snapshot: "
                f"{_clock(d.get('last_snapshot'))}.",
                "Check the snapshot DAG's runs and the cluster's reachability."]
    if condition == "snapshot_incomplete":
        failed = "; ".join(f"{e['stage']} {e['code']} x{e['count']} (e.g. {e['example']})"
                           for e in d.get("last_errors") or [])
        return [f"{_count(incident.value)} snapshots in a row are incomplete (threshold "
                f"{incident.threshold:g})"
                + (f"; the latest, at {_clock(d.get('last_snapshot'))}, could not read: "
                   f"{failed}." if failed else "; see raw.collection_errors for what failed.")]
    if condition == "quality_gate_failed":
        suites = d.get("failed_suites") or []
        return [f"Suite {s['suite']} failed on {s['subject']} ({s['failed']} expectation(s))."
                for s in suites] or ["A quality suite failed; see ops.quality_results."]
    if condition == "analytics_stale":
        computed = (f"computed through {_clock(d['computed_through'])}"
                    if d.get("computed_through") else "no live run has computed any yet")
        return [f"The newest status rows are {duration(d.get('behind_s'))} behind the newest "
                f"snapshot ({_clock(d.get('newest_snapshot'))}; {computed}): "
                f"{incident.value:.1f} snapshot intervals of "
                f"{duration(d.get('snapshot_every_s'))}, threshold {incident.threshold:g}.",
                "Until they catch up, no group alert can fire or resolve: every group's value "
                "is unknown. Check the live DAG's live_marts task and the Spark Connect server."]
    if condition == "task_failed":
        since = d.get("failed_since")
        return [f"Task {d.get('task_id')} of DAG {d.get('dag_id')} failed (run {d.get('run_id')}"
                f", try {d.get('try_number')}, at {_clock(d.get('at'))}"
                + (f"; failing since {_clock(since)}" if since and since != d.get("at") else "")
                # the raw reason's first line: escaped first, a traceback would be one line
                + f"): {shown(_first_line_of(incident.details.get('reason')), TEXT_LIMIT)}"]
    if condition == "channel_failing" and d.get("no_connection"):
        return [f"Alert channel {d.get('channel')} has no connection ({d['no_connection']}): "
                f"{_count(d.get('undelivered'))} notification(s) routed to it since "
                f"{_clock(d.get('failing_since'))} reached nobody there; they stay owed to it.",
                "Create the connection (groupscope alerts check-rules lists each channel's); "
                "this notice goes through the other channels."]
    if condition == "channel_failing":
        return [f"Alert channel {d.get('channel')} has failed every delivery since "
                f"{_clock(d.get('failing_since'))} ({_count(d.get('undelivered'))} notification(s) "
                f"undelivered, {_count(d.get('given_up'))} given up); last error: "
                f"{d.get('last_error') or '?'}.",
                "Its notifications are retried with backoff, and given up past the rules' "
                "delivery_max_age; this notice goes through the other channels."]
    if condition == "rules_invalid":
        return [f"{d.get('error')}.", "Alerting goes on with the last valid rules "
                "(kept in the warehouse) until the file is fixed."]
    return [f"Value {incident.value:g}, threshold {incident.threshold:g}."]


def cause_lines(incident: Incident) -> list[str]:
    """The "Likely cause" block: the probable causes the evaluation ranked for the incident
    (``groupscope.serve.alerting.causes``), best first; nothing for a condition they do not
    explain, or an incident evaluated before they existed."""
    found = _facts(incident).get("causes")
    if found is None or not causes.explains(str(incident.details.get("condition", ""))):
        return []
    if not found:
        return ["Likely cause: none known (no member crashed or left, no stuck record, "
                "rebalance storm, coordinator or partition leader move, producer surge, slow "
                "consumer or rewind in the group's last hour)."]
    first, *rest = found
    return [f"Likely cause: {first['title']}: {first['evidence']}.",
            *[f"Also possible: {c['title']}: {c['evidence']}." for c in rest]]


def top_cause(incident: Incident) -> str | None:
    """The likeliest cause's title, if the evaluation found one."""
    found = _facts(incident).get("causes") or []
    return str(found[0]["title"]) if found else None


def _first_line_of(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0][:500] if lines else "no reason was given"


def incident_fields(incident: Incident, notification: str, dashboard: str) -> dict[str, Any]:
    """One incident as the webhook's JSON carries it."""
    return {
        "incident_id": incident.incident_id, "notification": notification,
        "dedup_key": f"{incident.incident_id}:{notification}",
        "state": incident.state, "rule": incident.rule, "severity": incident.severity,
        "cluster": incident.cluster, "group": incident.group_id or None,
        "topic": incident.topic or None,
        # unknown: null; infinite (a channel without a connection) too: JSON has no infinity
        "value": incident.value if math.isfinite(incident.value) else None,
        "threshold": incident.threshold, "since": incident.started_at.isoformat(),
        "firing_since": incident.firing_at.isoformat() if incident.firing_at else None,
        "resolved_at": incident.resolved_at.isoformat() if incident.resolved_at else None,
        "summary": headline(incident), "details": " ".join(detail_lines(incident)),
        "dashboard": dashboard_link(dashboard, incident), "runbook": incident.runbook,
        "labels": dict(incident.labels),
        "causes": list(incident.details.get("causes") or []),
    }


def _tag(notification: str) -> str:
    if is_unknown_notice(notification):
        return "UNKNOWN"
    return "RESOLVED" if notification == "resolved" else "FIRING"


def _unknown_line(incident: Incident) -> str:
    d = _facts(incident)
    return (f"{headline(incident)} cannot be judged since {_clock(d.get('unknown_since'))}: "
            f"{d.get('unknown_why') or 'no data'}. It stays firing until there is evidence "
            "that it cleared.")


def _resolved_line(incident: Incident) -> str:
    began = incident.firing_at or incident.started_at
    lasted = (incident.resolved_at - began).total_seconds() if incident.resolved_at else None
    return (f"{headline(incident)} is over after {duration(lasted)} "
            f"(firing since {_clock(began.isoformat())}).")


def _now_line(incident: Incident) -> str:
    facts = _facts(incident)
    d = facts.get("now") or facts
    if not incident.group_id:
        return ""
    return (f"Now: {_lag(d)}, {_count(d.get('member_count'))} "
            f"member(s), status {d.get('status', '?')}.")


def single(item: Undelivered, dashboard: str, also: Sequence[Undelivered] = (),
           fired_too: frozenset[str] = frozenset()) -> Message:
    """One subject's message; ``also``: its other incidents of the same kind, in a line;
    ``fired_too``: the incidents whose firing was never delivered, said in their resolution."""
    incident, tag = item.incident, _tag(item.notification)
    repeat = " (still firing)" if item.notification.startswith("repeat-") else ""
    others = [f"{headline(o.incident)} ({o.incident.rule})" for o in also]
    if tag == "RESOLVED":
        body = [f"[RESOLVED] {subject_of(incident)}: {_resolved_line(incident)}",
                *([_fired_too_line(incident)] if incident.incident_id in fired_too else []),
                *([f"Also resolved: {'; '.join(others)}."] if others else []),
                _now_line(incident)]
    elif tag == "UNKNOWN":
        body = [f"[UNKNOWN] {subject_of(incident)}: {_unknown_line(incident)}",
                *([f"Also unknown: {'; '.join(others)}."] if others else [])]
    else:
        body = [f"[FIRING] {subject_of(incident)}: {headline(incident)}.{repeat}",
                *detail_lines(incident), *cause_lines(incident),
                *([f"Also firing: {'; '.join(others)}."] if others else [])]
    body.append(f"Dashboard: {dashboard_link(dashboard, incident)}. "
                f"Runbook: {incident.runbook or '-'}")
    subject = (f"[{tag}] groupscope {incident.severity}: {subject_of(incident)}: "
               f"{headline(incident)}")
    return Message(subject, "\n".join(line for line in body if line),
                   [incident_fields(i.incident, i.notification, dashboard)
                    for i in (item, *also)], tag.lower())


def _fired_too_line(incident: Incident) -> str:
    return (f"It fired at {_clock((incident.firing_at or incident.started_at).isoformat())}, "
            "but that notification could not be delivered before it resolved: this message "
            "is both.")


_COLLECTOR = ("collector_stale", "snapshot_incomplete", "quality_gate_failed")


def grouped(items: Sequence[Undelivered], dashboard: str,
            fired_too: frozenset[str] = frozenset()) -> Message:
    """Several incidents (one cluster, one channel, one kind) in one message."""
    tag = _tag(items[0].notification)
    clusters = sorted({shown(i.incident.cluster) for i in items})
    where = f"cluster {clusters[0]}" if len(clusters) == 1 else f"clusters {', '.join(clusters)}"
    by_rule: dict[str, int] = {}
    for item in items:
        by_rule[item.incident.rule] = by_rule.get(item.incident.rule, 0) + 1
    summary = ", ".join(f"{n} {rule}" for rule, n in sorted(by_rule.items()))
    lines = [f"[{tag}] {where}: {len(items)} incidents ({summary})."]
    for item in items[:MAX_LISTED]:
        incident = item.incident
        who = (f"group {shown(incident.group_id)}" if incident.group_id else
               "the collector" if incident.details.get("condition") in _COLLECTOR else
               "groupscope")
        if tag == "RESOLVED":
            lines.append(f"- {who}: {_resolved_line(incident)}"
                         + (" (its firing was never delivered)"
                            if incident.incident_id in fired_too else ""))
        elif tag == "UNKNOWN":
            lines.append(f"- {who}: {_unknown_line(incident)}")
        else:
            cause = top_cause(incident)
            lines.append(f"- {who}: {headline(incident)}. {detail_lines(incident)[0]}"
                         + (f" Likely cause: {cause}." if cause else ""))
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
    """The messages for one channel's owed deliveries: firing (and repeats) together, unknown
    together, resolved together; one incident alone makes a single message. An incident whose
    firing (or repeat, or unknown notice) is still owed when its resolution is owed too gets one
    message that says both, never a RESOLVED before its FIRING; the batch of that message
    carries both deliveries."""
    items = list(items)
    resolved = {i.incident.incident_id for i in items if i.notification == "resolved"}
    absorbed: dict[str, list[Undelivered]] = {}
    kinds: dict[str, list[Undelivered]] = {}
    for item in items:
        if item.notification != "resolved" and item.incident.incident_id in resolved:
            absorbed.setdefault(item.incident.incident_id, []).append(item)
            continue
        kinds.setdefault(_tag(item.notification), []).append(item)
    fired_too = frozenset(i for i, earlier in absorbed.items()
                          if any(not is_unknown_notice(e.notification) for e in earlier))
    result = []
    for tag in ("FIRING", "UNKNOWN", "RESOLVED"):
        batch = kinds.get(tag, [])
        if not batch:
            continue
        # A subject: a group, or the cluster's collector; groupscope's own tasks and channels
        # (named in the topic) are subjects apart, so each keeps its detail line.
        subjects = {(i.incident.cluster, i.incident.group_id, i.incident.topic) for i in batch}
        if len(subjects) == 1:  # one group (or the collector): its message, all its rules
            ordered = sorted(batch, key=_importance)
            message = single(ordered[0], dashboard, also=ordered[1:], fired_too=fired_too)
        else:
            message = grouped(batch, dashboard, fired_too)
        carried = [e for i in batch for e in absorbed.get(i.incident.incident_id, [])]
        result.append((message, [*carried, *batch]))
    return result


def _importance(item: Undelivered) -> tuple[int, str]:
    severity = {"critical": 0, "warning": 1}.get(item.incident.severity, 2)
    return severity, item.incident.rule


class DeliveryLog(Protocol):
    """Where delivery outcomes are kept (``ops.alert_deliveries``); each call is committed on
    its own, so an outcome is never lost or undone by a later failure. ``attempting`` is
    called before a send: the attempt is kept as failed until its outcome replaces it."""

    def attempting(self, items: list[Undelivered], retry_at: datetime) -> None: ...

    def sent(self, items: list[Undelivered]) -> None: ...

    def failed(self, items: list[Undelivered], error: str, retry_at: datetime) -> None: ...

    def given_up(self, items: list[Undelivered], why: str) -> None: ...

    def dropped(self, items: list[Undelivered], why: str) -> None: ...


# The time each channel is given for one notice of groupscope's own (the heartbeat, the outage
# notice): one short message, after the delivery's own deadline, inside the alert task's 2
# minutes. The channels send at the same time, each in a thread of its own.
NOTICE_DEADLINE_S = 10.0


def deliver(owed: Sequence[Undelivered], channels: Mapping[str, Channel], dashboard: str,
            log_to: DeliveryLog, now: datetime, rules: RuleSet,
            unavailable: Mapping[str, str] | None = None, keep_unknown: bool = False
            ) -> dict[str, str]:
    """Sends what is owed, every channel at once and each apart (``send_apart``), and keeps
    each outcome (``log_to``). Returns the outcome per channel ("sent N", "backing off until
    ...", or the error).

    - What is owed to a channel the rules no longer name is dropped, never retried; with
      ``keep_unknown`` (the rules in use are a fallback for an invalid file, which may name
      it) it stays owed, untouched.
    - ``unavailable``: configured channels whose connection cannot be read right now (why):
      their deliveries fail and are retried, like a channel that refused. A routed channel
      without any connection fails the same way (its failure is ``channel_failing``).
    - Every attempt is counted and kept as a failure before anything is sent: if the
      evaluation is killed while a channel stalls, that channel is in backoff at the next
      evaluation and the others do not wait behind it.
    - A channel that has not finished within ``rules.delivery_deadline`` fails like a
      refusal.
    - A channel that failed waits until the retry time of its latest failure before it is tried
      again, all its owed notifications with it (so a new RESOLVED never overtakes an older
      FIRING in backoff): after its N-th failure in a row it waits ``rules.retry_delay(N)``;
      what is owed longer than ``rules.delivery_max_age`` is given up.
    - After a failed send, the channel's other messages of this evaluation are not attempted:
      they fail with the same error and keep their order for the retry.
    - One episode of a rule and subject at a time: what a newer incident of the same
      fingerprint owes waits (untouched) until the older one's notifications to the channel
      are delivered or given up, so a receiver never gets the new FIRING before the old
      RESOLVED."""
    known = {c.name for c in rules.channels}
    unavailable = unavailable or {}
    per_channel: dict[str, list[Undelivered]] = {}
    for item in owed:
        per_channel.setdefault(item.channel, []).append(item)
    outcome: dict[str, str] = {}
    held_notes: dict[str, str] = {}
    due: dict[str, list[tuple[Message, list[Undelivered], datetime]]] = {}
    for name, items in per_channel.items():
        if name not in known and keep_unknown:
            outcome[name] = (f"kept {len(items)}: the channel is not in the rules in use (the "
                             "rules file is invalid)")
            continue
        if name not in known:
            log_to.dropped(items, f"channel {name} is no longer in the rules; not retried")
            outcome[name] = f"dropped {len(items)} (no longer in the rules)"
            continue
        expired = [i for i in items if i.created_at is not None
                   and now - i.created_at > rules.delivery_max_age]
        if expired:
            last = next((i.error for i in reversed(expired) if i.error), None) or "never sent"
            age = duration(rules.delivery_max_age.total_seconds())
            log_to.given_up(expired, f"given up after {age} undelivered; last error: {last}")
            gone = {(i.incident.incident_id, i.notification) for i in expired}
            items = [i for i in items if (i.incident.incident_id, i.notification) not in gone]
        items, held = _oldest_episodes(items)
        if held:
            held_notes[name] = (f"; {len(held)} held behind an older episode of the same rule "
                                "and subject")
        waiting: datetime | None = max(
            (i.next_attempt_at for i in items if i.next_attempt_at is not None), default=None)
        if waiting is not None and waiting > now:
            outcome[name] = f"backing off until {_clock(waiting.isoformat())}"
            continue
        if not items:
            if expired or held:
                outcome[name] = "sent 0" + held_notes.get(name, "")
            continue
        planned = []
        for message, batch in messages(items, dashboard):
            retry_at = now + rules.retry_delay(max((i.attempts for i in batch), default=0) + 1)
            log_to.attempting(batch, retry_at)
            planned.append((message, batch, retry_at))
        due[name] = planned
    sendable = {name: (channels[name], [m for m, _, _ in planned])
                for name, planned in due.items()
                if name not in unavailable and name in channels}
    deadline_s = rules.delivery_deadline.total_seconds()
    results = send_apart(sendable, deadline_s)
    for name, planned in due.items():
        error = unavailable.get(name)
        if error is None and name not in channels:
            error = f"channel {name} has no connection; kept for later"
        done = results.get(name, [])
        sent = 0
        for index, (_, batch, retry_at) in enumerate(planned):
            if error is None and index < len(done):
                error = done[index]
            elif error is None:
                error = (f"channel {name} did not finish within {duration(deadline_s)} (it "
                         "stalls); retried with backoff")
            if error is None:
                log_to.sent(batch)
                sent += len(batch)
            else:
                log_to.failed(batch, error, retry_at)
        held_note = held_notes.get(name, "")
        if error is not None:
            log.warning("alert delivery to %s failed, retried with backoff: %s", name, error)
            outcome[name] = error + held_note
        else:
            outcome[name] = f"sent {sent}{held_note}"
    return outcome


def send_apart(jobs: Mapping[str, tuple[Channel, Sequence[Message]]],
               deadline_s: float) -> dict[str, list[str | None]]:
    """Sends each channel's messages in order, every channel in a thread of its own, and waits
    at most ``deadline_s`` for all of them. Returns, per channel, the outcome of each message
    it finished (``send_one``: None sent, else the error), stopping after its first failure;
    a channel still sending at the deadline has fewer outcomes than messages. Its thread is
    left to end on its own (a daemon, so it never keeps the process alive): at worst a message
    sent after the deadline is sent again later, which the receiver drops by its
    ``dedup_key``."""
    import threading
    import time

    results: dict[str, list[str | None]] = {name: [] for name in jobs}

    def run(name: str, channel: Channel, batch: Sequence[Message]) -> None:
        for message in batch:
            error = send_one(channel, message)
            results[name].append(error)
            if error is not None:
                return

    threads = [threading.Thread(target=run, args=(name, channel, batch), daemon=True,
                                name=f"groupscope-send-{name}")
               for name, (channel, batch) in jobs.items()]
    for thread in threads:
        thread.start()
    until = time.monotonic() + deadline_s
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()))
    return {name: list(outcomes) for name, outcomes in results.items()}


def _oldest_episodes(items: list[Undelivered]) -> tuple[list[Undelivered], list[Undelivered]]:
    """(the items of the oldest incident of each fingerprint, the others)."""
    oldest: dict[str, Incident] = {}
    for item in items:
        known = oldest.get(item.incident.fingerprint)
        if known is None or (item.incident.started_at, item.incident.incident_id) < (
                known.started_at, known.incident_id):
            oldest[item.incident.fingerprint] = item.incident
    def due(item: Undelivered) -> bool:
        return oldest[item.incident.fingerprint].incident_id == item.incident.incident_id

    return [i for i in items if due(i)], [i for i in items if not due(i)]


def send_one(channel: Channel, message: Message) -> str | None:
    """None when sent, else the error (safe to record: no secret)."""
    try:
        channel.send(message)
    except ChannelError as exc:
        return str(exc)
    except Exception as exc:  # a notifier's own error: recorded, never fatal
        return f"channel {channel.name}: {type(exc).__name__}: {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    """The first line of an error, with any URL taken out (a webhook URL is a secret)."""
    lines = str(exc).strip().splitlines()
    return _URL.sub("<url>", lines[0])[:300] if lines else ""


_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)


def heartbeat(cluster: str, now: datetime, every: timedelta, firing: Sequence[Incident],
              dashboard: str) -> Message:
    """"groupscope is alive": proof that the evaluation runs and a channel delivers. Its
    absence is the alert (an outside dead man's switch expects one every ``every``)."""
    listed = "; ".join(f"{headline(i)} ({subject_of(i)})" for i in firing[:10])
    more = f" and {len(firing) - 10} more" if len(firing) > 10 else ""
    name = shown(cluster)
    text = (f"[HEARTBEAT] groupscope is alive: the alert rules of cluster {name} were "
            f"evaluated at {_clock(now.isoformat())}. Firing now: {len(firing)}"
            + (f" ({listed}{more})" if firing else "") + ".\n"
            f"The next heartbeat comes within {duration(every.total_seconds())}; if it does "
            "not, groupscope itself is down (Airflow, its scheduler or the warehouse).\n"
            f"Dashboard: {dashboard.rstrip('/')}{OVERVIEW_DASHBOARD}"
            f"?var-cluster={quote(cluster, safe='')}")
    fields = {"cluster": cluster, "evaluated_at": now.isoformat(), "firing": len(firing),
              "every_s": every.total_seconds(),
              "dedup_key": f"heartbeat:{cluster}:{now.isoformat()}"}
    return Message(f"[HEARTBEAT] groupscope is alive: cluster {name}", text, [fields],
                   "heartbeat")


def warehouse_message(cluster: str, error: str | None, since: datetime, now: datetime,
                      kind: str = "unreachable") -> Message:
    """groupscope's own notice that it cannot evaluate the alert rules (``error``; ``kind``:
    how its warehouse fails, "unreachable", "read-only", "disk full", ..., or "clock skew"),
    or that it can again (``error`` None). It is sent straight to every channel: the
    incidents and their deliveries live in the warehouse."""
    key, name = f"warehouse:{cluster}:{since.isoformat()}", shown(cluster)
    if error is not None:
        if kind == "clock skew":
            what, title = "cannot evaluate its alert rules", "worker CLOCK SKEW"
            check = ("Fix the time sync (NTP) of the Airflow worker named in the error; no "
                     "rule is evaluated and nothing is deleted there until then.")
        else:
            what = ("cannot reach its warehouse" if kind == "unreachable"
                    else f"cannot use its warehouse: it is {kind}")
            title = f"warehouse {kind.upper()}"
            check = ("Check the PostgreSQL server (a failover to a read-only replica, its disk, "
                     "its statement timeout, a migration not applied: groupscope warehouse "
                     "migrate) and the groupscope_warehouse connection.")
        text = (f"[FIRING] cluster {name}: groupscope {what} (since "
                f"{_clock(since.isoformat())}): {shown(error, TEXT_LIMIT)}.\n"
                "No alert rule can be evaluated and no incident delivered until it is back; "
                f"snapshots keep landing and load once it is. {check}")
        return Message(f"[FIRING] groupscope critical: cluster {name}: {title}", text,
                       [{"cluster": cluster, "dedup_key": f"{key}:firing", "kind": kind,
                         "since": since.isoformat()}], "firing")
    lasted = duration((now - since).total_seconds())
    text = (f"[RESOLVED] cluster {name}: groupscope evaluates its alert rules again, after "
            f"{lasted}. Alert evaluation and delivery resume; what the incidents owe is sent "
            "now.")
    return Message(f"[RESOLVED] groupscope critical: cluster {name}: warehouse usable "
                   "again", text, [{"cluster": cluster, "dedup_key": f"{key}:resolved",
                                    "since": since.isoformat()}], "resolved")
