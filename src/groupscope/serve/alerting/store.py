"""The alert store: everything the alert path keeps in the warehouse, and the only module that
speaks SQL to it (Alertmanager's ``nflog`` is the model): the incidents
(``ops.alert_incidents``), the notifications they owe and each channel's outcome
(``ops.alert_deliveries``), the heartbeats (``ops.alert_heartbeats``), groupscope's own task
outcomes (``ops.task_runs``) and the evaluation's lock. Every function takes the caller's
connection; the caller owns the transaction and the time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from groupscope.serve.alerting.incidents import Incident, Notice, Undelivered

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


def bound_session(conn: Any) -> None:
    """Bounds an evaluation's session: a lock waited for at most ``lock_timeout`` (``lock``),
    and a session that sits idle (its worker died without closing it, so the lock it holds
    would outlive it for hours) ended by the server within minutes. The warehouse is
    PostgreSQL 14 or later (``idle_session_timeout``)."""
    conn.execute(text("SELECT set_config('idle_session_timeout', '120s', false),"
                      " set_config('idle_in_transaction_session_timeout', '60s', false)"))


def bound_statements(conn: Any) -> None:
    """Bounds each of the evaluation's statements (after the lock: the wait for it is
    ``lock``'s): a warehouse that stops answering mid-evaluation is a statement timeout
    (SQLSTATE 57014), told as an outage, not a task killed in silence."""
    conn.execute(text("SELECT set_config('statement_timeout', '30s', false)"))


def lock(conn: Any, cluster: str, wait: timedelta) -> bool:
    """Serialises evaluations of one cluster, for the connection's session (``unlock``, or
    the session's end, releases it): an evaluation commits its deliveries one by one while it
    holds it. False when another session held it for ``wait``."""
    from sqlalchemy.exc import OperationalError

    conn.execute(text("SELECT set_config('lock_timeout', :wait, false)"),
                 {"wait": f"{int(wait.total_seconds() * 1000)}ms"})
    try:
        conn.execute(text("SELECT pg_advisory_lock(hashtext(:key))"),
                     {"key": f"groupscope-alerts:{cluster}"})
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        conn.rollback()
        return False
    conn.execute(text("SELECT set_config('lock_timeout', '0', false)"))
    return True


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


# How a delivery's error starts while its attempt has no outcome yet (``begin_attempt``).
IN_FLIGHT = "no answer yet to the attempt of"


def begin_attempt(conn: Any, items: Iterable[Undelivered], now: datetime,
                  retry_at: datetime) -> None:
    """An attempt to send ``items`` (one channel) starts: it is counted, and kept as failed,
    retried from ``retry_at``, until its outcome replaces that (``record_delivery``). An
    evaluation killed mid-send (a channel that stalls past the task's timeout) thus leaves
    that channel in backoff, so the next evaluation's other channels do not queue behind it."""
    _set_state(conn, items, now, f"{IN_FLIGHT} {now:%H:%M:%SZ} (still sending; if this "
               "stays, the evaluation ended before the channel answered)", "'failed'",
               attempted=True, next_attempt_at=retry_at)


def record_delivery(conn: Any, items: Iterable[Undelivered], now: datetime,
                    error: str | None, next_attempt_at: datetime | None = None) -> None:
    """The outcome of the attempt ``begin_attempt`` counted: sent, or failed with ``error``
    and retried from ``next_attempt_at``."""
    _set_state(conn, items, now, error, "CASE WHEN CAST(:error AS text) IS NULL THEN 'sent' "
               "ELSE 'failed' END", attempted=False, next_attempt_at=next_attempt_at)


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


def last_evaluated(conn: Any, cluster: str) -> datetime | None:
    """When the cluster's rules were last evaluated (None: never)."""
    value: datetime | None = conn.execute(text(
        "SELECT max(evaluated_at) FROM ops.alert_incidents WHERE cluster = :c"),
        {"c": cluster}).scalar_one()
    return value


def channels_used_since(conn: Any, cluster: str, since: datetime) -> set[str]:
    """The channels that delivered anything of the cluster's since ``since``."""
    return set(conn.execute(text(
        "SELECT DISTINCT d.channel FROM ops.alert_deliveries d JOIN"
        " ops.alert_incidents i USING (incident_id) WHERE i.cluster = :c"
        " AND d.sent_at > :since"), {"c": cluster, "since": since}).scalars())


class DeliveryLog:
    """``notify.DeliveryLog`` over one connection: each outcome its own transaction, so a
    failure after channel A sent never undoes A's "sent"."""

    def __init__(self, conn: Any, now: datetime) -> None:
        self.conn, self.now = conn, now

    def attempting(self, items: list[Undelivered], retry_at: datetime) -> None:
        with self.conn.begin():
            begin_attempt(self.conn, items, self.now, retry_at)

    def sent(self, items: list[Undelivered]) -> None:
        with self.conn.begin():
            record_delivery(self.conn, items, self.now, None)

    def failed(self, items: list[Undelivered], error: str, retry_at: datetime) -> None:
        with self.conn.begin():
            record_delivery(self.conn, items, self.now, error, retry_at)

    def given_up(self, items: list[Undelivered], why: str) -> None:
        with self.conn.begin():
            give_up(self.conn, items, self.now, why)

    def dropped(self, items: list[Undelivered], why: str) -> None:
        with self.conn.begin():
            drop(self.conn, items, self.now, why)


def unheard(conn: Any, cluster: str, channels: Sequence[str]) -> int:
    """The cluster's notifications still owed to one of ``channels`` (the rules' in use: what
    an invalid file's channel is kept owed does not count) that no channel has delivered: a
    page that has reached nobody yet (none: the heartbeat may say groupscope is alive)."""
    return int(conn.execute(text(
        "SELECT count(*) FROM (SELECT d.incident_id, d.notification FROM ops.alert_deliveries d"
        " JOIN ops.alert_incidents i USING (incident_id) WHERE i.cluster = :c"
        " GROUP BY d.incident_id, d.notification"
        " HAVING bool_or(d.state IN ('pending', 'failed') AND d.channel = ANY(:channels))"
        " AND NOT bool_or(d.state = 'sent')) AS owed"),
        {"c": cluster, "channels": list(channels)}).scalar_one())


def heartbeats(conn: Any, cluster: str) -> dict[str, Any]:
    """The last heartbeat per channel (``sent_at``, ``attempted_at``, ``error``)."""
    return {r.channel: r for r in conn.execute(text(
        "SELECT channel, sent_at, attempted_at, error FROM ops.alert_heartbeats"
        " WHERE cluster = :c"), {"c": cluster})}


def record_heartbeat(conn: Any, cluster: str, channel: str, now: datetime,
                     error: str | None) -> None:
    conn.execute(text(
        "INSERT INTO ops.alert_heartbeats (cluster, channel, sent_at, attempted_at, error)"
        " VALUES (:c, :ch, :sent, :now, :error) ON CONFLICT (cluster, channel) DO UPDATE"
        " SET sent_at = coalesce(excluded.sent_at, ops.alert_heartbeats.sent_at),"
        " attempted_at = excluded.attempted_at, error = excluded.error"),
        {"c": cluster, "ch": channel, "sent": now if error is None else None, "now": now,
         "error": error})


def record_task_run(conn: Any, cluster: str, dag_id: str, task_id: str, state: str,
                    run_id: str, try_number: int | None, at: datetime, reason: str = "") -> None:
    """Keeps a groupscope task's latest outcome (``ops.task_runs``): a failure is the
    ``task_failed`` condition's evidence, the task's next success the evidence that clears it.
    A success of a task that never failed writes nothing."""
    # A NUL byte is the one character PostgreSQL's text refuses: an error text may hold one.
    params = {"c": cluster, "d": dag_id, "t": task_id, "s": state, "r": run_id,
              "n": try_number, "at": at, "why": reason.replace("\x00", "\\0")[:4000]}
    if state == "success":
        conn.execute(text(
            "UPDATE ops.task_runs SET state = 'success', run_id = :r, try_number = :n,"
            " at = :at, failed_since = NULL, reason = '' WHERE cluster = :c"
            " AND dag_id = :d AND task_id = :t AND state = 'failed' AND at <= :at"), params)
        return
    conn.execute(text(
        "INSERT INTO ops.task_runs (cluster, dag_id, task_id, state, run_id, try_number, at,"
        " failed_since, reason) VALUES (:c, :d, :t, 'failed', :r, :n, :at, :at, :why)"
        " ON CONFLICT (cluster, dag_id, task_id) DO UPDATE SET state = 'failed',"
        " run_id = excluded.run_id, try_number = excluded.try_number, at = excluded.at,"
        " reason = excluded.reason, failed_since = CASE WHEN ops.task_runs.state = 'failed'"
        " THEN ops.task_runs.failed_since ELSE excluded.at END"), params)


def clock(conn: Any) -> datetime:
    """The warehouse's clock: the time of the caller's transaction (``now()``), one clock for
    every worker that evaluates or deletes."""
    value: datetime = conn.execute(text("SELECT now()")).scalar_one()
    return value
