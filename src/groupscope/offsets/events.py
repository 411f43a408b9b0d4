"""Decoded ``__consumer_offsets`` records as typed, flat event tables: the one shape shared by
the landing zone, the rebalance timeline and the Spark jobs.

Every row starts with ``cluster, source_partition, source_offset, record_ts``: the record it
came from. That triple (plus a member, kind and partition for child rows) is the natural key, so
re-landing a record can always be recognised.

Consumer-protocol records name topics by id. ``EventBuilder`` learns id -> name pairs from the
records that carry both (offset commits v4, partition metadata) and from ``topic_names``; a
name still unknown when the tables are built stays null beside its id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from groupscope.offsets.decoder import (
    RECORD_TYPE_NAMES,
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

_TS = pa.timestamp("ms", tz="UTC")
_HEAD = [
    pa.field("cluster", pa.string(), False),
    pa.field("source_partition", pa.int32(), False),
    pa.field("source_offset", pa.int64(), False),
    pa.field("record_ts", _TS, False),
]
_STRINGS = pa.list_(pa.string())


def _schema(*fields: tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema(_HEAD + [pa.field(n, t, nullable) for n, t, nullable in fields])


EVENT_SCHEMAS: dict[str, pa.Schema] = {
    "offset_commits": _schema(
        ("group_id", pa.string(), False), ("topic", pa.string(), False),
        ("partition", pa.int32(), False), ("committed_offset", pa.int64(), False),
        ("leader_epoch", pa.int32(), True), ("commit_metadata", pa.string(), False),
        ("commit_ts", _TS, False), ("expire_ts", _TS, True), ("topic_id", pa.string(), True),
        ("value_version", pa.int16(), False),
    ),
    # Classic groups: one row per completed rebalance (and per rewrite of the same generation,
    # e.g. a static member replaced without a rebalance), with its members below.
    "group_generations": _schema(
        ("group_id", pa.string(), False), ("protocol_type", pa.string(), False),
        ("generation", pa.int32(), False), ("protocol", pa.string(), True),
        ("leader", pa.string(), True), ("state_ts", _TS, True),
        ("member_count", pa.int32(), False), ("value_version", pa.int16(), False),
    ),
    "generation_members": _schema(
        ("group_id", pa.string(), False), ("generation", pa.int32(), False),
        ("member_id", pa.string(), False), ("instance_id", pa.string(), True),
        ("client_id", pa.string(), False), ("client_host", pa.string(), False),
        ("session_timeout_ms", pa.int32(), False), ("rebalance_timeout_ms", pa.int32(), False),
        ("subscribed_topics", _STRINGS, True), ("protocol_error", pa.string(), True),
    ),
    # Consumer-protocol (KIP-848) groups.
    "group_epochs": _schema(
        ("group_id", pa.string(), False), ("epoch", pa.int32(), False),
        ("metadata_hash", pa.int64(), True),
    ),
    "assignment_epochs": _schema(
        ("group_id", pa.string(), False), ("assignment_epoch", pa.int32(), False),
        ("assignment_ts", _TS, True),
    ),
    "consumer_members": _schema(
        ("group_id", pa.string(), False), ("member_id", pa.string(), False),
        ("instance_id", pa.string(), True), ("rack_id", pa.string(), True),
        ("client_id", pa.string(), False), ("client_host", pa.string(), False),
        ("subscribed_topics", _STRINGS, False), ("subscribed_regex", pa.string(), True),
        ("rebalance_timeout_ms", pa.int32(), False), ("server_assignor", pa.string(), True),
        ("classic_protocols", _STRINGS, True),
    ),
    # One row per target-assignment record, so an empty target (no partitions) is visible.
    "target_members": _schema(
        ("group_id", pa.string(), False), ("member_id", pa.string(), False),
        ("partition_count", pa.int32(), False),
    ),
    "member_epochs": _schema(
        ("group_id", pa.string(), False), ("member_id", pa.string(), False),
        ("member_epoch", pa.int32(), False), ("previous_member_epoch", pa.int32(), False),
        ("member_state", pa.int8(), False),
    ),
    # Partitions of either protocol: kind "assigned" (a classic generation's assignment),
    # "target" (a KIP-848 target assignment), "current" / "pending_revocation" (a KIP-848
    # member's reconciled state).
    "member_partitions": _schema(
        ("group_id", pa.string(), False), ("member_id", pa.string(), False),
        ("kind", pa.string(), False), ("topic", pa.string(), True),
        ("topic_id", pa.string(), True), ("partition", pa.int32(), False),
    ),
    "topic_metadata": _schema(
        ("group_id", pa.string(), False), ("topic_id", pa.string(), False),
        ("topic", pa.string(), False), ("partition_count", pa.int32(), False),
    ),
    "regex_subscriptions": _schema(
        ("group_id", pa.string(), False), ("regex", pa.string(), False),
        ("topics", _STRINGS, False), ("regex_version", pa.int64(), False),
        ("resolved_ts", _TS, False),
    ),
    # Tombstones: an offset deleted or expired, a group deleted, a member gone.
    "deletions": _schema(
        ("record_type", pa.int16(), False), ("record_kind", pa.string(), False),
        ("group_id", pa.string(), False), ("member_id", pa.string(), True),
        ("topic", pa.string(), True), ("partition", pa.int32(), True),
        ("regex", pa.string(), True),
    ),
    "unknown_records": _schema(
        ("record_type", pa.int16(), False), ("key_hex", pa.string(), False),
        ("value_size", pa.int32(), True),
    ),
    "undecodable_records": _schema(
        ("key_hex", pa.string(), True), ("value_hex", pa.string(), True),
        ("error", pa.string(), False),
    ),
}

EVENT_KEYS: dict[str, tuple[str, ...]] = {
    name: ("cluster", "source_partition", "source_offset") for name in EVENT_SCHEMAS
} | {
    "generation_members": ("cluster", "source_partition", "source_offset", "member_id"),
    "member_partitions": (
        "cluster", "source_partition", "source_offset", "member_id", "kind", "topic_id", "topic",
        "partition",
    ),
    "topic_metadata": ("cluster", "source_partition", "source_offset", "topic_id"),
}


class _Columns:
    __slots__ = ("columns", "names")

    def __init__(self, schema: pa.Schema) -> None:
        self.names = schema.names
        self.columns: list[list[Any]] = [[] for _ in self.names]

    def add(self, *values: Any) -> None:
        for column, value in zip(self.columns, values, strict=True):
            column.append(value)

    def __len__(self) -> int:
        return len(self.columns[0])


@dataclass
class EventBuilder:
    """Accumulates records of one cluster; ``tables()`` gives the event tables."""

    cluster: str
    topic_names: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._tables = {name: _Columns(schema) for name, schema in EVENT_SCHEMAS.items()}

    def add_raw(self, partition: int, offset: int, timestamp_ms: int, key: bytes | None,
                value: bytes | None) -> None:
        """Decodes and adds one record; one that does not decode is kept as undecodable."""
        try:
            record = decode(key, value)
        except OffsetsDecodeError as exc:
            self.counts["undecodable"] += 1
            self._tables["undecodable_records"].add(
                self.cluster, partition, offset, timestamp_ms, key.hex() if key else None,
                value.hex() if value is not None else None, str(exc),
            )
            return
        self.add(partition, offset, timestamp_ms, record)

    def add(self, partition: int, offset: int, ts: int, record: Record | UnknownRecord) -> None:
        head = (self.cluster, partition, offset, ts)
        t = self._tables
        if isinstance(record, UnknownRecord):
            self.counts["unknown"] += 1
            t["unknown_records"].add(*head, record.record_type, record.key.hex(),
                                     None if record.value is None else len(record.value))
            return
        value, key = record.value, record.key
        if value is None:
            self.counts["deletions"] += 1
            self._deletion(head, record)
            return
        if isinstance(value, OffsetCommitValue):
            assert isinstance(key, OffsetCommitKey)
            self.counts["offset_commits"] += 1
            if value.topic_id is not None:
                self.topic_names[value.topic_id] = key.topic
            t["offset_commits"].add(*head, key.group_id, key.topic, key.partition, value.offset,
                                    value.leader_epoch, value.metadata, value.commit_ts,
                                    value.expire_ts, value.topic_id, value.version)
            return
        self.counts[RECORD_TYPE_NAMES[record.record_type]] += 1
        group_id = key.group_id
        if isinstance(value, GroupMetadataValue):
            self._generation(head, group_id, value)
        elif isinstance(value, ConsumerGroupMetadataValue):
            t["group_epochs"].add(*head, group_id, value.epoch, value.metadata_hash)
        elif isinstance(value, TargetAssignmentMetadataValue):
            t["assignment_epochs"].add(*head, group_id, value.assignment_epoch,
                                       value.assignment_ts)
        elif isinstance(value, MemberMetadataValue):
            assert isinstance(key, MemberKey)
            t["consumer_members"].add(
                *head, group_id, key.member_id, value.instance_id, value.rack_id,
                value.client_id, value.client_host, list(value.subscribed_topics),
                value.subscribed_regex, value.rebalance_timeout_ms, value.server_assignor,
                None if value.classic_protocols is None else list(value.classic_protocols),
            )
        elif isinstance(value, TargetAssignmentMemberValue):
            assert isinstance(key, MemberKey)
            t["target_members"].add(*head, group_id, key.member_id,
                                    sum(len(tp.partitions) for tp in value.partitions))
            self._partitions(head, group_id, key.member_id, "target", value.partitions)
        elif isinstance(value, CurrentMemberAssignmentValue):
            assert isinstance(key, MemberKey)
            t["member_epochs"].add(*head, group_id, key.member_id, value.member_epoch,
                                   value.previous_member_epoch, value.state)
            self._partitions(head, group_id, key.member_id, "current", value.assigned)
            self._partitions(head, group_id, key.member_id, "pending_revocation",
                             value.pending_revocation)
        elif isinstance(value, PartitionMetadataValue):
            for topic in value.topics:
                self.topic_names[topic.topic_id] = topic.topic
                t["topic_metadata"].add(*head, group_id, topic.topic_id, topic.topic,
                                        topic.partition_count)
        else:
            assert isinstance(value, RegexValue) and isinstance(key, RegexKey)
            t["regex_subscriptions"].add(*head, group_id, key.regex, list(value.topics),
                                         value.regex_version, value.timestamp)

    def _generation(self, head: tuple[Any, ...], group_id: str,
                    value: GroupMetadataValue) -> None:
        t = self._tables
        t["group_generations"].add(*head, group_id, value.protocol_type, value.generation,
                                   value.protocol, value.leader, value.current_state_ts,
                                   len(value.members), value.version)
        for m in value.members:
            topics = None if m.subscription is None else list(m.subscription.topics)
            t["generation_members"].add(
                *head, group_id, value.generation, m.member_id, m.instance_id, m.client_id,
                m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms, topics,
                m.protocol_error,
            )
            for tp in m.assignment or ():
                t["member_partitions"].add(*head, group_id, m.member_id, "assigned", tp.topic,
                                           None, tp.partition)

    def _partitions(self, head: tuple[Any, ...], group_id: str, member_id: str, kind: str,
                    partitions: Iterable[TopicIdPartitions]) -> None:
        columns = self._tables["member_partitions"]
        for tp in partitions:
            for p in tp.partitions:
                columns.add(*head, group_id, member_id, kind, None, tp.topic_id, p)

    def _deletion(self, head: tuple[Any, ...], record: Record) -> None:
        key = record.key
        member_id = topic = partition = regex = None
        if isinstance(key, OffsetCommitKey):
            topic, partition = key.topic, key.partition
        elif isinstance(key, MemberKey):
            member_id = key.member_id
        elif isinstance(key, RegexKey):
            regex = key.regex
        else:
            assert isinstance(key, GroupKey)
        self._tables["deletions"].add(*head, record.record_type,
                                      RECORD_TYPE_NAMES[record.record_type], key.group_id,
                                      member_id, topic, partition, regex)

    def __len__(self) -> int:
        return sum(self.counts.values())

    def unresolved_topic_ids(self) -> set[str]:
        ids = self._tables["member_partitions"].columns[EVENT_SCHEMAS[
            "member_partitions"].names.index("topic_id")]
        return {i for i in ids if i is not None and i not in self.topic_names}

    def tables(self, topic_names: Mapping[str, str] | None = None) -> dict[str, pa.Table]:
        """Every event table (empty ones included), topic names filled in from topic ids."""
        names = {**self.topic_names, **(topic_names or {})}
        partitions = self._tables["member_partitions"]
        schema = EVENT_SCHEMAS["member_partitions"]
        topic_col = partitions.columns[schema.names.index("topic")]
        id_col = partitions.columns[schema.names.index("topic_id")]
        for i, topic_id in enumerate(id_col):
            if topic_id is not None and topic_col[i] is None:
                topic_col[i] = names.get(topic_id)
        return {
            name: pa.Table.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns.columns, schema_,
                                                                strict=True)],
                schema=schema_,
            )
            for name, columns in self._tables.items()
            for schema_ in (EVENT_SCHEMAS[name],)
        }


def record_kind_counts(tables: Mapping[str, pa.Table]) -> dict[str, int]:
    return {name: table.num_rows for name, table in tables.items() if table.num_rows}


__all__ = ["EVENT_KEYS", "EVENT_SCHEMAS", "EventBuilder", "record_kind_counts"]
