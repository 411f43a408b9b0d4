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
from groupscope.serve.alerting.rules import BELOW_CONDITIONS, RuleSet

log = logging.getLogger(__name__)

# At most this many incidents are listed in one grouped message; the rest are counted.
MAX_LISTED = 40
GROUP_DASHBOARD = "/d/groupscope-group/group-detail"
OVERVIEW_DASHBOARD = "/d/groupscope-overview/overview"


def duration(seconds: float | None) -> str:
    """``1 m 10 s``, ``2 h 5 m``, ``45 s``."""
    if seconds is None or math.isnan(seconds):
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
    if value is None or (isinstance(value, float) and math.isnan(value)):
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
    where = f"cluster {incident.cluster}"
    return f"{where}, group {incident.group_id}" if incident.group_id else where


def headline(incident: Incident) -> str:
    """What is wrong, in a word or a few (upper case for the states an on-call pages on)."""
    d, condition = incident.details, incident.details.get("condition", "")
    if condition == "group_status_err" and d.get("coordinator_down"):
        return "COORDINATOR DOWN (it can neither commit nor rebalance)"
    if condition == "group_status_err":
        # STOP: nobody commits (the group is empty, or its progress stopped as a whole while
        # its members are still listed); STALL: members are there, some partitions are not.
        return "STOPPED" if (d.get("stop_partitions") or 0) > 0 else "STALLED"
    return {
        "partition_rewind": "REWIND (committed offsets moved back)",
        "lag_seconds": f"lag {duration(incident.value)} behind",
        "lag_records": f"lag {_count(incident.value)} records",
        "lag_beyond_retention": "LAG BEYOND RETENTION (data lost to the consumer)",
        "group_empty_lag_growing": "EMPTY while its lag grows",
        "rebalances_per_hour": f"REBALANCE STORM ({_count(incident.value)} an hour)",
        "rebalance_stuck": f"REBALANCE STUCK for {duration(incident.value)}",
        "loss_forecast_s": (
            "DATA LOSS now (retention is deleting records it has not read)"
            if d.get("loss_basis") == "lost"
            else f"DATA LOSS forecast in {duration(incident.value)} (retention deletes records "
                 "it has not read)"),
        "collector_stale": "collector STALE",
        "snapshot_incomplete": "snapshots INCOMPLETE",
        "quality_gate_failed": "quality gate FAILED",
        "analytics_stale": "analytics STALE (alerts on groups cannot be judged)",
        "task_failed": f"task {d.get('dag_id')}.{d.get('task_id')} FAILED",
        "channel_failing": f"alert channel {d.get('channel') or incident.topic} FAILING",
        "rules_invalid": "rules file INVALID (the last valid rules are in use)",
    }.get(condition, f"{incident.rule} {incident.value:g} "
                     f"{'<' if condition in BELOW_CONDITIONS else '>'} {incident.threshold:g}")


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
    d = incident.details
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
    d, condition = incident.details, incident.details.get("condition", "")
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
                + f"): {_first_line_of(d.get('reason'))}"]
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
    found = incident.details.get("causes")
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
    found = incident.details.get("causes") or []
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
        "value": None if math.isnan(incident.value) else incident.value,  # unknown: null
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
    d = incident.details
    return (f"{headline(incident)} cannot be judged since {_clock(d.get('unknown_since'))}: "
            f"{d.get('unknown_why') or 'no data'}. It stays firing until there is evidence "
            "that it cleared.")


def _resolved_line(incident: Incident) -> str:
    began = incident.firing_at or incident.started_at
    lasted = (incident.resolved_at - began).total_seconds() if incident.resolved_at else None
    return (f"{headline(incident)} is over after {duration(lasted)} "
            f"(firing since {_clock(began.isoformat())}).")


