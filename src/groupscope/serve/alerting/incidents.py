"""Alert incidents: the lifecycle (a pure function of the rules, the observed values, the open
incidents and the time) and their store in the warehouse (``ops.alert_incidents``,
``ops.alert_deliveries``).

Lifecycle of one fingerprint (rule, cluster, group, topic):

- the rule's value is past its threshold (above it; below it for a time left, see
  ``rules.BELOW_CONDITIONS``): a **pending** incident starts; it turns **firing**
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import text

from groupscope.serve.alerting.conditions import Observation
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
             open_incidents: Iterable[Incident], now: datetime) -> Evaluation:
    """One evaluation step (see the module doc). ``open_incidents``: the pending and firing
    incidents of the subjects observed (one cluster)."""
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
    for fp, incident in current.items():
        if fp in seen:
            continue
        updated, notice = _clear(incident, now, rules, keep_firing=incident.rule in {
            r.name for r in rules.rules})
        if updated != incident:
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


# --- the store --------------------------------------------------------------------------------

_COLUMNS = ("incident_id", "fingerprint", "rule", "severity", "cluster", "group_id", "topic",
            "state", "started_at", "firing_at", "last_seen_at", "evaluated_at", "resolved_at",
            "value", "threshold", "details", "labels", "runbook", "notifications",
            "last_notified_at")


def prune(conn: Any, resolved_before: datetime) -> int:
    """Deletes the incidents resolved before ``resolved_before`` that owe nothing any more
    (every delivery sent, given up or dropped) and whose deliveries were all created and
    last tried before it too, with their deliveries; returns how many. The evaluation reads
    every delivery of a cluster: kept forever, they would slow it down.

    Never an open incident (pending, firing: the lifecycle's state), nor one still owed or
    tried since (a channel's last success and its give-ups are what ``channel_failing`` and
    the recently-used channels are judged on)."""
    result = conn.execute(text(
        "DELETE FROM ops.alert_incidents i WHERE i.state = 'resolved' "
        "AND i.resolved_at < :before AND NOT EXISTS (SELECT 1 FROM ops.alert_deliveries d "
        "WHERE d.incident_id = i.incident_id AND (d.state IN ('pending', 'failed') "
        "OR greatest(d.created_at, d.sent_at, d.last_attempt_at) >= :before))"),
        {"before": resolved_before})
    return int(result.rowcount or 0)


def lock(conn: Any, cluster: str) -> None:
    """Serialises evaluations of one cluster, for the connection's session (``unlock``, or
    the session's end, releases it): an evaluation commits its deliveries one by one while it
    holds it."""
    conn.execute(text("SELECT pg_advisory_lock(hashtext(:key))"),
                 {"key": f"groupscope-alerts:{cluster}"})


def unlock(conn: Any, cluster: str) -> None:
    conn.execute(text("SELECT pg_advisory_unlock(hashtext(:key))"),
                 {"key": f"groupscope-alerts:{cluster}"})


def open_incidents(conn: Any, cluster: str | None = None) -> list[Incident]:
    query = f"SELECT {', '.join(_COLUMNS)} FROM ops.alert_incidents WHERE state <> 'resolved'"
    params: dict[str, Any] = {}
    if cluster is not None:
        query += " AND cluster = :cluster"
        params["cluster"] = cluster
    rows = conn.execute(text(query + " ORDER BY started_at"), params).mappings().all()
    return [Incident(**dict(row)) for row in rows]


def incidents_since(conn: Any, since: datetime, cluster: str | None = None) -> list[Incident]:
    """The incidents that fired since ``since``, or were still open then, oldest first
    (pending ones that never fired are left out): what a summary of a period reports."""
    query = (f"SELECT {', '.join(_COLUMNS)} FROM ops.alert_incidents "
             "WHERE firing_at IS NOT NULL AND (resolved_at IS NULL OR resolved_at >= :since)")
    params: dict[str, Any] = {"since": since}
    if cluster is not None:
        query += " AND cluster = :cluster"
        params["cluster"] = cluster
    rows = conn.execute(text(query + " ORDER BY firing_at, incident_id"), params).mappings()
    return [Incident(**dict(row)) for row in rows.all()]


def save(conn: Any, incidents: Sequence[Incident]) -> None:
    if not incidents:
        return
    columns = ", ".join(_COLUMNS)
    values = ", ".join(f"CAST(:{c} AS jsonb)" if c in ("details", "labels") else f":{c}"
                       for c in _COLUMNS)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS if c != "incident_id")
    statement = text(f"INSERT INTO ops.alert_incidents ({columns}) VALUES ({values}) "
                     f"ON CONFLICT (incident_id) DO UPDATE SET {updates}")
    conn.execute(statement, [_row(i) for i in incidents])


def _json_safe(value: Any) -> Any:
    """NaN (an unknown value) as null: PostgreSQL's jsonb refuses NaN, and one refused row
    would fail every evaluation of the cluster."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _row(incident: Incident) -> dict[str, Any]:
    row = {c: getattr(incident, c) for c in _COLUMNS}
    row["details"] = json.dumps(_json_safe(incident.details), ensure_ascii=False, default=str,
                                allow_nan=False)
    row["labels"] = json.dumps(dict(incident.labels), ensure_ascii=False)
    return row


def owe(conn: Any, notices: Iterable[Notice], channels_for: Any, now: datetime) -> int:
    """Records the deliveries the notices owe: one per routed channel. ``channels_for``:
    incident -> channel names. Returns how many rows were added (an existing one is kept:
    a rerun owes nothing new)."""
    rows = [{"incident_id": n.incident.incident_id, "notification": n.notification,
             "channel": channel, "created_at": now}
            for n in notices for channel in channels_for(n.incident)]
    if not rows:
        return 0
    result = conn.execute(text(
        "INSERT INTO ops.alert_deliveries (incident_id, notification, channel, state, "
        "created_at) VALUES (:incident_id, :notification, :channel, 'pending', :created_at) "
        "ON CONFLICT DO NOTHING"), rows)
    return int(result.rowcount or 0)


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


def undelivered(conn: Any, cluster: str) -> list[Undelivered]:
    """The deliveries still owed (never tried, or failed and to be retried), oldest first."""
    columns = ", ".join(f"i.{c}" for c in _COLUMNS)
    rows = conn.execute(text(
        f"SELECT {columns}, d.notification, d.channel, d.attempts, d.created_at AS owed_at, "
        "d.next_attempt_at, d.error "
        "FROM ops.alert_deliveries d JOIN ops.alert_incidents i USING (incident_id) "
        "WHERE d.state IN ('pending', 'failed') AND i.cluster = :cluster "
        "ORDER BY d.created_at, i.group_id, d.notification"), {"cluster": cluster}).mappings()
    result = []
    for row in rows:
        values = dict(row)
        extra = {k: values.pop(k) for k in ("notification", "channel", "attempts", "owed_at",
                                             "next_attempt_at", "error")}
        result.append(Undelivered(Incident(**values), extra["notification"], extra["channel"],
                                  extra["attempts"], extra["owed_at"],
                                  extra["next_attempt_at"], extra["error"]))
    return result


def record_delivery(conn: Any, items: Iterable[Undelivered], now: datetime,
                    error: str | None, next_attempt_at: datetime | None = None) -> None:
    """The outcome of one send of ``items`` (one channel): sent, or failed with ``error`` and
    retried from ``next_attempt_at``."""
    _set_state(conn, items, now, error, "CASE WHEN CAST(:error AS text) IS NULL THEN 'sent' "
               "ELSE 'failed' END", attempted=True, next_attempt_at=next_attempt_at)


def give_up(conn: Any, items: Iterable[Undelivered], now: datetime, why: str) -> None:
    """Deliveries past their maximum age: no longer retried (the channel's failure is an
    incident of its own, ``channel_failing``)."""
    _set_state(conn, items, now, why, "'given_up'", attempted=False)


def drop(conn: Any, items: Iterable[Undelivered], now: datetime, why: str) -> None:
    """Deliveries to a channel no longer in the rules: never retried."""
    _set_state(conn, items, now, why, "'dropped'", attempted=False)


def _set_state(conn: Any, items: Iterable[Undelivered], now: datetime, error: str | None,
               state_sql: str, attempted: bool,
               next_attempt_at: datetime | None = None) -> None:
    rows = [{"incident_id": u.incident.incident_id, "notification": u.notification,
             "channel": u.channel, "now": now, "error": error, "next": next_attempt_at}
            for u in items]
    if not rows:
        return
    attempt = "attempts = attempts + 1, last_attempt_at = :now, " if attempted else ""
    conn.execute(text(
        f"UPDATE ops.alert_deliveries SET {attempt}state = {state_sql}, "
        "sent_at = CASE WHEN CAST(:error AS text) IS NULL THEN CAST(:now AS timestamptz) END, "
        "next_attempt_at = :next, "
        "error = :error WHERE incident_id = :incident_id AND notification = :notification "
        "AND channel = :channel"), rows)


def deliveries(conn: Any, incident_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Each incident's delivery state per channel (for ``groupscope alerts list``)."""
    if not incident_ids:
        return {}
    rows = conn.execute(text(
        "SELECT incident_id, notification, channel, state, attempts, sent_at, error "
        "FROM ops.alert_deliveries WHERE incident_id = ANY(:ids) "
        "ORDER BY created_at, channel"), {"ids": list(incident_ids)}).mappings()
    result: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        result.setdefault(row["incident_id"], []).append(dict(row))
    return result
