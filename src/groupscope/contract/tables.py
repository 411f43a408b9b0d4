"""A snapshot as flat tables: the one shape shared by the landing zone (Parquet) and the raw
warehouse tables (``sql/migrations``). Every table starts with ``cluster, snapshot_ts``; the
natural key of each is listed in ``KEYS`` and enforced by the warehouse's primary keys."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from groupscope.contract.model import Group, Snapshot

_TS = pa.timestamp("us", tz="UTC")
_HEAD = [pa.field("cluster", pa.string(), False), pa.field("snapshot_ts", _TS, False)]


def _schema(*fields: tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema(_HEAD + [pa.field(n, t, nullable) for n, t, nullable in fields])


SCHEMAS: dict[str, pa.Schema] = {
    "snapshots": _schema(
        ("snapshot_id", pa.string(), False),
        ("complete", pa.bool_(), False),
        ("group_count", pa.int32(), False),
        ("partition_count", pa.int32(), False),
        ("error_count", pa.int32(), False),
        ("offsets_topic_partitions", pa.int32(), True),
    ),
    "consumer_groups": _schema(
        ("group_id", pa.string(), False),
        ("group_type", pa.string(), False),
        ("state", pa.string(), False),
        ("protocol_type", pa.string(), True),
        ("assignor", pa.string(), True),
        ("coordinator_id", pa.int32(), True),
        ("expected_coordinator_id", pa.int32(), True),
        ("coordinator_mismatch", pa.bool_(), False),
        ("described", pa.bool_(), False),
        ("member_count", pa.int32(), False),
    ),
    "group_members": _schema(
        ("group_id", pa.string(), False),
        ("member_id", pa.string(), False),
        ("client_id", pa.string(), False),
        ("host", pa.string(), False),
        ("instance_id", pa.string(), True),
    ),
    "member_subscriptions": _schema(
        ("group_id", pa.string(), False),
        ("member_id", pa.string(), False),
        ("topic", pa.string(), False),
    ),
    "member_assignments": _schema(
        ("group_id", pa.string(), False),
        ("member_id", pa.string(), False),
        ("kind", pa.string(), False),  # current | target
        ("topic", pa.string(), False),
        ("partition", pa.int32(), False),
    ),
    "committed_offsets": _schema(
        ("group_id", pa.string(), False),
        ("topic", pa.string(), False),
        ("partition", pa.int32(), False),
        ("committed_offset", pa.int64(), True),
        ("leader_epoch", pa.int32(), True),
        ("commit_metadata", pa.string(), True),
    ),
    "partition_offsets": _schema(
        ("topic", pa.string(), False),
        ("partition", pa.int32(), False),
        ("log_start_offset", pa.int64(), True),
        ("high_watermark", pa.int64(), True),
        ("last_stable_offset", pa.int64(), True),
        ("leader", pa.int32(), True),
    ),
    "topics": _schema(
        ("topic", pa.string(), False),
        ("partition_count", pa.int32(), False),
        ("retention_ms", pa.int64(), True),
        ("retention_bytes", pa.int64(), True),
        ("segment_bytes", pa.int64(), True),
        ("cleanup_policy", pa.string(), True),
    ),
    "record_timestamps": _schema(
        ("topic", pa.string(), False),
        ("partition", pa.int32(), False),
        ("committed_offset", pa.int64(), False),
        ("record_offset", pa.int64(), False),
        ("record_ts", _TS, False),
        ("timestamp_type", pa.string(), False),
    ),
    # Share and streams groups (KIP-932, KIP-1071): what only their kind has.
    "group_epochs": _schema(
        ("group_id", pa.string(), False),
        ("group_epoch", pa.int32(), True),
        ("assignment_epoch", pa.int32(), True),
        ("topology_epoch", pa.int32(), True),  # streams groups only
    ),
    "member_epochs": _schema(
        ("group_id", pa.string(), False),
        ("member_id", pa.string(), False),
        ("member_epoch", pa.int32(), True),
        ("process_id", pa.string(), True),  # streams groups: the Kafka Streams instance
    ),
    "share_partition_offsets": _schema(
        ("group_id", pa.string(), False),
        ("topic", pa.string(), False),
        ("partition", pa.int32(), False),
        ("start_offset", pa.int64(), True),
        ("lag", pa.int64(), True),
        ("leader_epoch", pa.int32(), True),
    ),
    "streams_subtopology_topics": _schema(
        ("group_id", pa.string(), False),
        ("subtopology_id", pa.string(), False),
        # source | repartition_sink | repartition_source | changelog
        ("role", pa.string(), False),
        ("topic", pa.string(), False),
    ),
    "streams_member_tasks": _schema(
        ("group_id", pa.string(), False),
        ("member_id", pa.string(), False),
        ("kind", pa.string(), False),  # current | target
        ("role", pa.string(), False),  # active | standby | warmup
        ("subtopology_id", pa.string(), False),
        ("partition", pa.int32(), False),
    ),
    "snapshot_notes": _schema(
        ("seq", pa.int32(), False),
        ("note", pa.string(), False),
    ),
    "collection_errors": _schema(
        ("seq", pa.int32(), False),
        ("stage", pa.string(), False),
        ("code", pa.string(), False),
        ("message", pa.string(), False),
        ("group_id", pa.string(), True),
        ("topic", pa.string(), True),
        ("partition", pa.int32(), True),
        ("retriable", pa.bool_(), False),
        ("attempts", pa.int32(), False),
    ),
}

KEYS: dict[str, tuple[str, ...]] = {
    "snapshots": ("cluster", "snapshot_ts"),
    "consumer_groups": ("cluster", "snapshot_ts", "group_id"),
    "group_members": ("cluster", "snapshot_ts", "group_id", "member_id"),
    "member_subscriptions": ("cluster", "snapshot_ts", "group_id", "member_id", "topic"),
    "member_assignments": (
        "cluster", "snapshot_ts", "group_id", "member_id", "kind", "topic", "partition",
    ),
    "committed_offsets": ("cluster", "snapshot_ts", "group_id", "topic", "partition"),
    "partition_offsets": ("cluster", "snapshot_ts", "topic", "partition"),
    "topics": ("cluster", "snapshot_ts", "topic"),
    "record_timestamps": ("cluster", "snapshot_ts", "topic", "partition", "committed_offset"),
    "group_epochs": ("cluster", "snapshot_ts", "group_id"),
    "member_epochs": ("cluster", "snapshot_ts", "group_id", "member_id"),
    "share_partition_offsets": ("cluster", "snapshot_ts", "group_id", "topic", "partition"),
    "streams_subtopology_topics": (
        "cluster", "snapshot_ts", "group_id", "subtopology_id", "role", "topic",
    ),
    "streams_member_tasks": (
        "cluster", "snapshot_ts", "group_id", "member_id", "kind", "role", "subtopology_id",
        "partition",
    ),
    "snapshot_notes": ("cluster", "snapshot_ts", "seq"),
    "collection_errors": ("cluster", "snapshot_ts", "seq"),
}

# The assignment what-if of each snapshot (groupscope.simulate), landed beside it and loaded
# into mart.* with it, in this order.
WHATIF_SCHEMA = pa.schema([
    pa.field("cluster", pa.string(), False),
    pa.field("snapshot_ts", _TS, False),
    pa.field("group_id", pa.string(), False),
    pa.field("strategy", pa.string(), False),
    pa.field("current_strategy", pa.string()),
    pa.field("subscriptions_inferred", pa.bool_(), False),
    pa.field("members", pa.int32(), False),
    pa.field("partitions", pa.int32(), False),
    pa.field("max_minus_min", pa.int32(), False),
    pa.field("coefficient_of_variation", pa.float64()),
    pa.field("idle_members", pa.int32(), False),
    pa.field("most_lagged_member", pa.string()),
    pa.field("most_lagged_share", pa.float64()),
    pa.field("moved_on_leave", pa.int32()),
])
ADVICE_SCHEMA = pa.schema([
    pa.field("cluster", pa.string(), False),
    pa.field("snapshot_ts", _TS, False),
    pa.field("group_id", pa.string(), False),
    pa.field("seq", pa.int32(), False),
    pa.field("recommendation", pa.string(), False),
    pa.field("reason", pa.string(), False),
])


WHATIF_SCHEMAS = {"assignment_whatif": WHATIF_SCHEMA, "assignment_advice": ADVICE_SCHEMA}

# The manifest goes last: a snapshot counts as landed once its manifest row exists.
LOAD_ORDER = [t for t in SCHEMAS if t != "snapshots"] + ["snapshots"]


def snapshot_id(snapshot: Snapshot) -> str:
    return f"{snapshot.cluster}-{snapshot.snapshot_ts.strftime('%Y%m%dT%H%M%S%fZ')}"


def to_tables(snapshot: Snapshot) -> dict[str, pa.Table]:
    head = {"cluster": snapshot.cluster, "snapshot_ts": snapshot.snapshot_ts}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
    rows["snapshots"].append(
        {
            **head,
            "snapshot_id": snapshot_id(snapshot),
            "complete": snapshot.complete,
            "group_count": len(snapshot.groups),
            "partition_count": len(snapshot.partitions),
            "error_count": len(snapshot.errors),
            "offsets_topic_partitions": snapshot.offsets_topic_partitions,
        }
    )
    for g in snapshot.groups:
        rows["consumer_groups"].append(
            {
                **head,
                "group_id": g.group_id,
                "group_type": g.group_type.value,
                "state": g.state,
                "protocol_type": g.protocol_type,
                "assignor": g.assignor,
                "coordinator_id": g.coordinator_id,
                "expected_coordinator_id": g.expected_coordinator_id,
                "coordinator_mismatch": g.coordinator_mismatch,
                "described": g.described,
                "member_count": len(g.members),
            }
        )
        for m in g.members:
            rows["group_members"].append(
                {
                    **head, "group_id": g.group_id, "member_id": m.member_id,
                    "client_id": m.client_id, "host": m.host, "instance_id": m.instance_id,
                }
            )
            rows["member_subscriptions"].extend(
                {**head, "group_id": g.group_id, "member_id": m.member_id, "topic": t}
                for t in m.subscription or ()
            )
            for kind, tps in (("current", m.assignment), ("target", m.target_assignment or ())):
                rows["member_assignments"].extend(
                    {**head, "group_id": g.group_id, "member_id": m.member_id, "kind": kind,
                     "topic": tp.topic, "partition": tp.partition}
                    for tp in tps
                )
        _kind_rows(rows, head, g)
        rows["committed_offsets"].extend(
            {
                **head, "group_id": g.group_id, "topic": o.topic, "partition": o.partition,
                "committed_offset": o.offset, "leader_epoch": o.leader_epoch,
                "commit_metadata": o.metadata,
            }
            for o in g.offsets
        )
    rows["partition_offsets"].extend(
        {
            **head, "topic": p.topic, "partition": p.partition, "log_start_offset": p.log_start,
            "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable,
            "leader": p.leader,
        }
        for p in snapshot.partitions
    )
    rows["topics"].extend(
        {**head, "topic": t.topic, "partition_count": t.partition_count,
         "retention_ms": t.retention_ms, "retention_bytes": t.retention_bytes,
         "segment_bytes": t.segment_bytes, "cleanup_policy": t.cleanup_policy}
        for t in snapshot.topics
    )
    rows["record_timestamps"].extend(
        {**head, "topic": r.topic, "partition": r.partition, "committed_offset": r.offset,
         "record_offset": r.record_offset,
         "record_ts": datetime.fromtimestamp(r.timestamp_ms / 1000, UTC),
         "timestamp_type": r.timestamp_type}
        for r in snapshot.record_timestamps
    )
    rows["snapshot_notes"].extend(
        {**head, "seq": seq, "note": note} for seq, note in enumerate(snapshot.notes)
    )
    rows["collection_errors"].extend(
        {**head, "seq": seq, **e.as_record()} for seq, e in enumerate(snapshot.errors)
    )
    return {name: pa.Table.from_pylist(rows[name], schema=SCHEMAS[name]) for name in SCHEMAS}



def _kind_rows(rows: dict[str, list[dict[str, Any]]], head: dict[str, Any], g: Group) -> None:
    """The rows of what only share, streams and consumer-protocol groups have: epochs, a
    share group's start offsets and lag, a streams group's subtopologies and tasks."""
    if g.group_epoch is not None or g.assignment_epoch is not None \
            or g.topology_epoch is not None:
        rows["group_epochs"].append(
            {**head, "group_id": g.group_id, "group_epoch": g.group_epoch,
             "assignment_epoch": g.assignment_epoch, "topology_epoch": g.topology_epoch})
    rows["member_epochs"].extend(
        {**head, "group_id": g.group_id, "member_id": m.member_id,
         "member_epoch": m.member_epoch, "process_id": m.process_id}
        for m in g.members if m.member_epoch is not None or m.process_id is not None)
    rows["share_partition_offsets"].extend(
        {**head, "group_id": g.group_id, "topic": p.topic, "partition": p.partition,
         "start_offset": p.start_offset, "lag": p.lag, "leader_epoch": p.leader_epoch}
        for p in g.share_partitions)
    rows["streams_subtopology_topics"].extend(
        {**head, "group_id": g.group_id, "subtopology_id": s.subtopology_id, "role": role,
         "topic": topic}
        for s in g.subtopologies
        for role, topics in (("source", s.source_topics),
                             ("repartition_sink", s.repartition_sink_topics),
                             ("repartition_source", s.repartition_source_topics),
                             ("changelog", s.changelog_topics))
        for topic in topics)
    rows["streams_member_tasks"].extend(
        {**head, "group_id": g.group_id, "member_id": m.member_id,
         "kind": "target" if t.target else "current", "role": t.role.value,
         "subtopology_id": t.subtopology, "partition": t.partition}
        for m in g.members for t in m.tasks)
