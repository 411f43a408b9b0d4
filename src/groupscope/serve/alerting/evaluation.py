"""One evaluation of a cluster's alert rules, as a transaction over the caller's warehouse
connection: observe the conditions, step the incidents, owe and send the notifications, then
the heartbeat. The pieces are elsewhere (``conditions.observe``, ``incidents.evaluate``,
``notify.deliver``, all SQL in ``store``); this module orders them, and says what the
channels hear about groupscope itself when it cannot evaluate (``tell_outage``).

``groupscope.pipeline`` opens the warehouse and maps its errors; the Airflow task and the CLI
call it there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from groupscope.serve.alerting import conditions, incidents, notify, store
from groupscope.serve.alerting.channels import Channel, Message
from groupscope.serve.alerting.incidents import Incident
from groupscope.serve.alerting.rules import RuleSet

log = logging.getLogger(__name__)

# A worker whose clock is further than this from the warehouse's neither evaluates nor deletes
# (``ClockSkew``): its "now" would judge every group at a wrong age.
MAX_CLOCK_SKEW = timedelta(seconds=60)
# How long an evaluation waits for another of the same cluster (the live DAG's and the alerts
# DAG's overlap): the alert task has 2 minutes for the wait, the evaluation, the delivery
# (``RuleSet.delivery_deadline``, at most 30 s) and the notices (``notify.NOTICE_DEADLINE_S``).
LOCK_WAIT = timedelta(seconds=30)


class ClockSkew(RuntimeError):
    """The worker's clock differs from the warehouse's by more than ``MAX_CLOCK_SKEW``."""


def check_clock(worker: datetime, warehouse: datetime,
                bound: timedelta = MAX_CLOCK_SKEW) -> None:
    """Raises ``ClockSkew`` when ``worker`` is more than ``bound`` from ``warehouse``."""
    skew = (worker - warehouse).total_seconds()
    if abs(skew) > bound.total_seconds():
        side = "ahead of" if skew > 0 else "behind"
        raise ClockSkew(f"this worker's clock is {notify.duration(abs(skew))} {side} the "
                        f"warehouse's (worker {worker:%Y-%m-%dT%H:%M:%SZ}, warehouse "
                        f"{warehouse.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}; at most "
                        f"{notify.duration(bound.total_seconds())} is allowed): fix its time "
                        "sync (NTP)")


def warehouse_now(conn: Any, worker_clock: Callable[[], datetime] | None) -> datetime:
    """The warehouse's clock (the caller's transaction's ``now()``), checked against the
    worker's, read right after it: ``ClockSkew`` past ``MAX_CLOCK_SKEW``."""
    now = store.clock(conn)
    if worker_clock is not None:
        check_clock(worker_clock(), now)
    return now


