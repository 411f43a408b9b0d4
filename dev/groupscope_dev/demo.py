"""The demo workload: a producer, one group of every kind an operator meets (consumer groups,
a share group, a Kafka Streams application), and a timeline of scripted incidents, so that a
first run tells a story.

Most groups are healthy: they consume faster than the producer writes. The timeline
(``TIMELINE``, printed at the start of ``./run``) then breaks some on purpose: a group killed
with ``kill -9`` and restarted, a consumer that slows down and catches up again, a burst of
membership churn (a rebalance storm), a producer surge that one group cannot keep up with, and
a member whose handler blocks (it stops polling, its heartbeats go on) just before another
joins: a rebalance stuck waiting for it. Each alert they raise names its cause.
``demo-range`` is skewed from the start (range on topics whose partition counts its three
members do not divide), for the what-if advice. On Kafka 4.2+ (``kinds``), ``KIND_GROUPS``
adds a share group (KIP-932, a queue) of Kafka's own console share consumers, whose members
are killed and restarted, and a Kafka Streams application on the streams protocol (KIP-1071,
Kafka's WordCountDemo), to which a second instance is added: its tasks move.

Each member is its own process (a JVM for the share consumers and Streams instances, from the
Maven Central jars: ``groupscope_dev.kinds``), so that a crash can be a real ``SIGKILL`` (no
LeaveGroup) and a graceful leave a real ``close()``. ``DEMO_GROUPS`` and ``KIND_GROUPS`` are
the single description of the workload; the tests read them to know what the snapshot must
show. ``time_scale`` compresses the timeline
(the tests run it at a fraction of its ten minutes); ``demo_rules`` gives the alert thresholds
scaled the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupscope_dev import StackError, importable_env
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION, kafka_libs, require_java, streams_libs
from groupscope_dev.kinds import (
    WORD_COUNT_INPUT,
    WORD_COUNT_OUTPUT,
    JavaProcesses,
    share_consumer,
    streams_instance,
)

log = logging.getLogger(__name__)

TOPICS: dict[str, int] = {
    "demo.orders": 6,
    "demo.payments": 4,
    "demo.audit": 3,
    "demo.events": 8,
    "demo.archive": 2,
    "demo.shipments": 4,
    "demo.clicks": 3,
    "demo.queue": 4,  # the share group's
    WORD_COUNT_INPUT: 4,  # the Streams application's: lines of words
}
# Topics the producer leaves alone: the empty group's (its lag is old news) and the Streams
# application's output.
QUIET_TOPICS = ("demo.archive", WORD_COUNT_OUTPUT)
WORDS = ("kafka", "queue", "share", "stream", "task", "group", "lag", "offset")


@dataclass(frozen=True)
class GroupSpec:
    group_id: str
    topics: tuple[str, ...]
    members: int
    assignor: str | None = None  # classic client-side assignor
    protocol: str = "classic"  # or "consumer" (KIP-848), "share" (KIP-932), "streams"
    static: bool = False  # members get group.instance.id
    assign_only: bool = False  # assign() + commit: a "simple" group without members
    empty: bool = False  # commits once, then every member leaves
    churn: bool = False  # the storm: members join, leave and crash during the timeline's burst
    rate: float | None = None  # records a member processes per second; None: as fast as it can
    blocks: bool = False  # its first member's handler blocks when the timeline says so

    def instance_id(self, index: int) -> str | None:
        return f"{self.group_id}-instance-{index}" if self.static else None


DEMO_GROUPS: tuple[GroupSpec, ...] = (
    # range per topic: 6, 4 and 8 partitions over 3 members give 7, 6 and 5 (roundrobin: 6 each)
    GroupSpec("demo-range", ("demo.orders", "demo.payments", "demo.events"), 3,
              assignor="range"),
    GroupSpec("demo-roundrobin", ("demo.orders", "demo.payments"), 3, assignor="roundrobin"),
    GroupSpec("demo-cooperative-sticky", ("demo.orders",), 3, assignor="cooperative-sticky",
              churn=True),
    GroupSpec("demo-static", ("demo.payments",), 2, assignor="range", static=True),
    GroupSpec("demo-kip848", ("demo.events",), 2, protocol="consumer"),
    GroupSpec("demo-slow", ("demo.shipments",), 1, assignor="range"),
    GroupSpec("demo-assign-only", ("demo.audit",), 1, assign_only=True),
    GroupSpec("demo-empty", ("demo.archive",), 1, assignor="range", empty=True),
    # Keeps up with the producer's 20 records a second, not with its surge's 200; catches up
    # within about 90 s after it, before its time lag has stood over lag_seconds_high's 60 s
    # for the rule's minute (at 60 a second it did, and resolved only at the timeline's end).
    GroupSpec("demo-surge", ("demo.clicks",), 1, assignor="range", rate=90.0),
    GroupSpec("demo-stuck", ("demo.orders",), 2, assignor="range", blocks=True),
)

# Kafka 4.2+ (Demo.kinds): a share group of real share consumers (Kafka's console share
# consumer), and a Kafka Streams application on the streams protocol (WordCountDemo, which
# reads WORD_COUNT_INPUT; its group id is the application id). A JVM per member.
QUEUE_GROUP = "demo-queue"
STREAMS_APP = "demo-wordcount"
KIND_GROUPS: tuple[GroupSpec, ...] = (
    GroupSpec(QUEUE_GROUP, ("demo.queue",), 2, protocol="share"),
    GroupSpec(STREAMS_APP, (WORD_COUNT_INPUT,), 1, protocol="streams"),
)

# The groups the timeline leaves alone: they must stay OK and never notify.
HEALTHY = ("demo-range", "demo-static", "demo-kip848", "demo-assign-only", "demo-empty")
STOPPED_GROUP = "demo-roundrobin"
SLOW_GROUP = "demo-slow"
STORM_GROUP = "demo-cooperative-sticky"
SURGE_GROUP = "demo-surge"
SURGE_TOPIC = "demo.clicks"
STUCK_GROUP = "demo-stuck"
PRODUCE_RATE = 20.0  # records per second to each topic
SURGE_FACTOR = 10  # the surge: this many times the rate, to SURGE_TOPIC
SLOW_SHARE = 0.25  # the slow consumer's rate, as a share of the production rate
# The blocked member's max.poll.interval.ms (unscaled): past it, librdkafka leaves the group
# for it and the rebalance completes without it. From the block (255 s) to the join (345 s)
# and on to 525 s: the rebalance is stuck for 3 minutes, twice the rule's threshold.
STUCK_POLL_INTERVAL_S = 270.0


@dataclass(frozen=True)
class Event:
    """One scripted step: ``at_s`` seconds into the (unscaled) timeline."""

    at_s: float
    action: str  # kill | restart | slow | fast | storm | calm | surge | unsurge | block | join
    group_id: str
    text: str


TIMELINE: tuple[Event, ...] = (
    Event(60, "slow", SLOW_GROUP,
          "demo-slow slows to a quarter of the production rate: its lag in seconds grows "
          "until the lag_seconds_high rule fires"),
    Event(90, "storm", STORM_GROUP,
          "demo-cooperative-sticky starts churning: a member joins, leaves or crashes every "
          "{storm_every}, until the rebalance_storm rule fires at the next analytics run"),
    Event(120, "kill", STOPPED_GROUP,
          "kill -9 of every demo-roundrobin member: STOP, then a FIRING notification"),
    # The share session timeout (45 s) passes before the members leave the group.
    Event(150, "kill", QUEUE_GROUP,
          "kill -9 of every demo-queue share consumer: once their session has expired the "
          "queue has no member while records arrive; its lag grows and its start offset "
          "stands still (Group detail, share group panels)"),
    # A minute and a half before the join: the rebalance's cause is told by who stopped
    # committing before it began, which takes a snapshot or two to see (in the compressed
    # timeline of tests/integration/test_demo.py, passes slowed by a loaded machine, 15 s
    # real seconds held one snapshot at most).
    Event(255, "block", STUCK_GROUP,
          "a demo-stuck member's handler blocks: it stops polling, its heartbeats go on"),
    Event(270, "calm", STORM_GROUP, "demo-cooperative-sticky stops churning"),
    Event(300, "restart", STOPPED_GROUP,
          "demo-roundrobin restarts: it catches up, then a RESOLVED notification"),
    Event(345, "join", STUCK_GROUP,
          "a member joins demo-stuck: the rebalance waits for the blocked one (until its "
          "max.poll.interval.ms, {stuck_for}, has passed since its last poll), and the "
          "stuck-rebalance alert names it"),
    # Late enough for a history to compare with (the causes need 8 snapshots of the group).
    Event(360, "surge", SURGE_GROUP,
          "the producer writes 10 times as much to demo.clicks; demo-surge cannot keep up: its "
          "lag alert names a producer surge"),
    Event(390, "fast", SLOW_GROUP,
          "demo-slow is back to full speed: it catches up and its alert resolves"),
    Event(420, "unsurge", SURGE_GROUP,
          "demo.clicks is back to its usual rate: demo-surge catches up and its alert resolves"),
    # After the surge: starting JVMs costs CPU seconds, which would slow the snapshots that
    # must see demo-stuck's blocked member before its rebalance (in the compressed timeline
    # of tests/integration/test_demo.py, a pass every few seconds).
    Event(450, "restart", QUEUE_GROUP,
          "demo-queue's share consumers restart: they acquire the backlog and its lag falls "
          "back to zero"),
    Event(480, "join", STREAMS_APP,
          "a second demo-wordcount instance joins the Kafka Streams application: the broker "
          "moves tasks to it (Group detail, Streams group panels)"),
)
STORM_EVERY_S = 15.0
TIMELINE_END_S = 600.0  # the last resolved notification is due well before


def demo_rules(time_scale: float = 1.0, floor_s: float = 30.0) -> str:
    """The demo's alert rules file (on top of the built-in ones): a lag-seconds threshold the
    slow consumer crosses within the timeline (the built-in is 600 s for 5 m), and the
    timeline's own compression applied to the durations. The threshold is compressed too, but
    never below ``floor_s`` (two snapshot intervals, say): a lag in seconds is physical, and
    a healthy group can be a snapshot interval behind."""
    def seconds(value: float) -> str:
        return f"{max(1, round(value * time_scale))}s"

    return (
        "# The demo's thresholds (dev/groupscope_dev/demo.py), on top of the built-in rules.\n"
        f"keep_firing_for: {seconds(120)}\n"
        "rules:\n"
        f"  - {{name: lag_seconds_high, threshold: {max(round(floor_s), round(60 * time_scale))}, "
        f"for: {seconds(60)}}}\n"
        # The surge's lag passes this within its first half minute (unscaled); the healthy
        # groups are never near it.
        f"  - {{name: lag_records_high, overrides: [{{group: {SURGE_GROUP}, threshold: 1000,"
        " for: 0s}]}\n"
        f"  - {{name: rebalance_stuck, threshold: {max(round(floor_s), round(90 * time_scale))}}}\n"
    )


def create_topics(bootstrap: str, topics: dict[str, int] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=15).topics)
    wanted = [NewTopic(t, n, 1) for t, n in (topics or TOPICS).items() if t not in existing]
    if not wanted:
        return
    for topic, future in admin.create_topics(wanted, operation_timeout=30).items():
        try:
            future.result()
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"creating topic {topic} failed: {exc}") from exc


# The classic members' session timeout: longer than two of ./run's 15 s snapshot intervals, so
# a kill -9 is seen as it is. A member that vanishes within one interval of its last commit
# reads as a LeaveGroup to the causes (they tell a crash by the snapshots that still list a
# member after its commits stopped); with 6 s the demo's crashes were named clean leaves.
SESSION_TIMEOUT_MS = 30_000
# The churning group's: a join waits for every listed member to rejoin, a crashed one until
# its session expires, so a long session would turn the storm into a stop.
CHURN_SESSION_TIMEOUT_MS = 6_000


def consumer_config(bootstrap: str, spec: GroupSpec, index: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": spec.group_id,
        "client.id": f"{spec.group_id}-{index}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if spec.protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config["session.timeout.ms"] = (CHURN_SESSION_TIMEOUT_MS if spec.churn
                                        else SESSION_TIMEOUT_MS)
        config["heartbeat.interval.ms"] = 1_000
        if spec.assignor:
            config["partition.assignment.strategy"] = spec.assignor
    instance = spec.instance_id(index)
    if instance:
        config["group.instance.id"] = instance
    return config


# -- the processes ---------------------------------------------------------------------------
def _stop_on_signals() -> threading.Event:
    """Set by SIGTERM or SIGINT, so the loop ends cleanly (a member's close() is its
    graceful LeaveGroup)."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    return stopping


