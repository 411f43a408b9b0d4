"""Alerts that explain (issue 28): each probable cause reproduced with real clients on the
session's broker, the snapshot loop of the live path running as fast as it goes (collect, gate,
load, live marts on Spark, evaluate), and each group's FIRING on a real webhook naming its cause
first, with its evidence. The scenarios run side by side, one group each:

- ``leaver``: its only member closes (a LeaveGroup) while records keep coming: STOPPED, and
  "member left the group";
- ``poison``: one member reads three partitions and stops processing one of them (paused, as a
  consumer retrying a record that always fails does) while it commits the other two: STALLED
  (after the status rules' 60 s ``min_stop_s``), and "stuck on a record" with its offset;
- ``surge``: production goes from 10 to 100 records a second; the consumer, able to read about
  40, falls behind: the lag alert names "a producer surge";
- ``slower``: 30 records a second; its consumer keeps up, then slows to about 20 a second:
  "the consumers are slower than production";
- ``rewind``: a group without members whose offsets an admin moves back: "committed offsets
  moved back", "while the group had no member";
- ``stuck``: of two members, one stops polling (its handler blocked: librdkafka keeps
  heartbeating) and a third member joins: the rebalance waits for the blocked one until its
  ``max.poll.interval.ms`` (45 s here) passes, and the stuck-rebalance alert names it;
- ``stuck-848``: the same in a consumer-protocol group (KIP-848): its only member stops
  polling, and a second joins: the new target assignment moves partitions the blocked member
  does not give up (it revokes only when it polls), so the group stays Reconciling until the
  member is fenced (its 45 s poll interval), and the alert names the members that have not
  reconciled, the blocked one with them;
- ``loss``: a topic that keeps 1 MB a partition (``retention.bytes``, a segment a second;
  the broker checks retention every second), 1 KB records; its consumer reads about 30 a
  second a partition and keeps up with 15; once the log is full and deleting, production
  goes to 60: the lag eats the headroom (about 30 s of it), and the loss forecast fires
  (naming the surge) before the log start passes the committed offset, its forecast time
  within one snapshot interval of the loss; a second group on the same topic that keeps up
  gets no forecast within the hour. The surge waits for the deletion so that the time to the
  loss does not depend on how fast the passes run (a surge into a log still filling left the
  forecast one pass, or none, before the loss).

A killed member (still listed, then expired) and a storm's churning members are named in
tests/integration/test_fast_detection.py; a coordinator moving in test_alert_unknown.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from conftest import _cluster, _running, unique
from kafkautil import admin, commit_offsets, create_topic, produce_counts
from pipeline_loop import Loop

from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import load_rules
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration

MEMBER = Path(__file__).resolve().parents[1] / "member_process.py"
RULES = """
keep_firing_for: 0s
channels:
  - {name: webhook, kind: webhook, connection: causes_webhook}
rules:
  - name: lag_records_high
    overrides:
      # a lag that fires within the test, once the history holds a baseline to compare with
      - {group: "(surge|slower)-.*", threshold: 300, for: 10s}
  - name: rebalance_stuck
    overrides:
      - {group: "stuck-.*", threshold: 8}
