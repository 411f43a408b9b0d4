"""Broker faults on the real 3-broker cluster, seen through the whole snapshot loop.

The second test (issue 28): a broker stopped under a partition it alone holds, behind its
consumer: the group STALLs, and its FIRING names the partition without a leader and the broker
(its docstring says how); and (issue 41) the group's lag incident, firing before, stays firing
and unknown while that partition's high watermark cannot be read, never resolved.

The third (issue 28, "a coordinator move, or its broker down"): the broker that alone holds a
group's ``__consumer_offsets`` partition stops, so the group has no coordinator: COORDINATOR
DOWN fires, naming the partition and the broker, and resolves when the broker is back; the
cluster's ``snapshot_incomplete`` says what its snapshots could not read.

The first: unknown is not "resolved" (issue 24): the coordinator broker of
a STOPPED group is killed (kill -9) and restarted while the snapshot loop keeps running
(collect, gate, load, live marts on Spark, evaluate: what the snapshot and live DAGs run),
with time compressed through settings only (passes back to back, a 6 s session timeout,
commits every second, and ``keep_firing_for: 0s``, so that an evaluation that took the group as
cleared even once would resolve it at once). Across the whole run the webhook must hear exactly
one FIRING for the group and no RESOLVED.

The group's coordinator (the "victim") leads no partition of the topics read, so that its
outage is the coordinator's alone (a partition whose leader is down is collected today with
offsets of -1001 and no collection error, and the quality gate rejects that snapshot: another
fault, not this test's); each other broker coordinates a healthy "witness" group (caught up
on an idle topic), so the snapshots keep status rows while the victim is down.

What the passes see (Kafka 4.3.1): the first pass after the kill is partial (the dead broker's
ListGroups times out, once: a broker that timed out is not asked again within a snapshot). The
survivors answered that listing before the controller fenced the victim, so the group can be
absent from it: unknown (``conditions._why_absent``), and still firing. By the next pass the
group's offsets partition has moved to a survivor, so the group is listed on its new
coordinator with its commits, judged STOPPED. After the restart the preferred
leader takes the partition back, and the pass right after that move can see a *complete*
snapshot without the group: the group coordinator answers ListGroups for a shard it is giving
up (NotCoordinatorException) with an empty list and no error, and the new leader lists the
group only once it has loaded it. The test takes that pass as soon as the move shows in the
metadata. A group with an open incident must not be resolved there: it was not deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import NewTopic
from conftest import unique
from kafkautil import Producing, admin, commit_offsets, produce_counts, wait_until
from pipeline_loop import Loop
from sqlalchemy import text

from groupscope.kafka.coordinator import offsets_partition_for
from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import load_rules
from groupscope_dev.kafka import KafkaCluster, classpath, kafka_libs, require_java
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = [pytest.mark.integration, pytest.mark.cluster3]

MEMBER = Path(__file__).resolve().parents[1] / "member_process.py"
OFFSETS_PARTITIONS = 50

RULES = """
keep_firing_for: 0s
repeat_interval: 4h
retry_initial: 1s
channels:
  - {name: webhook, kind: webhook, connection: unknown_webhook}
"""

FAST = ("enable.auto.commit=true", "auto.commit.interval.ms=1000", "session.timeout.ms=6000",
        "heartbeat.interval.ms=1000")


@dataclass(frozen=True)
class Pass:
    """What one loop pass saw of the group, read back from the warehouse after it."""

    phase: str
    at_s: float  # seconds into the test, at its end
    complete: bool  # the pass's own snapshot (raw.snapshots)
    errors: str  # its collection errors, stage:code
    listed: bool  # the group is in the pass's snapshot
    coordinator: int | None  # ... coordinated by (as described)
    members: int | None
    judged_partial: bool  # the newest status snapshot (what the rules judge) was partial
    judged_status: str | None  # ... and the group's status there (None: no row)
    unknown: int  # the evaluation's unknown observations (its summary)
    incident: str | None  # the group's group_err incident, after the pass
    state: str
    unknown_why: str | None

    @property
    def absent_from_partial(self) -> bool:
        """No status row for the group at a partial judged snapshot: what must be unknown."""
        return self.judged_partial and self.judged_status is None


def _member(bootstrap: str, group: str, topic: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(MEMBER), bootstrap, group, topic, *FAST,
                             *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _find_coordinator(bootstrap: str) -> bool:
    """Asks for a group's coordinator (which creates ``__consumer_offsets``)."""
    client = admin(bootstrap)  # must outlive its futures
    future = client.describe_consumer_groups([unique("warm-up")], request_timeout=5)
    with contextlib.suppress(Exception):  # no coordinator yet: the topic is being created
        next(iter(future.values())).result(timeout=10)
    return True


