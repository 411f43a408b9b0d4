"""Captures real ``__consumer_offsets`` records from a real broker, with Kafka's own decoding of
each one, as test vectors for ``groupscope.offsets.decoder``.

    .venv/bin/python tests/vectors/capture_offsets_vectors.py --kafka-version 4.3.1

It starts a one-broker KRaft cluster from the Maven Central jars (``groupscope_dev``), runs
a scripted workload (below), reads every record of ``__consumer_offsets`` with its raw key and
value bytes, stops the broker, and runs Kafka's ``DumpLogSegments --offsets-decoder`` over the
topic's segment files. Each vector is one record: partition, offset, the raw bytes in hex and
Kafka's JSON for key and value. The test compares our decoding with Kafka's, field by field.

The workload: offset commits with metadata and leader epochs; a classic range group that a member
joins, a static member joins and the first member leaves (generations with members, timeouts,
subscriptions and assignments); transactional offset commits, one committed and one aborted;
two group deletions (tombstones for offsets and group metadata); a group.protocol=consumer
group with one member by topic list and one by regular expression (consumer-protocol records,
types 3-8 and 16; Kafka 4.x only: librdkafka's consumer protocol cannot join 3.9's preview).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from groupscope_dev.kafka import KafkaCluster, classpath, kafka_libs, require_java
from groupscope_dev.ports import free_port_block

OFFSETS_PARTITIONS = 3
HERE = Path(__file__).resolve().parent


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


class _Member:
    def __init__(self, bootstrap: str, group: str, topics: list[str], **config: Any) -> None:
        self.assigned = 0
        settings = {"bootstrap.servers": bootstrap, "group.id": group,
                    "enable.auto.commit": False, "auto.offset.reset": "earliest",
                    "session.timeout.ms": 6000, **config}
        self.consumer = Consumer({k: v for k, v in settings.items() if v is not None})
        self.consumer.subscribe(topics, on_assign=self._on_assign)

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assigned += 1

    def poll(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.consumer.poll(0.1)


def _poll_all(members: list[_Member], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for m in members:
            m.consumer.poll(0.05)


def _deleted(admin: AdminClient, group: str) -> bool:
    try:
        admin.delete_consumer_groups([group], request_timeout=30)[group].result()
    except KafkaException as exc:
        if exc.args[0].name() == "GROUP_ID_NOT_FOUND":
            return True
        if exc.args[0].name() != "NON_EMPTY_GROUP":
            raise
        return False
    return True


def workload(bootstrap: str, consumer_protocol: bool) -> None:
    print("workload: commits, a classic group, transactions, deletions", flush=True)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("vec-orders", 3, 1), NewTopic("vec-regex-a", 2, 1)],
                                 operation_timeout=30).values():
        f.result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        producer.produce("vec-orders", value=b"x", partition=i % 3)
    producer.flush(30)

    # A simple (assign-only) group: commits with metadata, unicode and an empty string.
    simple = Consumer({"bootstrap.servers": bootstrap, "group.id": "vec-simple-ü",
                       "enable.auto.commit": False})
    offsets = [TopicPartition("vec-orders", 0, 5, metadata="cursor=ä\"'"),
               TopicPartition("vec-orders", 1, 7, metadata=""),
               TopicPartition("vec-orders", 2, 9, leader_epoch=0)]
    deadline = time.monotonic() + 60
    while True:
        try:
            simple.commit(offsets=offsets, asynchronous=False)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    simple.close()

    # A classic group: join, a static member joins, the first leaves.
    first = _Member(bootstrap, "vec-classic", ["vec-orders"], **{
        "partition.assignment.strategy": "range"})
    _wait(lambda: (first.poll(0.2), first.assigned)[1] >= 1, 60, "first member's assignment")
    first.consumer.commit(offsets=[TopicPartition("vec-orders", 0, 3)], asynchronous=False)
    static = _Member(bootstrap, "vec-classic", ["vec-orders"], **{
        "partition.assignment.strategy": "range", "group.instance.id": "vec-static-1"})
    _wait(lambda: (_poll_all([first, static], 0.3), static.assigned)[1] >= 1, 60,
          "static member's assignment")
    first.consumer.close()
    _wait(lambda: (static.poll(0.3), static.assigned)[1] >= 2, 60, "rebalance after leave")
    static.consumer.close()

    # Transactional offset commits: one committed, one aborted.
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "vec-txn-producer"})
    txn.init_transactions(30)
    group_meta = Consumer({"bootstrap.servers": bootstrap, "group.id": "vec-txn",
                           "enable.auto.commit": False}).consumer_group_metadata()
    for offset, commit in ((11, True), (22, False)):
        txn.begin_transaction()
        txn.produce("vec-orders", value=b"txn", partition=0)
        txn.send_offsets_to_transaction([TopicPartition("vec-orders", 1, offset)], group_meta, 30)
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)

    # Tombstones: deleting a group writes one for each committed offset and its metadata.
    # The static member left without a LeaveGroup: its group empties at its session timeout.
    _wait(lambda: _deleted(admin, "vec-simple-ü") and _deleted(admin, "vec-classic"), 60,
          "group deletions")

    # librdkafka's consumer protocol does not join Kafka 3.9's preview of KIP-848.
    if consumer_protocol:
        print("workload: a consumer-protocol group", flush=True)
        by_list = _Member(bootstrap, "vec-848", ["vec-orders"], **{
            "group.protocol": "consumer", "session.timeout.ms": None})
        by_regex = _Member(bootstrap, "vec-848", ["^vec-regex-.*"], **{
            "group.protocol": "consumer", "session.timeout.ms": None,
            "client.id": "vec-regex-client"})
        _wait(lambda: (_poll_all([by_list, by_regex], 0.3),
                       by_list.assigned and by_regex.assigned)[1], 90, "consumer-protocol group")
        _poll_all([by_list, by_regex], 3)
        by_list.consumer.commit(offsets=[TopicPartition("vec-orders", 0, 1)], asynchronous=False)
        by_regex.consumer.close()
        _poll_all([by_list], 5)
        by_list.consumer.close()


def read_raw(bootstrap: str) -> list[dict[str, Any]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "vec-reader-unused",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("__consumer_offsets", p, 0)
                     for p in range(OFFSETS_PARTITIONS)])
    records, done = [], set()
    deadline = time.monotonic() + 60
    while len(done) < OFFSETS_PARTITIONS and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().name() == "_PARTITION_EOF":
                done.add(msg.partition())
                continue
            raise KafkaException(msg.error())
        records.append({"partition": msg.partition(), "offset": msg.offset(),
                        "timestamp": msg.timestamp()[1],
                        "key": (msg.key() or b"").hex(),
                        "value": None if msg.value() is None else msg.value().hex()})
    consumer.close()
    return records


_DUMP_LINE = re.compile(r"offset: (\d+) .*?key: (\{.*?\}) payload: (.*)$")


def kafka_decoding(cluster: KafkaCluster, version: str) -> dict[tuple[int, int], Any]:
    libs = kafka_libs(version)
    decoded: dict[tuple[int, int], Any] = {}
    # The tool moved from core (Scala) to the tools module in Kafka 4.
    dump_class = ("kafka.tools.DumpLogSegments" if version.startswith("3.")
                  else "org.apache.kafka.tools.DumpLogSegments")
    data = cluster.node_dir(1) / "data"
    for partition in range(OFFSETS_PARTITIONS):
        for segment in sorted((data / f"__consumer_offsets-{partition}").glob("*.log")):
            out = subprocess.run(
                [require_java(), "-cp", classpath(libs), dump_class,
                 "--offsets-decoder", "--print-data-log", "--files", str(segment)],
                check=True, capture_output=True, text=True).stdout
            for line in out.splitlines():
                match = _DUMP_LINE.search(line)
                if match:
                    payload = match.group(3).strip()
                    decoded[(partition, int(match.group(1)))] = {
                        "key": json.loads(match.group(2)),
                        "value": None if payload in ("<DELETE>", "null") else json.loads(payload),
                    }
    return decoded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-version", required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or HERE / f"offsets-{args.kafka_version}.json"
    with tempfile.TemporaryDirectory(prefix="gs-vectors-") as tmp:
        cluster = KafkaCluster(Path(tmp) / "kafka", version=args.kafka_version,
                               base_port=free_port_block(1),
                               controller_base_port=free_port_block(1),
                               offsets_topic_partitions=OFFSETS_PARTITIONS)
        cluster.start()
        try:
            workload(cluster.bootstrap, consumer_protocol=not args.kafka_version.startswith("3."))
            time.sleep(2)
            records = read_raw(cluster.bootstrap)
        finally:
            cluster.stop()
        decoded = kafka_decoding(cluster, args.kafka_version)
    vectors = []
    for r in records:
        kafka = decoded.get((r["partition"], r["offset"]))
        vectors.append({**r, "kafka_key": kafka and kafka["key"],
                         "kafka_value": kafka and kafka["value"]})
    out.write_text(json.dumps({
        "kafka_version": args.kafka_version,
        "produced_by": "tests/vectors/capture_offsets_vectors.py",
        "records": vectors,
    }, indent=1, ensure_ascii=False) + "\n")
    missing = sum(1 for v in vectors if v["kafka_key"] is None)
    print(f"{len(vectors)} records ({missing} without Kafka's decoding) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