"""
# The stuck group's members: a short session, and a poll interval the test can wait out.
STUCK = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
         "max.poll.interval.ms": 45000}
# ... and those of the consumer-protocol one (KIP-848: the broker owns the session and the
# heartbeat; the poll interval is also the rebalance timeout that fences a member).
STUCK_848 = {"group.protocol": "consumer", "max.poll.interval.ms": 45000}


class Producing(threading.Thread):
    """Produces ``rates[topic]`` records a second to each topic, spread over 3 partitions,
    each ``sizes[topic]`` bytes (1 unless given); the rates may change while it runs."""

    def __init__(self, bootstrap: str, rates: dict[str, float],
                 sizes: dict[str, int] | None = None) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.rates, self.stopping = rates, threading.Event()
        self.values = {topic: b"x" * (sizes or {}).get(topic, 1) for topic in rates}

    def run(self) -> None:
        owed = dict.fromkeys(self.rates, 0.0)
        sent = dict.fromkeys(self.rates, 0)
        while not self.stopping.is_set():
            for topic, rate in list(self.rates.items()):
                owed[topic] += rate * 0.1
                while owed[topic] >= 1:
                    owed[topic] -= 1
                    self.producer.produce(topic, self.values[topic], partition=sent[topic] % 3)
                    sent[topic] += 1
            self.producer.poll(0)
            time.sleep(0.1)
        self.producer.flush(10)


class Reading(threading.Thread):
    """A member of ``group`` reading ``topic``, committing what it processed every second;
    ``per_record_s`` of work per record; ``poisoned`` stops the processing of partition 0."""

    def __init__(self, bootstrap: str, group: str, topic: str, per_record_s: float = 0.0,
                 client_id: str = "reader", **config: Any) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "client.id": client_id, **config})
        self.topic, self.per_record_s = topic, per_record_s
        self.stopping, self.poisoned = threading.Event(), threading.Event()
        self.consumed = 0

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        processed: dict[int, int] = {}
        committed_at, paused = time.monotonic(), False
        while not self.stopping.is_set():
            if self.poisoned.is_set() and not paused:
                self.consumer.pause([TopicPartition(self.topic, 0)])
                paused = True
            message = self.consumer.poll(0.05)
            if (message is not None and message.error() is None
                    and not (paused and message.partition() == 0)):
                processed[message.partition()] = message.offset() + 1
                self.consumed += 1
                time.sleep(self.per_record_s)
            if processed and time.monotonic() - committed_at >= 1.0:
                with contextlib.suppress(KafkaException):  # a rebalance: committed next time
                    self.consumer.commit(offsets=[TopicPartition(self.topic, p, o)
                                                  for p, o in processed.items()],
                                         asynchronous=False)
                committed_at = time.monotonic()
        self.consumer.close()


def _member(bootstrap: str, group: str, topic: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(MEMBER), bootstrap, group, topic,
                             "enable.auto.commit=true", "auto.commit.interval.ms=1000",
                             f"client.id={group}-member"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _stuck_member(bootstrap: str, group: str, client_id: str,
                  settings: dict[str, Any] = STUCK) -> subprocess.Popen[str]:
    """A member of the stuck group in a process of its own, committing what it processed
    every second as ``Reading`` does: closing a consumer in the middle of the rebalance it is
    stuck in can deadlock librdkafka's close while it holds the GIL (seen: a rebalance
    callback's assign waiting forever), which froze a whole test run; a process is killed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(MEMBER), bootstrap, group, group,
                             "commit_every_s=1", f"client.id={client_id}",
                             *(f"{k}={v}" for k, v in settings.items())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _firings(webhook: WebhookCatcher) -> dict[tuple[str, str], dict[str, Any]]:
    """(group, rule) -> its FIRING incident, as the webhook's JSON carries it."""
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for body in list(webhook.bodies):
        for incident in body.get("incidents", []):
            if incident.get("notification") == "firing" and incident.get("group"):
                first.setdefault((incident["group"], incident["rule"]), incident)
    return first


# 1 MB a partition, a segment a second (segment.bytes may not go below 1 MiB since Kafka 4.0).
LOSS_TOPIC = {"retention.bytes": "1000000", "segment.ms": "1000"}


def _deleting(client: Any, topic: str) -> bool:
    """Retention has deleted from every partition of ``topic`` (its log start moved)."""
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import OffsetSpec

    futures = client.list_offsets(
        {KafkaTopicPartition(topic, p): OffsetSpec.earliest() for p in range(3)},
        request_timeout=10)
    return all(f.result().offset > 0 for f in futures.values())