def _offsets_topic(client: Any) -> dict[int, tuple[int, int]]:
    """``__consumer_offsets`` partition -> (its leader (-1: none), its preferred leader), as
    the metadata of an AdminClient's broker says."""
    topics = client.list_topics(timeout=10).topics
    if "__consumer_offsets" not in topics:
        return {}
    return {p: (part.leader, part.replicas[0] if part.replicas else -1)
            for p, part in topics["__consumer_offsets"].partitions.items()}


def _coordinator(client: Any, group: str) -> int:
    return _offsets_topic(client)[offsets_partition_for(group, OFFSETS_PARTITIONS)][0]


def _preferred(offsets: dict[int, tuple[int, int]], group: str) -> int:
    return offsets[offsets_partition_for(group, OFFSETS_PARTITIONS)][1]


def _create_topic_led_by(bootstrap: str, name: str, leaders: list[int], follower: int) -> None:
    """A topic of one partition per entry of ``leaders``, each replicated on the brokers of
    ``leaders`` (its own first: the preferred leader) and on ``follower``, which leads none."""
    others = sorted(set(leaders))
    _create_topic_on(bootstrap, name, [[leader, *[b for b in others if b != leader], follower]
                                       for leader in leaders])


def _create_topic_on(bootstrap: str, name: str, assignment: list[list[int]]) -> None:
    """A topic whose partition p is replicated on the brokers ``assignment[p]``."""
    client = admin(bootstrap)  # must outlive its futures
    # (confluent-kafka takes the partition count with an assignment, not -1 as documented)
    topics = [NewTopic(name, len(assignment), replica_assignment=assignment)]
    for future in client.create_topics(topics, operation_timeout=30).values():
        future.result()
    wait_until(lambda: name in client.list_topics(timeout=10).topics, 20,
               f"topic {name} to appear")


def _clean_up(cluster: KafkaCluster, stopped: int | None, producer: Producing,
              member: subprocess.Popen[str] | None) -> None:
    """What a test leaves: the broker it stopped started (the module's other tests need the
    whole cluster), its producer and its member stopped."""
    if stopped is not None:
        cluster.start_node(stopped)
        cluster.wait_ready()
    producer.stopping.set()
    if producer.is_alive():
        producer.join(15)
    if member is not None and member.poll() is None:
        member.kill()
        member.wait()


def _watching(cluster: str, bootstrap: str, postgres: Any, spark: Any, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch, extra_rules: str = ""
              ) -> tuple[WebhookCatcher, Loop]:
    """A webhook receiver (started) and the snapshot loop of the live path, with RULES (and
    ``extra_rules`` after them)."""
    webhook = WebhookCatcher()
    webhook.start()
    monkeypatch.setenv("AIRFLOW_CONN_UNKNOWN_WEBHOOK", json.dumps(
        {"conn_type": "http", "password": f"{webhook.url}/hook"}))
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES + extra_rules)
    rules = load_rules(rules_file)
    channels = build_channels(rules).channels
    assert sorted(channels) == ["webhook"]
    return webhook, Loop(cluster, bootstrap, postgres.url, tmp_path / "landing", spark,
                         channels, rules)


def _witnesses(bootstrap: str, offsets: dict[int, tuple[int, int]], others: list[int],
               victim: int, idle: str) -> None:
    """A healthy group (caught up on ``idle``, a topic ``victim`` leads no partition of) on
    each broker of ``others``: status rows at every snapshot while ``victim`` is down."""
    witnesses: dict[int, str] = {}
    while set(witnesses) != set(others):
        name = unique("witness")
        if _preferred(offsets, name) != victim:
            witnesses.setdefault(_preferred(offsets, name), name)
    _create_topic_led_by(bootstrap, idle, [others[1], others[0], others[1]], victim)
    produce_counts(bootstrap, idle, [5, 5, 5])
    for witness in witnesses.values():
        commit_offsets(bootstrap, witness, {(idle, p): 5 for p in range(3)})


