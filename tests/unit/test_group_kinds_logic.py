"""Share and streams groups, the pure parts: the mapping of librdkafka settings to the Java
client's, when the Java Admin round runs and what its failures become, and the flat tables.
The real-cluster parity is tests/integration/test_group_kinds.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from groupscope.collect.assemble import other_kinds_hinted
from groupscope.collect.collector import Collector, CollectorSettings
from groupscope.contract.cluster import ConfigError
from groupscope.contract.model import (
    CommittedOffset,
    Group,
    GroupType,
    Member,
    SharePartition,
    Snapshot,
    Stage,
    StreamsTask,
    Subtopology,
    TaskRole,
    TopicPartition,
)
from groupscope.contract.tables import KEYS, to_tables
from groupscope.kafka.adapter import ClassicGroup, ClusterMetadata
from groupscope.kafka.java_admin import (
    JavaKafkaError,
    KindDescription,
    KindListing,
    java_client_properties,
    resolve_classpath,
)

TS = datetime(2026, 11, 26, tzinfo=UTC)
BOOT = {"bootstrap.servers": "b:9092"}


@pytest.mark.parametrize(("given", "expected"), [
    ({}, {}),
    ({"security.protocol": "sasl_ssl", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
      "sasl.password": 'p"w\\'},
     {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                          'username="u" password="p\\"w\\\\";'}),
    ({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"},
     {"sasl.mechanism": "SCRAM-SHA-512",
      "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                          'username="u" password="p";'}),
    ({"ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none",
      "client.id": "gs", "socket.keepalive.enable": "true", "debug": "all"},
     {"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
      "ssl.endpoint.identification.algorithm": "", "client.id": "gs"}),
    ({"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "s", "ssl.key.password": "k"},
     {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
      "ssl.keystore.password": "s", "ssl.key.password": "k"}),
])
def test_librdkafka_settings_map_to_the_java_client(given: dict[str, str],
                                                    expected: dict[str, str]) -> None:
    assert java_client_properties({**BOOT, **given}) == {**BOOT, **expected}


def test_a_client_certificate_is_passed_as_pem_content(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY")
    props = java_client_properties({**BOOT, "ssl.certificate.location": str(tmp_path / "c.pem"),
                                    "ssl.key.location": str(tmp_path / "k.pem")})
    assert (props["ssl.keystore.type"], props["ssl.keystore.certificate.chain"],
            props["ssl.keystore.key"]) == ("PEM", "CERT", "KEY")


@pytest.mark.parametrize(("given", "named"), [
    ({"sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER"),
    ({"sasl.mechanism": "PLAIN"}, "needs sasl.username and sasl.password"),
    ({"enable.ssl.certificate.verification": "false"}, "enable.ssl.certificate.verification"),
    ({"ssl.certificate.pem": "CERT"}, "certificate and its key"),
])
def test_settings_without_a_java_equivalent_are_refused_by_name(given: dict[str, str],
                                                                named: str) -> None:
    with pytest.raises(ConfigError, match=named) as refused:
        java_client_properties({**BOOT, "sasl.password": "hunter2", **given})
    assert "hunter2" not in str(refused.value)


def test_the_classpath_needs_kafka_clients(tmp_path: Path) -> None:
    (tmp_path / "slf4j-api-1.7.36.jar").write_bytes(b"")
    with pytest.raises(ConfigError, match="no kafka-clients jar"):
        resolve_classpath(str(tmp_path))
    (tmp_path / "kafka-clients-4.3.1.jar").write_bytes(b"")
    assert [Path(j).name for j in resolve_classpath(str(tmp_path))] == [
        "kafka-clients-4.3.1.jar", "slf4j-api-1.7.36.jar"]
    assert len(resolve_classpath(str(tmp_path / "kafka-*.jar"))) == 1


def _seen(group_id: str, protocol_type: str | None) -> ClassicGroup:
    return ClassicGroup(group_id, None, "Dead", protocol_type, None, None, ())


def test_the_classic_view_hints_at_groups_the_consumer_listing_left_out() -> None:
    view = {"c": _seen("c", "consumer"), "q": _seen("q", ""), "connect": _seen("connect",
                                                                               "connect")}
    assert other_kinds_hinted(view, ["c", "q"]) is False
    assert other_kinds_hinted(view, ["c"]) is True  # q: a share or streams group
    assert other_kinds_hinted({}, []) is False


class ScriptedJava:
    def __init__(self, supported: set[GroupType], failing: frozenset[str] = frozenset()):
        self.supported, self.failing, self.closed, self.calls = supported, failing, False, []

    def supported_kinds(self) -> set[GroupType]:
        return self.supported

    def list_groups(self, kinds: list[GroupType]) -> list[KindListing]:
        self.calls.append("list")
        return [g for g in (KindListing("q", GroupType.SHARE, "Stable"),
                            KindListing("s", GroupType.STREAMS, "Stable"))
                if g.group_type in kinds]

    def _each(self, ids: list[str], value: Any) -> dict[str, Any]:
        return {g: JavaKafkaError("GROUP_ID_NOT_FOUND", "gone", False) if g in self.failing
                else value for g in ids}

    def describe_share_groups(self, ids: list[str]) -> dict[str, Any]:
        member = Member("m", "c", "h", None, (TopicPartition("t", 0),), member_epoch=3)
        return self._each(ids, KindDescription(GroupType.SHARE, "Stable", 1, 3, 3, (member,)))

    def share_group_offsets(self, ids: list[str]) -> dict[str, Any]:
        return self._each(ids, (SharePartition("t", 0, 10, 4, 0),))

    def describe_streams_groups(self, ids: list[str]) -> dict[str, Any]:
        return self._each(ids, KindDescription(GroupType.STREAMS, "NotReady", 1, 2, 2, (), 0,
                                               (Subtopology("0", ("t",)),)))

    def streams_group_offsets(self, ids: list[str]) -> dict[str, Any]:
        return self._each(ids, (CommittedOffset("t", 0, 7),))

    def close(self) -> None:
        self.closed = True


def _kinds(java: Any, hinted: bool = True, **settings: Any) -> tuple[Any, list[Any],
                                                                     list[str], Collector]:
    collector = Collector(object(), "c", CollectorSettings(**settings), java_admin=java)
    errors: list[Any] = []
    notes: list[str] = []
    metadata = ClusterMetadata(set(), {}, {}, {})
    return collector._other_kinds(hinted, metadata, errors, notes), errors, notes, collector


def test_no_hint_no_java_round() -> None:
    def never_called() -> Any:
        raise AssertionError("the Java Admin client was opened")

    assert _kinds(never_called, hinted=False)[:3] == ((), [], [])
    assert _kinds(never_called, hinted=True, group_kinds="never")[:3] == ((), [], [])


def test_both_kinds_are_read_and_the_client_closed() -> None:
    java = ScriptedJava({GroupType.SHARE, GroupType.STREAMS})
    groups, errors, notes, collector = _kinds(lambda: java)
    assert (errors, notes, java.closed) == ([], [], True)
    share, streams = groups
    assert (share.group_type, share.state, share.share_partitions[0].lag,
            share.members[0].member_epoch) == (GroupType.SHARE, "Stable", 4, 3)
    assert (streams.group_type, streams.state, streams.offsets[0].offset,
            streams.topology_epoch) == (GroupType.STREAMS, "NotReady", 7, 0)
    assert collector.requests["Java Admin (share, streams groups)"] == 1


def test_a_cluster_without_the_kinds_is_a_note_not_an_error() -> None:
    java = ScriptedJava(set())
    groups, errors, notes, _ = _kinds(lambda: java, group_kinds="always")
    assert (groups, errors, java.calls, java.closed) == ((), [], [], True)
    assert notes == ["share and streams groups skipped: the cluster does not support them "
                     "(no finalized share.version / streams.version feature; Kafka 4.1 or "
                     "newer has them)"]


def test_a_group_that_fails_is_an_error_and_the_others_stay() -> None:
    groups, errors, _, _ = _kinds(lambda: ScriptedJava({GroupType.SHARE, GroupType.STREAMS},
                                                       frozenset({"q"})))
    assert [(e.stage, e.code, e.group_id) for e in errors] == [
        (Stage.GROUP_KINDS, "GROUP_ID_NOT_FOUND", "q")] * 2
    share, streams = groups
    assert (share.described, share.state, share.share_partitions) == (False, "Stable", ())
    assert streams.described


def test_an_unconfigured_client_is_a_note_and_a_failing_one_an_error() -> None:
    def unconfigured() -> Any:
        raise ConfigError("no kafka-clients jar on the Java Admin classpath")

    def failing() -> Any:
        raise JavaKafkaError("SASL_AUTHENTICATION_FAILED", "Authentication failed", False)

    _, errors, notes, _ = _kinds(unconfigured)
    assert errors == [] and "no kafka-clients jar" in notes[0]
    _, errors, notes, _ = _kinds(failing)
    assert notes == [] and [(e.stage, e.code) for e in errors] == [
        (Stage.GROUP_KINDS, "SASL_AUTHENTICATION_FAILED")]


def test_each_kind_lands_what_only_it_has() -> None:
    tasks = (StreamsTask(TaskRole.ACTIVE, "0", 1), StreamsTask(TaskRole.STANDBY, "1", 0),
             StreamsTask(TaskRole.ACTIVE, "0", 1, target=True))
    streams = Group("s\"'ü", GroupType.STREAMS, "Assigning", "streams", None, 1, 1,
                    (Member("m", "c", "h", None, (), member_epoch=4, tasks=tasks,
                            process_id="p"),),
                    (CommittedOffset("t", 0, 5),), group_epoch=4, assignment_epoch=3,
                    topology_epoch=0,
                    subtopologies=(Subtopology("0", ("t",), ("r",)), Subtopology("1", (), (),
                                                                             ("r",), ("cl",))))
    share = Group("q", GroupType.SHARE, "Empty", "share", None, 1, 1, (), (),
                  group_epoch=2, assignment_epoch=2,
                  share_partitions=(SharePartition("t", 0, None, None),))
    snapshot = Snapshot("c", TS, (share, streams), (), (), notes=("a note",))
    tables = {name: table.to_pylist() for name, table in to_tables(snapshot).items()}
    assert [(r["group_id"], r["group_type"]) for r in tables["consumer_groups"]] == [
        ("q", "share"), ("s\"'ü", "streams")]
    assert [(r["start_offset"], r["lag"]) for r in tables["share_partition_offsets"]] == [
        (None, None)]
    assert sorted((r["kind"], r["role"], r["subtopology_id"], r["partition"])
                  for r in tables["streams_member_tasks"]) == [
        ("current", "active", "0", 1), ("current", "standby", "1", 0),
        ("target", "active", "0", 1)]
    assert sorted((r["subtopology_id"], r["role"], r["topic"])
                  for r in tables["streams_subtopology_topics"]) == [
        ("0", "repartition_sink", "r"), ("0", "source", "t"), ("1", "changelog", "cl"),
        ("1", "repartition_source", "r")]
    assert [(r["group_id"], r["topology_epoch"]) for r in tables["group_epochs"]] == [
        ("q", None), ("s\"'ü", 0)]
    assert [(r["member_id"], r["member_epoch"], r["process_id"])
            for r in tables["member_epochs"]] == [("m", 4, "p")]
    assert [r["note"] for r in tables["snapshot_notes"]] == ["a note"]
    for name, rows in tables.items():
        keys = [tuple(r[k] for k in KEYS[name]) for r in rows]
        assert len(keys) == len(set(keys)), name


def test_the_cli_report_shows_a_share_groups_lag_and_the_notes() -> None:
    from groupscope.serve.report import snapshot_json, snapshot_table

    member = Member("m", "c", "h", None, (TopicPartition("t", 0), TopicPartition("t", 1)))
    share = Group("queue", GroupType.SHARE, "Stable", "share", None, 1, 1, (member,), (),
                  share_partitions=(SharePartition("t", 0, 10, 4), SharePartition("t", 1, 3, 0)))
    snapshot = Snapshot("c", TS, (share,), (), (), notes=("streams groups skipped",))
    doc = snapshot_json(snapshot)
    assert doc["notes"] == ["streams groups skipped"]
    assert doc["groups"][0]["offsets"] == []  # a share group commits nothing
    table = snapshot_table(snapshot)
    assert "queue" in table and " 4 " in table and "t[0] 4" in table
    assert table.splitlines()[-1] == "  streams groups skipped"