def _loss_timeline(url: str, cluster: str, group: str, keeper: str) -> tuple[Any, Any]:
    """Per snapshot of the loss group: the loss seen on any partition, and the forecast of
    the partition forecast first (its own basis); and the keeper's forecasts and rows.
    Printed, so that a failed run shows the timeline whatever failed."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            # Per snapshot: the loss seen on any partition, and the forecast of the partition
            # forecast first (its own basis).
            rows = conn.execute(text(
                "SELECT DISTINCT ON (snapshot_ts) snapshot_ts,"
                "       bool_or(lag_beyond_retention) OVER (PARTITION BY snapshot_ts) AS lost,"
                "       loss_in_s, loss_basis AS basis"
                " FROM mart.partition_lag WHERE cluster = :c AND group_id = :g"
                " ORDER BY snapshot_ts, loss_in_s NULLS LAST, partition"),
                {"c": cluster, "g": group}).all()
            # Every partition's row, for a run whose forecast did not come as expected.
            partitions = conn.execute(text(
                "SELECT to_char(snapshot_ts, 'HH24:MI:SS'), partition, lag, log_start_offset,"
                "       committed_offset, round(production_rate::numeric, 1),"
                "       round(consumption_rate::numeric, 1), round(lag_growth_rate::numeric, 1),"
                "       round(loss_in_s::numeric, 1), loss_basis"
                " FROM mart.partition_lag WHERE cluster = :c AND group_id = :g"
                " ORDER BY snapshot_ts, partition"), {"c": cluster, "g": group}).all()
            # Within the rule's default threshold (1 h): what would page. A far forecast
            # can come and go when the reader, on this loaded machine, trails the surge.
            kept_up = conn.execute(text(
                "SELECT count(*) FILTER (WHERE loss_in_s < 3600), count(*),"
                "       array_agg(to_char(snapshot_ts, 'HH24:MI:SS') || ' p' || partition"
                "                 || ' lag ' || lag || ' loss in ' || round(loss_in_s::numeric)"
                "                 || ' ' || loss_basis) FILTER (WHERE loss_in_s IS NOT NULL)"
                " FROM mart.partition_lag WHERE cluster = :c AND group_id = :g"),
                {"c": cluster, "g": keeper}).one()
    finally:
        engine.dispose()
    shown = [(r.snapshot_ts.strftime("%H:%M:%S"), r.lost, r.loss_in_s, r.basis) for r in rows]
    print(f"loss group, per snapshot: {shown}; keeper: {kept_up}; per partition (time, "
          "partition, lag, log start, committed, production, consumption, growth, loss in, "
          f"basis): {[tuple(r) for r in partitions]}", flush=True)
    return rows, kept_up


def _print_membership(url: str, cluster: str, group: str) -> None:
    """Per snapshot of a stuck group: its state, and each member's current and target
    partition counts (what the stuck-rebalance condition and cause read). Printed, so that a
    failed run shows them."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT to_char(g.snapshot_ts, 'HH24:MI:SS') AS at, g.state, g.member_count,"
                "       (SELECT string_agg(m.client_id || ' ' || coalesce(a.counts, ''), '; ')"
                "        FROM raw.group_members m LEFT JOIN LATERAL ("
                "          SELECT string_agg(kind || '=' || n, ',') AS counts FROM ("
                "            SELECT kind, count(*) AS n FROM raw.member_assignments x"
                "            WHERE x.cluster = m.cluster AND x.snapshot_ts = m.snapshot_ts"
                "              AND x.group_id = m.group_id AND x.member_id = m.member_id"
                "            GROUP BY kind) k) a ON true"
                "        WHERE m.cluster = g.cluster AND m.snapshot_ts = g.snapshot_ts"
                "          AND m.group_id = g.group_id) AS members"
                " FROM raw.consumer_groups g WHERE g.cluster = :c AND g.group_id = :g"
                " ORDER BY g.snapshot_ts"), {"c": cluster, "g": group}).all()
    finally:
        engine.dispose()
    print(f"{group}, per snapshot (state, members: client current/target): "
          + " | ".join(f"{r.at} {r.state} {r.member_count} [{r.members}]" for r in rows),
          flush=True)


