"""The incident lifecycle, the notification texts and the per-channel delivery (pure logic:
the warehouse store and real channels are in tests/integration/test_alerting.py)."""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from groupscope.serve.alerting.channels import ChannelError, Message
from groupscope.serve.alerting.conditions import Observation, unknown
from groupscope.serve.alerting.incidents import (
    FIRING,
    PENDING,
    RESOLVED,
    Incident,
    Undelivered,
    evaluate,
)
from groupscope.serve.alerting.notify import _tag, deliver, duration, messages
from groupscope.serve.alerting.rules import load_rules

T0 = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def rules(tmp_path: Path, text: str = "") -> Any:
    path = tmp_path / "rules.yaml"
    path.write_text(text or "keep_firing_for: 60s\nrepeat_interval: 4h\n")
    return load_rules(path)


def err(group: str, value: float, **details: Any) -> Observation:
    base = {"status": "ERR" if value else "OK", "partitions": 12, "stop_partitions": value,
            "stall_partitions": 0, "lag": 48112, "time_lag_s": 400.0, "time_lag_exact": False,
            "member_count": 0, "state": "Empty", "worst_topic": "payments",
            "worst_partition": 3, "worst_reason": "lag 4000, committed offset unchanged",
            "snapshot_ts": T0.isoformat(), "unchanged_since": (T0 - timedelta(seconds=70))
            .isoformat(), "no_members_since": (T0 - timedelta(seconds=20)).isoformat()}
    return Observation("group_status_err", "prod", group, value, {**base, **details})


class Run:
    """Evaluations in sequence, carrying the open incidents as the store would."""

    def __init__(self, ruleset: Any) -> None:
        self.rules, self.open = ruleset, {}

    def at(self, seconds: float, *observations: Observation) -> list[str]:
        now = T0 + timedelta(seconds=seconds)
        result = evaluate(self.rules, observations, list(self.open.values()), now)
        for incident in result.incidents:
            if incident.state == RESOLVED:
                self.open.pop(incident.fingerprint, None)
            else:
                self.open[incident.fingerprint] = incident
        return [f"{n.notification} {n.incident.rule} {n.incident.group_id}"
                for n in result.notices]

    def state(self, rule: str = "group_err") -> str | None:
        states = [i.state for i in self.open.values() if i.rule == rule]
        return states[0] if states else None


def test_fires_once_at_first_sight_then_resolves_once_after_keep_firing(tmp_path: Path) -> None:
    run = Run(rules(tmp_path))
    assert run.at(0, err("payments-eu", 0)) == []
    assert run.at(30, err("payments-eu", 12)) == ["firing group_err payments-eu"]
    assert run.state() == FIRING
    assert run.at(60, err("payments-eu", 12)) == []  # no repeat while it stays firing
    assert run.at(90, err("payments-eu", 0)) == []  # keep firing 60 s: no resolve yet
    assert run.state() == FIRING
    assert run.at(120, err("payments-eu", 12)) == []  # flapped back: still the same incident
    assert run.at(150, err("payments-eu", 0)) == []
    assert run.at(215, err("payments-eu", 0)) == ["resolved group_err payments-eu"]
    assert run.state() is None
    assert run.at(245, err("payments-eu", 0)) == []


def test_repeats_only_after_the_repeat_interval(tmp_path: Path) -> None:
    run = Run(rules(tmp_path, "repeat_interval: 10m\nkeep_firing_for: 0s\n"))
    assert run.at(0, err("g", 3)) == ["firing group_err g"]
    assert run.at(599, err("g", 3)) == []
    assert run.at(600, err("g", 3)) == ["repeat-1 group_err g"]
    assert run.at(900, err("g", 3)) == []
    assert run.at(1200, err("g", 3)) == ["repeat-2 group_err g"]


def test_for_keeps_it_pending_and_a_short_blip_never_notifies(tmp_path: Path) -> None:
    run = Run(rules(tmp_path, "keep_firing_for: 0s\nrules:\n  - name: group_err\n"
                              "    severity: critical\n    condition: group_status_err\n"
                              "    threshold: 0\n    for: 2m\n    runbook: look\n"))
    assert run.at(0, err("g", 1)) == []
    assert run.state() == PENDING
    assert run.at(60, err("g", 0)) == []  # cleared before `for`: dropped, never notified
    assert run.state() is None
    assert run.at(90, err("g", 1)) == []
    assert run.at(180, err("g", 1)) == []
    assert run.at(210, err("g", 1)) == ["firing group_err g"]


