"""The status of the Kafka 4.2+ group kinds end to end, through the pipeline's own steps
(tests/pipeline_loop.py: collect with the Java Admin client, load, live marts, evaluate).

- A share group (KIP-932), on the session's Kafka 4.3.1 with real share consumers (Kafka's
  console share consumer): the queue consumed, its consumer killed (STOP, one FIRING
  notification), and restarted (one RESOLVED notification). Other modules' groups share the
  cluster: only this group's incident and notifications are counted.
- A streams group (KIP-1071), a real WordCountDemo instance on a broker of its own (the
  demo's topic names are fixed, and other modules use them on the session's broker): its
  source topic deleted, the group is NotReady (STOP, ``streams_not_ready``), as
  ``kafka-streams-groups.sh --describe --state`` says too; the topic re-created and an
  instance started again, it is Stable and OK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import _running, unique
from kafkautil import (
    JAVA_CLASSPATH,
    Producing,
    admin,
    create_topic,
    create_word_count_topics,
    kinds_snapshot,
    produce_counts,
    tool_rows,
    wait_until,
)
from pipeline_loop import Loop
from sqlalchemy import text

from groupscope import pipeline
from groupscope.contract.cluster import ClusterConfig
from groupscope.contract.model import Group
from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import load_rules
from groupscope_dev import kinds
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.ports import free_port_block
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration

RULES = """
keep_firing_for: 0s
repeat_interval: 4h
channels:
  - {name: webhook, kind: webhook, connection: kinds_webhook}
"""


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> Iterator[WebhookCatcher]:
    catcher = WebhookCatcher()
    catcher.start()
    monkeypatch.setenv("AIRFLOW_CONN_KINDS_WEBHOOK", json.dumps(
        {"conn_type": "http", "password": f"http://127.0.0.1:{catcher.port}/hook"}))
    try:
        yield catcher
    finally:
        catcher.stop()


def _group_status(engine: Any, cluster: str, group: str) -> tuple[str, list[str]] | None:
    """The group's status and its partitions' rules at the newest status snapshot."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT g.status, p.rule FROM mart.group_status g JOIN mart.partition_status p "
            "USING (cluster, snapshot_ts, group_id) WHERE cluster = :c AND group_id = :g "
            "AND snapshot_ts = (SELECT max(snapshot_ts) FROM mart.group_status "
            "WHERE cluster = :c AND group_id = :g)"), {"c": cluster, "g": group}).fetchall()
    return (rows[0][0], sorted(r[1] for r in rows)) if rows else None


