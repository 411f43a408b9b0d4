"""Share groups (KIP-932) and streams groups (KIP-1071) in the snapshot, against Kafka's own
tools on real members: console share consumers and two instances of Kafka's WordCountDemo on
the streams protocol. One setup for the module; every test reads it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import unique
from kafkautil import (
    JAVA_CLASSPATH,
    create_topic,
    create_word_count_topics,
    kinds_collector,
    kinds_snapshot,
    produce_counts,
    tool_rows,
    wait_until,
)

from groupscope.collect.collector import Collector, CollectorSettings
from groupscope.contract.model import Group, GroupType, Snapshot, TaskRole
from groupscope.kafka.java_admin import JavaAdmin
from groupscope.land.snapshots import land
from groupscope.quality import check_landed
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.kinds import (
    SHARE_GROUP_COMMAND,
    STREAMS_GROUP_COMMAND,
    WORD_COUNT_INPUT,
    JavaProcesses,
    run_tool,
    share_consumer,
    streams_instance,
)

pytestmark = pytest.mark.integration

# Quotes, unicode, and the longest group id a topic-like name may have.
HOSTILE = ("q'\"uote ünï©ødé 队列 " + "x" * 249)[:249]


@dataclass
class Setup:
    bootstrap: str
    share_busy: str  # two members, consuming everything
    share_stopped: str  # its one member took 5 records and left: a start offset and a lag
    share_hostile: str
    streams_app: str  # two WordCountDemo instances
    topic: str


def _describe_share(bootstrap: str, group: str, *options: str) -> list[list[str]]:
    return tool_rows(run_tool(SHARE_GROUP_COMMAND, "--bootstrap-server", bootstrap,
                              "--describe", "--group", group, *options), group)


def _describe_streams(bootstrap: str, group: str, *options: str) -> list[list[str]]:
    return tool_rows(run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap,
                              "--describe", "--group", group, *options), group)


@pytest.fixture(scope="module")
def setup(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    bootstrap = kafka.bootstrap
    logs = tmp_path_factory.mktemp("kinds")
    procs = JavaProcesses(logs)
    topic = unique("queue")
    create_topic(bootstrap, topic, 2)
    create_word_count_topics(bootstrap)
    busy, stopped, app = unique("share-busy"), unique("share-stopped"), unique("wordcount")
    _read_from_the_start(bootstrap, [busy, stopped, HOSTILE])
    produce_counts(bootstrap, topic, [12, 9])
    produce_counts(bootstrap, WORD_COUNT_INPUT, [3, 2])
    try:
        stopped_member = share_consumer(procs, bootstrap, topic, stopped, "stopped",
                                        max_messages=5)
        share_consumer(procs, bootstrap, topic, busy, "busy-1")
        share_consumer(procs, bootstrap, topic, busy, "busy-2")
        share_consumer(procs, bootstrap, topic, HOSTILE, "hostile")
        for i in (1, 2):
            streams_instance(procs, bootstrap, app, f"streams-{i}", logs / f"state-{i}")
        stopped_member.wait(60)
        # Quiet: the busy group's two members hold a partition each and acknowledged all 21
        # records; the streams app is Stable, both instances own tasks, and it committed the
        # end of every partition it reads. (Waited for on groupscope's own snapshots, which
        # cost no JVM start each; the tests compare them with Kafka's tools.)
        wait_until(lambda: _quiet(kinds_snapshot(bootstrap), busy, app), 90,
                   "the share consumers and the streams app to settle")
        yield Setup(bootstrap, busy, stopped, HOSTILE, app, topic)
    finally:
        procs.stop_all()


def _read_from_the_start(bootstrap: str, groups: list[str]) -> None:
    """``share.auto.offset.reset=earliest`` for share groups (kafka-configs.sh --entity-type
    groups), in one IncrementalAlterConfigs through the Java Admin client: one JVM start
    less per group than the tool."""
    import jpype

    java = JavaAdmin.open({"bootstrap.servers": bootstrap}, JAVA_CLASSPATH, 15)
    try:
        resource = jpype.JClass("org.apache.kafka.common.config.ConfigResource")
        op = jpype.JClass("org.apache.kafka.clients.admin.AlterConfigOp")
        entry = jpype.JClass("org.apache.kafka.clients.admin.ConfigEntry")
        changes = jpype.JClass("java.util.HashMap")()
        for group in groups:
            changes.put(resource(resource.Type.GROUP, group), jpype.JClass("java.util.List").of(
                [op(entry("share.auto.offset.reset", "earliest"), op.OpType.SET)]))
        java.admin.incrementalAlterConfigs(changes).all().get()
    finally:
        java.close()


def _quiet(snap: Snapshot, busy: str, app: str) -> bool:
    groups = {g.group_id: g for g in snap.groups}
    share, streams = groups.get(busy), groups.get(app)
    if share is None or streams is None:
        return False
    hw = {(p.topic, p.partition): p.high_watermark for p in snap.partitions}
    inputs = {o.partition: o.offset for o in streams.offsets if o.topic == WORD_COUNT_INPUT}
    return (len(share.members) == 2 and all(m.assignment for m in share.members)
            and len(share.share_partitions) == 2
            and all(p.lag == 0 for p in share.share_partitions)
            and streams.state == "Stable" and len(streams.members) == 2
            and all(any(not t.target for t in m.tasks) for m in streams.members)
            and inputs == {0: 3, 1: 2}
            and all(o.offset == hw.get((o.topic, o.partition)) for o in streams.offsets))


@pytest.fixture(scope="module")
def snap(setup: Setup) -> Snapshot:
    return kinds_snapshot(setup.bootstrap)


def _group(snapshot: Snapshot, group_id: str) -> Group:
    return next(g for g in snapshot.groups if g.group_id == group_id)


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def test_share_groups_equal_kafka_share_groups_describe(setup: Setup, snap: Snapshot) -> None:
    assert snap.complete, snap.errors
    for group_id in (setup.share_busy, setup.share_stopped):
        group = _group(snap, group_id)
        assert group.group_type is GroupType.SHARE and group.protocol_type == "share"
        tool = sorted((r[1], int(r[2]), r[3], r[4])
                      for r in _describe_share(setup.bootstrap, group_id))
        ours = sorted((p.topic, p.partition, _dash(p.start_offset), _dash(p.lag))
                      for p in group.share_partitions)
        assert ours == tool
    stopped = _group(snap, setup.share_stopped)
    # It took 5 records and left: records are still to be delivered.
    assert sum(p.lag or 0 for p in stopped.share_partitions) > 0
    assert any(p.start_offset for p in stopped.share_partitions)
    assert stopped.members == () and stopped.state == "Empty"


def test_share_members_and_state_equal_the_tool(setup: Setup, snap: Snapshot) -> None:
    group = _group(snap, setup.share_busy)
    rows = _describe_share(setup.bootstrap, setup.share_busy, "--members", "--verbose")
    # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS MEMBER-EPOCH ASSIGNMENT
    tool = sorted((r[1], r[2], r[3], int(r[5]), _assignment(r[6])) for r in rows)
    ours = sorted((m.member_id, m.host, m.client_id, m.member_epoch,
                   sorted((tp.topic, tp.partition) for tp in m.assignment))
                  for m in group.members)
    assert ours == tool and len(ours) == 2
    state = _describe_share(setup.bootstrap, setup.share_busy, "--state", "--verbose")[0]
    # GROUP COORDINATOR (ID) STATE GROUP-EPOCH ASSIGNMENT-EPOCH #MEMBERS
    assert (group.state, group.group_epoch, group.assignment_epoch, len(group.members)) == (
        state[-4], int(state[-3]), int(state[-2]), int(state[-1]))
    assert f"({group.coordinator_id})" in " ".join(state)


def _assignment(text: str) -> list[tuple[str, int]]:
    found = []
    for chunk in filter(None, re.split(r"[;]", text)):
        topic, _, partitions = chunk.rpartition(":")
        found += [(topic, int(p)) for p in partitions.split(",")]
    return sorted(found)


def _tasks(text: str) -> dict[str, list[tuple[str, int]]]:
    """``ACTIVE: 0:[1]; 1:[1]; TARGET-ACTIVE: ...`` -> {"ACTIVE": [("0", 1), ("1", 1)], ...}"""
    found: dict[str, list[tuple[str, int]]] = {}
    for role, body in re.findall(r"([A-Z-]+):((?:\s*[^:\s]+:\[[^\]]*\];)*)", text):
        found[role] = sorted((sub, int(p)) for sub, parts in re.findall(r"(\S+?):\[([^\]]*)\]",
                                                                       body)
                             for p in parts.split(",") if p.strip())
    return found


def test_streams_group_equals_kafka_streams_groups_describe(setup: Setup,
                                                            snap: Snapshot) -> None:
    group = _group(snap, setup.streams_app)
    assert group.group_type is GroupType.STREAMS
    state = _describe_streams(setup.bootstrap, setup.streams_app, "--state", "--verbose")[0]
    assert group.state == "Stable" and "Stable" in state
    rows = _describe_streams(setup.bootstrap, setup.streams_app, "--members", "--verbose")
    # GROUP TARGET-ASSIGNMENT-EPOCH TOPOLOGY-EPOCH MEMBER MEMBER-PROTOCOL MEMBER-EPOCH
    # PROCESS CLIENT-ID ASSIGNMENTS...
    tool = {}
    for r in rows:
        tasks = _tasks(" ".join(r[8:]))
        tool[r[3]] = (int(r[1]), int(r[2]), int(r[5]), r[6], r[7],
                      tasks.get("ACTIVE", []), tasks.get("TARGET-ACTIVE", []))
    ours = {}
    for m in group.members:
        def of(target: bool, m: Any = m) -> list[tuple[str, int]]:
            return sorted((t.subtopology, t.partition) for t in m.tasks
                          if t.role is TaskRole.ACTIVE and t.target is target)
        ours[m.member_id] = (group.assignment_epoch, group.topology_epoch, m.member_epoch,
                             m.process_id, m.client_id, of(False), of(True))
    assert ours == tool and len(ours) == 2
    # Every task of the topology has one active owner: subtopology x partition.
    active = sorted(t for m in group.members for t in m.tasks
                    if t.role is TaskRole.ACTIVE and not t.target)
    assert len(active) == len(group.subtopologies) * 2 == 4
    sources = {s.subtopology_id: s.source_topics for s in group.subtopologies}
    assert WORD_COUNT_INPUT in sources["0"]
    repartition = [t for s in group.subtopologies for t in s.repartition_source_topics]
    assert repartition and all(t.startswith(setup.streams_app) for t in repartition)


def test_streams_offsets_and_lag_equal_the_tool(setup: Setup) -> None:
    """A running Streams app may still commit: the tool is read before and after a fresh
    snapshot, and the snapshot is compared with the tool where both readings agree (up to
    three tries; never agreeing fails)."""
    for _ in range(3):
        before = _streams_offsets_by_tool(setup)
        snap = kinds_snapshot(setup.bootstrap)
        if _streams_offsets_by_tool(setup) == before:
            break
    else:
        pytest.fail("the streams group's offsets kept moving")
    group = _group(snap, setup.streams_app)
    hw = {(p.topic, p.partition): p.high_watermark for p in snap.partitions}
    ours = {(o.topic, o.partition): (_dash(o.offset), _dash(hw[(o.topic, o.partition)] - o.offset))
            for o in group.offsets if o.offset is not None}
    assert ours == before
    assert {t for t, _ in before} >= {WORD_COUNT_INPUT}


def _streams_offsets_by_tool(setup: Setup) -> dict[tuple[str, int], tuple[str, str]]:
    rows = _describe_streams(setup.bootstrap, setup.streams_app, "--verbose")
    # GROUP TOPIC PARTITION CURRENT-OFFSET LEADER-EPOCH LOG-END-OFFSET OFFSET-LAG
    return {(r[1], int(r[2])): (r[3], r[6]) for r in rows if r[3] != "-"}


def test_hostile_names_round_trip_through_the_landing_zone(setup: Setup, snap: Snapshot,
                                                           tmp_path: Path) -> None:
    group = _group(snap, setup.share_hostile)
    assert group.group_type is GroupType.SHARE and len(setup.share_hostile) == 249
    assert len(group.members) == 1 and group.share_partitions
    landed = land(snap, tmp_path)
    gate = check_landed(landed)
    assert gate.success, gate.summary()
    tables = landed.read()
    assert setup.share_hostile in tables["consumer_groups"].column("group_id").to_pylist()
    share_rows = [r for r in tables["share_partition_offsets"].to_pylist()
                  if r["group_id"] == setup.share_hostile]
    assert sorted((r["topic"], r["partition"], r["start_offset"], r["lag"])
                  for r in share_rows) == sorted(
        (p.topic, p.partition, p.start_offset, p.lag) for p in group.share_partitions)
    tasks = pq.read_table(landed.path("streams_member_tasks")).to_pylist()
    assert {r["group_id"] for r in tasks} >= {setup.streams_app}


def test_never_makes_no_java_call_and_auto_makes_one_where_the_kinds_are(setup: Setup) -> None:
    """"never" makes no Java Admin call and lists no share or streams group; "auto" on this
    cluster, whose classic view hints at the new kinds, makes one. ("auto" without a hint
    asking nothing is the collector's unit test; Kafka 3.9's cluster, below, is asked and
    answers with a note.)"""
    never = kinds_collector(setup.bootstrap, group_kinds="never")
    without = never.snapshot(datetime.now(UTC))
    assert "Java Admin (share, streams groups)" not in never.requests
    kinds = {GroupType.SHARE, GroupType.STREAMS}
    assert not [g for g in without.groups if g.group_type in kinds]
    auto = kinds_collector(setup.bootstrap)
    auto.snapshot(datetime.now(UTC))
    assert auto.requests["Java Admin (share, streams groups)"] == 1


def test_the_warehouse_loads_the_new_kinds(setup: Setup, snap: Snapshot, tmp_path: Path,
                                          warehouse_engine: Any) -> None:
    from sqlalchemy import text

    from groupscope.warehouse import load_landed

    load_landed(warehouse_engine, land(snap, tmp_path))
    params = {"ts": snap.snapshot_ts, "cluster": snap.cluster}
    with warehouse_engine.connect() as conn:
        kinds = dict(conn.execute(text(
            "SELECT group_id, group_type FROM raw.consumer_groups "
            "WHERE cluster = :cluster AND snapshot_ts = :ts"), params).all())
        lag = conn.execute(text(
            "SELECT sum(lag) FROM raw.share_partition_offsets "
            "WHERE cluster = :cluster AND snapshot_ts = :ts AND group_id = :g"),
            {**params, "g": setup.share_stopped}).scalar()
        tasks = conn.execute(text(
            "SELECT count(*) FROM raw.streams_member_tasks WHERE cluster = :cluster "
            "AND snapshot_ts = :ts AND group_id = :g AND kind = 'current'"),
            {**params, "g": setup.streams_app}).scalar()
        epochs = conn.execute(text(
            "SELECT topology_epoch FROM raw.group_epochs WHERE cluster = :cluster "
            "AND snapshot_ts = :ts AND group_id = :g"), {**params, "g": setup.streams_app}
        ).scalar()
    assert (kinds[setup.share_hostile], kinds[setup.streams_app]) == ("share", "streams")
    stopped = _group(snap, setup.share_stopped)
    assert lag == sum(p.lag or 0 for p in stopped.share_partitions)
    assert tasks == 4 and epochs == _group(snap, setup.streams_app).topology_epoch


def test_the_marts_gate_passes_a_share_group_without_members(
        setup: Setup, postgres: Any, warehouse_engine: Any, spark: Any, tmp_path: Path) -> None:
    """The stopped share group has start offsets and no member: the lag mart has its rows, and
    the marts gate counts them as expected (it failed the ./run demo's killed queue)."""
    from sqlalchemy import text

    from groupscope import pipeline
    from groupscope.contract.cluster import ClusterConfig

    cluster, now = unique("kinds-gate"), datetime.now(UTC)
    pipeline.collect(ClusterConfig(cluster, {"bootstrap.servers": setup.bootstrap}), tmp_path,
                     now, 15.0, java_classpath=JAVA_CLASSPATH)
    pipeline.check_and_load(postgres.url, tmp_path, cluster, now)
    live = pipeline.live_analytics(spark, postgres.url, tmp_path, cluster, now)
    assert live["snapshots"] == 1, live
    with warehouse_engine.connect() as conn:
        members = conn.execute(text(
            "SELECT count(*), count(member_id) FROM mart.partition_lag "
            "WHERE cluster = :c AND group_id = :g"), {"c": cluster, "g": setup.share_stopped}
        ).one()
    assert tuple(members) == (2, 0)  # two partitions, no member owns them
    checked = pipeline.gate_marts(postgres.url, cluster, now - timedelta(minutes=1),
                                  datetime.now(UTC), datetime.now(UTC))
    assert checked["expectations"] > 0


@pytest.mark.kafka39
def test_kafka_39_skips_the_new_kinds_with_a_note(kafka39: KafkaCluster) -> None:
    topic, group = unique("old-kinds"), unique("simple39")
    create_topic(kafka39.bootstrap, topic, 1)
    produce_counts(kafka39.bootstrap, topic, [4])
    from kafkautil import commit_offsets

    commit_offsets(kafka39.bootstrap, group, {(topic, 0): 3})
    always = kinds_snapshot(kafka39.bootstrap, group_kinds="always")
    never = kinds_snapshot(kafka39.bootstrap, group_kinds="never")
    assert always.complete and not always.errors
    assert always.notes and "share and streams groups skipped" in always.notes[0]
    assert never.notes == ()
    strip = [(g.group_id, g.group_type, g.state, g.offsets) for g in always.groups]
    assert strip == [(g.group_id, g.group_type, g.state, g.offsets) for g in never.groups]
    assert group in [g.group_id for g in always.groups]


def test_classpath_unset_is_a_note_not_an_error(setup: Setup) -> None:
    from kafkautil import admin

    unset = Collector(admin(setup.bootstrap), "kinds", CollectorSettings(request_timeout_s=15),
                      java_admin=lambda: JavaAdmin.open({"bootstrap.servers": setup.bootstrap},
                                                        os.devnull, 15))
    result = unset.snapshot(datetime.now(UTC))
    assert result.complete
    assert any("no kafka-clients jar" in n for n in result.notes)


def test_the_scheduled_collect_reads_the_kinds_in_its_child_process(setup: Setup,
                                                                     tmp_path: Path) -> None:
    """What the snapshot DAG runs: the snapshot in a child process (collect/isolated.py), whose
    JVM ends with it; landed with the kinds' tables."""
    from groupscope import pipeline
    from groupscope.contract.cluster import ClusterConfig
    from groupscope.land.snapshots import landed_snapshots

    cluster = ClusterConfig("kinds-dag", {"bootstrap.servers": setup.bootstrap})
    summary = pipeline.collect(cluster, tmp_path, datetime.now(UTC), 15.0,
                               java_classpath=JAVA_CLASSPATH)
    assert summary["complete"] and summary["notes"] == []
    (landed,) = landed_snapshots(tmp_path)
    kinds = dict(zip(*(landed.read()["consumer_groups"].column(c).to_pylist()
                       for c in ("group_id", "group_type")), strict=True))
    assert (kinds[setup.share_busy], kinds[setup.streams_app]) == ("share", "streams")
    without = pipeline.collect(cluster, tmp_path / "unset", datetime.now(UTC), 15.0)
    assert without["complete"] and "no kafka-clients jar" in without["notes"][0]
