"""The dead man's switch of ``./run`` and of the compose stack (service ``heartbeat-catcher``):
a local HTTP endpoint the heartbeat channel posts to, and a watch that says when groupscope's
heartbeat ("groupscope is alive", docs/alerts.md, "The heartbeat") is late and when it comes
back, as an outside check (Healthchecks, a ping URL) would. Its lines::

    HEARTBEAT LATE: no heartbeat from groupscope for 2 m 30 s (expected every 1 m)
    HEARTBEAT RESUMED: groupscope's heartbeat is back after 3 m 10 s without one

The receiving is the webhook catcher's (each post kept in ``heartbeat.log`` and
``heartbeat.jsonl``); the lateness is ``HeartbeatWatch``, pure, with the time passed in. Only
posts of kind ``heartbeat`` count: the warehouse-outage notice also reaches this channel (it
goes to every channel) and is kept, but it says nothing about groupscope being alive."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from groupscope.serve.alerting.notify import duration
from groupscope_dev.airflow import connection_env
from groupscope_dev.webhookcatcher import WebhookCatcher

# The heartbeat's channel in the rules ./run writes and in the compose stack's rules file
# (deploy/groupscope/rules.yaml); an operator points its connection at their own check.
DEADMAN_CHANNEL = "deadman"
DEADMAN_CONNECTION = "groupscope_deadman"


@dataclass
class HeartbeatWatch:
    """Whether the heartbeat is late: no heartbeat for longer than ``every`` + ``grace`` since
    the last one, or since the watch was armed. ``grace`` covers what the sender adds to
    ``every``: it sends at the first evaluation after ``every`` has passed (up to a snapshot
    interval later), plus the time the evaluation and its scheduling take. Each change is told
    once: late, then back."""

    every: timedelta
    grace: timedelta
    since: datetime | None = None  # the newest heartbeat, or when the watch was armed
    heard: bool = False
    late: bool = False

    def arm(self, now: datetime) -> None:
        """Starts counting from ``now`` if no heartbeat came yet: from then on, none coming is
        late too (a heartbeat that was never sent is the first thing to catch)."""
        if self.since is None:
            self.since = now

    def beat(self, at: datetime) -> str | None:
        """A heartbeat received at ``at``: the line to say, if any (the first one, or one that
        ends a lateness)."""
        previous, was_late, first = self.since, self.late, not self.heard
        self.since = at if previous is None else max(previous, at)
        self.heard, self.late = True, False
        if was_late and previous is not None:
            return (f"HEARTBEAT RESUMED: groupscope's heartbeat is back after "
                    f"{duration((at - previous).total_seconds())} without one")
        if first:
            return (f"HEARTBEAT the first heartbeat from groupscope came: from now on, one is "
                    f"expected every {duration(self.every.total_seconds())}")
        return None

    def check(self, now: datetime) -> str | None:
        """The line to say at ``now`` if the heartbeat just became late."""
        if self.since is None or self.late:
            return None
        silence = now - self.since
        if silence <= self.every + self.grace:
            return None
        self.late = True
        waited = duration(silence.total_seconds())
        expected = duration(self.every.total_seconds())
        if not self.heard:
            return (f"HEARTBEAT LATE: no heartbeat from groupscope in the {waited} since the "
                    f"watch began (expected every {expected})")
        return (f"HEARTBEAT LATE: no heartbeat from groupscope for {waited} "
                f"(expected every {expected})")


class HeartbeatCatcher:
    """The watch behind an HTTP endpoint (the webhook catcher's server). ``lines(now)`` gives
    what to print since the last call: heartbeats are counted as they arrive, lateness when
    asked."""

    def __init__(self, every: timedelta, grace: timedelta, folder: Path | None = None,
                 port: int = 0) -> None:
        self.watch = HeartbeatWatch(every, grace)
        self.receiver = WebhookCatcher(folder, port, name="heartbeat", listener=self._received)
        self.port = self.receiver.port
        self._said: list[str] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/heartbeat"

    @property
    def log(self) -> Path:
        """Where each heartbeat is kept, as a person reads it (``heartbeat.log``)."""
        return (self.receiver.folder or Path(".")) / "heartbeat.log"

    def connection(self, url: str | None = None) -> tuple[str, str]:
        """The heartbeat channel's Airflow connection (as its environment variable): a webhook
        to ``url``, this catcher by default."""
        return connection_env(DEADMAN_CONNECTION, "http", password=url or self.url)

    def start(self, host: str = "127.0.0.1") -> None:
        self.receiver.start(host)

    def stop(self) -> None:
        self.receiver.stop()

    def arm(self, now: datetime) -> None:
        with self._lock:
            self.watch.arm(now)

    def lines(self, now: datetime) -> list[str]:
        with self._lock:
            late = self.watch.check(now)
            said, self._said = self._said + ([late] if late else []), []
        return said

    def _received(self, body: dict[str, Any], received: datetime) -> None:
        if body.get("kind") != "heartbeat":
            return
        with self._lock:
            line = self.watch.beat(received)
            if line:
                self._said.append(line)


def heartbeat_rules(every: timedelta) -> str:
    """The part of a rules file that sends the heartbeat every ``every`` to the ``deadman``
    channel: the built-in channels plus that one (a file's ``channels`` replaces the built-in
    list), which takes no incident (``incidents: false``: to a ping URL, any post is a sign of
    life)."""
    from groupscope.serve.alerting.rules import builtin_rules

    builtin = [c.model_dump(exclude_defaults=True) for c in builtin_rules().channels]
    document: dict[str, Any] = {
        "heartbeat": {"channels": [DEADMAN_CHANNEL], "every": f"{round(every.total_seconds())}s"},
        "channels": [*builtin, {"name": DEADMAN_CHANNEL, "kind": "webhook",
                                "connection": DEADMAN_CONNECTION, "incidents": False}],
    }
    return ("# The heartbeat to the dead man's switch (dev/groupscope_dev/heartbeatcatcher.py);"
            " incidents go to the other channels.\n"
            + str(yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)))