def _now_line(incident: Incident) -> str:
    d = incident.details.get("now") or incident.details
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
    clusters = sorted({i.incident.cluster for i in items})
    where = f"cluster {clusters[0]}" if len(clusters) == 1 else f"clusters {', '.join(clusters)}"
    by_rule: dict[str, int] = {}
    for item in items:
        by_rule[item.incident.rule] = by_rule.get(item.incident.rule, 0) + 1
    summary = ", ".join(f"{n} {rule}" for rule, n in sorted(by_rule.items()))
    lines = [f"[{tag}] {where}: {len(items)} incidents ({summary})."]
    for item in items[:MAX_LISTED]:
        incident = item.incident
        who = (f"group {incident.group_id}" if incident.group_id else
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
    its own, so an outcome is never lost or undone by a later failure."""

    def sent(self, items: list[Undelivered]) -> None: ...

    def failed(self, items: list[Undelivered], error: str, retry_at: datetime) -> None: ...

    def given_up(self, items: list[Undelivered], why: str) -> None: ...

    def dropped(self, items: list[Undelivered], why: str) -> None: ...


def deliver(owed: Sequence[Undelivered], channels: Mapping[str, Channel], dashboard: str,
            log_to: DeliveryLog, now: datetime, rules: RuleSet,
            unavailable: Mapping[str, str] | None = None) -> dict[str, str]:
    """Sends what is owed, channel by channel, and keeps each outcome (``log_to``). Returns the
    outcome per channel ("sent N", "backing off until ...", or the error).

    - What is owed to a channel the rules no longer name is dropped, never retried.
    - ``unavailable``: configured channels whose connection cannot be read right now (why):
      their deliveries fail and are retried, like a channel that refused.
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
    for name, items in per_channel.items():
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
        waiting: datetime | None = max(
            (i.next_attempt_at for i in items if i.next_attempt_at is not None), default=None)
        if waiting is not None and waiting > now:
            outcome[name] = f"backing off until {_clock(waiting.isoformat())}"
            continue
        channel = channels.get(name)
        batches = messages(items, dashboard)
        sent, error = 0, unavailable.get(name)
        if channel is None and error is None:
            error = f"channel {name} has no connection; kept for later"
        for message, batch in batches:
            if error is None and channel is not None:
                error = send_one(channel, message)
            if error is None:
                log_to.sent(batch)
                sent += len(batch)
                continue
            attempts = max((i.attempts for i in batch), default=0) + 1
            log_to.failed(batch, error, now + rules.retry_delay(attempts))
        if error is not None:
            log.warning("alert delivery to %s failed, retried with backoff: %s", name, error)
            outcome[name] = error
        elif items or expired:
            outcome[name] = f"sent {sent}"
        if held:
            outcome[name] = (f"{outcome.get(name, 'sent 0')}; {len(held)} held behind an older "
                             "episode of the same rule and subject")
    return outcome


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
    text = (f"[HEARTBEAT] groupscope is alive: the alert rules of cluster {cluster} were "
            f"evaluated at {_clock(now.isoformat())}. Firing now: {len(firing)}"
            + (f" ({listed}{more})" if firing else "") + ".\n"
            f"The next heartbeat comes within {duration(every.total_seconds())}; if it does "
            "not, groupscope itself is down (Airflow, its scheduler or the warehouse).\n"
            f"Dashboard: {dashboard.rstrip('/')}{OVERVIEW_DASHBOARD}"
            f"?var-cluster={quote(cluster, safe='')}")
    fields = {"cluster": cluster, "evaluated_at": now.isoformat(), "firing": len(firing),
              "every_s": every.total_seconds(),
              "dedup_key": f"heartbeat:{cluster}:{now.isoformat()}"}
    return Message(f"[HEARTBEAT] groupscope is alive: cluster {cluster}", text, [fields],
                   "heartbeat")


def warehouse_message(cluster: str, error: str | None, since: datetime,
                      now: datetime) -> Message:
    """groupscope's own notice that it cannot reach its warehouse (``error``), or that it can
    again (``error`` None). It is sent straight to every channel: the incidents and their
    deliveries live in the warehouse."""
    key = f"warehouse:{cluster}:{since.isoformat()}"
    if error is not None:
        text = (f"[FIRING] cluster {cluster}: groupscope cannot reach its warehouse (since "
                f"{_clock(since.isoformat())}): {error}.\n"
                "No alert rule can be evaluated and no incident delivered until it is back; "
                "snapshots keep landing and load once it is. Check the PostgreSQL server and "
                "the groupscope_warehouse connection.")
        return Message(f"[FIRING] groupscope critical: cluster {cluster}: warehouse "
                       "UNREACHABLE", text, [{"cluster": cluster, "dedup_key": f"{key}:firing",
                                              "since": since.isoformat()}], "firing")
    lasted = duration((now - since).total_seconds())
    text = (f"[RESOLVED] cluster {cluster}: groupscope reaches its warehouse again, after "
            f"{lasted}. Alert evaluation and delivery resume; what the incidents owe is sent "
            "now.")
    return Message(f"[RESOLVED] groupscope critical: cluster {cluster}: warehouse reachable "
                   "again", text, [{"cluster": cluster, "dedup_key": f"{key}:resolved",
                                    "since": since.isoformat()}], "resolved")
