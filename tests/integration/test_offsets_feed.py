"""The offsets-topic feed watched (``offsets_feed_stale``) against a real Kafka and a real
PostgreSQL: each ingest run of ``__consumer_offsets`` is recorded once its batches are loaded,
and the condition fires when the feed stops being read to its end, whether no run comes any
more (its DAG paused) or the runs keep ending incomplete; a complete run clears it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import unique
from kafkautil import commit_offsets, create_topic
from sqlalchemy import Engine

from groupscope import pipeline
from groupscope.contract.cluster import ClusterConfig
from groupscope.serve.alerting.conditions import observe
from groupscope.serve.alerting.rules import breached, builtin_rules
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.postgres import LocalPostgres

pytestmark = pytest.mark.integration


def _feed(engine: Engine, cluster: str, now: datetime) -> tuple[float | str, dict[str, Any],
                                                                  bool]:
    """The condition's value (why it is unknown, when it is) and details at ``now``, and
    whether the built-in rule fires."""
    rule = next(r for r in builtin_rules().rules if r.condition == "offsets_feed_stale")
    with engine.connect() as conn, conn.begin():
        [seen] = observe(conn, cluster, ["offsets_feed_stale"], now, timedelta(seconds=30))
    if seen.unknown is not None:
        return seen.unknown, seen.details, False
    return seen.value, seen.details, breached(seen.condition, seen.value, rule.threshold)


def test_a_stalled_offsets_feed_fires_offsets_feed_stale(
        kafka: KafkaCluster, postgres: LocalPostgres, warehouse_engine: Engine,
        tmp_path: Path) -> None:
    cluster = unique("feed")
    config = ClusterConfig(cluster, {"bootstrap.servers": kafka.bootstrap})
    topic = unique("feed-topic")
    create_topic(kafka.bootstrap, topic, 1)
    commit_offsets(kafka.bootstrap, unique("feed-group"), {(topic, 0): 0})

    # Before any run is recorded the feed's state is unknown, not fresh.
    why, _, fires = _feed(warehouse_engine, cluster, datetime.now(UTC))
    assert why == "no offsets-topic ingest of the cluster was ever recorded" and not fires

    def run(at: datetime, run_timeout_s: float) -> dict[str, Any]:
        summary = pipeline.ingest(config, tmp_path, at, 15.0, run_timeout_s)
        pipeline.load_generations(postgres.url, tmp_path, cluster, at, summary)
        return summary

    start = datetime.now(UTC)
    assert run(start, 120.0)["complete"]
    assert _feed(warehouse_engine, cluster, start + timedelta(minutes=10)) == (
        600.0, {"complete_at": start.isoformat(), "checked_at": start.isoformat(),
                "incomplete": []}, False)
    # Its DAG paused: no run comes, and half an hour on the feed is stale.
    assert _feed(warehouse_engine, cluster, start + timedelta(minutes=31))[2]

    # Runs that keep ending incomplete (new records, and no time to read them) do not
    # refresh it either, and say which partitions they left.
    commit_offsets(kafka.bootstrap, unique("feed-group"), {(topic, 0): 0})
    later = start + timedelta(minutes=20)
    assert not run(later, 0.0)["complete"]
    value, details, fires = _feed(warehouse_engine, cluster, start + timedelta(minutes=31))
    assert fires and value == 31 * 60.0
    assert details["checked_at"] == later.isoformat() and details["incomplete"], details
    assert "timed out" in details["incomplete"][0]["error"]

    # A run that reads the topic to its end clears it.
    again = start + timedelta(minutes=32)
    assert run(again, 120.0)["complete"]
    assert _feed(warehouse_engine, cluster, again + timedelta(seconds=5)) == (
        5.0, {"complete_at": again.isoformat(), "checked_at": again.isoformat(),
              "incomplete": []}, False)