def test_rerunning_an_evaluation_owes_nothing_twice(tmp_path: Path) -> None:
    ruleset = rules(tmp_path)
    first = evaluate(ruleset, [err("g", 2)], [], T0)
    assert [n.notification for n in first.notices] == ["firing"]
    again = evaluate(ruleset, [err("g", 2)], first.incidents, T0)
    assert again.notices == []


def test_a_per_group_override_by_regex(tmp_path: Path) -> None:
    ruleset = rules(tmp_path, "rules:\n  - name: lag_records_high\n    severity: warning\n"
                              "    condition: lag_records\n    threshold: 100\n    for: 0s\n"
                              "    runbook: scale the consumers\n    overrides:\n"
                              "      - group: 'batch-.*'\n        threshold: 100000\n")
    run = Run(ruleset)
    notices = run.at(0, Observation("lag_records", "prod", "batch-nightly", 5000, {}),
                     Observation("lag_records", "prod", "payments", 5000, {}))
    assert notices == ["firing lag_records_high payments"]


def test_an_unobserved_incident_resolves(tmp_path: Path) -> None:
    run = Run(rules(tmp_path, "keep_firing_for: 0s\n"))
    assert run.at(0, err("gone", 4)) == ["firing group_err gone"]
    assert run.at(30) == ["resolved group_err gone"]  # the group was deleted


def _owed(notification: str, *groups: str, resolved: bool = False) -> list[Undelivered]:
    items = []
    for group in groups:
        started = T0 - timedelta(seconds=270)
        incident = Incident(
            incident_id=f"id-{group}", fingerprint=f"fp-{group}", rule="group_err",
            severity="critical", cluster="prod", group_id=group, topic="",
            state=RESOLVED if resolved else FIRING, started_at=started, last_seen_at=T0,
            evaluated_at=T0, value=12, threshold=0,
            details={**err(group, 12).details, "condition": "group_status_err"},
            runbook="Check the consumer's hosts and logs.", firing_at=started,
            resolved_at=T0 if resolved else None)
        items.append(Undelivered(incident, notification, "webhook", 0))
    return items


def test_a_share_groups_firing_text_says_how_long_its_start_offsets_have_not_moved() -> None:
    # A share group has no committed offset: its position is its start offset, and
    # conditions._stopped_since says so (``start_offsets``).
    [item] = _owed("firing", "queue")
    item.incident.details.update(start_offsets=True)
    [(message, _)] = messages([item], "http://grafana:3000")
    assert message.text.splitlines()[1] == (
        "12 of 12 partitions' start offsets have not moved for 1 m 10 s; lag 48,112 records "
        "(about 6 m 40 s).")


def test_a_firing_text_never_gives_a_partial_sum_as_the_lag() -> None:
    # A partition's offsets not read: the group's lag is unknown (issue 41), and the text
    # says so with the others' sum as a lower bound, not "lag ? records" nor that sum.
    [item] = _owed("firing", "payments-eu")
    item.incident.details.update(lag=None, time_lag_s=None, lag_unknown_partitions=1,
                                 lag_lower_bound=854)
    [(message, _)] = messages([item], "http://grafana:3000")
    assert message.text.splitlines()[1] == (
        "12 of 12 partitions have not moved for 1 m 10 s; lag unknown (1 partition(s) not "
        "read; at least 854 records).")


def test_the_firing_text_says_what_how_long_how_bad_and_where_to_look() -> None:
    [(message, _)] = messages(_owed("firing", "payments-eu"), "http://grafana:3000")
    assert message.text.splitlines()[:3] == [
        "[FIRING] cluster prod, group payments-eu: STOPPED.",
        "12 of 12 partitions have not moved for 1 m 10 s; lag 48,112 records (about 6 m 40 s).",
        "Members: 0 (Empty since 11:59:40Z).",
    ]
    assert ("Dashboard: http://grafana:3000/d/groupscope-group/group-detail?var-cluster=prod"
            "&var-group=payments-eu. Runbook: Check the consumer's hosts and logs."
            ) in message.text
    payload = message.payload()
    for key in ("incident_id", "state", "rule", "severity", "cluster", "group", "value",
                "threshold", "since", "dashboard", "runbook"):
        assert key in payload, key
    assert payload["group"] == "payments-eu" and payload["state"] == FIRING


def test_the_resolved_text_says_how_long_it_lasted() -> None:
    [(message, _)] = messages(_owed("resolved", "payments-eu", resolved=True), "http://g")
    assert message.text.startswith(
        "[RESOLVED] cluster prod, group payments-eu: STOPPED is over after 4 m 30 s")
    assert message.kind == "resolved"


