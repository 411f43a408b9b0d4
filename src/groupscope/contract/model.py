"""The contract every stage speaks: immutable records of one consumer-group snapshot.

A snapshot is stamped with the time it was given by its caller; nothing in here reads a clock.
Absent values are ``None``, never a sentinel number: "no committed offset" and "offset 0" are
different facts, and so are "lag unknown" and "lag 0".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class GroupType(StrEnum):
    CLASSIC = "classic"
    CONSUMER = "consumer"  # KIP-848: the broker assigns
    SHARE = "share"  # KIP-932: members share partitions, records are acknowledged one by one
    STREAMS = "streams"  # KIP-1071: the broker assigns a Kafka Streams application's tasks
    UNKNOWN = "unknown"


# The kinds only Kafka's Java Admin client describes (groupscope.kafka.java_admin).
JAVA_ADMIN_TYPES = (GroupType.SHARE, GroupType.STREAMS)


class Stage(StrEnum):
    """Where in the collection an error happened."""

    CLUSTER = "cluster"  # bootstrap, metadata: the whole snapshot is affected
    LIST_GROUPS = "list_groups"
    DESCRIBE_GROUP = "describe_group"
    GROUP_OFFSETS = "group_offsets"
    PARTITION_OFFSETS = "partition_offsets"
    TOPIC_METADATA = "topic_metadata"
    RECORD_TIMESTAMPS = "record_timestamps"  # sampling the record at a committed offset
    TOPIC_CONFIGS = "topic_configs"  # DescribeConfigs: a topic's retention settings
    # The share and streams groups, through Kafka's Java Admin client: listing them,
    # describing them, and their offsets (share-partition start offsets, streams commits).
    GROUP_KINDS = "group_kinds"


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


# Which partitions each member owns: member id -> its partitions, sorted.
Assignment = dict[str, tuple[TopicPartition, ...]]


@dataclass(frozen=True, slots=True)
class CollectionError:
    """One thing the collector could not learn. Recorded on the snapshot, never dropped."""

    stage: Stage
    code: str  # the Kafka error name (GROUP_ID_NOT_FOUND, ...) or TIMEOUT / UNEXPECTED
    message: str
    group_id: str | None = None
    topic: str | None = None
    partition: int | None = None
    retriable: bool = False
    attempts: int = 1

    def as_record(self) -> dict[str, object]:
        return {
            "stage": self.stage.value, "code": self.code, "message": self.message,
            "group_id": self.group_id, "topic": self.topic, "partition": self.partition,
            "retriable": self.retriable, "attempts": self.attempts,
        }

    def describe(self) -> str:
        subject = ", ".join(
            f"{name}={value!r}"
            for name, value in (
                ("group", self.group_id),
                ("topic", self.topic),
                ("partition", self.partition),
            )
            if value is not None
        )
        where = f" [{subject}]" if subject else ""
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"{self.stage}: {self.code}{where}{tries}: {self.message}"


class TaskRole(StrEnum):
    """What a streams-group member does with a task (KIP-1071)."""

    ACTIVE = "active"  # processes it
    STANDBY = "standby"  # keeps a replica of its state
    WARMUP = "warmup"  # catching its state up before it becomes active here


@dataclass(frozen=True, slots=True, order=True)
class StreamsTask:
    """One task of a streams-group member: the subtopology's partition ``partition``. ``target``
    marks the broker's target assignment (what the member owns once it has reconciled)."""

    role: TaskRole
    subtopology: str
    partition: int
    target: bool = False


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None  # group.instance.id: a static member
    assignment: tuple[TopicPartition, ...]
    # KIP-848 groups only: what the broker wants this member to own once it has reconciled.
    target_assignment: tuple[TopicPartition, ...] | None = None
    # Topics the member subscribes to, from its classic-protocol metadata (None: unknown,
    # e.g. KIP-848 members, whose subscriptions confluent-kafka does not expose).
    subscription: tuple[str, ...] | None = None
    # Share and streams groups: the member's epoch; streams groups: its tasks and the id of
    # the Kafka Streams process (instance) it belongs to.
    member_epoch: int | None = None
    tasks: tuple[StreamsTask, ...] = ()
    process_id: str | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int | None  # None: the group has no committed offset for this partition
    leader_epoch: int | None = None
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class SharePartition:
    """A share group's position on one partition (ListShareGroupOffsets). The start offset is
    the earliest offset still in flight: records below it are all acknowledged, some above it
    may be too. ``lag`` is the broker's count of records not yet acknowledged (KIP-1226, Kafka
    4.2+). Both None where the group has no state for the partition yet."""

    topic: str
    partition: int
    start_offset: int | None
    lag: int | None
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Subtopology:
    """One subtopology of a streams group's topology, with its topics by role."""

    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[str, ...] = ()
    changelog_topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Broker-side offsets of one partition: log start <= LSO <= high watermark."""

    topic: str
    partition: int
    log_start: int | None
    high_watermark: int | None
    last_stable: int | None
    # The broker leading the partition when the snapshot's metadata was read: -1 when none
    # does (the partition is offline), None where the metadata did not say.
    leader: int | None = None


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    group_type: GroupType
    state: str
    # "consumer" for consumer groups, "" for simple (commit-only) groups, "connect" and others
    # for classic groups of other clients; None where the broker did not say.
    protocol_type: str | None
    assignor: str | None
    coordinator_id: int | None
    # The leader of the group's __consumer_offsets partition, by Kafka's hashing formula.
    expected_coordinator_id: int | None
    members: tuple[Member, ...]
    offsets: tuple[CommittedOffset, ...]
    described: bool = True  # False when DescribeGroups failed: members and state are unknown
    # Share, streams and consumer-protocol groups: the group's epoch and its target
    # assignment's; streams groups: the topology's epoch and its subtopologies.
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    topology_epoch: int | None = None
    subtopologies: tuple[Subtopology, ...] = ()
    # Share groups only: the start offset and lag per partition (they commit no offsets).
    share_partitions: tuple[SharePartition, ...] = ()

    @property
    def coordinator_mismatch(self) -> bool:
        return (
            self.coordinator_id is not None
            and self.expected_coordinator_id is not None
            and self.coordinator_id != self.expected_coordinator_id
        )

    @property
    def is_simple(self) -> bool:
        return self.protocol_type == ""


@dataclass(frozen=True, slots=True)
class RecordTimestamp:
    """The timestamp of the record at a committed offset: the exact time lag of every group
    committed there is the snapshot time minus this. ``record_offset`` is the offset actually
    read, above ``offset`` when that one is gone (compaction, a transaction marker)."""

    topic: str
    partition: int
    offset: int
    record_offset: int
    timestamp_ms: int
    timestamp_type: str  # create_time | log_append_time


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic, with the settings that decide when its records are deleted (DescribeConfigs;
    None where the collector could not read them). -1 is Kafka's own "unlimited"."""

    topic: str
    partition_count: int
    retention_ms: int | None = None
    retention_bytes: int | None = None
    segment_bytes: int | None = None
    cleanup_policy: str | None = None  # delete, compact, or compact,delete


