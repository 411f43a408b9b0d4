"""The demo workload against a real broker of this module's own: every group kind shows up as
what it is, churn is real (a graceful leave is seen at once, a SIGKILL only after the session
timeout), and the demo's timeline, compressed, tells its story through the real pipeline
(collect, gate, load, live marts, alerts): the scripted stop fires and resolves exactly once
per channel, the slow consumer's lag in seconds fires, the producer surge's lag and the stuck
rebalance fire naming their causes first (a producer surge; the member whose handler blocked),
and the healthy groups stay OK and silent."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import _cluster, _running
from kafkautil import take_snapshot, wait_until
from pipeline_loop import Loop

from groupscope.contract.model import GroupType, Snapshot, TopicPartition
from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import load_rules
from groupscope.simulate.whatif import what_if
from groupscope.warehouse import connect
from groupscope_dev.demo import (
    DEMO_GROUPS,
    HEALTHY,
    SLOW_GROUP,
    STOPPED_GROUP,
    STORM_GROUP,
    STUCK_GROUP,
    SURGE_GROUP,
    TOPICS,
    Demo,
    GroupSpec,
    demo_rules,
)
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION, KafkaCluster
from groupscope_dev.mailcatcher import MailCatcher
from groupscope_dev.runstatus import read_groups, render_groups
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration

CLUSTER = "demo"
SCALE = 0.25  # the ten-minute timeline in two and a half


@pytest.fixture(scope="module")
def kafka(services_dir: Path) -> Iterator[KafkaCluster]:
    """Its own broker: the alerts judge every group of the cluster, and only the demo's are
    here."""
    yield from _running(_cluster(services_dir, "demo", 1, DEFAULT_KAFKA_VERSION))


@pytest.fixture(scope="module")
def demo(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    workload = Demo(kafka.bootstrap, tmp_path_factory.mktemp("demo"), time_scale=SCALE)
    workload.start()
    yield workload
    workload.stop()


def _unsettled(snapshot: Snapshot) -> list[str]:
    """What still keeps the demo groups from their steady shape (empty: settled)."""
    groups = {g.group_id: g for g in snapshot.groups}
    waiting = []
    for spec in DEMO_GROUPS:
        g = groups.get(spec.group_id)
        if g is None:
            waiting.append(f"{spec.group_id}: not listed")
        elif spec.empty or spec.assign_only:
            if g.state != "Empty" or not g.offsets:
                waiting.append(f"{spec.group_id}: {g.state}, {len(g.offsets)} offsets")
        elif (g.state != "Stable" or len(g.members) != spec.members
              or sum(len(m.assignment) for m in g.members) != _partitions(spec)):
            owned = sum(len(m.assignment) for m in g.members)
            waiting.append(f"{spec.group_id}: {g.state}, {len(g.members)} members, "
                           f"{owned} partitions")
    return waiting


def _partitions(spec: GroupSpec) -> int:
    return sum(TOPICS[t] for t in spec.topics)


def test_every_demo_group_kind_appears_as_what_it_is(kafka: KafkaCluster, demo: Demo) -> None:
    last: list[Snapshot] = []

    def settled() -> bool:
        last[:] = [take_snapshot(kafka.bootstrap)]
        return not _unsettled(last[0])

    try:
        wait_until(settled, 90, "every demo group to settle")
    except AssertionError:
        raise AssertionError(f"unsettled: {_unsettled(last[0])}") from None
    snapshot = last[0]
    assert snapshot.complete, snapshot.errors
    groups = {g.group_id: g for g in snapshot.groups}
    for spec in DEMO_GROUPS:
        g = groups[spec.group_id]
        expected_partitions = sorted(
            TopicPartition(t, p) for t in spec.topics for p in range(TOPICS[t]))
        if spec.assign_only:
            assert (g.group_type, g.protocol_type, g.members) == (GroupType.CLASSIC, "", ())
            assert sorted(TopicPartition(o.topic, o.partition) for o in g.offsets) == \
                expected_partitions
            continue
        if spec.empty:
            assert g.state == "Empty" and g.members == () and g.protocol_type == "consumer"
            assert {o.topic for o in g.offsets} == set(spec.topics)
            continue
        assert g.group_type is (GroupType.CONSUMER if spec.protocol == "consumer"
                                else GroupType.CLASSIC)
        assert g.assignor == (spec.assignor or "uniform")
        owned = sorted(tp for m in g.members for tp in m.assignment)
        assert owned == expected_partitions, f"{spec.group_id}: each partition exactly once"
        counts = sorted(len(m.assignment) for m in g.members)
        assert counts[-1] - counts[0] <= _max_spread(spec), (spec.group_id, counts)
        assert {m.client_id for m in g.members} == {
            f"{spec.group_id}-{i}" for i in range(spec.members)}
        instance_ids = {m.instance_id for m in g.members}
        if spec.static:
            assert instance_ids == {spec.instance_id(i) for i in range(spec.members)}
        else:
            assert instance_ids == {None}
        if spec.protocol == "consumer":
            assert all(m.target_assignment == m.assignment for m in g.members)
            assert all(m.subscription is None for m in g.members)  # not exposed for KIP-848
        else:  # decoded from each member's classic-protocol metadata
            assert all(m.subscription == tuple(sorted(spec.topics)) for m in g.members)
        assert g.coordinator_id == g.expected_coordinator_id == 1
    # demo-range is skewed on purpose (7, 6 and 5 partitions): the what-if advice says so
    advice = what_if(groups["demo-range"], snapshot)
    assert advice is not None
    assert [r for r, _ in advice.recommendations if r in ("switch to roundrobin",
                                                          "switch to cooperative-sticky")], advice


def _max_spread(spec: GroupSpec) -> int:
    # range assigns per topic, so the first members can lead by one partition per topic
    return len(spec.topics) if spec.assignor == "range" else 1


def test_graceful_leave_is_immediate_and_a_crash_waits_for_the_session(
    kafka: KafkaCluster, demo: Demo
) -> None:
    spec = next(g for g in DEMO_GROUPS if g.churn)
    wait_until(lambda: _members(kafka, spec.group_id) == spec.members, 60, "the full group")
    alive = [p for p in demo.members[spec.group_id] if p.poll() is None]

    alive[-1].send_signal(signal.SIGTERM)  # close(): LeaveGroup
    wait_until(lambda: _members(kafka, spec.group_id) == spec.members - 1, 8,
               "the graceful leave to show")

    alive[0].kill()  # SIGKILL: no LeaveGroup
    alive[0].wait()
    killed_at = time.monotonic()
    assert _members(kafka, spec.group_id) == spec.members - 1  # still counted
    wait_until(lambda: _members(kafka, spec.group_id) == spec.members - 2, 30,
               "the session timeout to expire the crashed member")
    # the demo's classic session timeout is 6 s: gone no sooner than that, less a poll
    assert time.monotonic() - killed_at > 4

    demo.add_member(spec, 10)  # and a join
    wait_until(lambda: _members(kafka, spec.group_id) == spec.members - 1, 30, "the join")


def _members(kafka: KafkaCluster, group_id: str) -> int:
    g = next(g for g in take_snapshot(kafka.bootstrap).groups if g.group_id == group_id)
    return len(g.members)


def test_demo_log_dir_holds_member_logs(demo: Demo) -> None:
    logs = sorted(p.name for p in Path(demo.log_dir).glob("*.log"))
    assert "producer.log" in logs and "demo-range-0.log" in logs


def _notifications(texts: list[str], group_id: str, kind: str) -> list[str]:
    return [t for t in texts if f"[{kind}]" in t and group_id in t]


def test_the_compressed_timeline_fires_and_resolves_the_scripted_stop_only(
        kafka: KafkaCluster, demo: Demo, postgres: Any, spark: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What ./run shows in ten minutes, in two: the channels ./run configures (a webhook and
    e-mail), the demo's rules file at the same compression."""
    webhook, mail = WebhookCatcher(), MailCatcher(tmp_path / "mail")
    webhook.start()
    mail.start()
    monkeypatch.setenv(*mail.connection("groupscope_smtp", "oncall@localhost"))
    rules_file = tmp_path / "demo-rules.yaml"
    rules_file.write_text(demo_rules(SCALE, floor_s=20))  # passes take about 10 s
    rules = load_rules(rules_file)
    assert rules.keep_firing_for.total_seconds() == 30
    channels = build_channels(rules, fallback_webhook_url=webhook.url).channels  # as the live DAG
    assert sorted(channels) == ["email", "webhook"]  # Slack has no connection here
    loop = Loop(CLUSTER, kafka.bootstrap, postgres.url, tmp_path / "landing", spark, channels,
                rules)
    # (the churn test before this one left the storm group one member short: it churns anyway)
    wait_until(lambda: not [w for w in _unsettled(take_snapshot(kafka.bootstrap))
                            if not w.startswith(STORM_GROUP)], 90, "the demo groups to settle")
    loop.run(2)  # history before the first event
    texts: dict[str, list[str]] = {}

    def story_told() -> bool:
        for line in demo.advance():
            print(f"[{demo.elapsed():6.1f} s] {line}", flush=True)
        loop.once()
        texts.update(webhook=list(webhook.texts), email=[
            str(m.get_body(preferencelist=("plain", "html")).get_content())
            for m in mail.mails()])
        return all(_notifications(t, STOPPED_GROUP, "RESOLVED")
                   and _notifications(t, SLOW_GROUP, "FIRING")
                   and _notifications(t, SURGE_GROUP, "FIRING") for t in texts.values()) \
            and _firing(webhook, STUCK_GROUP, "rebalance_stuck") is not None

    try:
        demo.start_timeline()
        wait_until(story_told, 400, "the scripted stop to fire and resolve, the slow "
                   "consumer and the surge to fire, on every channel, and the stuck rebalance")
        loop.run(1)  # nothing more is owed for it
        with connect(loop_engine := _engine(postgres.url)) as conn:
            groups = {g.group_id: g for g in read_groups(conn, CLUSTER)}
        loop_engine.dispose()
    finally:
        webhook.stop()
        mail.stop()
    print(render_groups(list(groups.values())))
    for channel, sent in texts.items():
        assert len(_notifications(sent, STOPPED_GROUP, "FIRING")) == 1, (channel, sent)
        assert len(_notifications(sent, STOPPED_GROUP, "RESOLVED")) == 1, (channel, sent)
        assert _notifications(sent, SLOW_GROUP, "FIRING"), (channel, sent)
        for healthy in HEALTHY:
            assert not [t for t in sent if healthy in t], (channel, healthy, sent)
    # The surge and the stuck rebalance each name their cause first.
    for group in (SURGE_GROUP, STUCK_GROUP):
        print(json.dumps(_sent(webhook, group), indent=1, default=str))
    surge = _firing(webhook, SURGE_GROUP, "lag_records_high")
    assert surge is not None and surge["causes"] \
        and surge["causes"][0]["kind"] == "producer_surge", _sent(webhook, SURGE_GROUP)
    stuck = _firing(webhook, STUCK_GROUP, "rebalance_stuck")
    assert stuck is not None and stuck["causes"] \
        and stuck["causes"][0]["kind"] == "rebalance_waits", _sent(webhook, STUCK_GROUP)
    assert f"(client {STUCK_GROUP}-0," in stuck["causes"][0]["evidence"], stuck  # the blocked one
    stop = _notifications(texts["webhook"], STOPPED_GROUP, "FIRING")[0]
    assert f"group {STOPPED_GROUP}: STOPPED" in stop, stop  # alone or grouped with others
    # its Empty and lag incidents are held (inhibition), not sent along with it
    assert "Also firing" not in stop and "EMPTY while its lag grows" not in stop, stop
    # the status line on the real marts: the healthy groups OK, every figure of one snapshot
    for healthy in HEALTHY:
        assert groups[healthy].status == "OK", groups[healthy]
    assert len({g.snapshot_ts for g in groups.values()}) == 1
    assert groups["demo-empty"].empty_since is not None  # known, or "no member seen since"
    assert groups[STOPPED_GROUP].members == 3


def _firing(webhook: WebhookCatcher, group: str, rule: str) -> dict[str, Any] | None:
    """The group's first FIRING of ``rule``, as the webhook's JSON carries it (with causes)."""
    return next((i for body in list(webhook.bodies) for i in body.get("incidents", [])
                 if i.get("group") == group and i.get("rule") == rule
                 and i.get("notification") == "firing"), None)


def _sent(webhook: WebhookCatcher, group: str) -> list[dict[str, Any]]:
    """Every incident the webhook carried for the group, whole: what a failed assert shows."""
    return [i for body in list(webhook.bodies) for i in body.get("incidents", [])
            if i.get("group") == group]


def _engine(url: str) -> Any:
    from groupscope import warehouse

    return warehouse.engine_for(url)