def _committed(bootstrap: str, group: str) -> bool:
    client = admin(bootstrap)  # must outlive its futures
    future = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return any(tp.offset >= 0 for tp in future.result(timeout=10).topic_partitions or [])


def _webhook_fields(webhook: WebhookCatcher, group: str) -> list[dict[str, Any]]:
    """The JSON of every incident of ``group`` the webhook received, in order."""
    return [i for body in list(webhook.bodies) for i in body.get("incidents", [])
            if i.get("group") == group]


def _webhook_incidents(webhook: WebhookCatcher, group: str) -> list[tuple[str, str]]:
    """(notification, rule) of every incident of ``group`` the webhook received, in order
    (a message may carry several incidents, of several subjects)."""
    return [(str(i.get("notification")), str(i.get("rule")))
            for i in _webhook_fields(webhook, group)]


_SEEN = text("""
WITH judged AS (SELECT max(snapshot_ts) AS ts FROM mart.group_status WHERE cluster = :c)
SELECT s.complete,
       (SELECT coalesce(string_agg(DISTINCT e.stage || ':' || e.code, ','), '')
        FROM raw.collection_errors e
        WHERE e.cluster = s.cluster AND e.snapshot_ts = s.snapshot_ts) AS errors,
       g.group_id IS NOT NULL AS listed, g.coordinator_id, g.member_count,
       (SELECT NOT j.complete FROM raw.snapshots j, judged
        WHERE j.cluster = :c AND j.snapshot_ts = judged.ts) AS judged_partial,
       (SELECT m.status FROM mart.group_status m, judged WHERE m.cluster = :c
        AND m.snapshot_ts = judged.ts AND m.group_id = :g) AS judged_status
FROM raw.snapshots s
LEFT JOIN raw.consumer_groups g
  ON g.cluster = s.cluster AND g.snapshot_ts = s.snapshot_ts AND g.group_id = :g
WHERE s.cluster = :c AND s.snapshot_ts = :at
""")

_INCIDENTS = text("""
SELECT incident_id, state, details->>'unknown_why' AS why FROM ops.alert_incidents
WHERE cluster = :c AND group_id = :g AND rule = :rule ORDER BY started_at
""")