def test_twenty_groups_make_one_grouped_message_per_kind() -> None:
    groups = [f"group-{n:02d}" for n in range(20)]
    batches = messages(_owed("firing", *groups) + _owed("resolved", "old", resolved=True),
                       "http://g")
    assert [(m.kind, len(items)) for m, items in batches] == [("firing", 20), ("resolved", 1)]
    text = batches[0][0].text
    assert text.startswith("[FIRING] cluster prod: 20 incidents (20 group_err).")
    assert all(f"- group {g}: STOPPED." in text for g in groups)
    assert len(batches[0][0].payload()["incidents"]) == 20


class Log:
    """The delivery log as the warehouse keeps it (notify.DeliveryLog), in memory."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str | None]] = []  # channel, notification, state
        self.attempts: list[tuple[str, str]] = []  # channel, notification: counted beforehand

    def attempting(self, items: list[Undelivered], retry_at: datetime) -> None:
        self.attempts += [(i.channel, i.notification) for i in items]

    def sent(self, items: list[Undelivered]) -> None:
        self.rows += [(i.channel, i.notification, "sent", None) for i in items]

    def failed(self, items: list[Undelivered], error: str, retry_at: datetime) -> None:
        self.rows += [(i.channel, i.notification, "failed", error) for i in items]
        self.retry_at = retry_at

    def given_up(self, items: list[Undelivered], why: str) -> None:
        self.rows += [(i.channel, i.notification, "given_up", why) for i in items]

    def dropped(self, items: list[Undelivered], why: str) -> None:
        self.rows += [(i.channel, i.notification, "dropped", why) for i in items]


class Good:
    def __init__(self, name: str, sent: list[tuple[str, Message]]) -> None:
        self.name, self.sent = name, sent

    def send(self, message: Message) -> None:
        self.sent.append((self.name, message))


class Down:
    name = "slack"

    def send(self, message: Message) -> None:
        raise ChannelError("channel slack: Slack webhook failed: connection refused")


CHANNELS = ("channels:\n  - {name: webhook, kind: webhook, connection: a}\n"
            "  - {name: slack, kind: slack, connection: b}\n"
            "  - {name: email, kind: email, connection: c}\n")


def delivery_rules(tmp_path: Path, extra: str = "") -> Any:
    return rules(tmp_path, CHANNELS + extra)


def test_a_failing_channel_does_not_hold_up_the_others(tmp_path: Path) -> None:
    sent: list[tuple[str, Message]] = []
    log = Log()
    owed = [Undelivered(u.incident, u.notification, channel, 0, T0)
            for u in _owed("firing", "a", "b") for channel in ("webhook", "slack", "email")]
    outcome = deliver(owed, {"webhook": Good("webhook", sent), "slack": Down(),
                             "email": Good("email", sent)}, "http://g", log, T0,
                      delivery_rules(tmp_path))
    assert [name for name, _ in sent] == ["webhook", "email"]
    assert outcome["webhook"] == "sent 2" and outcome["email"] == "sent 2"
    assert "connection refused" in outcome["slack"]
    assert sorted((c, state) for c, _, state, _ in log.rows) == sorted(
        [("webhook", "sent")] * 2 + [("email", "sent")] * 2 + [("slack", "failed")] * 2)
    # First failure: retried after the policy's initial 30 s.
    assert log.retry_at == T0 + timedelta(seconds=30)


class Stalls:
    """A channel whose send never returns in time (a receiver that drips its answer)."""

    name = "webhook"

    def __init__(self) -> None:
        self.release = threading.Event()

    def send(self, message: Message) -> None:
        self.release.wait(30)


def test_a_channel_that_stalls_fails_at_the_deadline_and_holds_up_no_other(
        tmp_path: Path) -> None:
    sent: list[tuple[str, Message]] = []
    log = Log()
    stalls = Stalls()
    owed = [Undelivered(u.incident, u.notification, channel, 0, T0)
            for u in _owed("firing", "a", "b") for channel in ("webhook", "email")]
    try:
        outcome = deliver(owed, {"webhook": stalls, "email": Good("email", sent)}, "http://g",
                          log, T0, delivery_rules(tmp_path, "delivery_deadline: 1s\n"))
    finally:
        stalls.release.set()
    assert [name for name, _ in sent] == ["email"]
    assert outcome["email"] == "sent 2"
    assert "did not finish within" in outcome["webhook"]
    assert sorted((c, state) for c, _, state, _ in log.rows) == sorted(
        [("email", "sent")] * 2 + [("webhook", "failed")] * 2)
    # Every attempt was kept before anything was sent: a kill mid-send leaves it failed.
    assert sorted(log.attempts) == sorted((c, "firing") for c in ("webhook", "email")
                                          for _ in range(2))
    assert log.retry_at == T0 + timedelta(seconds=30)


def test_a_channel_in_backoff_is_not_tried_and_a_new_resolved_does_not_overtake(
        tmp_path: Path) -> None:
    sent: list[tuple[str, Message]] = []
    log = Log()
    [firing] = [Undelivered(u.incident, u.notification, "webhook", 1, T0,
                            T0 + timedelta(seconds=30), "HTTP 500") for u in _owed("firing", "a")]
    [resolved] = [Undelivered(u.incident, u.notification, "webhook", 0, T0)
                  for u in _owed("resolved", "b", resolved=True)]
    ruleset = delivery_rules(tmp_path)
    outcome = deliver([firing, resolved], {"webhook": Good("webhook", sent)}, "http://g", log,
                      T0 + timedelta(seconds=10), ruleset)
    assert sent == [] and log.rows == []
    assert outcome["webhook"].startswith("backing off until 12:00:30Z")
    # Once due, both go, the firing first.
    deliver([firing, resolved], {"webhook": Good("webhook", sent)}, "http://g", log,
            T0 + timedelta(seconds=31), ruleset)
    assert [m.kind for _, m in sent] == ["firing", "resolved"]


def test_a_resolution_owed_with_its_firing_is_one_message_saying_both() -> None:
    incident = _owed("firing", "a")[0].incident
    over = replace(incident, state=RESOLVED, resolved_at=T0 + timedelta(minutes=3))
    owed = [Undelivered(incident, "firing", "webhook", 3, T0),
            Undelivered(over, "resolved", "webhook", 0, T0)]
    batches = messages(owed, "http://g")
    assert len(batches) == 1
    message, items = batches[0]
    assert message.kind == "resolved" and {i.notification for i in items} == {"firing",
                                                                             "resolved"}
    assert message.text.startswith("[RESOLVED] cluster prod, group a: STOPPED is over")
    assert "this message is both" in message.text
    assert message.payload()["dedup_key"] == f"{incident.incident_id}:resolved"


def test_old_deliveries_are_given_up_and_removed_channels_dropped(tmp_path: Path) -> None:
    sent: list[tuple[str, Message]] = []
    log = Log()
    old = [Undelivered(u.incident, u.notification, "webhook", 9, T0 - timedelta(hours=2),
                       T0 - timedelta(minutes=1), "HTTP 503") for u in _owed("firing", "a")]
    gone = [Undelivered(u.incident, u.notification, "pager", 2, T0) for u in _owed("firing", "b")]
    outcome = deliver([*old, *gone], {"webhook": Good("webhook", sent)}, "http://g", log, T0,
                      delivery_rules(tmp_path, "delivery_max_age: 1h\n"))
    assert sent == []
    assert sorted((c, s) for c, _, s, _ in log.rows) == [("pager", "dropped"),
                                                          ("webhook", "given_up")]
    assert "last error: HTTP 503" in next(w for c, _, _, w in log.rows if c == "webhook")
    assert outcome["pager"].startswith("dropped 1")


def test_a_new_episode_waits_for_the_old_episodes_resolved_on_its_channel(
        tmp_path: Path) -> None:
    # The old episode's RESOLVED failed and waited out its backoff; meanwhile the condition
    # held again and a new incident of the same rule and group fired.
    old = _owed("resolved", "a", resolved=True)[0]
    old = Undelivered(old.incident, "resolved", "webhook", 1, T0, T0 - timedelta(seconds=1),
                      "HTTP 503")
    new_incident = replace(_owed("firing", "a")[0].incident, incident_id="id-a-2",
                           started_at=T0 + timedelta(seconds=5))
    new = Undelivered(new_incident, "firing", "webhook", 0, T0 + timedelta(seconds=5))
    sent: list[tuple[str, Message]] = []
    log = Log()
    later = T0 + timedelta(seconds=10)
    outcome = deliver([new, old], {"webhook": Good("webhook", sent)}, "http://g", log, later,
                      delivery_rules(tmp_path))
    assert [m.subject for _, m in sent] == [messages([old], "http://g")[0][0].subject]
    assert sent[0][1].kind == "resolved"
    assert log.rows == [("webhook", "resolved", "sent", None)]
    assert "1 held behind an older episode" in outcome["webhook"]
    # Next evaluation: the old episode is delivered, the new FIRING goes.
    deliver([new], {"webhook": Good("webhook", sent)}, "http://g", log, later,
            delivery_rules(tmp_path))
    assert sent[1][1].kind == "firing" and len(sent) == 2


def test_a_connection_that_cannot_be_read_is_a_retry_not_a_missing_channel(
        tmp_path: Path) -> None:
    log = Log()
    owed = [Undelivered(u.incident, u.notification, "slack", 0, T0) for u in _owed("firing", "a")]
    outcome = deliver(owed, {}, "http://g", log, T0, delivery_rules(tmp_path),
                      unavailable={"slack": "connection groupscope_slack cannot be read now"})
    assert [(c, s) for c, _, s, _ in log.rows] == [("slack", "failed")]
    assert "cannot be read" in outcome["slack"]


def on_unknown_rules(tmp_path: Path, mode: str = "keep") -> Any:
    return rules(tmp_path, "keep_firing_for: 60s\nunknown_notice_after: 5m\nrules:\n"
                           f"  - name: group_err\n    on_unknown: {mode}\n")


def test_unknown_keeps_a_firing_incident_and_says_so_once(tmp_path: Path) -> None:
    run = Run(on_unknown_rules(tmp_path))
    assert run.at(0, err("payments", 12)) == ["firing group_err payments"]
    partial = unknown("group_status_err", "prod", "payments",
                      "missing from the partial snapshot of 12:01 (COORDINATOR_NOT_AVAILABLE)")
    # Unknown for 10 minutes: neither resolved (no evidence) nor repeated; one notice at 5 m.
    notices = [n for t in range(60, 660, 60) for n in run.at(t, partial)]
    assert notices == ["unknown group_err payments"]
    assert run.state() == FIRING
    held = next(iter(run.open.values()))
    assert "COORDINATOR_NOT_AVAILABLE" in held.details["unknown_why"]
    # Evidence that it cleared resolves it at once (it last held 11 minutes ago).
    assert run.at(700, err("payments", 0)) == ["resolved group_err payments"]


def test_each_unknown_spell_of_a_firing_incident_owes_a_notice_of_its_own(
        tmp_path: Path) -> None:
    run = Run(on_unknown_rules(tmp_path))
    run.at(0, err("payments", 12))
    gap = unknown("group_status_err", "prod", "payments", "a coordinator restarting")
    first = [n for t in range(60, 420, 60) for n in run.at(t, gap)]
    assert run.at(420, err("payments", 12)) == []  # known again, still firing
    second = [n for t in range(480, 840, 60) for n in run.at(t, gap)]
    # Two deliveries (an ``unknown`` row per spell would be dropped as a duplicate of the
    # first), each with its own dedup key.
    assert (first, second) == (["unknown group_err payments"], ["unknown-2 group_err payments"])
    assert _tag("unknown-2") == "UNKNOWN"


def test_unknown_never_starts_nor_advances_an_incident(tmp_path: Path) -> None:
    run = Run(rules(tmp_path, "rules:\n  - name: group_err\n    for: 2m\n"))
    assert run.at(0, err("payments", 12)) == [] and run.state() == PENDING
    gap = unknown("group_status_err", "prod", "payments", "the analytics are stale")
    assert run.at(300, gap) == [] and run.state() == PENDING
    assert run.at(330, gap, unknown("group_status_err", "prod", "orders", "no data")) == []
    assert [i.group_id for i in run.open.values()] == ["payments"]


@pytest.mark.parametrize(("mode", "expected"), [
    ("ok", ["resolved group_err payments"]), ("alerting", [])])
def test_unknown_as_ok_or_as_alerting(tmp_path: Path, mode: str, expected: list[str]) -> None:
    run = Run(on_unknown_rules(tmp_path, mode))
    run.at(0, err("payments", 12))
    gap = unknown("group_status_err", "prod", "payments", "no data")
    assert [n for t in (30, 90) for n in run.at(t, gap)] == expected
    assert run.state() == (None if mode == "ok" else FIRING)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (45, "45 s"), (70, "1 m 10 s"), (120, "2 m"), (7500, "2 h 5 m"),
    (90000, "1 d 1 h")])
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def lag_seconds(group: str, value: float) -> Observation:
    return Observation("lag_seconds", "prod", group, value,
                       {"lag": 48112, "time_lag_s": value, "time_lag_exact": False})


INHIBITION_RULES = ("keep_firing_for: 60s\nrepeat_interval: 4h\n"
                    "rules:\n  - {name: lag_seconds_high, threshold: 600, for: 0s}\n")


def test_a_stopped_group_behind_in_time_notifies_once_for_the_whole_episode(
        tmp_path: Path) -> None:
    """The STOPPED message already gives the lag: the lag rules of a group whose ERR fires
    send nothing, not their firing, nor their resolution, even when it comes later."""
    run = Run(rules(tmp_path, INHIBITION_RULES))
    assert run.at(0, err("orders", 0), lag_seconds("orders", 30)) == []
    assert run.at(30, err("orders", 12), lag_seconds("orders", 700)) == [
        "firing group_err orders"]
    assert run.state("lag_seconds_high") == FIRING  # an incident, held from the receivers
    # back and caught up: both keep firing for a while, then end; the held one silently
    assert run.at(60, err("orders", 0), lag_seconds("orders", 10)) == []
    assert run.at(130, err("orders", 0), lag_seconds("orders", 10)) == [
        "resolved group_err orders"]
    assert run.state("lag_seconds_high") is None
    assert run.at(200, err("orders", 0), lag_seconds("orders", 10)) == []


def test_a_lag_that_fired_before_the_stop_still_resolves(tmp_path: Path) -> None:
    run = Run(rules(tmp_path, INHIBITION_RULES))
    assert run.at(0, err("orders", 0), lag_seconds("orders", 700)) == [
        "firing lag_seconds_high orders"]
    assert run.at(30, err("orders", 12), lag_seconds("orders", 900)) == [
        "firing group_err orders"]
    assert run.at(60, err("orders", 0), lag_seconds("orders", 5)) == []
    assert sorted(run.at(200, err("orders", 0), lag_seconds("orders", 5))) == [
        "resolved group_err orders", "resolved lag_seconds_high orders"]


def test_inhibition_is_per_group(tmp_path: Path) -> None:
    run = Run(rules(tmp_path, INHIBITION_RULES))
    assert sorted(run.at(0, err("orders", 12), lag_seconds("payments", 700))) == [
        "firing group_err orders", "firing lag_seconds_high payments"]


def test_a_held_lag_fires_once_its_stop_is_over_and_it_still_holds(tmp_path: Path) -> None:
    """The group came back but does not catch up: the lag it was held for is news now."""
    run = Run(rules(tmp_path, INHIBITION_RULES))
    assert run.at(0, err("orders", 12), lag_seconds("orders", 700)) == [
        "firing group_err orders"]
    assert run.at(30, err("orders", 0), lag_seconds("orders", 900)) == []
    assert run.at(100, err("orders", 0), lag_seconds("orders", 9000)) == [
        "resolved group_err orders", "firing lag_seconds_high orders"]
    assert run.at(130, err("orders", 0), lag_seconds("orders", 9000)) == []
    assert run.at(150, err("orders", 0), lag_seconds("orders", 5)) == []  # keeps firing 60 s
    assert run.at(200, err("orders", 0), lag_seconds("orders", 5)) == [
        "resolved lag_seconds_high orders"]


def test_a_resolved_stop_says_what_it_was_and_how_things_are_now(tmp_path: Path) -> None:
    from groupscope.serve.alerting.notify import headline, single

    ruleset = rules(tmp_path)
    open_now: list[Incident] = []
    for seconds, obs in ((0, err("orders", 12)),
                         (30, err("orders", 0, member_count=3, state="Stable", lag=14)),
                         (100, err("orders", 0, member_count=3, state="Stable", lag=9))):
        result = evaluate(ruleset, [obs], open_now, T0 + timedelta(seconds=seconds))
        open_now = [i for i in result.incidents if i.state != RESOLVED] or open_now
    [resolved] = [n.incident for n in result.notices if n.notification == "resolved"]
    assert headline(resolved) == "STOPPED"  # not STALLED: members are back by now
    text = single(Undelivered(resolved, "resolved", "webhook", 0), "http://g").text
    assert "STOPPED is over after 1 m 40 s" in text, text
    assert "Now: lag 9 records, 3 member(s), status OK." in text, text


def test_an_unknown_that_counts_as_alerting_reads_as_unknown_not_nan(tmp_path: Path) -> None:
    run = Run(on_unknown_rules(tmp_path, "alerting"))
    gap = unknown("group_status_err", "prod", "payments", "no data")
    assert run.at(0, gap) == ["firing group_err payments"]
    [incident] = run.open.values()
    [(message, _)] = messages([Undelivered(incident, "firing", "webhook", 0)], "http://g")
    assert message.payload()["value"] is None
    assert "nan" not in message.text.lower()


def test_an_unknown_value_is_stored_as_null_never_nan(tmp_path: Path) -> None:
    """PostgreSQL's jsonb refuses NaN: one such row would fail every evaluation after it."""
    import json

    from groupscope.serve.alerting.store import _row

    run = Run(on_unknown_rules(tmp_path, "ok"))
    run.at(0, err("payments", 12))
    result = evaluate(run.rules, [unknown("group_status_err", "prod", "payments", "no data")],
                      list(run.open.values()), T0 + timedelta(seconds=30))
    [changed] = result.incidents
    stored = json.loads(_row(changed)["details"])
    assert stored["now"]["value"] is None and "NaN" not in _row(changed)["details"]


