"""The Spark path of the offsets-topic ingest (Spark's Kafka source from Maven Central, local
mode) lands exactly what the plain path lands, and the two continue from each other's
positions. On a broker of its own: the session's broker has other tests' groups, whose members
expire and write to the offsets topic at any time (a run saw 16 of its partitions move
between the two ingests)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from conftest import _cluster, _running, unique
from kafkautil import commit_offsets, create_topic
from test_offsets_topic import _ingest_all

from groupscope.analyze import submit as sparksubmit
from groupscope.offsets import store
from groupscope.offsets.events import EVENT_SCHEMAS
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION, KafkaCluster, spark_kafka_libs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka(services_dir: Path) -> Iterator[KafkaCluster]:
    yield from _running(_cluster(services_dir, "spark-ingest", 1, DEFAULT_KAFKA_VERSION))


def _commit(bootstrap: str, group: str, topic: str, times: int) -> None:
    """Commits offsets 1 .. times. The first waits out the coordinator: on this module's fresh
    broker it is still loading the group's offsets-topic partition."""
    commit_offsets(bootstrap, group, {(topic, 0): 1})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    for n in range(1, times):
        consumer.commit(offsets=[TopicPartition(topic, 0, n + 1)], asynchronous=False)
    consumer.close()


def _spark_ingest(bootstrap: str, root: Path) -> dict[str, Any]:
    argv = sparksubmit.command("offsets_ingest.py", [
        "--bootstrap", bootstrap, "--cluster", "it", "--landing", str(root),
        "--batch-records", "500"], jars=spark_kafka_libs())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env=sparksubmit.environment())
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _rows(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name in EVENT_SCHEMAS:
        table = store.read_events(root, "it", name)
        out[name] = sorted(tuple(map(repr, row.values())) for row in table.to_pylist())
    return out


def test_spark_and_plain_ingest_land_the_same_events(kafka: KafkaCluster, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap
    topic = unique("spark-in")
    create_topic(bootstrap, topic, 1)
    _commit(bootstrap, unique("spark-g"), topic, 700)

    plain, mixed = tmp_path / "plain", tmp_path / "mixed"
    assert _ingest_all(bootstrap, mixed).complete  # the plain path first ...
    _commit(bootstrap, unique("spark-g"), topic, 300)
    summary = _spark_ingest(bootstrap, mixed)  # ... then Spark continues from its positions
    assert sum(sum(p["counts"].values()) for p in summary["landed"]) >= 300
    assert _ingest_all(bootstrap, plain).complete  # one plain run over everything

    limit = store.positions(plain, "it")
    assert store.positions(mixed, "it") == limit
    assert _rows(mixed) == _rows(plain)

    # A rerun finds nothing new but the records of Spark's own throwaway reader group (its
    # offset reader joins a group on the driver, see groupscope.offsets.spark_ingest).
    _spark_ingest(bootstrap, mixed)
    after = store.positions(mixed, "it")
    new_rows = [
        row for name in EVENT_SCHEMAS
        for row in store.read_events(mixed, "it", name).to_pylist()
        if row["source_offset"] >= limit.get(row["source_partition"], 0)
    ]
    assert all(r["group_id"].startswith("groupscope-spark-offsets-reader") for r in new_rows)
    assert all(after[p] >= limit.get(p, 0) for p in after)
