"""The __consumer_offsets decoder: real records captured from Kafka 3.9 and 4.x brokers, each
compared field by field with Kafka's own decoding (DumpLogSegments --offsets-decoder), plus
crafted edge cases for versions no current broker writes, nullable fields, empty arrays, tagged
fields, unknown record types and truncated bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from groupscope.contract.model import TopicPartition
from groupscope.offsets.decoder import (
    ClassicMember,
    ConsumerGroupMetadataValue,
    CurrentMemberAssignmentValue,
    GroupKey,
    GroupMetadataValue,
    MemberKey,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsDecodeError,
    PartitionMetadataValue,
    Record,
    RegexKey,
    RegexValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicIdPartitions,
    UnknownRecord,
    decode,
)

VECTORS = sorted((Path(__file__).parent.parent / "vectors").glob("offsets-*.json"))


def _vectors() -> list[Any]:
    out = []
    for path in VECTORS:
        data = json.loads(path.read_text())
        for r in data["records"]:
            name = f"{data['kafka_version']}-p{r['partition']}-o{r['offset']}"
            out.append(pytest.param(r, id=name))
    return out


def test_vectors_from_both_kafka_lines_are_present() -> None:
    versions = {json.loads(p.read_text())["kafka_version"].split(".")[0] for p in VECTORS}
    assert versions == {"3", "4"}


def _tps(parts: tuple[TopicIdPartitions, ...]) -> list[dict[str, Any]]:
    return [{"topicId": t.topic_id, "partitions": list(t.partitions)} for t in parts]


def _as_kafka_json(record: Record) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Our decoding in the shape DumpLogSegments prints (only the fields both sides have)."""
    k = record.key
    key: dict[str, Any]
    if isinstance(k, OffsetCommitKey):
        key = {"group": k.group_id, "topic": k.topic, "partition": k.partition}
    elif isinstance(k, GroupKey):
        key = {"group": k.group_id} if record.record_type == 2 else {"groupId": k.group_id}
    elif isinstance(k, MemberKey):
        key = {"groupId": k.group_id, "memberId": k.member_id}
    else:
        assert isinstance(k, RegexKey)
        key = {"groupId": k.group_id, "regularExpression": k.regex}
    v = record.value
    if v is None:
        return key, None
    value: dict[str, Any]
    if isinstance(v, OffsetCommitValue):
        epoch = -1 if v.leader_epoch is None else v.leader_epoch
        value = {"offset": v.offset, "leaderEpoch": epoch,
                 "metadata": v.metadata, "commitTimestamp": v.commit_ts}
        if v.expire_ts is not None:
            value["expireTimestamp"] = v.expire_ts
        if v.topic_id is not None:
            value["topicId"] = v.topic_id
    elif isinstance(v, GroupMetadataValue):
        value = {"protocolType": v.protocol_type, "generation": v.generation,
                 "protocol": v.protocol, "leader": v.leader,
                 "members": [_classic_member(m) for m in v.members]}
        if v.version >= 2:
            state_ts = v.current_state_ts
            value["currentStateTimestamp"] = -1 if state_ts is None else state_ts
    elif isinstance(v, ConsumerGroupMetadataValue):
        value = {"epoch": v.epoch}
        if v.metadata_hash is not None:
            value["metadataHash"] = v.metadata_hash
    elif isinstance(v, MemberMetadataValue):
        value = {"instanceId": v.instance_id, "rackId": v.rack_id, "clientId": v.client_id,
                 "clientHost": v.client_host, "subscribedTopicNames": list(v.subscribed_topics),
                 "subscribedTopicRegex": v.subscribed_regex,
                 "rebalanceTimeoutMs": v.rebalance_timeout_ms, "serverAssignor": v.server_assignor}
    elif isinstance(v, TargetAssignmentMetadataValue):
        value = {"assignmentEpoch": v.assignment_epoch}
        if v.assignment_ts is not None:
            value["assignmentTimestamp"] = v.assignment_ts
    elif isinstance(v, TargetAssignmentMemberValue):
        value = {"topicPartitions": _tps(v.partitions)}
    elif isinstance(v, CurrentMemberAssignmentValue):
        value = {"memberEpoch": v.member_epoch, "previousMemberEpoch": v.previous_member_epoch,
                 "state": v.state, "assignedPartitions": _tps(v.assigned),
                 "partitionsPendingRevocation": _tps(v.pending_revocation)}
    elif isinstance(v, RegexValue):
        value = {"topics": list(v.topics), "version": v.regex_version, "timestamp": v.timestamp}
    else:
        assert isinstance(v, PartitionMetadataValue)
        value = {"topics": [{"topicId": t.topic_id, "topicName": t.topic,
                             "numPartitions": t.partition_count} for t in v.topics]}
    return key, value