def loss(group: str, seconds: float, **details: Any) -> Observation:
    base = {"member_count": 2, "state": "Stable", "lag": 1200, "time_lag_s": 40.0,
            "time_lag_exact": False, "snapshot_ts": T0.isoformat(), "loss_topic": "orders",
            "loss_partition": 2, "loss_basis": "log_start", "loss_headroom": 540,
            "loss_production_rate": 50.0, "loss_consumption_rate": 30.0,
            "loss_growth_rate": 20.0,
            "loss_retention_ms": 604_800_000, "loss_retention_bytes": 1_048_576}
    return Observation("loss_forecast_s", "prod", group, seconds, {**base, **details})


def test_a_time_left_fires_below_its_threshold_and_resolves_above_it(tmp_path: Path) -> None:
    run = Run(rules(tmp_path, "keep_firing_for: 0s\n"))
    assert run.at(0, loss("orders-etl", 604_800)) == []  # 7 days: no loss forecast
    assert run.at(30, loss("orders-etl", 3600)) == []  # at the threshold: not below it
    assert run.at(60, loss("orders-etl", 27)) == ["firing data_loss_forecast orders-etl"]
    assert run.at(90, loss("orders-etl", 0, loss_basis="lost")) == []
    assert run.at(120, loss("orders-etl", 604_800)) == ["resolved data_loss_forecast orders-etl"]