def run_member(bootstrap: str, spec: GroupSpec, index: int, stop_after: float | None,
               slow_rate: float, max_poll_interval_ms: int | None = None) -> None:
    """One member: consume (at ``spec.rate`` records/s if set) and commit every second.
    SIGUSR1 slows it to ``slow_rate`` records/s (0: its handler blocks, it stops polling),
    SIGUSR2 lets it run at full speed again."""
    # Before anything slow: a signal that comes first would end the process.
    rate = [spec.rate]
    signal.signal(signal.SIGUSR1, lambda *_: rate.__setitem__(0, slow_rate))
    signal.signal(signal.SIGUSR2, lambda *_: rate.__setitem__(0, spec.rate))
    stopping = _stop_on_signals()
    from confluent_kafka import Consumer, TopicPartition

    config = consumer_config(bootstrap, spec, index)
    if max_poll_interval_ms is not None:
        config["max.poll.interval.ms"] = max_poll_interval_ms
    consumer = Consumer(config)
    owned = [TopicPartition(t, p) for t in spec.topics for p in range(TOPICS[t])]
    if spec.assign_only:
        consumer.assign(owned)
    else:
        consumer.subscribe(list(spec.topics))
    started = time.monotonic()
    last_commit = started
    try:
        while not stopping.is_set():
            if stop_after is not None and time.monotonic() - started > stop_after \
                    and _all_committed(consumer):
                # not before every owned partition has a commit: a group that empties before
                # it commits anything is deleted (a slow join on a loaded machine did that)
                break
            if rate[0] == 0:  # a handler that never returns: no poll, no commit
                time.sleep(0.2)
                continue
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                if rate[0]:
                    time.sleep(1.0 / rate[0])  # "processing"
            elif msg is not None and spec.assign_only:
                # librdkafka gives up on an assign()ed partition when fetching its committed
                # offset fails (NOT_COORDINATOR while a fresh cluster creates the offsets
                # topic); an application assigns again.
                time.sleep(1.0)
                consumer.assign(owned)
            if time.monotonic() - last_commit >= 1.0:
                with contextlib.suppress(Exception):  # nothing consumed yet to commit
                    consumer.commit(asynchronous=False)
                last_commit = time.monotonic()
    finally:
        with contextlib.suppress(Exception):
            consumer.commit(asynchronous=False)
        consumer.close()  # a graceful leave: LeaveGroup, no session-timeout wait


