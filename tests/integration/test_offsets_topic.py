"""Offsets-topic ingest and the rebalance timeline against a real Kafka (the newest 4.x) and real
librdkafka members: scripted churn whose generations must equal what the clients observed, a
group.protocol=consumer group checked against ConsumerGroupDescribe, transactions, commit
counts, idempotent reruns, and an ingest killed mid-run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewPartitions
from conftest import unique
from kafkautil import admin, create_topic, take_snapshot, wait_until

from groupscope.offsets import store
from groupscope.offsets.events import EVENT_KEYS, EVENT_SCHEMAS
from groupscope.offsets.ingest import IngestSettings, consumer_config, ingest, topic_resolver
from groupscope.offsets.timeline import build_timeline
from groupscope_dev.kafka import KafkaCluster

pytestmark = pytest.mark.integration
MEMBER = Path(__file__).resolve().parent.parent / "member_process.py"


class MemberProcess:
    def __init__(self, bootstrap: str, group: str, topics: list[str], **config: Any) -> None:
        pairs = [f"{k.replace('_', '.')}={v}" for k, v in config.items()]
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER), bootstrap, group, ",".join(topics), *pairs],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    @property
    def assigned(self) -> int:
        return sum(1 for line in self.lines if line.startswith("ASSIGNED"))

    @property
    def member_id(self) -> str:
        return next(line.split()[2] for line in reversed(self.lines)
                    if line.startswith("ASSIGNED"))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        self.send("close")
        self.proc.wait(30)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def _ingest_all(bootstrap: str, root: Path, **settings: Any) -> Any:
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}))
    try:
        result = ingest(consumer, "it", root, datetime.now(UTC),
                        IngestSettings(**{"timeout_s": 60.0, **settings}),
                        topic_resolver(admin(bootstrap), 10))
    finally:
        consumer.close()
    return result


def _events(root: Path) -> dict[str, list[dict[str, Any]]]:
    return {name: store.read_events(root, "it", name).to_pylist() for name in EVENT_SCHEMAS}


def _step(members: list[MemberProcess], before: dict[int, int], what: str) -> None:
    """Waits until every live member saw one more assignment than ``before``."""
    wait_until(lambda: all(m.assigned > before[id(m)] for m in members), 60, what)


def test_scripted_churn_gives_exactly_the_generations_the_clients_observed(
        kafka: KafkaCluster, tmp_path: Path, postgres: Any, warehouse_engine: Any) -> None:
    bootstrap = kafka.bootstrap
    group, t1, t2 = unique("churn"), unique("churn-a"), unique("churn-b")
    create_topic(bootstrap, t1, 4)
    create_topic(bootstrap, t2, 2)
    base = {"partition_assignment_strategy": "range", "session_timeout_ms": 10000,
            "heartbeat_interval_ms": 500, "topic_metadata_refresh_interval_ms": 1000}
    expected: list[tuple[list[str], list[str]]] = []  # (joined, left) per generation

    def snapshot_counts(*ms: MemberProcess) -> dict[int, int]:
        return {id(m): m.assigned for m in ms}

    a = MemberProcess(bootstrap, group, [t1], **base)
    _step([a], {id(a): 0}, "a's first assignment")
    expected.append(([a.member_id], []))

    static = MemberProcess(bootstrap, group, [t1], **{**base, "session_timeout_ms": 30000,
                                                      "group_instance_id": "static-1"})
    before = snapshot_counts(a, static)
    _step([a, static], before, "the static member joining")
    expected.append(([static.member_id], []))

    b = MemberProcess(bootstrap, group, [t1], **base)
    before = snapshot_counts(a, static, b)
    _step([a, static, b], before, "b joining")
    expected.append(([b.member_id], []))

    before = snapshot_counts(a, static)
    left_gracefully = b.member_id
    b.close()
    _step([a, static], before, "b's graceful leave")
    expected.append(([], [left_gracefully]))

    c = MemberProcess(bootstrap, group, [t1], **{**base, "session_timeout_ms": 3000})
    before = snapshot_counts(a, static, c)
    _step([a, static, c], before, "c joining")
    expected.append(([c.member_id], []))
    crashed = c.member_id
    before = snapshot_counts(a, static)
    c.kill()  # no LeaveGroup: the coordinator notices when its 3 s session times out
    _step([a, static], before, "c's session timing out")
    expected.append(([], [crashed]))

    # The static member restarts within its 30 s session timeout: no new generation.
    generations_seen_by_a = a.assigned
    old_static_id = static.member_id
    static.close()
    restarted = MemberProcess(bootstrap, group, [t1], **{**base, "session_timeout_ms": 30000,
                                                         "group_instance_id": "static-1"})
    wait_until(lambda: restarted.assigned >= 1, 60, "the static member's restart")
    time.sleep(3)
    assert a.assigned == generations_seen_by_a, "a static restart must not rebalance"

    before = snapshot_counts(a, restarted)
    a.send(f"subscribe {t1},{t2}")  # a subscription change
    _step([a, restarted], before, "the subscription change")
    expected.append(([], []))

    before = snapshot_counts(a, restarted)
    client = admin(bootstrap)  # must outlive its futures
    for future in client.create_partitions([NewPartitions(t1, 6)]).values():
        future.result()
    _step([a, restarted], before, "the partition-count increase")
    expected.append(([], []))

    root = tmp_path / "landing"
    result = _ingest_all(bootstrap, root)
    assert result.complete, result.as_dict()
    timeline = build_timeline(group, _events(root))

    gens = timeline.generations
    # Every generation a saw (it was a member throughout) is in the timeline, and no other.
    assert len(gens) == a.assigned == len(expected) == 8
    assert [g.generation for g in gens] == list(range(1, 9))
    assert [g.missing_before for g in gens] == [0] * 8
    assert [(sorted(g.joined), sorted(g.left)) for g in gens] == \
        [(sorted(j), sorted(left)) for j, left in expected]
    restart_generation = gens[5]
    assert restart_generation.rewrites >= 1
    assert {"instance_id": "static-1", "old_member_id": old_static_id,
            "new_member_id": restarted.member_id} in restart_generation.replaced
    assert {m.member_id for m in gens[7].members} == {a.member_id, restarted.member_id}
    assert {tp.topic for m in gens[7].members for tp in m.partitions} == {t1, t2}
    assert sum(len(m.partitions) for m in gens[7].members) == 6 + 2
    assert all(m.session_timeout_ms in (10000, 30000) for m in gens[7].members)
    assert gens[3].partitions_moved >= 1  # b's partitions went to the others

    # The same generations, loaded into the warehouse for the rebalance-storm alert: each
    # once, at its record's time, and a second load finds nothing new.
    from groupscope import pipeline

    first = pipeline.load_generations(postgres.url, root, "it", datetime.now(UTC))
    assert first["batches"] >= 1 and first["rows"] >= 8
    assert pipeline.load_generations(postgres.url, root, "it", datetime.now(UTC)) == \
        {"batches": 0, "rows": 0}
    with warehouse_engine.connect() as conn:
        loaded = conn.exec_driver_sql(
            "SELECT generation, group_protocol, min(event_ts) FROM raw.group_generations"
            " WHERE cluster = 'it' AND group_id = %(g)s GROUP BY 1, 2 ORDER BY 1",
            {"g": group}).all()
    assert [(g, p) for g, p, _ in loaded] == [(n, "classic") for n in range(1, 9)]
    assert [t for _, _, t in loaded] == [g.timestamp for g in gens]

    # The CLI reads the group's own offsets-topic partition and prints the same timeline.
    cli = [sys.executable, "-m", "groupscope.cli", "rebalances", "--bootstrap", bootstrap,
           "--group", group]
    shown = subprocess.run([*cli, "--format", "json"], capture_output=True, text=True,
                           timeout=120, check=True)
    doc = json.loads(shown.stdout)
    assert (doc["group_id"], doc["type"]) == (group, "classic")
    assert [g["generation"] for g in doc["generations"]] == list(range(1, 9))
    for g in doc["generations"]:
        assert {"generation", "timestamp", "protocol", "leader", "members", "joined", "left",
                "partitions_moved"} <= set(g)
    assert doc["generations"][1]["joined"] == expected[1][0]
    assert doc["generations"][0]["protocol"] == "range"
    table = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=True).stdout
    assert table.splitlines()[0].startswith(f"group {group} (classic): ")
    assert "static static-1 restarted in place" in table
    for m in (a, restarted):
        m.close()


def test_consumer_protocol_epochs_match_consumer_group_describe(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap
    group, topic = unique("kip848"), unique("kip848-t")
    create_topic(bootstrap, topic, 6)
    members = [MemberProcess(bootstrap, group, [topic], group_protocol="consumer")
               for _ in range(3)]
    try:
        wait_until(lambda: all(m.assigned for m in members), 60, "three assigned members")

        def settled() -> Any:
            snap = take_snapshot(bootstrap)
            g = next((g for g in snap.groups if g.group_id == group), None)
            if g is None or len(g.members) != 3:
                return None
            if any(set(m.assignment) != set(m.target_assignment or ()) for m in g.members):
                return None
            return g if sum(len(m.assignment) for m in g.members) == 6 else None

        described = wait_until(settled, 60, "a reconciled consumer-protocol group")
        root = tmp_path / "landing"
        assert _ingest_all(bootstrap, root).complete
        timeline = build_timeline(group, _events(root))
    finally:
        for m in members:
            m.close()
    assert timeline.type == "consumer"
    epochs = [g.generation for g in timeline.generations]
    assert epochs == sorted(set(epochs)) and len(epochs) >= 1
    last = timeline.generations[-1]
    ours = {m.member_id: set(m.partitions) for m in last.members}
    theirs = {m.member_id: set(m.target_assignment or ()) for m in described.members}
    assert ours == theirs
    assert sorted(j for g in timeline.generations for j in g.joined) == sorted(theirs)


def test_commit_counts_transactions_reruns_and_a_killed_ingest(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap
    topic = unique("commits")
    create_topic(bootstrap, topic, 3)
    made: Counter[str] = Counter()
    groups = [unique("committer") for _ in range(6)]
    for i, group in enumerate(groups):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        for n in range(150 + 10 * i):
            # One request commits two partitions: two records, one commit timestamp.
            consumer.commit(offsets=[TopicPartition(topic, 0, n + 1),
                                     TopicPartition(topic, 1, n + 2)], asynchronous=False)
            made[group] += 2
        consumer.close()

    txn_group = unique("txn")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    meta = Consumer({"bootstrap.servers": bootstrap, "group.id": txn_group}).\
        consumer_group_metadata()

    def transactional_commit(offset: int, commit: bool | None) -> None:
        producer.begin_transaction()
        producer.produce(topic, b"x", partition=2)
        producer.send_offsets_to_transaction([TopicPartition(topic, 2, offset)], meta, 30)
        if commit is True:
            producer.commit_transaction(30)
        elif commit is False:
            producer.abort_transaction(30)

    transactional_commit(11, True)
    transactional_commit(22, False)
    transactional_commit(33, None)  # left open while the first ingest runs

    reference = tmp_path / "reference"
    first = _ingest_all(bootstrap, reference)
    assert first.complete, first.as_dict()
    commits = store.read_events(reference, "it", "offset_commits").to_pylist()
    per_group = Counter(c["group_id"] for c in commits if c["group_id"] in made)
    assert per_group == made
    requests = {(c["group_id"], c["commit_ts"]) for c in commits if c["group_id"] == groups[0]}
    assert len(requests) <= made[groups[0]] // 2  # two records per request share a timestamp
    # Only the committed transaction's offset: the aborted one never happened, the open one
    # is beyond the last stable offset.
    assert [c["committed_offset"] for c in commits if c["group_id"] == txn_group] == [11]

    producer.commit_transaction(30)
    second = _ingest_all(bootstrap, reference)
    assert second.complete
    commits = store.read_events(reference, "it", "offset_commits").to_pylist()
    assert [c["committed_offset"] for c in commits if c["group_id"] == txn_group] == [11, 33]

    # A rerun with nothing new lands nothing.
    batches_before = len(store.batches(reference, "it"))
    rerun = _ingest_all(bootstrap, reference)
    assert rerun.records == 0 and len(store.batches(reference, "it")) == batches_before

    # An ingest killed mid-run, then restarted, lands every event exactly once.
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "groupscope.cli", "offsets", "ingest", "--bootstrap",
               bootstrap, "--cluster", "it", "--landing", str(killed), "--batch-records", "3"]
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: len(store.batches(killed, "it")) >= 20 or run.poll() is not None, 60,
               "the first batches")
    run.send_signal(signal.SIGKILL)
    run.wait(10)
    partial = len(store.batches(killed, "it"))
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["complete"] is True
    assert len(store.batches(killed, "it")) > partial

    def keys(root: Path) -> list[tuple[Any, ...]]:
        """Every landed row by its table's natural key (EVENT_KEYS)."""
        out = []
        for name, key in EVENT_KEYS.items():
            table = store.read_events(root, "it", name).select(list(key))
            out += [(name, *row.values()) for row in table.to_pylist()]
        return out

    killed_keys = keys(killed)
    assert len(killed_keys) == len(set(killed_keys)), "an event landed twice"
    # The restarted run read to the end: everything the uninterrupted runs landed is there.
    assert set(keys(reference)) <= set(killed_keys)