def _assert_the_forecast_came_before_the_loss(url: str, cluster: str, group: str,
                                              timeline: tuple[Any, Any],
                                              firings: dict[tuple[str, str], Any]) -> None:
    """The forecast fired at a snapshot before the first one that saw the loss, and the
    time it forecast is within one snapshot interval of the loss (which came between the last
    snapshot without it and the first with it)."""
    from sqlalchemy import create_engine

    from groupscope.serve.grafana.dashboards import build_all
    from groupscope.serve.grafana.macros import expand

    rows, kept_up = timeline
    shown = [(r.snapshot_ts.strftime("%H:%M:%S"), r.lost, r.loss_in_s, r.basis) for r in rows]
    first_lost = next(i for i, r in enumerate(rows) if r.lost)
    assert first_lost > 0, shown
    forecast = next(i for i, r in enumerate(rows) if r.loss_in_s is not None
                    and r.loss_in_s < 3600)
    assert forecast < first_lost, shown  # before the loss
    assert rows[forecast].basis == "log_start", shown
    interval = median(b.snapshot_ts - a.snapshot_ts
                      for a, b in itertools.pairwise(rows)).total_seconds()
    forecast_at = rows[forecast].snapshot_ts + timedelta(seconds=rows[forecast].loss_in_s)
    after, before = rows[first_lost - 1].snapshot_ts, rows[first_lost].snapshot_ts
    early = (after - forecast_at).total_seconds()
    late = (forecast_at - before).total_seconds()
    print(f"forecast at {rows[forecast].snapshot_ts:%H:%M:%S} for {forecast_at:%H:%M:%S}; "
          f"lost between {after:%H:%M:%S} and {before:%H:%M:%S}; interval {interval:.1f} s",
          flush=True)
    assert early <= interval and late <= interval, (early, late, interval, shown)
    # The alert names the partition, the topic's retention and the rates.
    details = firings[(group, "data_loss_forecast")]["details"]
    assert f"{group}[" in details and "records behind the committed offset" in details, details
    assert "retention.bytes 977 KiB" in details and "production " in details, details
    # The keeper read the same deleting log all along: never a loss forecast within the hour.
    assert kept_up[1] > 0 and kept_up[0] == 0, kept_up
    # Group detail draws the forecast, as the panel's query (macros expanded) reads it.
    panel = next(t["rawSql"] for p in build_all()["groupscope-group"]["panels"]
                 if p["title"] == "Time until data loss (forecast)" for t in p["targets"])
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            drawn = conn.exec_driver_sql(expand(
                panel, time_from=rows[0].snapshot_ts, time_to=rows[-1].snapshot_ts,
                variables={"cluster": cluster, "group": group, "topic": [group]})).all()
    finally:
        engine.dispose()
    assert {round(r.loss_in_s, 6) for r in drawn} >= {round(r.loss_in_s, 6) for r in rows
                                                      if r.loss_in_s is not None}, drawn


@pytest.fixture(scope="module")
def broker(services_dir: Path) -> Iterator[Any]:
    # Its own: a snapshot of the session's broker would read every other test's groups too.
    cluster = _cluster(services_dir, "causes", 1, DEFAULT_KAFKA_VERSION)
    cluster.extra_config["log.retention.check.interval.ms"] = "1000"  # the loss comes on time
    yield from _running(cluster)