_EXTRAS = frozenset({Stage.RECORD_TIMESTAMPS, Stage.TOPIC_CONFIGS})


@dataclass(frozen=True, slots=True)
class Snapshot:
    cluster: str
    snapshot_ts: datetime
    groups: tuple[Group, ...]
    partitions: tuple[PartitionOffsets, ...]
    topics: tuple[TopicInfo, ...]
    errors: tuple[CollectionError, ...] = field(default=())
    offsets_topic_partitions: int | None = None
    record_timestamps: tuple[RecordTimestamp, ...] = field(default=())
    # What the collector skipped by design, not by failure (a cluster too old for share and
    # streams groups, say): read by people, costs no completeness.
    notes: tuple[str, ...] = field(default=())

    @property
    def complete(self) -> bool:
        # A record-timestamp sample that failed costs one exact time-lag figure (the estimate
        # stands in), and a topic's unread retention settings cost its loss forecast's time
        # bound, not the snapshot's completeness; both are still listed in the errors.
        return all(e.stage in _EXTRAS for e in self.errors)

    def partition_offsets(self) -> dict[TopicPartition, PartitionOffsets]:
        return {TopicPartition(p.topic, p.partition): p for p in self.partitions}


def offset_lag(committed: int | None, high_watermark: int | None) -> int | None:
    """High watermark minus committed offset, unclamped.

    None where either side is unknown. A negative value (committed beyond the high watermark,
    e.g. after a topic was re-created) is returned as is: it is a state to report, not a
    number to hide.
    """
    if committed is None or high_watermark is None:
        return None
    return high_watermark - committed
