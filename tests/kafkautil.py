"""Helpers that drive a real Kafka cluster from tests: topics, exact production, commits and
consumer-group members running in threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from groupscope.collect.collector import Collector, CollectorSettings
from groupscope.contract.model import Snapshot
from groupscope.kafka.java_admin import JavaAdmin
from groupscope_dev.kafka import kafka_libs

# Kafka's Java Admin client's jars (share and streams groups).
JAVA_CLASSPATH = str(kafka_libs("4.3.1"))

COORDINATOR_WARMING = {"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
                       "COORDINATOR_LOAD_IN_PROGRESS"}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1,
                 config: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)  # must outlive its futures: a destroyed client fails them
    futures = client.create_topics([NewTopic(name, partitions, replication,
                                             config=config or {})],
                                   operation_timeout=30)
    for future in futures.values():
        future.result()
    wait_until(lambda: name in client.list_topics(timeout=10).topics, 20,
               f"topic {name} to appear")


def create_word_count_topics(bootstrap: str, partitions: int = 2) -> None:
    """WordCountDemo's input and output topics (groupscope_dev.kinds), which its applications
    need: fixed names, so the first module of a run makes them and the others reuse them."""
    from groupscope_dev.kinds import WORD_COUNT_INPUT, WORD_COUNT_OUTPUT

    for name in (WORD_COUNT_INPUT, WORD_COUNT_OUTPUT):
        try:
            create_topic(bootstrap, name, partitions)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def produce_counts(bootstrap: str, topic: str, counts: Iterable[int]) -> list[int]:
    """Produces exactly counts[p] records to partition p; returns the counts."""
    counts = list(counts)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for partition, count in enumerate(counts):
        for i in range(count):
            producer.produce(topic, value=f"{partition}:{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    return counts


def commit_offsets(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commits as an assign()-style client would: no membership, a "simple" group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    wanted = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                consumer.commit(offsets=wanted, asynchronous=False)
                return
            except KafkaException as exc:
                # A fresh cluster creates and loads __consumer_offsets on the first commit.
                if exc.args[0].name() not in COORDINATOR_WARMING or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def take_snapshot(bootstrap: str, cluster: str = "test", admin_client: Any = None,
                  **settings: Any) -> Snapshot:
    collector = Collector(admin_client or admin(bootstrap), cluster,
                          CollectorSettings(**{"request_timeout_s": 15, **settings}))
    return collector.snapshot(datetime.now(UTC))


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Producing(threading.Thread):
    """Keeps appending records to every partition of a topic (a few per second each)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "log_level": 0})
        self.topic, self.partitions = topic, partitions
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for partition in range(self.partitions):
                self.producer.produce(self.topic, b"x", partition=partition)
            self.producer.poll(0)
            time.sleep(0.3)
        self.producer.flush(10)


class Member(threading.Thread):
    """A real group member in a thread: subscribes, and after each assignment commits
    ``commit_at[(topic, partition)]`` for the partitions it owns; polls until stopped."""

    def __init__(self, config: dict[str, Any], topics: list[str],
                 commit_at: dict[tuple[str, int], int] | None = None) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.topics = topics
        self.commit_at = commit_at or {}
        self.assignment: list[tuple[str, int]] = []
        self.assignments_seen = 0
        self.committed = threading.Event()
        self._stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = Consumer({"enable.auto.commit": False, "auto.offset.reset": "earliest",
                                 **self.config})
            pending_commit = False

            def on_assign(c: Any, partitions: list[TopicPartition]) -> None:
                nonlocal pending_commit
                self.assignments_seen += 1
                pending_commit = True

            consumer.subscribe(self.topics, on_assign=on_assign)
            while not self._stop_event.is_set():
                consumer.poll(0.2)
                if pending_commit:
                    owned = [(tp.topic, tp.partition) for tp in consumer.assignment()]
                    self.assignment = sorted(owned)
                    wanted = [TopicPartition(t, p, self.commit_at[(t, p)])
                              for t, p in owned if (t, p) in self.commit_at]
                    if wanted:
                        consumer.commit(offsets=wanted, asynchronous=False)
                    pending_commit = False
                    self.committed.set()
            consumer.close()
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)


def stop_all(members: list[Member]) -> None:
    """Stops the members together: one by one, each leave would rebalance the rest first."""
    for member in members:
        member._stop_event.set()
    for member in members:
        member.join(30)


def kinds_collector(bootstrap: str, **settings: Any) -> Collector:
    """The collector with Kafka's Java Admin client too (share and streams groups), in this
    process: its JVM starts once, not at every snapshot as in a collect task's child."""
    return Collector(admin(bootstrap), "kinds",
                     CollectorSettings(**{"request_timeout_s": 15, **settings}),
                     java_admin=lambda: JavaAdmin.open({"bootstrap.servers": bootstrap},
                                                       JAVA_CLASSPATH, 15))


def kinds_snapshot(bootstrap: str, **settings: Any) -> Snapshot:
    return kinds_collector(bootstrap, **settings).snapshot(datetime.now(UTC))


def tool_rows(output: str, group: str) -> list[list[str]]:
    """The rows of a Kafka tool's table (kafka-share-groups, kafka-streams-groups) about
    ``group``, split on whitespace."""
    return [line.split() for line in output.splitlines() if line.split()[:1] == [group]]