def test_the_loss_forecast_names_the_partition_its_retention_the_rates_and_when() -> None:
    incident = Incident(
        incident_id="id", fingerprint="fp", rule="data_loss_forecast", severity="critical",
        cluster="prod", group_id="orders-etl", topic="", state=FIRING, started_at=T0,
        last_seen_at=T0, evaluated_at=T0, value=27.0, threshold=3600,
        details={**loss("orders-etl", 27).details, "condition": "loss_forecast_s"},
        runbook="", firing_at=T0)
    [(message, _)] = messages([Undelivered(incident, "firing", "webhook", 0)], "")
    lines = message.text.splitlines()
    assert lines[0] == ("[FIRING] cluster prod, group orders-etl: DATA LOSS forecast in 27 s "
                        "(retention deletes records it has not read).")
    assert lines[1] == (
        "orders[2]: the log deletes as fast as it grows and its start is 540 records behind "
        "the committed offset; the lag grows by 20.0 records/s, so retention reaches unread "
        "records in about 27 s at 12:00:27Z (retention.ms 7 d 0 h, retention.bytes 1 MiB); "
        "production 50.0 records/s, consumption 30.0 records/s.")
    by_age = replace(incident, details={**incident.details, "loss_basis": "retention_ms",
                                        "loss_retention_bytes": -1})
    [(message, _)] = messages([Undelivered(by_age, "firing", "webhook", 0)], "")
    assert ("orders[2]: the record at its committed offset reaches the topic's retention.ms "
            "in about 27 s at 12:00:27Z, when its segment may be deleted (retention.ms 7 d 0 h, "
            "retention.bytes unlimited)") in message.text
    lost = replace(incident, value=0.0, details={**incident.details, "loss_basis": "lost"})
    [(message, _)] = messages([Undelivered(lost, "firing", "webhook", 0)], "")
    assert message.text.startswith("[FIRING] cluster prod, group orders-etl: DATA LOSS now ")
    assert "orders[2]: records the group had not read are being deleted now" in message.text
    unknown_value = replace(incident, value=math.nan,
                            details={**incident.details, "loss_basis": None})
    [(message, _)] = messages([Undelivered(unknown_value, "firing", "webhook", 0)], "")
    assert "No partition's loss is forecast at the latest snapshot" in message.text


