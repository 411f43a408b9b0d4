"""The demo workload: producers, plus one consumer group of every kind an operator meets.

Each member is its own process, so that a crash can be a real ``SIGKILL`` (no LeaveGroup) and a
graceful leave a real ``close()``. ``DEMO_GROUPS`` is the single description of the workload;
the tests read it to know what the snapshot must show.
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

from groupscope_dev import importable_env

log = logging.getLogger(__name__)

TOPICS: dict[str, int] = {
    "demo.orders": 6,
    "demo.payments": 4,
    "demo.audit": 3,
    "demo.events": 8,
    "demo.archive": 2,
}


@dataclass(frozen=True)
class GroupSpec:
    group_id: str
    topics: tuple[str, ...]
    members: int
    assignor: str | None = None  # classic client-side assignor
    protocol: str = "classic"  # or "consumer" (KIP-848)
    static: bool = False  # members get group.instance.id
    assign_only: bool = False  # assign() + commit: a "simple" group without members
    empty: bool = False  # commits once, then every member leaves
    churn: bool = False  # members join, leave and crash while the demo runs
    rate: float = 20.0  # messages a member processes per second (lag builds above it)

    def instance_id(self, index: int) -> str | None:
        return f"{self.group_id}-instance-{index}" if self.static else None


DEMO_GROUPS: tuple[GroupSpec, ...] = (
    GroupSpec("demo-range", ("demo.orders", "demo.payments"), 2, assignor="range"),
    GroupSpec("demo-roundrobin", ("demo.orders", "demo.payments"), 3, assignor="roundrobin"),
    GroupSpec("demo-cooperative-sticky", ("demo.orders",), 3, assignor="cooperative-sticky",
              churn=True),
    GroupSpec("demo-static", ("demo.payments",), 2, assignor="range", static=True),
    GroupSpec("demo-kip848", ("demo.events",), 2, protocol="consumer"),
    GroupSpec("demo-assign-only", ("demo.audit",), 1, assign_only=True),
    GroupSpec("demo-empty", ("demo.archive",), 1, assignor="range", empty=True),
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
        config["session.timeout.ms"] = 10_000 if spec.static else 6_000
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


def run_member(bootstrap: str, spec: GroupSpec, index: int, stop_after: float | None) -> None:
    """One member: consume at ``spec.rate`` messages/s and commit every second."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(consumer_config(bootstrap, spec, index))
    stopping = _stop_on_signals()
    owned = [TopicPartition(t, p) for t in spec.topics for p in range(TOPICS[t])]
    if spec.assign_only:
        consumer.assign(owned)
    else:
        consumer.subscribe(list(spec.topics))
    started = time.monotonic()
    last_commit = started
    try:
        while not stopping.is_set():
            if stop_after is not None and time.monotonic() - started > stop_after:
                break
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                time.sleep(1.0 / spec.rate)  # "processing": slower than production, lag grows
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


def run_producer(bootstrap: str, rate: float) -> None:
    """Produces ``rate`` messages per second to every demo topic, keyed so partitions differ."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    stopping = _stop_on_signals()
    rng = random.Random(7)  # noqa: S311 - demo data, not security
    sent = 0
    started = time.monotonic()
    while not stopping.is_set():
        for topic in TOPICS:
            if topic == "demo.archive":
                continue  # the empty group's topic stays still: its lag is old news
            producer.produce(topic, key=str(rng.randrange(1000)).encode(), value=b"x" * 64)
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
    produce_rate: float = 50.0
    kip848: bool = True
    rng: random.Random = field(default_factory=lambda: random.Random(42))  # noqa: S311
    members: dict[str, list[subprocess.Popen[bytes]]] = field(default_factory=dict)
    producer: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        create_topics(self.bootstrap)
        seed_archive(self.bootstrap)
        self.producer = self._spawn(["producer", "--rate", str(self.produce_rate)], "producer")
        for spec in self.active_groups():
            for index in range(spec.members):
                self.add_member(spec, index, stop_after=5.0 if spec.empty else None)

    def active_groups(self) -> list[GroupSpec]:
        return [g for g in self.groups if self.kip848 or g.protocol != "consumer"]

    def add_member(self, spec: GroupSpec, index: int, stop_after: float | None = None) -> None:
        args = ["member", "--group", spec.group_id, "--index", str(index)]
        if stop_after is not None:
            args += ["--stop-after", str(stop_after)]
        proc = self._spawn(args, f"{spec.group_id}-{index}")
        self.members.setdefault(spec.group_id, []).append(proc)

    def churn_once(self) -> str:
        """One membership change in each churning group: a join, a graceful leave or a crash."""
        events = []
        for spec in self.active_groups():
            if not spec.churn:
                continue
            alive = [p for p in self.members.get(spec.group_id, []) if p.poll() is None]
            action = self.rng.choice(["join", "leave", "crash"]) if len(alive) > 1 else "join"
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


def _spec(group_id: str) -> GroupSpec:
    for spec in DEMO_GROUPS:
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
    producer = sub.add_parser("producer")
    producer.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args(argv)
    if args.role == "member":
        run_member(args.bootstrap, _spec(args.group), args.index, args.stop_after)
    else:
        run_producer(args.bootstrap, args.rate)


if __name__ == "__main__":
    main()
