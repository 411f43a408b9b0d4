"""A rebalance storm held, on real components: a broker of this module's own, real members
(one that stays, one that keeps joining and leaving), the offsets-topic ingest loading the
generations into the warehouse, Spark's live marts and the alert evaluation, in a loop.

The storm-rule counts over a sliding window (``rebalance_window``), from the generations in
``__consumer_offsets``, so a storm held over several windows fires once and never flaps; the
hourly mart's count (whole hours) fired, resolved and fired again every hour. Time is
compressed through settings: a 10 s window instead of an hour (the storm is held for more
than two windows: "two hours"), a threshold scaled alike, no keep_firing_for (a single dip
would resolve at once, so no flap can hide).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from conftest import _cluster, _running
from kafkautil import create_topic, produce_counts, wait_until
from pipeline_loop import Loop
from sqlalchemy import text

from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import load_rules
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration

CLUSTER = "storm"
GROUP = "storm-group"
FAST = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}

# More than 4 rebalances in the 10 s window (1,440 an hour). The flapping member makes one or
# two a cycle of about a second.
RULES = """
keep_firing_for: 0s
rebalance_window: 10s
channels:
  - {name: webhook, kind: webhook, connection: storm_webhook}
rules:
  - name: rebalance_storm
    threshold: 1440
"""


@pytest.fixture(scope="module")
def broker(services_dir: Path) -> Iterator[Any]:
    yield from _running(_cluster(services_dir, "storm", 1, DEFAULT_KAFKA_VERSION))


class Staying(threading.Thread):
    """The member that stays: consumes and commits every second, through every rebalance."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                  "auto.offset.reset": "earliest",
                                  "auto.commit.interval.ms": 1000, **FAST})
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe(["storm"])
        while not self.stopping.is_set():
            self.consumer.poll(0.1)
        self.consumer.close()


class Flapping(threading.Thread):
    """A member that joins, takes its assignment, and leaves cleanly, over and over: two
    rebalances a cycle (what a crash-looping pod does to its group)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.stopping, self.cycles = bootstrap, threading.Event(), 0

    def run(self) -> None:
        while not self.stopping.is_set():
            assigned = threading.Event()
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                                 "enable.auto.commit": False, **FAST})
            consumer.subscribe(["storm"], on_assign=lambda c, p, a=assigned: a.set())
            deadline = time.monotonic() + 20
            while not assigned.is_set() and time.monotonic() < deadline:
                consumer.poll(0.1)
            consumer.close()  # LeaveGroup: the group rebalances again at once
            self.cycles += 1


def test_a_storm_held_over_many_windows_fires_once_and_resolves_once(
        broker: Any, postgres: Any, warehouse_engine: Any, spark: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    webhook = WebhookCatcher()
    webhook.start()
    monkeypatch.setenv("AIRFLOW_CONN_STORM_WEBHOOK", json.dumps(
        {"conn_type": "http", "password": f"http://127.0.0.1:{webhook.port}/hook"}))
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES)
    rules = load_rules(rules_file)
    channels = build_channels(rules).channels
    assert sorted(channels) == ["webhook"]
    create_topic(broker.bootstrap, "storm", 3)
    produce_counts(broker.bootstrap, "storm", [20, 20, 20])
    loop = Loop(CLUSTER, broker.bootstrap, postgres.url, tmp_path / "landing", spark, channels,
                rules, ingest=True)
    staying, flapping = Staying(broker.bootstrap), Flapping(broker.bootstrap)
    staying.start()
    try:
        loop.run(2)  # calm: the group's first generation only
        assert webhook.texts == []

        flapping.start()
        wait_until(lambda: loop.once()["firing"] >= 1 and webhook.texts, 90,
                   "the storm's firing notification")
        fired_at = time.monotonic()
        # Held for more than two windows: the sliding count never dips under the threshold.
        while time.monotonic() - fired_at < 30:
            loop.once()
            assert len(webhook.texts) == 1, webhook.texts
        assert flapping.cycles >= 10, flapping.cycles
        first = webhook.bodies[0]
        assert "[FIRING]" in webhook.texts[0] and GROUP in webhook.texts[0]
        assert "REBALANCE STORM" in webhook.texts[0]
        assert "rebalances in the 10 s up to" in webhook.texts[0], webhook.texts[0]
        assert "counted from the generations in __consumer_offsets" in webhook.texts[0]
        incident = first["incidents"][0]
        assert (incident["rule"], incident["group"]) == ("rebalance_storm", GROUP)

        # The storm ends: once a window has passed without it, one RESOLVED.
        flapping.stopping.set()
        flapping.join(30)
        wait_until(lambda: loop.once()["firing"] == 0 and len(webhook.texts) == 2, 120,
                   "the storm's resolved notification")
        assert webhook.texts[1].startswith("[RESOLVED]"), webhook.texts[1]
        loop.run(1)
        assert len(webhook.texts) == 2
        with warehouse_engine.connect() as conn:
            generations = conn.execute(text(
                "SELECT count(DISTINCT generation) FROM raw.group_generations "
                "WHERE cluster = :c AND group_id = :g"), {"c": CLUSTER, "g": GROUP}).scalar_one()
            hourly = conn.execute(text(
                "SELECT count(*) FROM mart.rebalance_events WHERE cluster = :c"),
                {"c": CLUSTER}).scalar_one()
        # The storm's rebalances, landed by the ingest (a join that comes while the leave's
        # rebalance is under way makes one generation of the two, so fewer than 2 a cycle);
        # none by the hourly job (not run).
        assert generations >= flapping.cycles // 2, (generations, flapping.cycles)
        assert hourly == 0
    finally:
        flapping.stopping.set()
        staying.stopping.set()
        staying.join(30)
        webhook.stop()
        print("median seconds per pass step: " + ", ".join(
            f"{name} {sorted(values)[len(values) // 2]:.1f}"
            for name, values in loop.seconds.items()), flush=True)