def test_incomplete_snapshots_name_what_the_latest_could_not_read(tmp_path: Path) -> None:
    from groupscope.serve.alerting.notify import single

    failed = [{"stage": "list_groups", "code": "COORDINATOR_NOT_AVAILABLE", "count": 1,
               "example": "__consumer_offsets partition 42 has no leader (its replica: broker "
                          "1, none in sync and up)"}]
    ruleset = rules(tmp_path)
    details = {"last_snapshot": T0.isoformat(), "last_complete_snapshot": None,
               "snapshot_every_s": 15.0}
    seen = Observation("snapshot_incomplete", "prod", "", 4.0,
                       {**details, "last_errors": failed})
    [notice] = evaluate(ruleset, [seen], [], T0).notices
    text = single(Undelivered(notice.incident, "firing", "webhook", 0), "http://g").text
    assert (f"4 snapshots in a row are incomplete (threshold 3); the latest, at "
            f"{T0:%H:%M:%S}Z, could not read: list_groups COORDINATOR_NOT_AVAILABLE x1 (e.g. "
            "__consumer_offsets partition 42 has no leader (its replica: broker 1, none in sync "
            "and up)).") in text, text
    # Without the errors (an evaluation before they were read), the table is named instead.
    bare = Observation("snapshot_incomplete", "prod", "", 4.0, details)
    [notice] = evaluate(ruleset, [bare], [], T0).notices
    assert "see raw.collection_errors" in single(
        Undelivered(notice.incident, "firing", "webhook", 0), "http://g").text


