"""The status and alert of a share group (KIP-932) end to end, on the session's Kafka 4.3.1
with real share consumers (Kafka's console share consumer): the snapshot loop of
tests/pipeline_loop.py (collect with the Java Admin client, load, live marts, evaluate) sees
the queue consumed, its consumer killed (STOP, one FIRING notification), and restarted (one
RESOLVED notification). Other modules' groups share the cluster: only this group's incident
and notifications are counted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import unique
from kafkautil import Producing, create_topic, wait_until
from pipeline_loop import Loop
from sqlalchemy import text

from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import load_rules
from groupscope_dev.kafka import KafkaCluster, kafka_libs
from groupscope_dev.kinds import JavaProcesses, share_consumer
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
    loop.java_classpath = str(kafka_libs("4.3.1"))
    procs = JavaProcesses(tmp_path / "java")
    producing = Producing(bootstrap, topic, 1)
    producing.start()

    def mine() -> list[str]:
        return [t for t in webhook.texts if group in t]

    def status() -> tuple[str, list[str]]:
        seen = _group_status(warehouse_engine, cluster, group) or ("", [])
        print(f"pass {len(loop.summaries)}: {seen}", flush=True)  # for a failure's output
        return seen

    try:
        consumer = share_consumer(procs, bootstrap, topic, group, "share-1")
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

        # Restarted: the queue is consumed again, one RESOLVED.
        share_consumer(procs, bootstrap, topic, group, "share-2")
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
