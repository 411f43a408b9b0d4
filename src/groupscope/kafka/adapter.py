"""The AdminClient calls a snapshot makes, and their answers read into plain data.

``AdminAdapter`` makes the calls and hands back what confluent-kafka answers (result objects,
or futures of them); the ``read_*`` functions turn those answers into the contract's records
and the plain dataclasses below, so nothing past this module sees a confluent-kafka object.
Failures are not judged here: a call raises or a future fails, and the caller's policy decides
what that means. Broker-level errors a result lists are handed on as they came, for the same
reason.

confluent-kafka is imported only inside the calls: the plain types and readers load without
librdkafka, so the pure assembly that consumes them does too.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from groupscope.contract.model import (
    CollectionError,
    CommittedOffset,
    GroupType,
    Member,
    Stage,
    TopicInfo,
    TopicPartition,
)

__all__ = [
    "OFFSETS_TOPIC",
    "OFFSET_KINDS",
    "AdminAdapter",
    "ClassicGroup",
    "ClassicMember",
    "ClusterMetadata",
    "ConsumerGroupListing",
    "Described",
    "Listing",
    "OffsetKind",
    "read_classic_view",
    "read_committed",
    "read_description",
    "read_listing",
    "read_metadata",
    "read_offset",
]

OFFSETS_TOPIC = "__consumer_offsets"

_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "UNKNOWN": "Unknown",
    "UNKOWN": "Unknown",
}

# A ListOffsets request carries one isolation level, so each kind is a request of its own.
OffsetKind = Literal["log_start", "high_watermark", "last_stable"]
OFFSET_KINDS: tuple[OffsetKind, ...] = ("log_start", "high_watermark", "last_stable")


@dataclass
class ClusterMetadata:
    brokers: set[int]
    topics: dict[str, TopicInfo]
    offsets_leaders: dict[int, int]  # __consumer_offsets partition -> leader broker id
    # Topics whose metadata came back with an error; they matter only if a group touches them.
    topic_errors: dict[str, CollectionError]
    # (topic, partition) -> leader broker id, -1 when the partition has none (offline).
    partition_leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    # __consumer_offsets partition -> its replicas' broker ids (where an offline one lives).
    offsets_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class Listing:
    group_id: str
    group_type: GroupType
    state: str
    protocol_type: str | None
    # Filled for groups of other protocol types, which DescribeConsumerGroups refuses.
    assignor: str | None = None
    members: tuple[Member, ...] = ()


@dataclass(frozen=True)
class ConsumerGroupListing:
    valid: list[Listing]
    # The brokers that could not answer, as the KafkaErrors the result lists.
    errors: list[Any]


@dataclass(frozen=True)
class Described:
    group_type: GroupType
    state: str
    protocol_type: str
    assignor: str | None
    coordinator_id: int | None
    members: tuple[Member, ...]
    from_classic_view: bool = False


@dataclass(frozen=True)
class ClassicMember:
    member_id: str
    client_id: str | None
    client_host: str | None
    metadata: bytes | None  # the protocol's member metadata, still encoded


@dataclass(frozen=True)
class ClassicGroup:
    """A group as the classic ListGroups + DescribeGroups round shows it, fields as the broker
    gave them (None where it gave nothing)."""

    group_id: str
    error: CollectionError | None  # None: answered without error
    state: str | None
    protocol_type: str | None
    protocol: str | None
    coordinator_id: int | None
    members: tuple[ClassicMember, ...]


@dataclass
class AdminAdapter:
    """The admin calls of one snapshot. ``admin`` is a confluent_kafka AdminClient (or anything
    with its methods); every call is counted in ``requests``, by API.

    OffsetFetch calls take turns over ``admin`` and ``offset_fetch_admins`` (more clients of
    the same cluster, so more connections to each coordinator): librdkafka sends one group per
    OffsetFetch, each after a FindCoordinator, and a broker answers the requests of one
    connection one at a time."""

    admin: Any
    request_timeout_s: float
    requests: Counter[str]
    offset_fetch_admins: Sequence[Any] = ()
    _offset_fetchers: Iterator[Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._offset_fetchers = itertools.cycle([self.admin, *self.offset_fetch_admins])

    def list_topics(self) -> Any:
        self.requests["Metadata"] += 1
        return self.admin.list_topics(timeout=self.request_timeout_s)

    def list_consumer_groups(self) -> Any:
        self.requests["ListGroups"] += 1
        return self.admin.list_consumer_groups(request_timeout=self.request_timeout_s).result()

    def list_classic_groups(self) -> Any:
        self.requests["ListGroups+DescribeGroups(classic, per broker)"] += 1
        with warnings.catch_warnings():
            # Deprecated in favour of the consumer-group APIs, which cannot see all this.
            warnings.simplefilter("ignore", DeprecationWarning)
            return self.admin.list_groups(timeout=self.request_timeout_s)

    def describe_consumer_groups(
        self, group_ids: Sequence[str]
    ) -> dict[str, concurrent.futures.Future[Any]]:
        self.requests["DescribeGroups"] += 1
        result: dict[str, concurrent.futures.Future[Any]] = (
            self.admin.describe_consumer_groups(
                list(group_ids), request_timeout=self.request_timeout_s
            )
        )
        return result

    def list_consumer_group_offsets(
        self, group_id: str
    ) -> dict[str, concurrent.futures.Future[Any]]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        self.requests["OffsetFetch"] += 1
        result: dict[str, concurrent.futures.Future[Any]] = (
            next(self._offset_fetchers).list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group_id)],
                request_timeout=self.request_timeout_s,
            )
        )
        return result

    def describe_topic_configs(
        self, topics: Sequence[str]
    ) -> dict[str, concurrent.futures.Future[Any]]:
        """One DescribeConfigs call for the topics (topic resources need no particular broker:
        librdkafka sends them in one request), topic -> its future."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        self.requests["DescribeConfigs"] += 1
        answer = self.admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, t) for t in topics],
            request_timeout=self.request_timeout_s)
        return {resource.name: future for resource, future in answer.items()}

    def list_offsets(
        self, batch: Sequence[tuple[OffsetKind, TopicPartition]]
    ) -> dict[tuple[OffsetKind, TopicPartition], concurrent.futures.Future[Any]]:
        """One ListOffsets call per kind in ``batch``; librdkafka splits each by leader."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as KafkaTP
        from confluent_kafka.admin import OffsetSpec

        kinds: dict[OffsetKind, tuple[Callable[[], Any], Any]] = {
            "log_start": (OffsetSpec.earliest, IsolationLevel.READ_UNCOMMITTED),
            "high_watermark": (OffsetSpec.latest, IsolationLevel.READ_UNCOMMITTED),
            "last_stable": (OffsetSpec.latest, IsolationLevel.READ_COMMITTED),
        }
        futures: dict[tuple[OffsetKind, TopicPartition], concurrent.futures.Future[Any]] = {}
        for kind in {k for k, _ in batch}:
            spec, isolation = kinds[kind]
            self.requests["ListOffsets"] += 1
            answer = self.admin.list_offsets(
                {KafkaTP(tp.topic, tp.partition): spec() for k, tp in batch if k == kind},
                isolation_level=isolation,
                request_timeout=self.request_timeout_s,
            )
            futures.update(
                ((kind, TopicPartition(k.topic, k.partition)), f) for k, f in answer.items()
            )
        return futures


@dataclass(frozen=True)
class Retention:
    """A topic's retention settings (TopicInfo's fields of the same names)."""

    retention_ms: int | None
    retention_bytes: int | None
    segment_bytes: int | None
    cleanup_policy: str | None


def read_retention(entries: dict[str, Any]) -> Retention:
    """A topic's DescribeConfigs answer (config name -> ConfigEntry); a setting missing or
    unreadable is None."""

    def number(name: str) -> int | None:
        raw = getattr(entries.get(name), "value", None)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    policy = getattr(entries.get("cleanup.policy"), "value", None)
    return Retention(number("retention.ms"), number("retention.bytes"),
                     number("segment.bytes"),
                     policy.replace(" ", "") if isinstance(policy, str) else None)


def read_metadata(md: Any) -> ClusterMetadata:
    topic_errors: dict[str, CollectionError] = {}
    topics: dict[str, TopicInfo] = {}
    for name, topic in md.topics.items():
        if topic.error is not None:
            topic_errors[name] = CollectionError(
                Stage.TOPIC_METADATA, topic.error.name(), topic.error.str(), topic=name,
                retriable=bool(topic.error.retriable()),
            )
            continue
        topics[name] = TopicInfo(name, len(topic.partitions))
    leaders = {(name, pid): p.leader for name, topic in md.topics.items()
               if topic.error is None for pid, p in topic.partitions.items()}
    offsets_leaders: dict[int, int] = {}
    offsets_replicas: dict[int, tuple[int, ...]] = {}
    if OFFSETS_TOPIC in md.topics and md.topics[OFFSETS_TOPIC].error is None:
        offsets = md.topics[OFFSETS_TOPIC].partitions
        offsets_leaders = {pid: p.leader for pid, p in offsets.items()}
        offsets_replicas = {pid: tuple(p.replicas or ()) for pid, p in offsets.items()}
    return ClusterMetadata(set(md.brokers), topics, offsets_leaders, topic_errors, leaders,
                           offsets_replicas)


def read_listing(result: Any) -> ConsumerGroupListing:
    return ConsumerGroupListing(
        valid=[
            Listing(
                group_id=g.group_id,
                group_type=_group_type(getattr(g, "type", None)),
                state=_state_name(getattr(g, "state", None)),
                protocol_type="" if g.is_simple_consumer_group else "consumer",
            )
            for g in result.valid or ()
        ],
        errors=list(result.errors or ()),
    )


def read_classic_view(groups: Any) -> dict[str, ClassicGroup]:
    return {g.id: _classic_group(g) for g in groups}


def _classic_group(g: Any) -> ClassicGroup:
    error = None
    if g.error is not None and g.error.code() != 0:
        error = CollectionError(Stage.DESCRIBE_GROUP, g.error.name(), g.error.str(),
                                group_id=g.id)
    return ClassicGroup(
        group_id=g.id,
        error=error,
        state=g.state,
        protocol_type=g.protocol_type,
        protocol=g.protocol,
        coordinator_id=g.broker.id if g.broker is not None else None,
        members=tuple(
            ClassicMember(member_id=m.id, client_id=m.client_id, client_host=m.client_host,
                          metadata=m.metadata)
            for m in g.members or ()
        ),
    )


def read_description(description: Any) -> Described:
    return Described(
        group_type=_group_type(getattr(description, "type", None)),
        state=_state_name(description.state),
        protocol_type="" if description.is_simple_consumer_group else "consumer",
        assignor=description.partition_assignor or None,
        coordinator_id=description.coordinator.id if description.coordinator else None,
        members=tuple(sorted((_member(m) for m in description.members or ()),
                             key=lambda m: m.member_id)),
    )


def read_committed(result: Any) -> list[tuple[CommittedOffset, Any]]:
    """Each partition's committed offset, in the order answered, with the KafkaError the
    broker gave for that partition (None: none)."""
    return [
        (
            CommittedOffset(
                topic=tp.topic,
                partition=tp.partition,
                offset=tp.offset if tp.offset >= 0 else None,
                leader_epoch=tp.leader_epoch
                if tp.leader_epoch is not None and tp.leader_epoch >= 0 else None,
                metadata=tp.metadata or None,
            ),
            tp.error,
        )
        for tp in result.topic_partitions or ()
    ]


def read_offset(result: Any) -> int:
    return int(result.offset)


def _member(m: Any) -> Member:
    target = getattr(m, "target_assignment", None)
    return Member(
        member_id=m.member_id,
        client_id=m.client_id or "",
        host=m.host or "",
        instance_id=m.group_instance_id or None,
        assignment=tuple(sorted(_tps(m.assignment))),
        target_assignment=tuple(sorted(_tps(target))) if target is not None else None,
    )


def _tps(assignment: Any) -> list[TopicPartition]:
    if assignment is None:
        return []
    return [TopicPartition(tp.topic, tp.partition) for tp in assignment.topic_partitions or ()]


def _group_type(value: Any) -> GroupType:
    name = getattr(value, "name", str(value or "")).upper()
    if name == "CONSUMER":
        return GroupType.CONSUMER
    if name == "CLASSIC":
        return GroupType.CLASSIC
    return GroupType.UNKNOWN


def _state_name(value: Any) -> str:
    name = getattr(value, "name", str(value or "UNKNOWN")).upper()
    return _STATE_NAMES.get(name, name.title())
