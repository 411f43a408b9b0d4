"""A pure decoder for the records of ``__consumer_offsets`` (no I/O).

A record's key is an int16 record type followed by the key struct; its value is an int16 version
followed by the value struct, or null (a tombstone). The layouts follow the JSON schemas under
``group-coordinator/src/main/resources/common/message/`` in Apache Kafka:

- 0, 1  offset commit (values v0-v4; v4 is flexible)
- 2     classic group metadata (values v0-v4; v4 is flexible)
- 3-8   consumer-protocol (KIP-848) group records, flexible from v0
- 16    consumer-protocol regular-expression subscription
- other types (share and streams groups, future ones) decode as ``UnknownRecord``

Truncated or malformed bytes raise ``OffsetsDecodeError`` naming the record type and the byte
offset. Unknown tagged fields are skipped, as Kafka's own readers do.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from groupscope.contract.model import TopicPartition
from groupscope.kafka.protocol import (
    ProtocolDecodeError,
    Subscription,
    decode_assignment,
    decode_subscription,
)


class OffsetsDecodeError(ValueError):
    """Bytes that do not decode as the record they claim to be."""


# --- keys -------------------------------------------------------------------------------------

OFFSET_COMMIT_TYPES: Final = (0, 1)
GROUP_METADATA: Final = 2
CONSUMER_GROUP_METADATA: Final = 3
CONSUMER_GROUP_PARTITION_METADATA: Final = 4
CONSUMER_GROUP_MEMBER_METADATA: Final = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: Final = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: Final = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: Final = 8
CONSUMER_GROUP_REGULAR_EXPRESSION: Final = 16

RECORD_TYPE_NAMES: Final = {
    0: "offset_commit", 1: "offset_commit", 2: "group_metadata",
    3: "consumer_group_metadata", 4: "consumer_group_partition_metadata",
    5: "consumer_group_member_metadata", 6: "consumer_group_target_assignment_metadata",
    7: "consumer_group_target_assignment_member",
    8: "consumer_group_current_member_assignment",
    16: "consumer_group_regular_expression",
}
_GROUP_KEYED = (2, 3, 4, 6)
_MEMBER_KEYED = (5, 7, 8)


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class MemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class RegexKey:
    group_id: str
    regex: str


Key = OffsetCommitKey | GroupKey | MemberKey | RegexKey


# --- values -----------------------------------------------------------------------------------
# Values are slotted but not frozen: a frozen dataclass costs about 1 us to build, most of the
# budget of a decoder meant to do 200,000 records a second on one core. Treat them as read-only.


@dataclass(slots=True)
class OffsetCommitValue:
    version: int
    offset: int
    leader_epoch: int | None  # v3+; -1 on the wire means unknown
    metadata: str
    commit_ts: int  # epoch ms
    expire_ts: int | None  # v1 only
    topic_id: str | None = None  # tagged in v4 (Kafka 4.1+), when the broker knew it


@dataclass(slots=True)
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int  # v0 has none: the session timeout served as both
    session_timeout_ms: int
    subscription: Subscription | None  # decoded when the protocol type is "consumer"
    assignment: tuple[TopicPartition, ...] | None
    protocol_error: str | None = None  # why the embedded consumer-protocol bytes did not decode


@dataclass(slots=True)
class GroupMetadataValue:
    version: int
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_ts: int | None  # v2+, epoch ms
    members: tuple[ClassicMember, ...]


@dataclass(slots=True)
class ConsumerGroupMetadataValue:
    version: int
    epoch: int
    metadata_hash: int | None  # tagged, Kafka 4.1+
    creation_ts: int | None  # tagged, KIP-1282


@dataclass(slots=True)
class TopicMetadata:
    topic_id: str
    topic: str
    partition_count: int


@dataclass(slots=True)
class PartitionMetadataValue:
    version: int
    topics: tuple[TopicMetadata, ...]


@dataclass(slots=True)
class MemberMetadataValue:
    version: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_protocols: tuple[str, ...] | None  # set when the member speaks the classic protocol


@dataclass(slots=True)
class TargetAssignmentMetadataValue:
    version: int
    assignment_epoch: int
    assignment_ts: int | None  # tagged, Kafka 4.3+


@dataclass(slots=True)
class TopicIdPartitions:
    topic_id: str
    partitions: tuple[int, ...]


@dataclass(slots=True)
class TargetAssignmentMemberValue:
    version: int
    partitions: tuple[TopicIdPartitions, ...]


@dataclass(slots=True)
class CurrentMemberAssignmentValue:
    version: int
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: tuple[TopicIdPartitions, ...]
    pending_revocation: tuple[TopicIdPartitions, ...]


@dataclass(slots=True)
class RegexValue:
    version: int
    topics: tuple[str, ...]
    regex_version: int
    timestamp: int


Value = (
    OffsetCommitValue | GroupMetadataValue | ConsumerGroupMetadataValue | PartitionMetadataValue
    | MemberMetadataValue | TargetAssignmentMetadataValue | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue | RegexValue
)


@dataclass(slots=True)
class Record:
    """One decoded record. ``value`` None is a tombstone."""

    record_type: int
    key: Key
    value: Value | None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(slots=True)
class UnknownRecord:
    """A record type this decoder does not know (share or streams groups, future types)."""

    record_type: int
    key: bytes
    value: bytes | None


# --- the reader -------------------------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I8 = struct.Struct(">b")


class _Reader:
    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, pos: int, what: str) -> None:
        self.data = data
        self.pos = pos
        self.what = what

    def fail(self, message: str) -> OffsetsDecodeError:
        return OffsetsDecodeError(f"{self.what}: {message} at byte {self.pos} of {len(self.data)}")

    def _fixed(self, fmt: struct.Struct) -> int:
        end = self.pos + fmt.size
        if end > len(self.data):
            raise self.fail(f"truncated: need {fmt.size} bytes")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos = end
        return int(value)

    def i8(self) -> int:
        return self._fixed(_I8)

    def i16(self) -> int:
        return self._fixed(_I16)

    def i32(self) -> int:
        return self._fixed(_I32)

    def i64(self) -> int:
        return self._fixed(_I64)

    def uvarint(self) -> int:
        data, pos, shift, value = self.data, self.pos, 0, 0
        while True:
            if pos >= len(data):
                raise self.fail("truncated varint")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise self.fail("varint longer than 5 bytes")

    def _take(self, length: int) -> bytes:
        end = self.pos + length
        if length < 0 or end > len(self.data):
            raise self.fail(f"truncated: a field of {length} bytes")
        raw = self.data[self.pos : end]
        self.pos = end
        return raw

    def _text(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"string is not UTF-8 ({exc.reason})") from None

    def string(self, flexible: bool) -> str:
        value = self.nullable_string(flexible)
        if value is None:
            raise self.fail("null where a string is required")
        return value

    def nullable_string(self, flexible: bool) -> str | None:
        length = self.uvarint() - 1 if flexible else self.i16()
        if length < 0:
            return None
        return self._text(self._take(length))

    def nullable_bytes(self, flexible: bool) -> bytes | None:
        length = self.uvarint() - 1 if flexible else self.i32()
        if length < 0:
            return None
        return self._take(length)

    def array_length(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0:
            return -1
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise self.fail(f"array of {n} elements cannot fit")
        return n

    def uuid(self) -> str:
        # Kafka prints topic ids as URL-safe base64 without padding (Uuid.toString).
        return base64.urlsafe_b64encode(self._take(16)).decode("ascii").rstrip("=")

    def tagged_fields(self) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self._take(self.uvarint())
        return fields

    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def _tagged_i64(fields: dict[int, bytes], tag: int, what: str) -> int | None:
    raw = fields.get(tag)
    if raw is None:
        return None
    if len(raw) != 8:
        raise OffsetsDecodeError(f"{what}: tagged field {tag} has {len(raw)} bytes, expected 8")
    return int(_I64.unpack(raw)[0])


# --- keys -------------------------------------------------------------------------------------

_KEY_CACHE: dict[bytes, Key] = {}
_KEY_CACHE_LIMIT = 200_000


def decode_key(data: bytes) -> tuple[int, Key | None]:
    """The record type and the typed key; None for a type this decoder does not know."""
    if len(data) < 2:
        raise OffsetsDecodeError(f"key: truncated: {len(data)} bytes, need 2 for the type")
    cached = _KEY_CACHE.get(data)
    if cached is not None:
        return (int(_I16.unpack_from(data)[0]), cached)
    record_type = int(_I16.unpack_from(data)[0])
    r = _Reader(data, 2, f"key of record type {record_type}")
    key: Key
    # Keys are never flexible: their version is the record type, frozen since v0.
    if record_type in OFFSET_COMMIT_TYPES:
        key = OffsetCommitKey(r.string(False), r.string(False), r.i32())
    elif record_type in _GROUP_KEYED:
        key = GroupKey(r.string(False))
    elif record_type in _MEMBER_KEYED:
        key = MemberKey(r.string(False), r.string(False))
    elif record_type == CONSUMER_GROUP_REGULAR_EXPRESSION:
        key = RegexKey(r.string(False), r.string(False))
    else:
        return record_type, None
    if len(_KEY_CACHE) >= _KEY_CACHE_LIMIT:
        _KEY_CACHE.clear()
    _KEY_CACHE[data] = key
    return record_type, key


# --- values -----------------------------------------------------------------------------------


def _offset_commit(data: bytes) -> OffsetCommitValue:
    version = int(_I16.unpack_from(data)[0])
    if version == 4:
        return _offset_commit_v4(data)
    if 0 <= version <= 3:
        # The hot path: fixed layout, one string.
        try:
            (offset,) = _I64.unpack_from(data, 2)
            pos = 10
            leader_epoch: int | None = None
            if version >= 3:
                (leader_epoch,) = _I32.unpack_from(data, pos)
                pos += 4
            (length,) = _I16.unpack_from(data, pos)
            pos += 2
            if length < 0 or pos + length > len(data):
                raise struct.error("metadata")
            metadata = data[pos : pos + length].decode("utf-8")
            pos += length
            (commit_ts,) = _I64.unpack_from(data, pos)
            expire_ts = _I64.unpack_from(data, pos + 8)[0] if version == 1 else None
        except (struct.error, UnicodeDecodeError):
            return _offset_commit_slow(data, version)
        return OffsetCommitValue(
            version, offset, None if leader_epoch == -1 else leader_epoch, metadata, commit_ts,
            expire_ts,
        )
    return _offset_commit_slow(data, version)


def _offset_commit_v4(data: bytes) -> OffsetCommitValue:
    # What Kafka 4.1+ writes: a one-byte compact length and either no tagged field or just the
    # topic id. Anything else takes the general reader.
    try:
        offset, leader_epoch = _V4_HEAD.unpack_from(data, 2)
        length = data[14] - 1
        if length < 0 or length > 126:
            return _offset_commit_slow(data, 4)
        pos = 15 + length
        metadata = data[15:pos].decode("utf-8")
        (commit_ts,) = _I64.unpack_from(data, pos)
        pos += 8
        tags = data[pos : pos + 3]
        topic_id = None
        if tags == b"\x01\x00\x10" and len(data) == pos + 19:
            topic_id = base64.urlsafe_b64encode(data[pos + 3 : pos + 19]).decode("ascii")[:22]
        elif tags != b"\x00" or len(data) != pos + 1:
            return _offset_commit_slow(data, 4)
    except (struct.error, IndexError, UnicodeDecodeError):
        return _offset_commit_slow(data, 4)
    return OffsetCommitValue(
        4, offset, None if leader_epoch == -1 else leader_epoch, metadata, commit_ts, None,
        topic_id,
    )


_V4_HEAD = struct.Struct(">qi")


def _offset_commit_slow(data: bytes, version: int) -> OffsetCommitValue:
    r = _Reader(data, 2, f"offset commit value v{version}")
    if not 0 <= version <= 4:
        raise r.fail(f"unknown version {version}")
    flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string(flexible)
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else None
    topic_id = None
    if flexible:
        raw_topic_id = r.tagged_fields().get(0)
        if raw_topic_id is not None:
            topic_id = _Reader(raw_topic_id, 0, f"{r.what} topic id").uuid()
    return OffsetCommitValue(
        version, offset, None if leader_epoch == -1 else leader_epoch, metadata, commit_ts,
        expire_ts, topic_id,
    )


def _group_metadata(data: bytes) -> GroupMetadataValue:
    version = int(_I16.unpack_from(data)[0])
    r = _Reader(data, 2, f"group metadata value v{version}")
    if not 0 <= version <= 4:
        raise r.fail(f"unknown version {version}")
    flexible = version >= 4
    protocol_type = r.string(flexible)
    generation = r.i32()
    protocol = r.nullable_string(flexible)
    leader = r.nullable_string(flexible)
    state_ts = r.i64() if version >= 2 else None
    members = []
    for _ in range(max(r.array_length(flexible), 0)):
        member_id = r.string(flexible)
        instance_id = r.nullable_string(flexible) if version >= 3 else None
        client_id = r.string(flexible)
        client_host = r.string(flexible)
        rebalance_timeout = r.i32() if version >= 1 else None
        session_timeout = r.i32()
        subscription_bytes = r.nullable_bytes(flexible)
        assignment_bytes = r.nullable_bytes(flexible)
        if flexible:
            r.tagged_fields()
        subscription, assignment, error = _consumer_protocol(
            protocol_type, subscription_bytes, assignment_bytes
        )
        members.append(
            ClassicMember(
                member_id, instance_id, client_id, client_host,
                session_timeout if rebalance_timeout is None else rebalance_timeout,
                session_timeout, subscription, assignment, error,
            )
        )
    if flexible:
        r.tagged_fields()
    return GroupMetadataValue(
        version, protocol_type, generation, protocol, leader,
        None if state_ts is None or state_ts < 0 else state_ts, tuple(members),
    )


def _consumer_protocol(
    protocol_type: str, subscription: bytes | None, assignment: bytes | None
) -> tuple[Subscription | None, tuple[TopicPartition, ...] | None, str | None]:
    # Other protocol types (connect, streams' classic groups with their own bytes) keep theirs
    # opaque; a malformed member is reported on the member, not as a failed record.
    if protocol_type != "consumer":
        return None, None, None
    try:
        decoded_subscription = decode_subscription(subscription) if subscription else None
        decoded_assignment = decode_assignment(assignment) if assignment is not None else None
    except ProtocolDecodeError as exc:
        return None, None, str(exc)
    return decoded_subscription, decoded_assignment, None


def _flexible_v0(data: bytes, what: str) -> _Reader:
    version = int(_I16.unpack_from(data)[0])
    r = _Reader(data, 2, f"{what} value v{version}")
    if version != 0:
        raise r.fail(f"unknown version {version}")
    return r


def _consumer_group_metadata(data: bytes) -> ConsumerGroupMetadataValue:
    r = _flexible_v0(data, "consumer group metadata")
    epoch = r.i32()
    tags = r.tagged_fields()
    return ConsumerGroupMetadataValue(
        0, epoch, _tagged_i64(tags, 0, r.what), _tagged_i64(tags, 1, r.what)
    )


def _partition_metadata(data: bytes) -> PartitionMetadataValue:
    r = _flexible_v0(data, "consumer group partition metadata")
    topics = []
    for _ in range(max(r.array_length(True), 0)):
        topic_id = r.uuid()
        name = r.string(True)
        partition_count = r.i32()
        for _ in range(max(r.array_length(True), 0)):  # partition racks
            r.i32()
            for _ in range(max(r.array_length(True), 0)):
                r.string(True)
            r.tagged_fields()
        r.tagged_fields()
        topics.append(TopicMetadata(topic_id, name, partition_count))
    r.tagged_fields()
    return PartitionMetadataValue(0, tuple(topics))


def _member_metadata(data: bytes) -> MemberMetadataValue:
    r = _flexible_v0(data, "consumer group member metadata")
    instance_id = r.nullable_string(True)
    rack_id = r.nullable_string(True)
    client_id = r.string(True)
    client_host = r.string(True)
    topics = tuple(r.string(True) for _ in range(max(r.array_length(True), 0)))
    regex = r.nullable_string(True)
    rebalance_timeout = r.i32()
    server_assignor = r.nullable_string(True)
    tags = r.tagged_fields()
    classic: tuple[str, ...] | None = None
    if 0 in tags:
        classic = _classic_member_metadata(tags[0], r.what)
    return MemberMetadataValue(
        0, instance_id, rack_id, client_id, client_host, topics, regex, rebalance_timeout,
        server_assignor, classic,
    )


def _classic_member_metadata(raw: bytes, what: str) -> tuple[str, ...] | None:
    r = _Reader(raw, 0, f"{what} classic member metadata")
    n = r.array_length(True)
    if n < 0:
        return None
    names = []
    for _ in range(n):
        names.append(r.string(True))
        r.nullable_bytes(True)
        r.tagged_fields()
    r.tagged_fields()
    return tuple(names)


def _target_assignment_metadata(data: bytes) -> TargetAssignmentMetadataValue:
    r = _flexible_v0(data, "consumer group target assignment metadata")
    epoch = r.i32()
    tags = r.tagged_fields()
    return TargetAssignmentMetadataValue(0, epoch, _tagged_i64(tags, 0, r.what))


def _topic_id_partitions(r: _Reader) -> tuple[TopicIdPartitions, ...]:
    out = []
    for _ in range(max(r.array_length(True), 0)):
        topic_id = r.uuid()
        partitions = tuple(r.i32() for _ in range(max(r.array_length(True), 0)))
        r.tagged_fields()  # AssignmentEpochs (KIP-1251) and future tags
        out.append(TopicIdPartitions(topic_id, partitions))
    return tuple(out)


def _target_assignment_member(data: bytes) -> TargetAssignmentMemberValue:
    r = _flexible_v0(data, "consumer group target assignment member")
    partitions = _topic_id_partitions(r)
    r.tagged_fields()
    return TargetAssignmentMemberValue(0, partitions)


def _current_member_assignment(data: bytes) -> CurrentMemberAssignmentValue:
    r = _flexible_v0(data, "consumer group current member assignment")
    member_epoch = r.i32()
    previous_epoch = r.i32()
    state = r.i8()
    assigned = _topic_id_partitions(r)
    pending = _topic_id_partitions(r)
    r.tagged_fields()
    return CurrentMemberAssignmentValue(0, member_epoch, previous_epoch, state, assigned, pending)


def _regex(data: bytes) -> RegexValue:
    r = _flexible_v0(data, "consumer group regular expression")
    topics = tuple(r.string(True) for _ in range(max(r.array_length(True), 0)))
    version = r.i64()
    timestamp = r.i64()
    r.tagged_fields()
    return RegexValue(0, topics, version, timestamp)


_VALUE_DECODERS: dict[int, Callable[[bytes], Value]] = {
    0: _offset_commit, 1: _offset_commit, 2: _group_metadata, 3: _consumer_group_metadata,
    4: _partition_metadata, 5: _member_metadata, 6: _target_assignment_metadata,
    7: _target_assignment_member, 8: _current_member_assignment, 16: _regex,
}


def decode(key: bytes | None, value: bytes | None) -> Record | UnknownRecord:
    """Decodes one record of ``__consumer_offsets``. Raises OffsetsDecodeError for bytes that
    do not decode; returns UnknownRecord for a record type this decoder does not know."""
    if key is None:
        raise OffsetsDecodeError("key: null (every record of __consumer_offsets has a key)")
    record_type, typed_key = decode_key(key)
    if typed_key is None:
        return UnknownRecord(record_type, key, value)
    if value is None:
        return Record(record_type, typed_key, None)
    if len(value) < 2:
        raise OffsetsDecodeError(
            f"value of record type {record_type}: truncated: {len(value)} bytes, need 2"
        )
    try:
        decoded = _VALUE_DECODERS[record_type](value)
    except struct.error as exc:  # a fixed read past the end outside the guarded reader
        raise OffsetsDecodeError(f"value of record type {record_type}: truncated ({exc})") from None
    return Record(record_type, typed_key, decoded)