def test_a_stopped_groups_coordinator_restarting_never_resolves_it(
        kafka3: KafkaCluster, postgres: Any, warehouse_engine: Any, spark: Any,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = kafka3.bootstrap
    cluster, group = unique("unknown3"), unique("payments")
    topic, idle = unique("orders"), unique("idle")
    webhook, loop = _watching(cluster, bootstrap, postgres, spark, tmp_path, monkeypatch)
    metadata = admin(bootstrap)  # one client for the metadata polls
    passes: list[Pass] = []
    began = time.monotonic()
    producer = Producing(bootstrap, topic, 3)
    member: subprocess.Popen[str] | None = None
    stopped: int | None = None

    def phase(name: str) -> None:  # where the time goes
        print(f"[{time.monotonic() - began:6.1f} s] {name} ({len(passes)} passes so far)",
              flush=True)

    def once(name: str) -> Pass:
        summary = loop.once()
        with warehouse_engine.connect() as conn:
            seen = conn.execute(_SEEN, {"c": cluster, "g": group, "at": loop.last}
                                ).mappings().one()
            incidents = conn.execute(_INCIDENTS, {"c": cluster, "g": group,
                                                  "rule": "group_err"}).fetchall()
        last = incidents[-1] if incidents else None
        done = Pass(name, round(time.monotonic() - began, 1), seen["complete"], seen["errors"],
                    seen["listed"], seen["coordinator_id"], seen["member_count"],
                    bool(seen["judged_partial"]), seen["judged_status"], summary["unknown"],
                    last.incident_id if last else None, last.state if last else "-",
                    last.why if last else None)
        passes.append(done)
        print(f"  {done}", flush=True)
        return done

    try:
        phase("1. the group's coordinator, topics that it leads no partition of, witnesses")
        offsets: dict[int, tuple[int, int]] = wait_until(
            lambda: _find_coordinator(bootstrap) and (now := _offsets_topic(metadata))
            and len(now) == OFFSETS_PARTITIONS
            and all(leader == preferred for leader, preferred in now.values()) and now, 60,
            "every __consumer_offsets partition led by its preferred replica")
        victim = _preferred(offsets, group)
        others = [n for n in kafka3.node_ids() if n != victim]
        _create_topic_led_by(bootstrap, topic, [others[0], others[1], others[0]], victim)
        _witnesses(bootstrap, offsets, others, victim, idle)
        producer.start()

        phase("1. a consumer committing every second")
        member = _member(bootstrap, group, topic)
        assert member.stdout is not None
        line = member.stdout.readline()
        assert line.startswith("ASSIGNED"), line
        wait_until(lambda: _committed(bootstrap, group), 30, "the consumer's first commit")
        wait_until(lambda: (p := once("healthy")).members and p.judged_status, 120,
                   "a snapshot judging the consuming group")
        assert _webhook_incidents(webhook, group) == []

        phase("1. kill -9 of the consumer")
        member.send_signal(signal.SIGKILL)
        member.wait()
        wait_until(lambda: once("stopping").state == "firing"
                   and _webhook_incidents(webhook, group), 120,
                   "the group's FIRING on the webhook")
        assert _webhook_incidents(webhook, group) == [("firing", "group_err")], webhook.texts
        fired = [t for t in webhook.texts if group in t]
        assert fired[0].startswith(f"[FIRING] cluster {cluster}, group {group}: STOPPED"), fired
        incident = passes[-1].incident

        # 2. kill -9 of its coordinator's broker: no controlled shutdown, so its leaderships
        #    stay with it until the controller fences it.
        assert _coordinator(metadata, group) == victim
        phase(f"2. kill -9 of broker {victim}, the group's coordinator")
        kafka3.stop_node(victim, hard=True)
        stopped = victim
        survivors = admin(",".join(f"127.0.0.1:{kafka3.broker_port(n)}" for n in others))
        deadline = time.monotonic() + 90
        while True:  # until the group is judged on its new coordinator
            seen = once("broker down")
            if ((seen.judged_status and _coordinator(survivors, group) not in (victim, -1))
                    or time.monotonic() > deadline):
                break

        phase(f"2. restart of broker {victim}")
        kafka3.start_node(victim)
        kafka3.wait_ready()
        stopped = None
        deadline = time.monotonic() + 60
        while _coordinator(metadata, group) != victim:  # the preferred leader takes it back
            assert time.monotonic() < deadline, "the group's coordinator never moved back"
            time.sleep(0.05)
        phase("2. the group's offsets partition is back on its broker: a pass at once")
        deadline = time.monotonic() + 90
        while True:  # until a complete snapshot judges it on its coordinator again
            seen = once("restarted")
            if ((seen.complete and seen.judged_status and seen.coordinator == victim)
                    or time.monotonic() > deadline):
                break

        phase("3. assertions")
        for p in passes:
            print(f"  {p}")
        down = [p for p in passes if p.phase == "broker down"]
        back = [p for p in passes if p.phase == "restarted"]
        absent = [p for p in down + back if p.judged_status is None]
        # Exactly one FIRING, no RESOLVED: the outage was never taken as "cleared".
        got = _webhook_incidents(webhook, group)
        assert got == [("firing", "group_err")], (
            f"the webhook got {got} for the group; the passes whose judged snapshot had no "
            f"status row for it: {absent}")
        assert not any("[RESOLVED]" in t and group in t for t in webhook.texts)
        # Through both coordinator moves the same incident kept firing.
        assert all(p.incident == incident and p.state == "firing" for p in down + back), \
            down + back
        # The outage was real: a partial snapshot (the dead broker's ListGroups failed).
        assert any(not p.complete and "list_groups:" in p.errors for p in down), down
        for p in down + back:
            if p.absent_from_partial:  # unknown: kept firing, saying why
                assert p.unknown > 0, p
                assert p.unknown_why is not None and (
                    p.unknown_why.startswith("missing from the partial snapshot of")
                    or "lists the group but no status could be computed" in p.unknown_why), p
            elif p.judged_status is not None:  # judged on its data: still STOPPED
                assert p.judged_status == "ERR", p
        # Seen on another coordinator while its own was down (or not seen), back on its own
        # at the end: judged STOPPED on a complete snapshot, a known value again.
        assert any(p.coordinator not in (None, victim) or not p.listed for p in down), down
        assert back[-1].complete and back[-1].coordinator == victim, back
        assert back[-1].judged_status == "ERR" and back[-1].unknown_why is None, back
        print(f"  passes without a status row for the group: "
              f"{sum(p.judged_partial for p in absent)} at a partial snapshot, "
              f"{sum(not p.judged_partial for p in absent)} at a complete one", flush=True)
        phase("done")
    finally:
        print("median seconds per pass step: " + ", ".join(
            f"{name} {sorted(values)[len(values) // 2]:.1f}"
            for name, values in loop.seconds.items()), flush=True)
        _clean_up(kafka3, stopped, producer, member)
        webhook.stop()


_WATCHED = text("""
SELECT s.complete, p.partition, p.leader, p.high_watermark, c.committed_offset,
       st.status, st.lag AS status_lag, st.reason
FROM raw.snapshots s
JOIN raw.partition_offsets p ON p.cluster = s.cluster AND p.snapshot_ts = s.snapshot_ts
LEFT JOIN raw.committed_offsets c
  ON c.cluster = p.cluster AND c.snapshot_ts = p.snapshot_ts AND c.group_id = :g
 AND c.topic = p.topic AND c.partition = p.partition
LEFT JOIN mart.partition_status st
  ON st.cluster = p.cluster AND st.snapshot_ts = p.snapshot_ts AND st.group_id = :g
 AND st.topic = p.topic AND st.partition = p.partition
WHERE s.cluster = :c AND s.snapshot_ts = :at AND p.topic = :t ORDER BY p.partition
""")

_LEADERS = text("""
SELECT p.snapshot_ts, p.partition, p.leader, p.high_watermark, c.committed_offset
FROM raw.partition_offsets p
LEFT JOIN raw.committed_offsets c
  ON c.cluster = p.cluster AND c.snapshot_ts = p.snapshot_ts AND c.group_id = :g
 AND c.topic = p.topic AND c.partition = p.partition
WHERE p.cluster = :c AND p.topic = :t ORDER BY p.snapshot_ts, p.partition
""")


def test_a_partition_gone_offline_behind_its_consumer_names_its_broker(
        kafka3: KafkaCluster, postgres: Any, warehouse_engine: Any, spark: Any,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28's "partition leader moved, or a broker down": a consumer slower than
    production (records waiting on every partition) reads a topic whose partition 2 lives on
    one broker alone (replication factor 1); that broker stops (a controlled shutdown: the
    controller takes its leaderships at once, and partition 2 has no replica to go to). From
    then on nothing can be read from partition 2, nor its high watermark: its committed offset
    freezes with records waiting. The status keeps the last high watermark read, so the
    partition STALLs after the status rules' 60 s ``min_stop_s``, and the FIRING names the
    offline partition and its broker first, not a poison record (one partition frozen while
    the member's others advance looks like one).

    Issue 41's "a partial snapshot never resolves a lag incident", on the same run: the
    group's lag fires (``lag_records_high`` at 1 record) while it is healthy and behind. Once
    partition 2's high watermark cannot be read, the group's lag is unknown (the sum of
    partitions 0 and 1 is only a lower bound): the lag incident stays firing, unknown with
    the reason, and never resolves (``keep_firing_for: 0s``: one evaluation that took the
    partial sum as the lag, below the threshold, would resolve it)."""
    bootstrap = kafka3.bootstrap
    cluster, group, topic = unique("leader3"), unique("billing"), unique("invoices")
    webhook, loop = _watching(cluster, bootstrap, postgres, spark, tmp_path, monkeypatch,
                              LAG_FIRES_AT_ONE_RECORD)
    metadata = admin(bootstrap)
    producer = Producing(bootstrap, topic, 3)
    member: subprocess.Popen[str] | None = None
    stopped: int | None = None
    began = time.monotonic()

    def phase(name: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {name}", flush=True)

    lag_states: list[list[tuple[str, str | None]]] = []  # the lag incidents after each pass

    def watched() -> bool:
        """A pass, and what it saw of the topic's partitions: the group FIRING?"""
        loop.once()
        with warehouse_engine.connect() as conn:
            rows = conn.execute(_WATCHED, {"c": cluster, "g": group, "t": topic,
                                           "at": loop.last}).fetchall()
            lag_incidents = conn.execute(_INCIDENTS, {"c": cluster, "g": group,
                                                      "rule": "lag_records_high"}).fetchall()
        lag_states.append([(i.state, i.why) for i in lag_incidents])
        print(f"  lag incident: {lag_states[-1]}", flush=True)
        print(f"  [{time.monotonic() - began:6.1f} s] " + "; ".join(
            f"p{r.partition} leader {r.leader} hw {r.high_watermark} committed"
            f" {r.committed_offset} {r.status} lag {r.status_lag}"
            + (f" ({r.reason})" if r.status not in (None, "OK") else "")
            for r in rows) + ("" if not rows or rows[0].complete else " [partial]"), flush=True)
        return ("firing", "group_err") in _webhook_incidents(webhook, group)

    try:
        phase("1. a topic whose partition 2 lives on one broker, not the group's coordinator")
        wait_until(lambda: _find_coordinator(bootstrap)
                   and len(_offsets_topic(metadata)) == OFFSETS_PARTITIONS
                   and _coordinator(metadata, group) > 0, 60, "the group's coordinator")
        coordinator = _coordinator(metadata, group)
        victim = next(n for n in kafka3.node_ids() if n != coordinator)
        others = [n for n in kafka3.node_ids() if n != victim]
        _create_topic_on(bootstrap, topic, [[others[0]], [others[1]], [victim]])
        producer.start()
        # About 10 records a second produced, about 7 read: records wait on every partition.
        # Its fetch buffer holds a record or two, as a consumer further behind than its
        # buffer is (librdkafka's default prefetches more than this test's lag: the member
        # would go on processing it after the broker is gone, to the last record there).
        member = _member(bootstrap, group, topic, "per_record_s=0.15",
                         "queued.min.messages=1", "queued.max.messages.kbytes=1",
                         "fetch.message.max.bytes=1")
        assert member.stdout is not None
        line = member.stdout.readline()
        assert line.startswith("ASSIGNED"), line
        wait_until(lambda: _committed(bootstrap, group), 30, "the consumer's first commit")
        healthy_until = time.monotonic() + 45  # a commit rhythm for the status rules to know
        while time.monotonic() < healthy_until or len(lag_states) < 3:  # (passes slow at times)
            assert not watched(), webhook.texts
        # Behind on every partition: its lag fired, on a complete snapshot.
        assert _webhook_incidents(webhook, group) == [("firing", "lag_records_high")], \
            webhook.texts

        phase(f"2. broker {victim}, partition 2's only replica, stops")
        kafka3.stop_node(victim)
        stopped = victim
        before_stop = len(lag_states)
        wait_until(watched, 240, "the group's FIRING on the webhook")
        # After every pass from the stop on, the lag incident was the one firing (never
        # resolved, however many passes the STALL took).
        assert all(len(states) == 1 and states[0][0] == "firing"
                   for states in lag_states[before_stop:]), lag_states

        phase("3. assertions")
        with warehouse_engine.connect() as conn:
            rows = conn.execute(_LEADERS, {"c": cluster, "g": group, "t": topic}).fetchall()
        for row in rows:
            print(f"  {row}")
        texts = [t for t in webhook.texts if group in t]
        print("\n".join(texts), flush=True)
        # The lag's FIRING, then the STALL's; no RESOLVED of the lag on a partial snapshot.
        assert _webhook_incidents(webhook, group) == [("firing", "lag_records_high"),
                                                      ("firing", "group_err")], texts
        fired = [t for t in texts if "STALLED" in t]
        assert fired[0].startswith(f"[FIRING] cluster {cluster}, group {group}: STALLED"), fired
        # The snapshots saw the leader go: broker `victim`, then none.
        offline = [r for r in rows if r.partition == 2 and r.leader == -1]
        assert offline and all(r.high_watermark is None for r in offline), rows
        assert {r.leader for r in rows if r.partition == 2 and r.snapshot_ts
                < offline[0].snapshot_ts} == {victim}, rows
        assert "high watermark not read at this snapshot" in fired[0], fired
        assert (f"Likely cause: a partition without a leader (its broker down): {topic}[2] (led"
                f" by broker {victim} before;") in fired[0], fired
        assert f"broker {victim} down and no in-sync replica to take over" in fired[0], fired
        assert "cause: stuck on a record" not in fired[0] \
            and "possible: stuck on a record" not in fired[0], fired
        # Every snapshot since partition 2 went offline gave the group an unknown lag, its
        # partitions 0 and 1's sum kept apart as a lower bound; and the lag incident is the
        # one of the healthy phase, firing still, unknown for that reason.
        with warehouse_engine.connect() as conn:
            lags = conn.execute(_GROUP_LAG, {"c": cluster, "g": group,
                                             "since": offline[0].snapshot_ts}).fetchall()
            incidents = conn.execute(_INCIDENTS, {"c": cluster, "g": group,
                                                  "rule": "lag_records_high"}).fetchall()
        print(lags, incidents, flush=True)
        assert lags and all(r.lag is None and r.lag_unknown_partitions == 1
                            and r.lag_lower_bound > 0 for r in lags), lags
        [lag_incident] = incidents
        assert lag_incident.state == "firing", incidents
        assert lag_incident.why.startswith("lag of 1 partition(s) unknown (high watermark or "
                                           "log start not read"), incidents
        phase("done")
    finally:
        _clean_up(kafka3, stopped, producer, member)
        webhook.stop()


# The group's lag fires as soon as it is behind (1 record), on the test's fast clock.
LAG_FIRES_AT_ONE_RECORD = """
rules:
  - {name: lag_records_high, threshold: 1, for: 0s}
"""

_GROUP_LAG = text("""
SELECT snapshot_ts, lag, lag_lower_bound, lag_unknown_partitions FROM mart.group_lag
WHERE cluster = :c AND group_id = :g AND snapshot_ts >= :since ORDER BY snapshot_ts
""")


def _reassign(cluster: KafkaCluster, partition: int, replicas: list[int], tmp_path: Path) -> None:
    """Moves ``__consumer_offsets`` partition ``partition`` onto ``replicas`` (Kafka's own
    kafka-reassign-partitions tool), and waits until the metadata shows it there."""
    plan = tmp_path / f"reassign-{partition}-{'-'.join(map(str, replicas))}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "__consumer_offsets", "partition": partition, "replicas": replicas}]}))
    done = subprocess.run(
        [require_java(), "-cp", classpath(kafka_libs(cluster.version)),
         "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
         "--bootstrap-server", cluster.bootstrap, "--reassignment-json-file", str(plan),
         "--execute"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    metadata = admin(cluster.bootstrap)
    wait_until(lambda: (part := metadata.list_topics(timeout=10).topics["__consumer_offsets"]
                        .partitions[partition]).replicas == replicas
               and part.leader == replicas[0], 60,
               f"__consumer_offsets-{partition} on brokers {replicas}")


def test_a_group_whose_coordinator_has_no_replica_left_is_named_with_its_broker(
        kafka3: KafkaCluster, postgres: Any, warehouse_engine: Any, spark: Any,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28's "a coordinator move, or its broker down", where it stops a group: the
    group's ``__consumer_offsets`` partition lives on one broker alone (reassigned there: a
    topic created with replication factor 1, or its other replicas out of sync), and that
    broker stops. Nothing can take the partition over, so the group has no coordinator: it
    cannot commit, and its member stops consuming when its session expires (librdkafka's own
    session check). Once the controller has the broker out, no broker lists the group and no
    request fails: before this test's fix a snapshot was complete and missed the group, and
    two such snapshots took it as deleted, so nothing fired. Now every snapshot names the
    offsets partition without a leader, and the group fires COORDINATOR DOWN with the broker
    as its cause; it resolves once the broker is back and the group commits again."""
    bootstrap = kafka3.bootstrap
    cluster, group = unique("coordless"), unique("ledger")
    topic, idle = unique("entries"), unique("idle")
    webhook, loop = _watching(cluster, bootstrap, postgres, spark, tmp_path, monkeypatch)
    metadata = admin(bootstrap)
    producer = Producing(bootstrap, topic, 3)
    member: subprocess.Popen[str] | None = None
    stopped: int | None = None
    moved: tuple[int, list[int]] | None = None
    began = time.monotonic()

    def phase(name: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {name}", flush=True)

    def watched() -> list[tuple[str, str]]:
        """A pass; what the webhook heard of the group since the test began."""
        loop.once()
        with warehouse_engine.connect() as conn:
            seen = conn.execute(_SEEN, {"c": cluster, "g": group, "at": loop.last}
                                ).mappings().one()
        print(f"  [{time.monotonic() - began:6.1f} s] complete {seen['complete']}, errors "
              f"{seen['errors'] or '-'}, listed {seen['listed']} (coordinator "
              f"{seen['coordinator_id']}, {seen['member_count']} members), judged "
              f"{seen['judged_status']}", flush=True)
        return _webhook_incidents(webhook, group)

    try:
        phase("1. the group's offsets partition on one broker alone; witnesses on the others")
        offsets: dict[int, tuple[int, int]] = wait_until(
            lambda: _find_coordinator(bootstrap) and (now := _offsets_topic(metadata))
            and len(now) == OFFSETS_PARTITIONS
            and all(leader == preferred for leader, preferred in now.values()) and now, 60,
            "every __consumer_offsets partition led by its preferred replica")
        partition = offsets_partition_for(group, OFFSETS_PARTITIONS)
        victim = _preferred(offsets, group)
        others = [n for n in kafka3.node_ids() if n != victim]
        replicas = list(metadata.list_topics(timeout=10).topics["__consumer_offsets"]
                        .partitions[partition].replicas)
        _reassign(kafka3, partition, [victim], tmp_path)
        moved = (partition, replicas)
        _create_topic_on(bootstrap, topic, [[others[0], others[1]], [others[1], others[0]],
                                            [others[0], others[1]]])
        _witnesses(bootstrap, offsets, others, victim, idle)
        producer.start()
        member = _member(bootstrap, group, topic)
        assert member.stdout is not None
        line = member.stdout.readline()
        assert line.startswith("ASSIGNED"), line
        wait_until(lambda: _committed(bootstrap, group), 30, "the consumer's first commit")
        healthy_until = time.monotonic() + 20  # a commit rhythm for the status rules to know
        while time.monotonic() < healthy_until:
            assert watched() == [], webhook.texts

        phase(f"2. broker {victim}, the only replica of __consumer_offsets-{partition}, stops")
        kafka3.stop_node(victim)
        stopped = victim
        wait_until(watched, 180, "the group's FIRING on the webhook")
        print("\n".join(t for t in webhook.texts if group in t), flush=True)
        assert _webhook_incidents(webhook, group) == [("firing", "group_err")], webhook.texts
        # (The JSON, not the text: under load another incident, collector_stale, can share
        # the message, whose text then gives each incident a line.)
        [fired] = _webhook_fields(webhook, group)
        assert fired["summary"].startswith("COORDINATOR DOWN"), fired
        assert fired["details"].startswith(f"Its offsets partition, __consumer_offsets-"
                                           f"{partition}, has had no leader since"), fired
        cause = fired["causes"][0]
        assert cause["kind"] == "coordinator_down", fired["causes"]
        assert cause["evidence"].startswith(
            f"__consumer_offsets partition {partition} has no leader (its replica: broker"
            f" {victim}, none in sync and up), since"), cause
        assert f"broker {victim} coordinated it at its last listing" in cause["evidence"]
        with warehouse_engine.connect() as conn:
            seen = conn.execute(_SEEN, {"c": cluster, "g": group, "at": loop.last}
                                ).mappings().one()
        assert not seen["complete"] and "list_groups:COORDINATOR_NOT_AVAILABLE" in \
            seen["errors"] and not seen["listed"], seen

        phase("2. the cluster's snapshots stay incomplete, and its alert says what they miss")

        def incomplete() -> list[dict[str, Any]]:
            watched()
            return [i for body in list(webhook.bodies) for i in body.get("incidents", [])
                    if i.get("rule") == "snapshot_incomplete" and i.get("cluster") == cluster]
        [cluster_alert] = wait_until(incomplete, 120, "snapshot_incomplete's FIRING")
        print(cluster_alert["details"], flush=True)
        assert (f"could not read: list_groups COORDINATOR_NOT_AVAILABLE x1 (e.g."
                f" __consumer_offsets partition {partition} has no leader (its replica: broker"
                f" {victim}, none in sync and up)") in cluster_alert["details"], cluster_alert

        phase(f"3. broker {victim} back: the group commits again and resolves")
        kafka3.start_node(victim)
        kafka3.wait_ready()
        stopped = None
        wait_until(lambda: ("resolved", "group_err") in watched(), 180,
                   "the group's RESOLVED on the webhook")
        assert _webhook_incidents(webhook, group) == [("firing", "group_err"),
                                                      ("resolved", "group_err")], webhook.texts
        phase("done")
    finally:
        _clean_up(kafka3, stopped, producer, member)
        if moved is not None:  # and their groups' coordinators replicated as before
            _reassign(kafka3, moved[0], moved[1], tmp_path)
        webhook.stop()
