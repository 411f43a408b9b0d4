"""Alert incidents: the lifecycle (a pure function of the rules, the observed values, the open
incidents and the time); ``groupscope.serve.alerting.store`` keeps them in the warehouse.

Lifecycle of one fingerprint (rule, cluster, group, topic):

- the rule's value is past its threshold (above it; below it for a time left, see
  ``kinds.BELOW_KINDS``): a **pending** incident starts; it turns **firing**
  once the condition has held for the rule's ``for`` (at once when ``for`` is 0). Firing owes
  every routed channel a ``firing`` notification, once.
- while it stays firing, a ``repeat-N`` notification is owed every ``repeat_interval``.
- the value falls back: a pending incident is dropped silently (it never notified); a firing
  one stays firing for ``keep_firing_for`` more (so a flapping value does not fire and resolve
  at every snapshot), then **resolves** and owes a ``resolved`` notification, once.
- a later episode of the same fingerprint is a new incident with a new id.
- the value is **unknown** (``Observation.unknown``: no data, a partial snapshot, stale
  analytics): by the rule's ``on_unknown``, the incident keeps its state (``keep``, the
  default: neither fires nor resolves; a pending one waits), or the value counts as holding
  (``alerting``) or as not holding (``ok``). A firing incident that stays unknown for the
  rules' ``unknown_notice_after`` owes an ``unknown`` notification, once per unknown spell,
  naming why. Only evidence resolves: a known value that no longer holds, a subject that a
  complete snapshot no longer lists, or the rule's removal.

Owed notifications are rows of ``ops.alert_deliveries`` (one per incident, notification and
channel): ``groupscope.serve.alerting.notify`` sends them and records each channel's outcome. An
evaluation repeated for the same data finds nothing new to owe, so it sends nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from groupscope.serve.alerting.conditions import Observation, unknown
from groupscope.serve.alerting.rules import RuleSet, breached

PENDING, FIRING, RESOLVED = "pending", "firing", "resolved"


@dataclass(frozen=True)
class Incident:
    incident_id: str
    fingerprint: str
    rule: str
    severity: str
    cluster: str
    group_id: str
    topic: str
    state: str
    started_at: datetime
    last_seen_at: datetime
    evaluated_at: datetime
    value: float
    threshold: float
    details: Mapping[str, Any] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    runbook: str = ""
    firing_at: datetime | None = None
    resolved_at: datetime | None = None
    notifications: int = 0
    last_notified_at: datetime | None = None


@dataclass(frozen=True)
class Notice:
    """A notification an incident owes its channels."""

    incident: Incident
    notification: str  # firing | repeat-N | unknown | resolved


@dataclass(frozen=True)
class Evaluation:
    incidents: list[Incident]  # new or changed
    notices: list[Notice]


def fingerprint(rule: str, cluster: str, group_id: str, topic: str = "") -> str:
    key = json.dumps([rule, cluster, group_id, topic], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _incident_id(fp: str, started_at: datetime) -> str:
    return hashlib.sha256(f"{fp}|{started_at.isoformat()}".encode()).hexdigest()[:16]


def evaluate(rules: RuleSet, observations: Iterable[Observation],
             open_incidents: Iterable[Incident], now: datetime,
             rules_error: str | None = None) -> Evaluation:
    """One evaluation step (see the module doc). ``open_incidents``: the pending and firing
    incidents of the subjects observed (one cluster). ``rules_error``: the rules file is
    invalid and ``rules`` are a fallback (the last valid ones, or the built-ins): an open
    incident of a rule they do not hold is then unknown, not resolved (nobody removed the
    rule; the file that holds it cannot be read)."""
    by_condition: dict[str, list[Any]] = {}
    for rule in rules.rules:
        by_condition.setdefault(rule.condition, []).append(rule)
    current = {i.fingerprint: i for i in open_incidents}
    changed: list[Incident] = []
    notices: list[Notice] = []
    seen: set[str] = set()

    for obs in observations:
        for rule in by_condition.get(obs.condition, []):
            effective = rule.effective(obs.cluster, obs.group_id)
            fp = fingerprint(effective.name, obs.cluster, obs.group_id, obs.topic)
            seen.add(fp)
            incident = current.get(fp)
            if obs.unknown is not None and effective.on_unknown == "keep":
                updated, notice = _unknown(incident, obs, now, rules)
            else:
                holds = effective.enabled and (
                    effective.on_unknown == "alerting" if obs.unknown is not None
                    else breached(obs.condition, obs.value, effective.threshold))
                updated, notice = _step(incident, holds, obs, effective, fp, now, rules)
            if updated is not None and updated != incident:
                changed.append(updated)
            if notice is not None:
                notices.append(notice)

    # Open incidents nobody observed this time (a deleted group, a rule removed from the
    # file): their condition no longer holds.
    loaded = {r.name for r in rules.rules}
    for fp, incident in current.items():
        if fp in seen:
            continue
        if rules_error is not None and incident.rule not in loaded:
            updated, notice = _unknown(incident, unknown(
                incident.details.get("condition", ""), incident.cluster, incident.group_id,
                f"the rule {incident.rule} that raised it is not loaded: the rules file is "
                f"invalid ({rules_error})"), now, rules)
        else:
            updated, notice = _clear(incident, now, rules, keep_firing=incident.rule in loaded)
        if updated is not None and updated != incident:
            changed.append(updated)
        if notice is not None:
            notices.append(notice)
    kept, marked = _inhibited(notices, [*current.values(), *changed], now)
    if marked:
        by_id = {i.incident_id: i for i in marked}
        changed = [by_id.pop(i.incident_id, i) for i in changed] + list(by_id.values())
    return Evaluation(changed, kept)


# The conditions whose notifications a firing incident of another condition, on the same
# group, makes redundant (Alertmanager calls this inhibition): a group STOPPED or STALLED is
# Empty with a growing lag, and behind in records and in time, and its message already says
# so. An incident that starts firing while its inhibitor fires is held: it notifies nothing
# while the inhibitor fires. If it still holds once the inhibitor is over (the group came back
# but does not catch up), it fires then; if it is over by then too, it ends silently (the
# receivers never heard of it). One that fired before its inhibitor keeps its resolution, so
# no receiver is left with an incident it never hears the end of.
INHIBITED_BY = {"group_empty_lag_growing": "group_status_err",
                "lag_seconds": "group_status_err", "lag_records": "group_status_err",
                # a forecast that starts while the loss itself is firing says nothing new
                "loss_forecast_s": "lag_beyond_retention"}
INHIBITED = "inhibited_by"  # in an incident's details: held, its firing not sent
NOW = "now"  # in an incident's details once its condition stopped holding: the latest values


def _inhibited(notices: list[Notice], incidents: Iterable[Incident], now: datetime
               ) -> tuple[list[Notice], list[Incident]]:
    """The notices left to send (with the firing of held incidents whose inhibitor is over),
    and the incidents newly held or released."""
    latest = {i.incident_id: i for i in incidents}
    firing = {(i.cluster, i.group_id, i.details.get("condition")) for i in latest.values()
              if i.state == FIRING}

    def inhibitor_fires(incident: Incident) -> bool:
        inhibitor = INHIBITED_BY.get(str(incident.details.get("condition")))
        return bool(inhibitor) and (incident.cluster, incident.group_id, inhibitor) in firing

    kept, updated = [], []
    noticed = {n.incident.incident_id for n in notices}
    for n in notices:
        incident = latest.get(n.incident.incident_id, n.incident)
        if incident.details.get(INHIBITED):
            continue  # held: its repeats and its resolution are silent too
        if n.notification != "resolved" and inhibitor_fires(incident):
            if n.notification == "firing":
                updated.append(replace(incident, details={
                    **incident.details,
                    INHIBITED: INHIBITED_BY[str(incident.details.get("condition"))]}))
            continue
        kept.append(n)
    for incident in latest.values():
        if (incident.state == FIRING and incident.details.get(INHIBITED)
                and incident.incident_id not in noticed and incident.last_seen_at == now
                and not inhibitor_fires(incident)):
            released = replace(incident, last_notified_at=now, details={
                k: v for k, v in incident.details.items() if k != INHIBITED})
            updated.append(released)
            kept.append(Notice(released, "firing"))
    return kept, updated


UNKNOWN_SINCE, UNKNOWN_WHY, UNKNOWN_NOTICED = "unknown_since", "unknown_why", "unknown_noticed"
_UNKNOWN_KEYS = (UNKNOWN_SINCE, UNKNOWN_WHY, UNKNOWN_NOTICED)
# How many unknown notices the incident has owed, over all its unknown spells: the second
# spell's notice is ``unknown-2`` (a delivery of its own, with a dedup key of its own).
UNKNOWN_NOTICES = "unknown_notices"


def unknown_notification(notices_before: int) -> str:
    return "unknown" if notices_before == 0 else f"unknown-{notices_before + 1}"


def is_unknown_notice(notification: str) -> bool:
    return notification == "unknown" or notification.startswith("unknown-")


def _unknown(incident: Incident | None, obs: Observation, now: datetime,
             rules: RuleSet) -> tuple[Incident | None, Notice | None]:
    """The value is unknown and the rule keeps the state: nothing starts, nothing fires or
    resolves; the incident notes since when and why, and a firing one that stays unknown for
    ``unknown_notice_after`` owes one ``unknown`` notification for the spell (``unknown-N``
    for its Nth spell)."""
    if incident is None:
        return None, None
    since = incident.details.get(UNKNOWN_SINCE) or now.isoformat()
    details = {**incident.details, UNKNOWN_SINCE: since, UNKNOWN_WHY: obs.unknown}
    updated = replace(incident, evaluated_at=now, details=details)
    if (incident.state == FIRING and not incident.details.get(UNKNOWN_NOTICED)
            and now - datetime.fromisoformat(since) >= rules.unknown_notice_after):
        before = int(incident.details.get(UNKNOWN_NOTICES) or 0)
        updated = replace(updated, details={**details, UNKNOWN_NOTICED: True,
                                            UNKNOWN_NOTICES: before + 1})
        return updated, Notice(updated, unknown_notification(before))
    return updated, None


def _step(incident: Incident | None, holds: bool, obs: Observation, effective: Any, fp: str,
          now: datetime, rules: RuleSet) -> tuple[Incident | None, Notice | None]:
    if not holds:
        if incident is None:
            return None, None
        # The latest value and details even so: a resolved message says how things are now.
        updated, notice = _clear(incident, now, rules, keep_firing=True)
        # What held stays (a resolved STOPPED says STOPPED, with the value it fired on); how
        # things are now goes beside it, for the resolved message's "Now:" line.
        held = {k: v for k, v in incident.details.items() if k != NOW and k not in _UNKNOWN_KEYS}
        updated = replace(updated, details={
            **held, NOW: {**_details(obs), "value": obs.value}})
        return updated, Notice(updated, notice.notification) if notice else None
    if incident is None:
        incident = Incident(
            incident_id=_incident_id(fp, now), fingerprint=fp, rule=effective.name,
            severity=effective.severity, cluster=obs.cluster, group_id=obs.group_id,
            topic=obs.topic, state=PENDING, started_at=now, last_seen_at=now,
            evaluated_at=now, value=obs.value, threshold=effective.threshold,
            details=_details(obs), labels=dict(effective.labels),
            runbook=effective.runbook)
    # An unknown value that counts as holding (on_unknown: alerting) keeps the last known one.
    value = incident.value if obs.unknown is not None and not math.isnan(incident.value) \
        else obs.value
    incident = replace(incident, last_seen_at=now, evaluated_at=now, value=value,
                       threshold=effective.threshold, severity=effective.severity,
                       details=_details(obs, incident), labels=dict(effective.labels),
                       runbook=effective.runbook)
    if incident.state == PENDING and now - incident.started_at >= effective.for_:
        incident = replace(incident, state=FIRING, firing_at=now, notifications=1,
                           last_notified_at=now)
        return incident, Notice(incident, "firing")
    if (incident.state == FIRING and incident.last_notified_at is not None
            and now - incident.last_notified_at >= rules.repeat_interval):
        incident = replace(incident, notifications=incident.notifications + 1,
                           last_notified_at=now)
        return incident, Notice(incident, f"repeat-{incident.notifications - 1}")
    return incident, None


def _clear(incident: Incident, now: datetime, rules: RuleSet,
           keep_firing: bool) -> tuple[Incident, Notice | None]:
    """The condition of ``incident`` does not hold at ``now``."""
    if incident.state == PENDING:
        return replace(incident, state=RESOLVED, resolved_at=now, evaluated_at=now), None
    if keep_firing and now - incident.last_seen_at < rules.keep_firing_for:
        return replace(incident, evaluated_at=now), None
    resolved = replace(incident, state=RESOLVED, resolved_at=now, evaluated_at=now)
    return resolved, Notice(resolved, "resolved")


def _details(obs: Observation, incident: Incident | None = None) -> dict[str, Any]:
    """What the message needs, with the condition kind (a rule of the user's may use any),
    and the episode's inhibition mark."""
    held = {k: incident.details[k] for k in (INHIBITED, UNKNOWN_NOTICES)
            if incident is not None and incident.details.get(k)}
    why = {UNKNOWN_WHY: obs.unknown} if obs.unknown is not None else {}
    return {**obs.details, "condition": obs.condition, **held, **why}


@dataclass(frozen=True)
class Undelivered:
    incident: Incident
    notification: str
    channel: str
    attempts: int
    created_at: datetime | None = None
    next_attempt_at: datetime | None = None
    error: str | None = None

    @property
    def dedup_key(self) -> str:
        """Stable across retries: a receiver that got it once can drop a repeat."""
        return f"{self.incident.incident_id}:{self.notification}"