def evaluate(conn: Any, cluster: str, rules: RuleSet, channels: Mapping[str, Channel],
             now: datetime | None, snapshot_every: timedelta, dashboard_url: str, *,
             worker_clock: Callable[[], datetime] | None = None,
             unavailable: Mapping[str, str] | None = None,
             missing: Mapping[str, str] | None = None,
             rules_error: str | None = None, rules_source: str = "") -> dict[str, Any]:
    """Evaluates the alert rules over the cluster's newest marts, keeps the incidents, then
    sends what they owe, per channel, and the heartbeat. Returns a summary: nothing in it is a
    secret.

    Evaluations of one cluster are serialised (a session advisory lock, waited for at most
    ``LOCK_WAIT``: then another evaluation is at work, and this one returns ``skipped``). The
    session is bounded (``store.bound_session``): a warehouse that stops answering is a
    statement timeout, and a worker that dies holding the lock loses it within minutes.
    ``now`` None: the time is the warehouse's clock once the lock is held (one clock for every
    worker); ``worker_clock`` (the caller's own clock) more than ``MAX_CLOCK_SKEW`` from it
    raises ``ClockSkew`` before anything is judged. A ``now`` given (a replay, a test) is
    taken as it is, never before the last evaluation's. The incidents and what they owe are one
    transaction; each delivery outcome is then committed on its own. Delivery is at least
    once: the receiver drops a repeat by its ``dedup_key``.

    ``unavailable``: channels whose connection cannot be read right now (why): their
    deliveries are owed and retried. ``missing``: channels whose connection is not defined
    (why): what is routed to them is owed to them all the same (so they fail, and
    ``channel_failing`` names them), and when no channel of a notification's route has a
    connection it goes to every channel that has one too: a page is never owed to nobody.
    ``rules_error``: the rules file is invalid and ``rules`` are the last valid ones (the
    ``rules_invalid`` condition says so)."""
    unavailable = dict(unavailable or {})
    missing = dict(missing or {})
    store.bound_session(conn)
    if not store.lock(conn, cluster, LOCK_WAIT):
        return {"cluster": cluster, "skipped": "another evaluation of the cluster held its "
                f"lock for {notify.duration(LOCK_WAIT.total_seconds())}; it does the work"}
    store.bound_statements(conn)
    conn.commit()
    try:
        with conn.begin():
            if now is None:
                now = warehouse_now(conn, worker_clock)
            else:
                last = store.last_evaluated(conn, cluster)
                now = max(now, last or datetime.min.replace(tzinfo=UTC))
            recent = store.channels_used_since(conn, cluster, now - rules.delivery_max_age)
            unavailable.update({name: f"channel {name}: {why} (it was used before: taken as "
                                "a lookup failure, retried)"
                                for name, why in missing.items() if name in recent})
            missing = {n: why for n, why in missing.items() if n not in unavailable}
            current = store.open_incidents(conn, cluster)
            me = conditions.SelfState(rules_error, rules_source,
                                      tuple(c.name for c in rules.channels), missing)
            observed = conditions.observe(
                conn, cluster, {r.condition for r in rules.rules}, now, snapshot_every,
                stale_intervals=_stale_intervals(rules, cluster),
                open_groups={i.group_id for i in current if i.group_id}, me=me,
                rebalance_window=rules.rebalance_window, holds=rules.exceeded)
            result = incidents.evaluate(rules, observed, current, now, rules_error)
            store.save(conn, result.incidents)
            reachable = set(channels) | set(unavailable)
            owed = store.owe(conn, result.notices,
                             lambda i: route(rules, i, reachable), now)
        with conn.begin():
            pending = store.undelivered(conn, cluster)
        outcome = notify.deliver(pending, channels, dashboard_url, store.DeliveryLog(conn, now),
                                 now, rules, {**unavailable, **missing},
                                 keep_unknown=rules_error is not None)
        with conn.begin():
            unheard = store.unheard(conn, cluster, [c.name for c in rules.channels])
        beats = heartbeat(conn, rules, channels, cluster, now, dashboard_url,
                          reached=unheard == 0)
        with conn.begin():
            open_now = store.open_incidents(conn, cluster)
    finally:
        conn.rollback()
        store.unlock(conn, cluster)
        conn.commit()
    summary = {"cluster": cluster, "evaluated_at": now.isoformat(),
               "observations": len(observed),
               "unknown": sum(o.unknown is not None for o in observed),
               "changed": len(result.incidents),
               "notifications": [f"{n.notification} {n.incident.rule} "
                                 f"{n.incident.group_id or n.incident.topic or cluster}"
                                 for n in result.notices],
               "deliveries_owed": owed, "deliveries": outcome, "heartbeat": beats,
               "firing": sum(i.state == "firing" for i in open_now),
               "pending": sum(i.state == "pending" for i in open_now)}
    for name, error in outcome.items():
        if not error.startswith(("sent", "backing off", "dropped")):
            log.warning("alert channel %s: %s", name, error)
    return summary


def route(rules: RuleSet, incident: Incident, reachable: set[str]) -> list[str]:
    """The channels a notification of ``incident`` is owed to (never a channel's own failure
    to it: the others say it):

    - the channels its matching routes name, even one without a connection (it is owed there
      and fails, so ``channel_failing`` names it: a typo in a connection id must not drop the
      route's pages);
    - no route matches: every channel of the rules that has a connection (one without is
      simply not set up), but those for the heartbeat alone (``incidents: false``);
    - when none of those can be reached, every other channel that can be and takes incidents,
      so that it reaches somebody; an invalid rules file goes to every channel that can be
      reached and takes incidents (the routes may be what is wrong)."""
    others = [c.name for c in rules.channels if c.name in reachable and c.incidents
              and not _about_channel(incident, c.name)]
    if incident.details.get("condition") == "rules_invalid":
        return others
    routed = rules.routed(incident.severity, incident.labels) or [
        c.name for c in rules.channels_for(incident.severity, incident.labels)
        if c.name in reachable]
    routed = [name for name in routed if not _about_channel(incident, name)]
    if any(name in reachable for name in routed):
        return routed
    return routed + [name for name in others if name not in routed]


def _stale_intervals(rules: RuleSet, cluster: str) -> float:
    """How far behind (snapshot intervals) the analytics may be before group values are
    unknown: the ``analytics_stale`` rule's threshold for the cluster (none: never)."""
    found = [r.effective(cluster, "") for r in rules.rules if r.condition == "analytics_stale"]
    return min((r.threshold for r in found if r.enabled), default=math.inf)


def _about_channel(incident: Incident, channel: str) -> bool:
    """A channel's own failure is not sent to it: the other channels say it."""
    return bool(incident.details.get("condition") == "channel_failing"
                and incident.topic == channel)


