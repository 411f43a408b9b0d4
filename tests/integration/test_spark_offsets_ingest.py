"""The Spark path of the offsets-topic ingest (Spark's Kafka source from Maven Central, local
mode) lands exactly what the plain path lands, and the two continue from each other's
positions. Spark reads through the secured broker's SCRAM-SHA-512, SCRAM-SHA-256 and mutual
TLS listeners (the plain path through its plaintext one): the connection's settings reach the
job in a file, and no secret (the password, the client key) shows in ``ps`` while it runs, in
its output or in its event log. Not on the session's main
broker: it has other tests' groups, whose members expire and write to the offsets topic at any
time (a run saw 16 of its partitions move between the two ingests); the secured broker's
groups have no members."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from conftest import SCRAM_USERS, unique
from kafkautil import commit_offsets, create_topic
from test_offsets_topic import _ingest_all

from groupscope.analyze import submit as sparksubmit
from groupscope.offsets import store
from groupscope.offsets.events import EVENT_SCHEMAS
from groupscope_dev.kafka import KafkaCluster, spark_kafka_libs

pytestmark = pytest.mark.integration


def _commit(bootstrap: str, group: str, topic: str, times: int) -> None:
    """Commits offsets 1 .. times. The first waits out the coordinator: on this module's fresh
    broker it is still loading the group's offsets-topic partition."""
    commit_offsets(bootstrap, group, {(topic, 0): 1})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    for n in range(1, times):
        consumer.commit(offsets=[TopicPartition(topic, 0, n + 1)], asynchronous=False)
    consumer.close()


def _sampled_ps(stop: threading.Event, seen: list[str]) -> None:
    while not stop.is_set():
        seen.append(subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True,
                                   text=True).stdout)
        stop.wait(0.5)


def _spark_ingest(client: dict[str, str], root: Path, scratch: Path) -> dict[str, Any]:
    """One spark-submit of the job over ``client`` (librdkafka settings); fails if a secret of
    the client shows in ``ps`` while it runs, in its output or in its event log."""
    client_file = scratch / "client.json"
    client_file.write_text(json.dumps(client))
    os.chmod(client_file, 0o600)
    events = scratch / "events"
    events.mkdir(exist_ok=True)
    argv = sparksubmit.command("offsets_ingest.py", [
        "--bootstrap", client["bootstrap.servers"], "--cluster", "it", "--landing", str(root),
        "--batch-records", "500", "--client-file", str(client_file)], jars=spark_kafka_libs(),
        conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
              "spark.eventLog.compress": "false"})
    stop, seen = threading.Event(), []  # type: ignore[var-annotated]
    sampler = threading.Thread(target=_sampled_ps, args=(stop, seen))
    sampler.start()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                              env=sparksubmit.environment())
    finally:
        stop.set()
        sampler.join()
    assert done.returncode == 0, done.stderr[-3000:]
    secret = _secret(client)
    event_log = "".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    assert "spark.redaction.regex" in event_log  # Spark's conf is dumped there ...
    assert any("offsets_ingest.py" in snapshot for snapshot in seen)  # ... ps saw the job ...
    for where, text in (("ps", "".join(seen)), ("stdout", done.stdout),
                        ("stderr", done.stderr), ("event log", event_log)):
        assert secret not in text, f"the client's secret in the {where}"  # ... no
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _secret(client: dict[str, str]) -> str:
    """The SCRAM password, or for mutual TLS a line of the client key's PEM body."""
    if "sasl.password" in client:
        return client["sasl.password"]
    body = Path(client["ssl.key.location"]).read_text().splitlines()[1]
    assert len(body) >= 32
    return body


def _rows(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name in EVENT_SCHEMAS:
        table = store.read_events(root, "it", name)
        out[name] = sorted(tuple(map(repr, row.values())) for row in table.to_pylist())
    return out


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "mTLS"])
def test_spark_and_plain_ingest_land_the_same_events(kafka_secure: KafkaCluster,
                                                     tmp_path: Path, mechanism: str) -> None:
    bootstrap = kafka_secure.bootstrap
    secured = kafka_secure.secure_client(mechanism)
    if mechanism != "mTLS":
        assert secured["sasl.password"] in SCRAM_USERS.values()
    topic = unique("spark-in")
    create_topic(bootstrap, topic, 1)
    _commit(bootstrap, unique("spark-g"), topic, 700)

    plain, mixed = tmp_path / "plain", tmp_path / "mixed"
    assert _ingest_all(bootstrap, mixed).complete  # the plain path first ...
    _commit(bootstrap, unique("spark-g"), topic, 300)
    summary = _spark_ingest(secured, mixed, tmp_path)  # ... then Spark continues from them
    assert sum(sum(p["counts"].values()) for p in summary["landed"]) >= 300
    assert _ingest_all(bootstrap, plain).complete  # one plain run over everything

    limit = store.positions(plain, "it")
    assert store.positions(mixed, "it") == limit
    assert _rows(mixed) == _rows(plain)
    if mechanism != "SCRAM-SHA-512":
        return  # the rerun is about positions, not the listener: one mechanism pays for it

    # A rerun finds nothing new but the records of Spark's own throwaway reader group (its
    # offset reader joins a group on the driver, see groupscope.offsets.spark_ingest).
    _spark_ingest(secured, mixed, tmp_path)
    after = store.positions(mixed, "it")
    new_rows = [
        row for name in EVENT_SCHEMAS
        for row in store.read_events(mixed, "it", name).to_pylist()
        if row["source_offset"] >= limit.get(row["source_partition"], 0)
    ]
    assert all(r["group_id"].startswith("groupscope-spark-offsets-reader") for r in new_rows)
    assert all(after[p] >= limit.get(p, 0) for p in after)