def _all_committed(consumer: Any) -> bool:
    """Whether the group holds a committed offset for every partition this member owns."""
    assignment = consumer.assignment()
    if not assignment:
        return False
    try:
        return all(tp.offset >= 0 for tp in consumer.committed(assignment, timeout=5))
    except Exception:  # the coordinator is busy: ask again on the next turn
        return False


def run_producer(bootstrap: str, rate: float) -> None:
    """Produces ``rate`` messages per second to every demo topic, keyed so partitions differ.
    SIGUSR1 starts the surge (``SURGE_FACTOR`` times as many to ``SURGE_TOPIC``), SIGUSR2
    ends it."""
    from confluent_kafka import Producer

    surging = [False]
    signal.signal(signal.SIGUSR1, lambda *_: surging.__setitem__(0, True))
    signal.signal(signal.SIGUSR2, lambda *_: surging.__setitem__(0, False))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    stopping = _stop_on_signals()
    rng = random.Random(7)  # noqa: S311 - demo data, not security
    sent = 0
    started = time.monotonic()
    while not stopping.is_set():
        for topic in TOPICS:
            if topic in QUIET_TOPICS:
                continue
            for _ in range(SURGE_FACTOR if surging[0] and topic == SURGE_TOPIC else 1):
                value = (" ".join(rng.choices(WORDS, k=6)).encode() if topic == WORD_COUNT_INPUT
                         else b"x" * 64)
                producer.produce(topic, key=str(rng.randrange(1000)).encode(), value=value)
        sent += 1
        producer.poll(0)
        delay = started + sent / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(10)


