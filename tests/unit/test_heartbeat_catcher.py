"""The heartbeat's local dead man's switch (dev/groupscope_dev/heartbeatcatcher.py), the one
./run and the compose stack's heartbeat-catcher run: when it says the heartbeat is late and
when it is back (pure, the time passed in), what it hears over a real socket from groupscope's
own webhook sender, and the rules part ./run writes to send it."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from groupscope.serve.alerting import notify
from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import builtin_rules, load_rules_text
from groupscope_dev.__main__ import HEARTBEAT_EVERY, _heartbeat_grace
from groupscope_dev.demo import demo_rules
from groupscope_dev.heartbeatcatcher import (
    DEADMAN_CHANNEL,
    DEADMAN_CONNECTION,
    HeartbeatCatcher,
    HeartbeatWatch,
    heartbeat_rules,
)

T0 = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _watch() -> HeartbeatWatch:
    return HeartbeatWatch(every=MINUTE, grace=timedelta(seconds=90))


def test_nothing_is_late_before_the_watch_is_armed_or_hears_anything() -> None:
    watch = _watch()
    assert watch.check(T0 + timedelta(days=1)) is None


def test_steady_heartbeats_say_nothing_but_the_first() -> None:
    watch = _watch()
    watch.arm(T0)
    first = watch.beat(T0 + timedelta(seconds=40))
    assert first is not None and first.startswith("HEARTBEAT the first heartbeat")
    # Each one up to a snapshot interval after the interval, as the evaluations send them.
    at = T0 + timedelta(seconds=40)
    for _ in range(20):
        assert watch.check(at + timedelta(seconds=149)) is None
        at += timedelta(seconds=75)
        assert watch.beat(at) is None
    assert not watch.late


def test_late_once_after_every_and_grace_then_resumed() -> None:
    watch = _watch()
    watch.arm(T0)
    watch.beat(T0)
    assert watch.check(T0 + timedelta(seconds=150)) is None  # every + grace: not yet
    assert watch.check(T0 + timedelta(seconds=151)) == (
        "HEARTBEAT LATE: no heartbeat from groupscope for 2 m 31 s (expected every 1 m)")
    assert watch.check(T0 + timedelta(seconds=400)) is None  # told once
    assert watch.beat(T0 + timedelta(seconds=190)) == (
        "HEARTBEAT RESUMED: groupscope's heartbeat is back after 3 m 10 s without one")
    assert not watch.late
    # And late again, counted from the heartbeat that ended the first silence.
    assert watch.check(T0 + timedelta(seconds=190 + 150)) is None
    late = watch.check(T0 + timedelta(seconds=190 + 151))
    assert late is not None and late.startswith("HEARTBEAT LATE")


def test_a_heartbeat_that_never_comes_is_late_from_when_the_watch_was_armed() -> None:
    watch = _watch()
    watch.arm(T0)
    watch.arm(T0 + timedelta(hours=1))  # arming again does not move the start
    assert watch.check(T0 + timedelta(seconds=200)) == (
        "HEARTBEAT LATE: no heartbeat from groupscope in the 3 m 20 s since the watch began "
        "(expected every 1 m)")


def test_a_heartbeat_received_out_of_order_does_not_move_the_count_back() -> None:
    watch = _watch()
    watch.beat(T0 + timedelta(seconds=60))
    watch.beat(T0)
    assert watch.check(T0 + timedelta(seconds=60 + 150)) is None


def test_runs_heartbeat_is_late_after_2_m_30_s_of_silence() -> None:
    """./run's interval and grace with its default 15 s snapshots (the issue's example)."""
    assert HEARTBEAT_EVERY == MINUTE
    assert HEARTBEAT_EVERY + _heartbeat_grace(15.0) == timedelta(minutes=2, seconds=30)
    assert _heartbeat_grace(60.0) == timedelta(minutes=4)  # several slower snapshot intervals


# -- over a real socket ------------------------------------------------------------------------
def test_groupscopes_heartbeat_reaches_the_catcher_through_the_connection_it_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules ./run writes and the connection the catcher gives make the product's own
    channel post to the catcher; a heartbeat counts, an outage notice to the same channel does
    not; lateness is judged at the time given."""
    catcher = HeartbeatCatcher(MINUTE, timedelta(seconds=90), tmp_path / "heartbeat")
    catcher.start()
    try:
        monkeypatch.setenv(*catcher.connection())
        rules = load_rules_text(heartbeat_rules(MINUTE), "rules file run-rules.yaml")
        channel = build_channels(rules).channels[DEADMAN_CHANNEL]
        catcher.arm(datetime.now(UTC))

        # Another message to the same channel (the warehouse-outage notice goes to every
        # channel) is kept, but it is no heartbeat.
        _post(catcher.url, {"kind": "warehouse_outage", "text": "[FIRING] ..."})
        assert catcher.lines(datetime.now(UTC)) == []
        message = notify.heartbeat("local", datetime.now(UTC), MINUTE, [], "http://grafana")
        assert notify.send_one(channel, message) is None
        heard = catcher.lines(datetime.now(UTC))
        assert len(heard) == 1 and heard[0].startswith("HEARTBEAT the first heartbeat"), heard
        log = (tmp_path / "heartbeat/heartbeat.log").read_text()
        assert "[FIRING] ..." in log and "[HEARTBEAT] groupscope is alive" in log

        later = datetime.now(UTC) + timedelta(seconds=151)
        assert catcher.lines(later) == [
            "HEARTBEAT LATE: no heartbeat from groupscope for 2 m 31 s (expected every 1 m)"]
        assert catcher.lines(later) == []

        assert notify.send_one(channel, message) is None
        back = catcher.lines(datetime.now(UTC))
        assert len(back) == 1 and back[0].startswith("HEARTBEAT RESUMED"), back
    finally:
        catcher.stop()


def _post(url: str, body: dict[str, str]) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


# -- the rules ./run writes ---------------------------------------------------------------------
def test_the_heartbeat_rules_send_it_to_the_deadman_channel_only() -> None:
    rules = load_rules_text(heartbeat_rules(MINUTE), "rules file run-rules.yaml")
    assert rules.heartbeat is not None
    assert (rules.heartbeat.channels, rules.heartbeat.every) == ([DEADMAN_CHANNEL], MINUTE)
    by_name = {c.name: c for c in rules.channels}
    assert (by_name[DEADMAN_CHANNEL].kind, by_name[DEADMAN_CHANNEL].connection) \
        == ("webhook", DEADMAN_CONNECTION)
    # Every built-in channel is still there, as it was, and gets every incident; the
    # heartbeat's receiver gets none (to a ping URL any post is a sign of life).
    builtin = builtin_rules().channels
    assert [by_name[c.name] for c in builtin] == builtin
    for severity in ("critical", "warning", "info"):
        for labels in ({}, {"team": "payments"}):
            assert [c.name for c in rules.channels_for(severity, labels)] \
                == [c.name for c in builtin]


def test_the_demos_thresholds_and_the_heartbeat_make_one_rules_file() -> None:
    """./run writes both into run-rules.yaml (the heartbeat part alone with --demo none)."""
    rules = load_rules_text(demo_rules(1.0, floor_s=30) + heartbeat_rules(MINUTE),
                            "rules file run-rules.yaml")
    assert rules.heartbeat is not None and rules.heartbeat.channels == [DEADMAN_CHANNEL]
    assert rules.keep_firing_for == timedelta(minutes=2)  # the demo's
    assert next(r for r in rules.rules if r.name == "lag_seconds_high").threshold == 60
