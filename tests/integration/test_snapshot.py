"""Snapshots of a real single-broker Kafka: exact lag, every group kind, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import unique
from kafkautil import (
    Member,
    admin,
    commit_offsets,
    create_topic,
    produce_counts,
    take_snapshot,
    wait_until,
)

from groupscope.collect.collector import ClusterUnavailable
from groupscope.contract.model import GroupType, Stage, TopicPartition
from groupscope_dev.kafka import KafkaCluster

pytestmark = pytest.mark.integration


def test_lag_is_produced_minus_committed_exactly(kafka: KafkaCluster) -> None:
    topic = unique("orders")
    create_topic(kafka.bootstrap, topic, 4)
    produced = produce_counts(kafka.bootstrap, topic, [50, 70, 0, 33])
    committed = {(topic, 0): 20, (topic, 1): 70, (topic, 3): 1}  # partition 2: no commit
    group = unique("lagging")
    members = [
        Member({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                "partition.assignment.strategy": "range"}, [topic], committed)
        for _ in range(2)
    ]
    for m in members:
        m.start()
    try:
        wait_until(lambda: sum(len(m.assignment) for m in members) == 4, 30,
                   "both members to own the 4 partitions")
        wait_until(lambda: all(m.committed.is_set() for m in members), 30, "the commits")
        snapshot = wait_until(
            lambda: (s := take_snapshot(kafka.bootstrap))
            and getattr(_find(s, group), "state", None) == "Stable" and s,
            30, "a stable group",
        )
    finally:
        for m in members:
            m.stop()
    assert snapshot.complete, snapshot.errors
    g = _group(snapshot, group)
    assert (g.group_type, g.protocol_type, g.assignor) == (GroupType.CLASSIC, "consumer", "range")
    assert len(g.members) == 2
    owned = sorted(tp for m in g.members for tp in m.assignment)
    assert owned == [TopicPartition(topic, p) for p in range(4)]
    # range: 4 partitions over 2 members, contiguous halves, in member-id order
    assert sorted(len(m.assignment) for m in g.members) == [2, 2]
    offsets = snapshot.partition_offsets()
    lags = {}
    for o in g.offsets:
        hw = offsets[TopicPartition(o.topic, o.partition)].high_watermark
        assert hw is not None and o.offset is not None
        lags[o.partition] = hw - o.offset
    assert lags == {p: produced[p] - committed[(topic, p)] for (_, p) in committed}
    assert offsets[TopicPartition(topic, 2)].high_watermark == 0
    assert all(offsets[TopicPartition(topic, p)].log_start == 0 for p in range(4))


def test_simple_group_and_owned_partition_without_commit(kafka: KafkaCluster) -> None:
    topic = unique("audit")
    create_topic(kafka.bootstrap, topic, 2)
    produce_counts(kafka.bootstrap, topic, [10, 10])
    group = unique("assign-only")
    commit_offsets(kafka.bootstrap, group, {(topic, 1): 4})
    snapshot = take_snapshot(kafka.bootstrap)
    g = _group(snapshot, group)
    assert g.is_simple and g.state == "Empty" and g.members == ()
    assert [(o.partition, o.offset) for o in g.offsets] == [(1, 4)]
    from groupscope.serve.report import snapshot_json

    doc = next(x for x in snapshot_json(snapshot)["groups"] if x["group_id"] == group)
    assert doc["type"] == "classic" and doc["protocol_type"] == ""
    assert [(o["partition"], o["lag"]) for o in doc["offsets"]] == [(1, 6)]


def test_consumer_protocol_group_reports_members_and_target_assignment(
    kafka: KafkaCluster,
) -> None:
    topic = unique("events")
    create_topic(kafka.bootstrap, topic, 6)
    group = unique("kip848")
    members = [Member({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                       "group.protocol": "consumer"}, [topic]) for _ in range(2)]
    for m in members:
        m.start()
    try:
        snapshot = wait_until(
            lambda: (s := take_snapshot(kafka.bootstrap)) and (g := _find(s, group))
            and len(g.members) == 2 and all(len(m.assignment) == 3 for m in g.members) and s,
            60, "two reconciled members",
        )
    finally:
        for m in members:
            m.stop()
    g = _group(snapshot, group)
    assert g.group_type is GroupType.CONSUMER
    assert g.assignor == "uniform"
    for m in g.members:
        assert m.target_assignment == m.assignment


def test_group_deleted_mid_snapshot_is_recorded(kafka: KafkaCluster) -> None:
    topic = unique("t")
    create_topic(kafka.bootstrap, topic, 1)
    doomed, kept = unique("doomed"), unique("kept")
    for g in (doomed, kept):
        commit_offsets(kafka.bootstrap, g, {(topic, 0): 0})
    real = admin(kafka.bootstrap)

    class DeletesAfterListing:
        """The real admin client, but the group is deleted for real after it was listed and
        before its offsets are fetched: the race a busy cluster produces, made
        deterministic."""

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def list_consumer_group_offsets(self, request: list, **kw: object) -> object:
            if request[0].group_id == doomed:
                for f in real.delete_consumer_groups([doomed]).values():
                    f.result()
            return real.list_consumer_group_offsets(request, **kw)

    snapshot = take_snapshot(kafka.bootstrap, admin_client=DeletesAfterListing())
    assert not snapshot.complete
    errors = [e for e in snapshot.errors if e.group_id == doomed]
    assert [e.code for e in errors] == ["GROUP_ID_NOT_FOUND"]
    assert _group(snapshot, doomed).state == "Dead"
    assert _group(snapshot, doomed).offsets == ()
    assert _group(snapshot, kept).offsets[0].offset == 0
    assert _group(snapshot, kept).state == "Empty"
    assert all(e.group_id == doomed for e in snapshot.errors)


def _answers(client: object, topic: str) -> bool:
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import OffsetSpec

    futures = client.list_offsets(  # type: ignore[attr-defined]
        {KafkaTopicPartition(topic, 0): OffsetSpec.latest()}, request_timeout=5)
    try:
        for f in futures.values():
            f.result()
    except Exception:
        return False
    return True


def test_topic_deleted_mid_snapshot_is_recorded(kafka: KafkaCluster) -> None:
    doomed, kept = unique("doomed-topic"), unique("kept-topic")
    for t in (doomed, kept):
        create_topic(kafka.bootstrap, t, 2)
        produce_counts(kafka.bootstrap, t, [3, 3])
    group = unique("reader")
    commit_offsets(kafka.bootstrap, group, {(doomed, 0): 1, (kept, 1): 2})
    real = admin(kafka.bootstrap)

    class DeletesTopicBeforeListOffsets:
        """The topic is deleted for real after the group's offsets were fetched and before
        the partition offsets are: the collector holds partitions that no longer exist."""

        deleted = False

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def list_offsets(self, *args: object, **kw: object) -> object:
            if not self.deleted:
                for f in real.delete_topics([doomed], operation_timeout=30).values():
                    f.result()
                wait_until(lambda: doomed not in real.list_topics(timeout=5).topics, 30,
                           "the topic deletion")
                # The broker may still answer for the partition for a moment after its
                # metadata is gone: wait until it no longer does (else the race is lost).
                wait_until(lambda: not _answers(real, doomed), 30, "the partition to go")
                self.deleted = True
            return real.list_offsets(*args, **kw)

    snapshot = take_snapshot(kafka.bootstrap, admin_client=DeletesTopicBeforeListOffsets(),
                             attempts=2, retry_backoff_s=0.2)
    assert not snapshot.complete
    # Its offsets, and its retention settings (read after them), could not be read.
    assert {(e.stage, e.topic) for e in snapshot.errors} == {
        (Stage.PARTITION_OFFSETS, doomed), (Stage.TOPIC_CONFIGS, doomed)}
    # the one partition the group holds
    assert {e.partition for e in snapshot.errors if e.stage == Stage.PARTITION_OFFSETS} == {0}
    assert all(e.code == "UNKNOWN_TOPIC_OR_PART" for e in snapshot.errors), snapshot.errors
    by_tp = snapshot.partition_offsets()
    assert by_tp[TopicPartition(kept, 1)].high_watermark == 3
    # the deleted topic's partitions stay in the snapshot, their offsets unknown, not dropped
    assert by_tp[TopicPartition(doomed, 0)].high_watermark is None
    assert {(o.topic, o.offset) for o in _group(snapshot, group).offsets} == {
        (doomed, 1), (kept, 2)}


def test_unreachable_cluster_raises_clear_error() -> None:
    from groupscope_dev.ports import free_ports

    port = free_ports(1)[0]
    with pytest.raises(ClusterUnavailable, match="unavailable"):
        take_snapshot(f"127.0.0.1:{port}", admin_client=admin(f"127.0.0.1:{port}"),
                      request_timeout_s=3)


def test_cli_json_and_errors(kafka: KafkaCluster) -> None:
    topic = unique("cli")
    create_topic(kafka.bootstrap, topic, 1)
    produce_counts(kafka.bootstrap, topic, [9])
    group = unique("cli-group")
    commit_offsets(kafka.bootstrap, group, {(topic, 0): 2})
    cli = [sys.executable, "-m", "groupscope.cli"]
    out = subprocess.run([*cli, "snapshot", "--bootstrap", kafka.bootstrap, "--cluster", "ci",
                          "--format", "json"], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["cluster"] == "ci" and doc["complete"] is True
    g = next(x for x in doc["groups"] if x["group_id"] == group)
    assert g["offsets"] == [{"topic": topic, "partition": 0, "committed": 2, "log_start": 0,
                             "high_watermark": 9, "last_stable": 9, "lag": 7,
                             "below_log_start": False}]
    table = subprocess.run([*cli, "snapshot", "--bootstrap", kafka.bootstrap],
                           capture_output=True, text=True, check=True).stdout
    assert group in table and "simple" in table

    from groupscope_dev.ports import free_ports

    for args, expected in [
        (["--bootstrap", f"127.0.0.1:{free_ports(1)[0]}", "--timeout", "3"], "unavailable"),
        (["--bootstrap", kafka.bootstrap, "--config", "oops"], "key=value"),
        (["--bootstrap", kafka.bootstrap, "--config", "no.such=1"], "No such configuration"),
        (["--bootstrap", "nohost"], "not host:port"),
    ]:
        bad = subprocess.run([*cli, "snapshot", *args], capture_output=True, text=True)
        assert bad.returncode != 0
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], bad.stderr
        assert "Traceback" not in bad.stderr


def _find(snapshot, group_id):  # type: ignore[no-untyped-def]
    return next((g for g in snapshot.groups if g.group_id == group_id), None)


def _group(snapshot, group_id):  # type: ignore[no-untyped-def]
    found = _find(snapshot, group_id)
    assert found is not None, f"group {group_id!r} not in snapshot"
    return found


def test_other_protocol_types_are_recorded_as_such(kafka: KafkaCluster) -> None:
    """A Kafka Connect worker group: the consumer-group APIs refuse it, the classic view
    records it, with its protocol type and members, and the snapshot stays complete."""
    group = unique("connect-cluster")
    port = kafka.broker_port(1)
    # A raw JoinGroup does not create __consumer_offsets the way FindCoordinator does.
    topic = unique("warm")
    create_topic(kafka.bootstrap, topic, 1)
    commit_offsets(kafka.bootstrap, unique("warm"), {(topic, 0): 0})
    worker = wait_until(lambda: _try_join(port, group), 30, "the raw JoinGroup to succeed")
    try:
        snapshot = take_snapshot(kafka.bootstrap)
    finally:
        worker.close()
    assert snapshot.complete, snapshot.errors
    g = _group(snapshot, group)
    assert (g.group_type, g.protocol_type, g.state, g.assignor) == (
        GroupType.CLASSIC, "connect", "Stable", "sessioned")
    assert [(m.member_id, m.client_id) for m in g.members] == [
        (worker.member_id, "raw-connect-worker")]
    assert g.members[0].assignment == ()  # opaque to us: never decoded as a consumer's
    from groupscope.serve.report import snapshot_table

    assert "classic/connect" in snapshot_table(snapshot)


def _try_join(port: int, group: str):  # type: ignore[no-untyped-def]
    from rawgroup import RawMember

    try:
        return RawMember("127.0.0.1", port, group, "connect", "sessioned")
    except (RuntimeError, OSError):
        return None  # the coordinator may still be loading on a fresh broker


def test_offsets_below_log_start_and_beyond_high_watermark_are_reported(
    kafka: KafkaCluster,
) -> None:
    from confluent_kafka import TopicPartition as KafkaTP

    from groupscope.serve.report import snapshot_json

    topic = unique("retention")
    create_topic(kafka.bootstrap, topic, 2)
    produce_counts(kafka.bootstrap, topic, [20, 5])
    group = unique("odd-offsets")
    # partition 0: committed 3, then retention-like deletion moves the log start to 12;
    # partition 1: committed 50 while the high watermark is 5 (a re-created topic, say).
    commit_offsets(kafka.bootstrap, group, {(topic, 0): 3, (topic, 1): 50})
    client = admin(kafka.bootstrap)
    for future in client.delete_records([KafkaTP(topic, 0, 12)]).values():
        future.result()
    snapshot = take_snapshot(kafka.bootstrap)
    doc = next(g for g in snapshot_json(snapshot)["groups"] if g["group_id"] == group)
    rows = {o["partition"]: o for o in doc["offsets"]}
    assert (rows[0]["log_start"], rows[0]["committed"], rows[0]["lag"]) == (12, 3, 17)
    assert rows[0]["below_log_start"] is True  # 9 records were deleted unread
    assert (rows[1]["high_watermark"], rows[1]["committed"], rows[1]["lag"]) == (5, 50, -45)
    assert rows[1]["below_log_start"] is False


def test_an_owner_deleting_what_it_just_committed_is_no_loss(kafka: KafkaCluster) -> None:
    """A Kafka Streams application deletes its repartition topics' records up to what it has
    just committed. When that happens between the collector's OffsetFetch and its ListOffsets,
    the offset read is below the log start read after it: the ./run demo's Streams application
    raised a false LAG BEYOND RETENTION so. The group is read again, and is no loss."""
    from confluent_kafka import TopicPartition as KafkaTP

    topic, group = unique("repartition"), unique("streams-like")
    create_topic(kafka.bootstrap, topic, 1)
    produce_counts(kafka.bootstrap, topic, [60])
    commit_offsets(kafka.bootstrap, group, {(topic, 0): 10})
    real = admin(kafka.bootstrap)
    fetches: list[int] = []

    class PurgesAfterTheFetch:
        """The real admin client; the first time the group's offsets have been fetched, its
        owner commits 40 and deletes the records below it, for real."""

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def list_consumer_group_offsets(self, request: list, **kw: object) -> object:
            answer = real.list_consumer_group_offsets(request, **kw)
            if request[0].group_id == group:
                fetches.append(1)
                if len(fetches) == 1:
                    for future in answer.values():
                        future.result()  # read before the purge
                    commit_offsets(kafka.bootstrap, group, {(topic, 0): 40})
                    for future in real.delete_records([KafkaTP(topic, 0, 40)]).values():
                        future.result()
            return answer

    snapshot = take_snapshot(kafka.bootstrap, admin_client=PurgesAfterTheFetch())
    (offset,) = _group(snapshot, group).offsets
    log = snapshot.partition_offsets()[TopicPartition(topic, 0)]
    assert len(fetches) == 2  # read again, once
    assert (log.log_start, offset.offset, log.high_watermark) == (40, 40, 60)
    assert snapshot.complete, snapshot.errors


def test_a_committed_offset_on_a_transaction_marker_has_no_record_to_wait_for(
        kafka: KafkaCluster) -> None:
    """A consumer that commits what it processed stops on the marker a transaction leaves (a
    lag of 1). The record sampler sees its position pass the marker and says so, instead of
    waiting out its timeout at every snapshot; a partition with records is still sampled."""
    from confluent_kafka import Producer

    from groupscope.kafka.sampling import RecordSampler, SampleRequest

    topic = unique("txn")
    create_topic(kafka.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap,
                         "transactional.id": unique("txn-producer")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic, b"x", partition=partition)
    producer.commit_transaction(30)
    # Each partition: the record at 0, the commit marker at 1, high watermark 2.
    sampler = RecordSampler({"bootstrap.servers": kafka.bootstrap}, timeout_s=60)
    found, missing = sampler([SampleRequest(TopicPartition(topic, 0), 1, 1),
                              SampleRequest(TopicPartition(topic, 1), 0, 2)])
    assert [(r.partition, r.offset, r.record_offset) for r in found] == [(1, 0, 0)]
    assert [(m.tp.partition, reason) for m, reason in missing] == [
        (0, "no record between the committed offset and the high watermark (transaction "
            "markers or aborted records only)")]