def seed_archive(bootstrap: str, messages: int = 100) -> None:
    """Old data and old commits for the empty group."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(messages):
        producer.produce("demo.archive", value=b"old", partition=i % TOPICS["demo.archive"])
    producer.flush(15)


# -- the supervisor --------------------------------------------------------------------------
@dataclass
class Demo:
    bootstrap: str
    log_dir: Path
    groups: Sequence[GroupSpec] = DEMO_GROUPS
    produce_rate: float = PRODUCE_RATE
    kip848: bool = True
    kinds: bool = True  # KIND_GROUPS: a share group and a Streams application (Kafka 4.2+)
    time_scale: float = 1.0  # 0.25: the ten-minute timeline in two and a half
    timeline: Sequence[Event] = TIMELINE
    rng: random.Random = field(default_factory=lambda: random.Random(42))  # noqa: S311
    members: dict[str, list[subprocess.Popen[bytes]]] = field(default_factory=dict)
    producer: subprocess.Popen[bytes] | None = None
    started_at: float | None = None  # monotonic
    done: list[Event] = field(default_factory=list)
    storming: bool = False
    _next_churn: float = 0.0
    java: JavaProcesses = field(init=False)

    def __post_init__(self) -> None:
        self.java = JavaProcesses(self.log_dir)

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.kinds and (missing := _kinds_missing()):
            # e.g. the compose stack's demo container: a JRE, but no Maven to fetch the jars
            log.warning("the demo leaves out its share group and Streams application: %s",
                        missing)
            self.kinds = False
        create_topics(self.bootstrap,
                      {**TOPICS, WORD_COUNT_OUTPUT: TOPICS[WORD_COUNT_INPUT]} if self.kinds
                      else TOPICS)
        seed_archive(self.bootstrap)
        self.producer = self._spawn(["producer", "--rate", str(self.produce_rate)], "producer")
        for spec in self.active_groups():
            for index in range(spec.members):
                self.add_member(spec, index, stop_after=5.0 if spec.empty else None)

    def active_groups(self) -> list[GroupSpec]:
        kinds = KIND_GROUPS if self.kinds else ()
        return [g for g in (*self.groups, *kinds) if self.kip848 or g.protocol != "consumer"]

    def add_member(self, spec: GroupSpec, index: int, stop_after: float | None = None) -> None:
        name = f"{spec.group_id}-{index}"
        if spec.protocol == "share":
            proc = share_consumer(self.java, self.bootstrap, spec.topics[0], spec.group_id, name)
        elif spec.protocol == "streams":
            proc = streams_instance(self.java, self.bootstrap, spec.group_id, name,
                                    self.log_dir / f"{name}-state")
        else:
            proc = self._spawn(self._member_args(spec, index, stop_after), name)
        self.members.setdefault(spec.group_id, []).append(proc)

    def _member_args(self, spec: GroupSpec, index: int, stop_after: float | None) -> list[str]:
        args = ["member", "--group", spec.group_id, "--index", str(index),
                "--slow-rate", str(0 if spec.blocks else self.produce_rate * SLOW_SHARE)]
        if spec.blocks:
            args += ["--max-poll-interval-ms",
                     str(round(STUCK_POLL_INTERVAL_S * self.time_scale * 1000))]
        if stop_after is not None:
            args += ["--stop-after", str(stop_after)]
        return args

    # -- the timeline ------------------------------------------------------------------------
    def schedule(self) -> list[tuple[float, Event]]:
        """The timeline as (seconds after the start, event), scaled, for this workload's
        groups (no KIP-848 group on Kafka 3.x)."""
        active = {g.group_id for g in self.active_groups()}
        return [(e.at_s * self.time_scale, e) for e in self.timeline if e.group_id in active]

    @property
    def end_s(self) -> float:
        return TIMELINE_END_S * self.time_scale

    def describe(self) -> str:
        """The timeline as printed at the start: when each event comes, and what to expect."""
        def clock(seconds: float) -> str:
            return f"{int(seconds // 60)}:{int(seconds % 60):02d}"

        lines = [f"  {clock(at_s):>5}  {self._text(event)}" for at_s, event in self.schedule()]
        lines.append(f"  {clock(self.end_s):>5}  every incident has resolved but the storm's (it "
                     "counts the last hour's rebalances)")
        return "\n".join(lines)

    def start_timeline(self) -> None:
        """The timeline counts from now (``./run`` calls it once the DAGs run, so no event
        happens before groupscope watches)."""
        self.started_at = time.monotonic()

    def elapsed(self) -> float:
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at

    def advance(self) -> list[str]:
        """Carries out what is due: the timeline's events, and a churn step while the storm
        lasts. Returns what happened, a line each."""
        if self.started_at is None:
            return []  # the timeline has not started
        elapsed, happened = self.elapsed(), []
        for at_s, event in self.schedule():
            if at_s <= elapsed and event not in self.done:
                self.done.append(event)
                self._carry_out(event)
                happened.append(self._text(event))
        if self.storming and elapsed >= self._next_churn:
            self._next_churn = elapsed + STORM_EVERY_S * self.time_scale
            churn = self.churn_once()
            if churn:
                happened.append(f"churn: {churn}")
        return happened

    def _text(self, event: Event) -> str:
        return event.text.format(storm_every=f"{STORM_EVERY_S * self.time_scale:g} s",
                                 stuck_for=f"{STUCK_POLL_INTERVAL_S * self.time_scale:g} s")

    def _carry_out(self, event: Event) -> None:
        spec = _spec(event.group_id)
        alive = [p for p in self.members.get(spec.group_id, []) if p.poll() is None]
        if event.action == "kill":
            for proc in alive:
                proc.kill()  # SIGKILL: no LeaveGroup, the coordinator waits out the session
            for proc in alive:
                proc.wait()
        elif event.action == "restart":
            for index in range(spec.members):
                self.add_member(spec, index)
        elif event.action in ("slow", "fast"):
            for proc in alive:
                proc.send_signal(signal.SIGUSR1 if event.action == "slow" else signal.SIGUSR2)
        elif event.action in ("surge", "unsurge") and self.producer is not None:
            self.producer.send_signal(signal.SIGUSR1 if event.action == "surge"
                                      else signal.SIGUSR2)
        elif event.action == "block":
            alive[0].send_signal(signal.SIGUSR1)  # its slow rate is 0: the handler blocks
        elif event.action == "join":
            self.add_member(spec, len(self.members.get(spec.group_id, [])))
        elif event.action == "storm":
            self.storming, self._next_churn = True, self.elapsed()
        elif event.action == "calm":
            self.storming = False
        else:
            raise ValueError(f"unknown demo action {event.action!r}")

    def churn_once(self) -> str:
        """One membership change in each churning group: a join, a graceful leave or a crash."""
        events = []
        for spec in self.active_groups():
            if not spec.churn:
                continue
            alive = [p for p in self.members.get(spec.group_id, []) if p.poll() is None]
            action = self.rng.choice(["join", "leave", "crash"]) if len(alive) > 1 else "join"
            if len(alive) >= spec.members + 2:
                action = self.rng.choice(["leave", "crash"])  # the storm keeps the group small
            if action == "join" or not alive:
                self.add_member(spec, len(self.members.get(spec.group_id, [])))
            elif action == "leave":
                alive[-1].send_signal(signal.SIGTERM)
            else:
                alive[0].kill()  # SIGKILL: no LeaveGroup, the coordinator waits out the session
            events.append(f"{spec.group_id}: {action}")
        return ", ".join(events)

    def stop(self) -> None:
        procs = [p for ps in self.members.values() for p in ps]
        if self.producer:
            procs.append(self.producer)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        return subprocess.Popen(
            [sys.executable, "-m", "groupscope_dev.demo", "--bootstrap", self.bootstrap,
             *args],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**importable_env(os.environ), "PYTHONUNBUFFERED": "1"},
        )


def _kinds_missing() -> str | None:
    """Why the share consumers and Streams instances cannot start here (a JVM and the Kafka
    and Kafka Streams jars, fetched with Maven on first use), or None."""
    try:
        require_java()
        kafka_libs(DEFAULT_KAFKA_VERSION)
        streams_libs(DEFAULT_KAFKA_VERSION)
    except StackError as exc:
        return str(exc)
    return None


def _spec(group_id: str) -> GroupSpec:
    for spec in (*DEMO_GROUPS, *KIND_GROUPS):
        if spec.group_id == group_id:
            return spec
    raise SystemExit(f"no demo group {group_id!r}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m groupscope_dev.demo")
    parser.add_argument("--bootstrap", required=True)
    sub = parser.add_subparsers(dest="role", required=True)
    member = sub.add_parser("member")
    member.add_argument("--group", required=True)
    member.add_argument("--index", type=int, default=0)
    member.add_argument("--stop-after", type=float)
    member.add_argument("--slow-rate", type=float, default=PRODUCE_RATE * SLOW_SHARE)
    member.add_argument("--max-poll-interval-ms", type=int)
    producer = sub.add_parser("producer")
    producer.add_argument("--rate", type=float, default=PRODUCE_RATE)
    args = parser.parse_args(argv)
    if args.role == "member":
        run_member(args.bootstrap, _spec(args.group), args.index, args.stop_after,
                   args.slow_rate, args.max_poll_interval_ms)
    else:
        run_producer(args.bootstrap, args.rate)


if __name__ == "__main__":
    main()