def test_each_cause_is_named_first_in_its_alert(broker: Any, postgres: Any, spark: Any,
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = broker.bootstrap
    webhook = WebhookCatcher()
    webhook.start()
    monkeypatch.setenv("AIRFLOW_CONN_CAUSES_WEBHOOK", json.dumps(
        {"conn_type": "http", "password": f"{webhook.url}/hook"}))
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES)
    rules = load_rules(rules_file)
    channels = build_channels(rules).channels
    groups = {name: unique(name)
              for name in ("leaver", "poison", "surge", "slower", "rewind", "stuck",
                           "stuck-848", "loss")}
    for name, group in groups.items():
        create_topic(bootstrap, group, 3, config=LOSS_TOPIC if name == "loss" else None)
    keeper = unique("keeper")
    producing = Producing(bootstrap, {groups["leaver"]: 15, groups["poison"]: 15,
                                      groups["surge"]: 10, groups["slower"]: 30,
                                      groups["stuck"]: 15, groups["stuck-848"]: 15,
                                      groups["loss"]: 45},
                          sizes={groups["loss"]: 1000})
    readers = {"poison": Reading(bootstrap, groups["poison"], groups["poison"]),
               "surge": Reading(bootstrap, groups["surge"], groups["surge"],
                                per_record_s=0.025),
               "slower": Reading(bootstrap, groups["slower"], groups["slower"]),
               "loss": Reading(bootstrap, groups["loss"], groups["loss"], per_record_s=1 / 90),
               "keeper": Reading(bootstrap, keeper, groups["loss"])}
    stuck = {name: _stuck_member(bootstrap, groups["stuck"], f"{name}-handler")
             for name in ("blocked", "steady")}
    # The consumer-protocol group has one member, holding every partition when it blocks:
    # the joiner's target then takes partitions only the blocked member can give up (with a
    # second member, the assignor may move the joiner's share from that one instead).
    stuck_848 = {"blocked": _stuck_member(bootstrap, groups["stuck-848"],
                                          "blocked-848-handler", STUCK_848)}
    joiners: list[subprocess.Popen[str]] = []
    leaver = _member(bootstrap, groups["leaver"], groups["leaver"])
    produce_counts(bootstrap, groups["rewind"], [100, 100, 100])
    client = admin(bootstrap)
    commit_offsets(bootstrap, groups["rewind"], {(groups["rewind"], p): 80 for p in range(3)})
    loop = Loop(unique("causes"), bootstrap, postgres.url, tmp_path / "landing", spark,
                channels, rules)
    began = time.monotonic()
    events: dict[str, float] = {}

    def seconds() -> float:
        return time.monotonic() - began

    try:
        producing.start()
        for reader in readers.values():
            reader.start()
        assert leaver.stdout is not None
        assert leaver.stdout.readline().startswith("ASSIGNED")
        expect = {"leaver": ("group_err", "member_left", "committed up to"),
                  "poison": ("group_err", "stuck_on_record",
                             f"{groups['poison']}[0] has stayed at offset"),
                  "surge": ("lag_records_high", "producer_surge", "production up"),
                  "slower": ("lag_records_high", "consumer_slower", "consuming"),
                  "rewind": ("partition_rewind", "rewind", "while the group had no member"),
                  "stuck": ("rebalance_stuck", "rebalance_waits", "(client blocked-handler,"),
                  "stuck-848": ("rebalance_stuck", "rebalance_waits",
                                "(client blocked-848-handler,"),
                  # the surge, or (once the surge is older than the 5 intervals the surge
                  # cause compares) the consumers being slower than production now
                  "loss": ("data_loss_forecast", "producer_surge|consumer_slower",
                           "production up|consuming")}
        # ... and the loss itself, to see when it came.
        wanted = {(groups[name], rule) for name, (rule, _, _) in expect.items()} | {
            (groups["loss"], "lag_beyond_retention")}
        # Ends as soon as every alert has fired (about 180 s on a quiet machine); the bound
        # leaves room for passes slowed by a loaded one (13 s a pass: 245 s was too short).
        while seconds() < 420 and not wanted <= set(_firings(webhook)):
            loop.once()
            # The poison first: its STALL waits the status rules' 60 s, the others' baseline
            # meanwhile (its commit rhythm is known after 3 passes).
            if len(loop.summaries) >= 3 and "poison" not in events:
                events["poison"] = seconds()
                readers["poison"].poisoned.set()
            # A baseline first (the rates and commit rhythms of every group), then the faults.
            if len(loop.summaries) >= 8 and "faults" not in events:
                events["faults"] = seconds()
                assert leaver.stdin is not None
                leaver.stdin.write("close\n")
                leaver.stdin.flush()
                producing.rates[groups["surge"]] = 100
                readers["slower"].per_record_s = 0.05
                commit_offsets(bootstrap, groups["rewind"],
                               {(groups["rewind"], p): 10 for p in range(3)})
                for blocked in (stuck["blocked"], stuck_848["blocked"]):
                    assert blocked.stdin is not None
                    blocked.stdin.write("block\n")
                    blocked.stdin.flush()
            if "faults" in events and "loss" not in events and _deleting(client,
                                                                         groups["loss"]):
                events["loss"] = seconds()
                producing.rates[groups["loss"]] = 180
            if len(loop.summaries) >= 10 and "join" not in events:
                # Two passes after the handler blocked: its partitions already silent.
                events["join"] = seconds()
                joiners += [_stuck_member(bootstrap, groups["stuck"], "joiner"),
                            _stuck_member(bootstrap, groups["stuck-848"], "joiner-848",
                                          STUCK_848)]
        firings = _firings(webhook)
        print(f"poison at {events.get('poison')} s, faults at {events.get('faults')} s, loss "
              f"surge at {events.get('loss')} s, join at {events.get('join')} s; "
              f"{len(loop.summaries)} passes in {seconds():.0f} s; firing: "
              + "; ".join(f"{g} {r} after {i.get('since')}: {[c['kind'] for c in i['causes']]}"
                          for (g, r), i in firings.items()), flush=True)
        timeline = _loss_timeline(postgres.url, loop.cluster.name, groups["loss"], keeper)
        for name in ("stuck", "stuck-848"):
            _print_membership(postgres.url, loop.cluster.name, groups[name])
        for name, (rule, kind, evidence) in expect.items():
            incident = firings.get((groups[name], rule))
            assert incident is not None, (name, sorted(firings), webhook.texts)
            assert incident["causes"], (name, incident)
            top = incident["causes"][0]
            assert top["kind"] in kind.split("|"), (name, incident["causes"])
            assert any(e in top["evidence"] for e in evidence.split("|")), (name, top)
            text = next(t for t in webhook.texts
                        if f"group {groups[name]}:" in t and incident["summary"] in t)
            title = incident["causes"][0]["title"]
            # its own message ("Likely cause: title: evidence"), or a line of a grouped one
            assert f"Likely cause: {title}: " in text or f"Likely cause: {title}." in text, text
        # A STALL of one partition among advancing ones says how long that one has stood.
        assert "have not moved for 0 s" not in firings[(groups["poison"], "group_err")][
            "details"], firings[(groups["poison"], "group_err")]["details"]
        # The stuck group's STOP, if it came (nobody commits during the rebalance), names the
        # member the rebalance waits for too, not every member it silenced.
        stopped = firings.get((groups["stuck"], "group_err"))
        if stopped is not None:
            assert stopped["causes"][0]["kind"] == "rebalance_waits", stopped["causes"]
        # Only the faulty groups fired: the healthy phase paged nobody, nor the group that
        # keeps up with the deleting log.
        assert {g for g, _ in firings} == set(groups.values()), sorted(firings)
        _assert_the_forecast_came_before_the_loss(postgres.url, loop.cluster.name,
                                                  groups["loss"], timeline, firings)
    finally:
        producing.stopping.set()
        for reader in readers.values():
            reader.stopping.set()
        for process in [leaver, *stuck.values(), *stuck_848.values(), *joiners]:
            if process.poll() is None:
                process.kill()
                process.wait()
        for thread in [*readers.values(), producing]:
            if thread.is_alive():
                thread.join(15)
        webhook.stop()
        print("median seconds per pass step: " + ", ".join(
            f"{name} {sorted(values)[len(values) // 2]:.1f}"
            for name, values in loop.seconds.items()), flush=True)