def _classic_member(m: ClassicMember) -> dict[str, Any]:
    out: dict[str, Any] = {"memberId": m.member_id, "groupInstanceId": m.instance_id,
                           "clientId": m.client_id, "clientHost": m.client_host,
                           "sessionTimeout": m.session_timeout_ms}
    if m.subscription is not None:
        out["subscription.topics"] = list(m.subscription.topics)
        out["subscription.ownedPartitions"] = sorted(
            (tp.topic, tp.partition) for tp in m.subscription.owned_partitions)
    if m.assignment is not None:
        out["assignment"] = sorted((tp.topic, tp.partition) for tp in m.assignment)
    return out


def _project(kafka: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Kafka's JSON reduced to the fields ours has, with embedded consumer-protocol structs
    flattened the way _classic_member flattens ours."""
    out = {}
    for name, theirs in kafka.items():
        if name == "members":
            out[name] = [_project_member(m, o) for m, o in zip(theirs, ours[name], strict=True)]
        elif name in ours:
            out[name] = [_strip_epochs(t) for t in theirs] if name in (
                "assignedPartitions", "partitionsPendingRevocation") else theirs
    return out


def _strip_epochs(tp: dict[str, Any]) -> dict[str, Any]:
    return {"topicId": tp["topicId"], "partitions": tp["partitions"]}


def _project_member(kafka: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    out = {k: kafka[k] for k in ("memberId", "groupInstanceId", "clientId", "clientHost",
                                 "sessionTimeout") if k in kafka}
    if "subscription.topics" in ours:
        out["subscription.topics"] = kafka["subscription"]["topics"]
        out["subscription.ownedPartitions"] = sorted(
            (t["topic"], p) for t in kafka["subscription"].get("ownedPartitions", [])
            for p in t["partitions"])
    if "assignment" in ours:
        out["assignment"] = sorted((t["topic"], p)
                                   for t in kafka["assignment"]["assignedPartitions"]
                                   for p in t["partitions"])
    return out


@pytest.mark.parametrize("vector", _vectors())
def test_real_record_decodes_as_kafka_decodes_it(vector: dict[str, Any]) -> None:
    key = bytes.fromhex(vector["key"])
    value = None if vector["value"] is None else bytes.fromhex(vector["value"])
    record = decode(key, value)
    assert isinstance(record, Record), record
    assert record.record_type == int(vector["kafka_key"]["type"])
    our_key, our_value = _as_kafka_json(record)
    assert our_key == vector["kafka_key"]["data"]
    if vector["kafka_value"] is None:
        assert our_value is None and record.is_tombstone
        return
    assert our_value is not None
    assert record.value is not None
    assert record.value.version == int(vector["kafka_value"]["version"])
    assert our_value == _project(vector["kafka_value"]["data"], our_value)
    # Nothing Kafka decoded is missing from ours, except fields we deliberately leave out.
    left_out = {"userData", "subscription", "assignment", "rebalanceTimeout",
                "classicMemberMetadata", "creationTimeMs", "currentStateTimestamp"}
    assert set(vector["kafka_value"]["data"]) - set(our_value) <= left_out


def test_classic_member_rebalance_timeout_is_decoded() -> None:
    vectors = [v.values[0] for v in _vectors()]
    seen = 0
    for v in vectors:
        kafka = v["kafka_value"]
        if v["kafka_key"]["type"] == "2" and kafka and kafka["data"]["members"]:
            record = decode(bytes.fromhex(v["key"]), bytes.fromhex(v["value"]))
            assert isinstance(record.value, GroupMetadataValue)
            for ours, theirs in zip(record.value.members, kafka["data"]["members"], strict=True):
                assert ours.rebalance_timeout_ms == theirs["rebalanceTimeout"]
                seen += 1
    assert seen >= 4


# --- crafted records ---------------------------------------------------------------------------


def _s(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _uv(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _cs(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return _uv(len(raw) + 1) + raw


def _cb(value: bytes | None) -> bytes:
    return b"\x00" if value is None else _uv(len(value) + 1) + value


def _tags(*fields: tuple[int, bytes]) -> bytes:
    return _uv(len(fields)) + b"".join(_uv(t) + _uv(len(v)) + v for t, v in fields)


def _commit_key(group: str = "g", topic: str = "t", partition: int = 3, kind: int = 1) -> bytes:
    return struct.pack(">h", kind) + _s(group) + _s(topic) + struct.pack(">i", partition)


def _group_key(record_type: int, group: str = "g") -> bytes:
    return struct.pack(">h", record_type) + _s(group)


def _member_key(record_type: int, group: str = "g", member: str = "m1") -> bytes:
    return struct.pack(">h", record_type) + _s(group) + _s(member)


def test_offset_commit_v0_to_v4() -> None:
    v0 = struct.pack(">hq", 0, 42) + _s("meta") + struct.pack(">q", 1000)
    v1 = struct.pack(">hq", 1, 42) + _s("") + struct.pack(">qq", 1000, 2000)
    v2 = struct.pack(">hq", 2, 42) + _s("x") + struct.pack(">q", 1000)
    v3 = struct.pack(">hqi", 3, 42, 7) + _s("x") + struct.pack(">q", 1000)
    v4 = (struct.pack(">hqi", 4, 42, -1) + _cs("ü") + struct.pack(">q", 1000)
          + _tags((0, bytes(range(16))), (9, b"future")))
    expected = {
        0: OffsetCommitValue(0, 42, None, "meta", 1000, None),
        1: OffsetCommitValue(1, 42, None, "", 1000, 2000),
        2: OffsetCommitValue(2, 42, None, "x", 1000, None),
        3: OffsetCommitValue(3, 42, 7, "x", 1000, None),
        4: OffsetCommitValue(4, 42, None, "ü", 1000, None, "AAECAwQFBgcICQoLDA0ODw"),
    }
    for raw in (v0, v1, v2, v3, v4):
        record = decode(_commit_key(), raw)
        assert isinstance(record, Record)
        assert record.key == OffsetCommitKey("g", "t", 3)
        assert isinstance(record.value, OffsetCommitValue)
        assert record.value == expected[record.value.version]
    # Record type 0 is the legacy offset commit key, same layout.
    legacy = decode(_commit_key(kind=0), v1)
    assert isinstance(legacy, Record) and legacy.record_type == 0


def test_offset_commit_tombstone() -> None:
    record = decode(_commit_key(), None)
    assert isinstance(record, Record) and record.is_tombstone
    assert record.key == OffsetCommitKey("g", "t", 3)


def _subscription(topics: list[str]) -> bytes:
    return (struct.pack(">hi", 0, len(topics)) + b"".join(_s(t) for t in topics)
            + struct.pack(">i", -1))


def _assignment(topic: str, partitions: list[int]) -> bytes:
    return (struct.pack(">hi", 0, 1) + _s(topic) + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def test_group_metadata_v0_uses_session_timeout_for_rebalance_timeout() -> None:
    member = (_s("m1") + _s("client") + _s("/10.0.0.1") + struct.pack(">i", 10_000)
              + struct.pack(">i", len(_subscription(["t"]))) + _subscription(["t"])
              + struct.pack(">i", len(_assignment("t", [0, 1]))) + _assignment("t", [0, 1]))
    raw = struct.pack(">h", 0) + _s("consumer") + struct.pack(">i", 5) + _s("range") + _s("m1") \
        + struct.pack(">i", 1) + member
    record = decode(_group_key(2), raw)
    assert isinstance(record, Record) and isinstance(record.value, GroupMetadataValue)
    v = record.value
    assert (v.generation, v.protocol, v.leader, v.current_state_ts) == (5, "range", "m1", None)
    (m,) = v.members
    assert (m.rebalance_timeout_ms, m.session_timeout_ms, m.instance_id) == (10_000, 10_000, None)
    assert m.subscription is not None and m.subscription.topics == ("t",)
    assert m.assignment == (TopicPartition("t", 0), TopicPartition("t", 1))


def test_group_metadata_v4_flexible_with_nulls_and_empty_members() -> None:
    raw = (struct.pack(">h", 4) + _cs("consumer") + struct.pack(">i", 0) + _cs(None) + _cs(None)
           + struct.pack(">q", -1) + _uv(0 + 1) + _tags((5, b"xyz")))
    record = decode(_group_key(2), raw)
    assert isinstance(record, Record)
    assert record.value == GroupMetadataValue(4, "consumer", 0, None, None, None, ())


def test_group_metadata_v4_member_with_null_assignment_and_opaque_protocol() -> None:
    member = (_cs("w1") + _cs("static-1") + _cs("c") + _cs("h") + struct.pack(">ii", 60_000, 10_000)
              + _cb(b"opaque") + _cb(None) + _tags())
    raw = (struct.pack(">h", 4) + _cs("connect") + struct.pack(">i", 9) + _cs("sessioned")
           + _cs("w1") + struct.pack(">q", 123) + _uv(2) + member + _tags())
    record = decode(_group_key(2), raw)
    assert isinstance(record, Record) and isinstance(record.value, GroupMetadataValue)
    (m,) = record.value.members
    assert m == ClassicMember("w1", "static-1", "c", "h", 60_000, 10_000, None, None)
    assert record.value.current_state_ts == 123


def test_malformed_embedded_subscription_is_reported_on_the_member() -> None:
    member = (_s("m1") + _s("c") + _s("h") + struct.pack(">ii", 1, 1)
              + struct.pack(">i", 3) + b"\x00\x00\x00" + struct.pack(">i", 0))
    raw = struct.pack(">h", 1) + _s("consumer") + struct.pack(">i", 1) + _s("range") + _s("m1") \
        + struct.pack(">i", 1) + member
    record = decode(_group_key(2), raw)
    assert isinstance(record, Record) and isinstance(record.value, GroupMetadataValue)
    assert record.value.members[0].protocol_error is not None
    assert "truncated" in record.value.members[0].protocol_error


def test_consumer_group_records_with_tags_and_empty_arrays() -> None:
    epoch = decode(_group_key(3), struct.pack(">hi", 0, 7) + _tags((0, struct.pack(">q", -5)),
                                                                   (1, struct.pack(">q", 99))))
    assert isinstance(epoch, Record)
    assert epoch.value == ConsumerGroupMetadataValue(0, 7, -5, 99)

    classic = _uv(2) + _cs("range") + _cb(b"meta") + _tags() + _tags()
    member_raw = (struct.pack(">h", 0) + _cs(None) + _cs("rack-a") + _cs("c") + _cs("/h")
                  + _uv(1) + _cs(None) + struct.pack(">i", 45_000) + _cs("uniform")
                  + _tags((0, classic)))
    member = decode(_member_key(5), member_raw)
    assert isinstance(member, Record)
    assert member.key == MemberKey("g", "m1")
    assert member.value == MemberMetadataValue(0, None, "rack-a", "c", "/h", (), None, 45_000,
                                               "uniform", ("range",))

    target = decode(_member_key(7), struct.pack(">h", 0) + _uv(1) + _tags())
    assert isinstance(target, Record)
    assert target.value == TargetAssignmentMemberValue(0, ())

    tid = bytes(16)
    current_raw = (struct.pack(">hiib", 0, 4, 3, 1)
                   + _uv(2) + tid + _uv(3) + struct.pack(">ii", 0, 2)
                   + _tags((0, _uv(3) + struct.pack(">ii", 4, 4))) + _uv(1) + _tags())
    current = decode(_member_key(8), current_raw)
    assert isinstance(current, Record)
    assert current.value == CurrentMemberAssignmentValue(
        0, 4, 3, 1, (TopicIdPartitions("AAAAAAAAAAAAAAAAAAAAAA", (0, 2)),), ())

    meta = decode(_group_key(6), struct.pack(">hi", 0, 4) + _tags())
    assert isinstance(meta, Record)
    assert meta.value == TargetAssignmentMetadataValue(0, 4, None)

    regex_key = struct.pack(">h", 16) + _s("g") + _s("^a.*")
    regex = decode(regex_key, struct.pack(">h", 0) + _uv(2) + _cs("a1") + struct.pack(">qq", 3, 4)
                   + _tags())
    assert isinstance(regex, Record)
    assert regex.key == RegexKey("g", "^a.*")
    assert regex.value == RegexValue(0, ("a1",), 3, 4)


def test_partition_metadata_record() -> None:
    racks = _uv(2) + struct.pack(">i", 0) + _uv(2) + _cs("r1") + _tags()
    raw = (struct.pack(">h", 0) + _uv(2) + bytes(range(16)) + _cs("orders")
           + struct.pack(">i", 6) + racks + _tags() + _tags())
    record = decode(_group_key(4), raw)
    assert isinstance(record, Record) and isinstance(record.value, PartitionMetadataValue)
    assert [(t.topic, t.partition_count) for t in record.value.topics] == [("orders", 6)]


@pytest.mark.parametrize("record_type", [9, 10, 15, 17, 21, 300])
def test_unknown_record_types_are_kept_not_fatal(record_type: int) -> None:
    key = struct.pack(">h", record_type) + b"\x00\x01g"
    record = decode(key, b"\x00\x00anything")
    assert record == UnknownRecord(record_type, key, b"\x00\x00anything")


def _real_records() -> list[tuple[bytes, bytes]]:
    out = []
    for v in (p.values[0] for p in _vectors()):
        if v["value"] is not None:
            out.append((bytes.fromhex(v["key"]), bytes.fromhex(v["value"])))
    return out


def test_every_truncation_of_a_real_record_is_a_clear_decode_error() -> None:
    checked = 0
    for key, value in _real_records():
        for cut in range(len(key)):
            with pytest.raises(OffsetsDecodeError, match=r"truncated|key"):
                decode(key[:cut], value)
        for cut in range(len(value)):
            truncated = value[:cut]
            try:
                record = decode(key, truncated)
            except OffsetsDecodeError as exc:
                assert "truncated" in str(exc) or "cannot fit" in str(exc), exc
                checked += 1
                continue
            # A cut inside a classic member's embedded consumer-protocol bytes is reported on
            # the member; no other prefix may decode.
            raise AssertionError(f"a {cut}-byte prefix of {value.hex()} decoded as {record}")
    assert checked > 500


def test_unknown_versions_and_null_keys_are_errors() -> None:
    with pytest.raises(OffsetsDecodeError, match="unknown version 9"):
        decode(_commit_key(), struct.pack(">hq", 9, 1))
    with pytest.raises(OffsetsDecodeError, match="unknown version 5"):
        decode(_group_key(2), struct.pack(">h", 5))
    with pytest.raises(OffsetsDecodeError, match="unknown version 1"):
        decode(_group_key(3), struct.pack(">hi", 1, 1))
    with pytest.raises(OffsetsDecodeError, match="null"):
        decode(None, b"")


def test_invalid_utf8_is_a_decode_error_not_a_crash() -> None:
    raw = struct.pack(">h", 1) + struct.pack(">h", 2) + b"\xff\xfe" + _s("t") + struct.pack(">i", 0)
    with pytest.raises(OffsetsDecodeError, match="UTF-8"):
        decode(raw, None)