ROUTED = ("channels:\n  - {name: pager, kind: webhook, connection: a}\n"
          "  - {name: slack, kind: slack, connection: b}\n"
          "  - {name: deadman, kind: webhook, connection: c, incidents: false}\n"
          "routes:\n  - {severities: [critical], channels: [pager], continue: false}\n"
          "  - {channels: [slack], continue: false}\n"
          "heartbeat: {channels: [deadman], every: 5m}\n")


@pytest.mark.parametrize(("condition", "reachable", "expected"), [
    # 1. Its route's channel can be reached: the route, alone.
    ("group_status_err", {"pager", "slack", "deadman"}, ["pager"]),
    # 2. Its route's only channel has no connection: owed there still (it fails, and is
    #    told), and to every other that can be reached, except the dead man's switch.
    ("group_status_err", {"slack", "deadman"}, ["pager", "slack"]),
    # 3. Nothing can be reached: owed to its route (retried, never to nobody).
    ("group_status_err", set(), ["pager"]),
    # 4. An invalid rules file: every channel that can be reached (the routes may be what is
    #    wrong), still not the dead man's switch.
    ("rules_invalid", {"pager", "slack", "deadman"}, ["pager", "slack"]),
    # 5. A channel's own failure never goes to it.
    ("channel_failing", {"slack", "deadman"}, ["slack"]),
])
def test_a_route_cannot_drop_a_page(tmp_path: Path, condition: str, reachable: set[str],
                                    expected: list[str]) -> None:
    from groupscope.serve.alerting.evaluation import route

    incident = replace(_owed("firing", "a")[0].incident,
                       topic="pager" if condition == "channel_failing" else "",
                       details={"condition": condition})
    assert route(rules(tmp_path, ROUTED), incident, reachable) == expected