def heartbeat(conn: Any, rules: RuleSet, channels: Mapping[str, Channel], cluster: str,
              now: datetime, dashboard_url: str, reached: bool = True) -> dict[str, str]:
    """"groupscope is alive" to the rules' heartbeat channels, at most every ``every``: an
    outside system that stops hearing it knows groupscope itself is down (Alertmanager's
    Watchdog). ``reached`` False (a notification is owed that no channel has delivered: a
    page that reached nobody): nothing is sent, so the outside watcher fires. A failed
    heartbeat is tried again ``retry_initial`` later, never owed."""
    beat = rules.heartbeat
    if beat is None:
        return {}
    if not reached:
        return {name: "withheld: a notification is owed that no channel has delivered"
                for name in beat.channels}
    with conn.begin():
        last = store.heartbeats(conn, cluster)
        firing = [i for i in store.open_incidents(conn, cluster) if i.state == "firing"]
    due: dict[str, tuple[Channel, list[Message]]] = {}
    outcome: dict[str, str] = {}
    for name in beat.channels:
        channel, row = channels.get(name), last.get(name)
        if channel is None:
            outcome[name] = "no connection: the outside watcher hears nothing"
            continue
        if row is not None and row.sent_at is not None and now - row.sent_at < beat.every:
            continue
        if row is not None and row.error is not None and row.attempted_at is not None \
                and now - row.attempted_at < rules.retry_initial:
            continue  # it failed a moment ago: not at every evaluation
        due[name] = (channel, [notify.heartbeat(cluster, now, beat.every, firing,
                                                dashboard_url)])
    deadline_s = notify.NOTICE_DEADLINE_S
    for name, results in notify.send_apart(due, deadline_s).items():
        error = results[0] if results else (
            f"channel {name}: the heartbeat did not finish within "
            f"{notify.duration(deadline_s)}")
        with conn.begin():
            store.record_heartbeat(conn, cluster, name, now, error)
        outcome[name] = "sent" if error is None else error
    return outcome


# --- what the channels hear when groupscope itself cannot evaluate -------------------------


def tell_outage(channels: Mapping[str, Channel], cluster: str, state_dir: Path, now: datetime,
                error: str | None, kind: str = "unreachable") -> dict[str, str]:
    """What the channels hear about groupscope's own failure to evaluate, which the incidents
    cannot say (they live in the warehouse): ``error`` set (``kind``: unreachable, read-only,
    disk full, statement timeout, not migrated, clock skew, ...): each channel gets one
    "[FIRING]" per outage; ``error`` None, the evaluation succeeded: the channels that were
    told get one "[RESOLVED]". The outage's state is a small file per cluster under
    ``state_dir`` (the alert log's folder), read and written under an exclusive lock and
    replaced atomically, so two tasks evaluating at once (the live DAG's and the alerts
    DAG's) tell each channel once, and a task killed mid-write leaves the old state whole.
    Returns the outcome per channel."""
    import fcntl

    state_dir.mkdir(parents=True, exist_ok=True)
    lock_file = state_dir / f"warehouse-outage-{file_key(cluster)}.lock"
    with lock_file.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if error is None:  # this worker evaluates: the cluster's outage, and its own clock's
            return {**_tell_outage(channels, cluster, state_dir, now, None, kind),
                    **_tell_outage(channels, _this_worker(cluster), state_dir, now, None,
                                   CLOCK_SKEW)}
        # A clock is one worker's: its notice is that worker's to raise and to resolve, or a
        # worker on time would resolve it at every run and the skewed one raise it again.
        subject = _this_worker(cluster) if kind == CLOCK_SKEW else cluster
        return _tell_outage(channels, subject, state_dir, now, error, kind)


CLOCK_SKEW = "clock skew"


def _this_worker(cluster: str) -> str:
    import socket

    return f"{cluster} (worker {socket.gethostname()})"


def _tell_outage(channels: Mapping[str, Channel], cluster: str, state_dir: Path,
                 now: datetime, error: str | None, kind: str) -> dict[str, str]:
    state_file = state_dir / f"warehouse-outage-{file_key(cluster)}.json"
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = None
    if error is None and state is None:
        return {}
    state = state or {"since": now.isoformat(), "told": [], "kind": kind}
    message = notify.warehouse_message(cluster, error, datetime.fromisoformat(state["since"]),
                                       now, state.get("kind", kind))
    # A channel no longer among them (the rules changed meanwhile) cannot be told it is over:
    # forgotten, so that the next outage is told to it afresh.
    told = set(state["told"]) & (set(channels) if error is None else set(state["told"]))
    due = {name: (channel, [message]) for name, channel in sorted(channels.items())
           if (name in told) != (error is not None)}  # not told yet / told, now resolved
    outcome: dict[str, str] = {}
    deadline_s = notify.NOTICE_DEADLINE_S
    for name, results in notify.send_apart(due, deadline_s).items():
        failure = results[0] if results else (
            f"channel {name}: did not finish within {notify.duration(deadline_s)}")
        outcome[name] = "sent" if failure is None else failure
        if failure is None:
            (told.add if error is not None else told.discard)(name)
    if error is None and not told:
        state_file.unlink(missing_ok=True)
    else:
        state["told"] = sorted(told)
        with _replacing(state_file) as out:
            out.write(json.dumps(state))
    return outcome


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[Any]:
    """Writes ``path`` whole or not at all: a temporary file beside it, synced, renamed over."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("w", encoding="utf-8") as out:
        yield out
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def file_key(name: str) -> str:
    """A short name for a cluster's (or a worker's) files of local state beside the alert log:
    the outage state here, the spooled task outcomes (``pipeline.spool_task_run``)."""
    import hashlib

    return hashlib.sha256(name.encode()).hexdigest()[:16]