def test_a_share_group_whose_consumer_is_killed_is_stop_then_resolved(
        kafka: KafkaCluster, postgres: Any, warehouse_engine: Any, spark: Any,
        webhook: WebhookCatcher, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap
    cluster, topic, group = unique("kind-alerts"), unique("queue-alert"), unique("queue")
    create_topic(bootstrap, topic, 1)
    rules = load_rules(_write(tmp_path / "rules.yaml", RULES))
    loop = Loop(cluster, bootstrap, postgres.url, tmp_path / "landing", spark,
                build_channels(rules).channels, rules)
    loop.java_classpath = JAVA_CLASSPATH
    procs = kinds.JavaProcesses(tmp_path / "java")
    producing = Producing(bootstrap, topic, 1)
    producing.start()

    def mine() -> list[str]:
        return [t for t in webhook.texts if group in t]

    def status() -> tuple[str, list[str]]:
        seen = _group_status(warehouse_engine, cluster, group) or ("", [])
        print(f"pass {len(loop.summaries)}: {seen}", flush=True)  # for a failure's output
        return seen

    try:
        consumer = kinds.share_consumer(procs, bootstrap, topic, group, "share-1")
        # Consuming: the start offset follows the log at every pass.
        # (The bounds below are generous: a pass's live marts took 25 s to 90 s on a shared
        # machine.)
        loop.run(2)
        wait_until(lambda: loop.once() and status()[0] == "OK", 600,
                   "the queue consumed, status OK")
        assert mine() == []

        # kill -9: the member stays listed until its session times out (45 s), its records
        # stay acquired; the start offset stops while records arrive.
        consumer.kill()
        consumer.wait()
        wait_until(lambda: loop.once() and mine(), 600, "a FIRING notification for the queue")
        status, partition_rules = _group_status(warehouse_engine, cluster, group) or ("", [])
        assert status == "ERR" and set(partition_rules) <= {
            "progress_stopped", "share_no_members"}, partition_rules
        assert len(mine()) == 1 and "[FIRING]" in mine()[0] and "STOPPED" in mine()[0], mine()
        # Its position is the start offset: the message says how long it has stood still.
        assert "1 of 1 partitions' start offsets have not moved for " in mine()[0], mine()

        # Restarted: the queue is consumed again, one RESOLVED.
        kinds.share_consumer(procs, bootstrap, topic, group, "share-2")
        wait_until(lambda: loop.once() and len(mine()) >= 2, 600,
                   "a RESOLVED notification for the queue")
        assert loop.last is not None
        loop.evaluate(loop.last)  # the same evaluation again sends nothing
        assert len(mine()) == 2 and "[RESOLVED]" in mine()[1], mine()
        with warehouse_engine.connect() as conn:
            incidents = conn.execute(text(
                "SELECT rule, state FROM ops.alert_incidents WHERE cluster = :c "
                "AND group_id = :g AND rule = 'group_err'"), {"c": cluster, "g": group}).all()
            lag = conn.execute(text(
                "SELECT max(lag), max(time_lag_estimated_s) FROM mart.partition_lag "
                "WHERE cluster = :c AND group_id = :g"), {"c": cluster, "g": group}).one()
        assert [tuple(i) for i in incidents] == [("group_err", "resolved")], incidents
        # The start offset's lag was measured, in records and in seconds, while it stopped.
        assert lag[0] > 0 and lag[1] > 0, lag
    finally:
        print("median seconds per pass step: " + ", ".join(
            f"{name} {sorted(values)[len(values) // 2]:.1f}"
            for name, values in loop.seconds.items()), flush=True)
        producing.stopping.set()
        procs.stop_all()
        producing.join(15)


def _write(path: Path, content: str) -> Path:
    path.write_text(content)
    return path


# A Streams member that finds a source topic missing gives up after two heartbeat intervals
# (its stream thread fails with MissingSourceTopicException, the client shuts down and leaves):
# the group is NotReady that long. 15 s (the broker's default maximum; default 5 s) keeps it
# NotReady for some 30 s: a snapshot and Kafka's tool, each a JVM start, fit in, however
# loaded the machine.
STREAMS_HEARTBEAT_MS = "15000"


@pytest.fixture(scope="module")
def streams_kafka(services_dir: Path) -> Iterator[KafkaCluster]:
    """A broker of this module's own: WordCountDemo's topic names are fixed, and deleting its
    source topic on the session's broker would break the other modules' streams apps."""
    yield from _running(KafkaCluster(
        services_dir / unique("kafka-streams"), base_port=free_port_block(1),
        controller_base_port=free_port_block(1),
        extra_config={"group.streams.heartbeat.interval.ms": STREAMS_HEARTBEAT_MS}))


def _streams_group(bootstrap: str, app: str) -> Group | None:
    return next((g for g in kinds_snapshot(bootstrap).groups if g.group_id == app), None)


def _tool_state(bootstrap: str, app: str) -> str:
    """The STATE column of ``kafka-streams-groups.sh --describe --state``."""
    output = kinds.run_tool(kinds.STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap,
                            "--describe", "--group", app, "--state")
    rows = tool_rows(output, app)
    assert len(rows) == 1, output
    return rows[0][-2]  # GROUP COORDINATOR (ID) STATE #MEMBERS


def test_a_streams_group_whose_source_topic_is_deleted_is_not_ready_then_recovers(
        streams_kafka: KafkaCluster, postgres: Any, warehouse_engine: Any, spark: Any,
        tmp_path: Path) -> None:
    bootstrap = streams_kafka.bootstrap
    cluster, app = unique("kind-streams"), unique("wordcount")
    config = ClusterConfig(cluster, {"bootstrap.servers": bootstrap})
    landing = tmp_path / "landing"
    procs = kinds.JavaProcesses(tmp_path / "java")

    def collect() -> datetime:  # the snapshot DAG's collect (a child process, as deployed)
        now = datetime.now(UTC)
        pipeline.collect(config, landing, now, 15.0, java_classpath=JAVA_CLASSPATH)
        return now

    def stable_and_caught_up() -> bool:
        group = _streams_group(bootstrap, app)
        # Both subtopologies committed: the repartition topic's offsets outlive the source.
        return bool(group and group.state == "Stable" and len(group.members) == 1
                    and {o.topic for o in group.offsets} > {kinds.WORD_COUNT_INPUT})

    try:
        create_word_count_topics(bootstrap)
        produce_counts(bootstrap, kinds.WORD_COUNT_INPUT, [3, 2])
        first = kinds.streams_instance(procs, bootstrap, app, "streams-1",
                                       tmp_path / "state-1")
        wait_until(stable_and_caught_up, 120, "the streams app Stable, its offsets committed")
        stable = collect()
        assert _tool_state(bootstrap, app) == "Stable"

        client = admin(bootstrap)  # must outlive its futures
        for future in client.delete_topics([kinds.WORD_COUNT_INPUT]).values():
            future.result()
        wait_until(lambda: (group := _streams_group(bootstrap, app)) is not None
                   and group.state == "NotReady", 60, "the streams group NotReady")
        not_ready = collect()
        assert _tool_state(bootstrap, app) == "NotReady"

        # Its client gave up (or will): a new instance, once the topic is back, recovers.
        procs.stop(first)
        create_word_count_topics(bootstrap)
        kinds.streams_instance(procs, bootstrap, app, "streams-2", tmp_path / "state-2")
        wait_until(lambda: (group := _streams_group(bootstrap, app)) is not None
                   and group.state == "Stable" and len(group.members) == 1, 120,
                   "the streams app Stable again")
        recovered = collect()
        assert _tool_state(bootstrap, app) == "Stable"

        # Load and the live marts, once for the three snapshots, as the live DAG does.
        pipeline.check_and_load(postgres.url, landing, cluster, datetime.now(UTC))
        pipeline.live_analytics(spark, postgres.url, landing, cluster, datetime.now(UTC))
        with warehouse_engine.connect() as conn:
            states = dict(conn.execute(text(
                "SELECT snapshot_ts, state FROM raw.consumer_groups WHERE cluster = :c "
                "AND group_id = :g"), {"c": cluster, "g": app}).all())
            partitions = conn.execute(text(
                "SELECT snapshot_ts, status, rule FROM mart.partition_status "
                "WHERE cluster = :c AND group_id = :g"), {"c": cluster, "g": app}).all()
            groups = dict(conn.execute(text(
                "SELECT snapshot_ts, status FROM mart.group_status WHERE cluster = :c "
                "AND group_id = :g"), {"c": cluster, "g": app}).all())
        # The landed snapshots saw what the tool saw.
        assert [states[ts] for ts in (stable, not_ready, recovered)] == [
            "Stable", "NotReady", "Stable"], states

        def rules_at(ts: datetime) -> set[tuple[str, str]]:
            return {(status, rule) for at, status, rule in partitions if at == ts}

        # NotReady: every partition it still has offsets on (the repartition topic's; the
        # deleted topic's went with it) is STOP by streams_not_ready, whatever its lag.
        assert rules_at(not_ready) == {("STOP", "streams_not_ready")}, partitions
        assert groups[not_ready] == "ERR", groups
        for ts in (stable, recovered):
            assert rules_at(ts) and all(status == "OK" for status, _ in rules_at(ts)), (
                ts, partitions)
            assert groups[ts] == "OK", groups
    finally:
        procs.stop_all()