@pytest.mark.parametrize(("skew", "refused"), [
    (timedelta(0), False), (timedelta(seconds=59), False), (timedelta(seconds=-59), False),
    (timedelta(seconds=61), True), (timedelta(hours=-1), True), (timedelta(days=14), True),
])
def test_a_worker_clock_too_far_from_the_warehouses_is_refused(skew: timedelta,
                                                               refused: bool) -> None:
    from groupscope.serve.alerting.evaluation import ClockSkew, check_clock

    if refused:
        with pytest.raises(ClockSkew, match="ahead of" if skew > timedelta(0) else "behind"):
            check_clock(T0 + skew, T0)
    else:
        check_clock(T0 + skew, T0)


def test_without_a_matching_route_only_the_channels_set_up_are_owed(tmp_path: Path) -> None:
    from groupscope.serve.alerting.evaluation import route

    # No routes: every channel with a connection, never the dead man's switch; the built-in
    # channel nobody set up (pager, no connection) is not owed, nor is it failing.
    text = ROUTED.split("routes:")[0] + "heartbeat: {channels: [deadman], every: 5m}\n"
    incident = replace(_owed("firing", "a")[0].incident, details={"condition": "group_err"})
    assert route(rules(tmp_path, text), incident, {"slack", "deadman"}) == ["slack"]
    assert route(rules(tmp_path, text), incident, {"pager", "slack", "deadman"}) == [
        "pager", "slack"]
