"""A snapshot assembled from the admin API's answers, already read into plain data: no I/O.

The collector calls these in the order its requests need them: the groups (from listings,
descriptions and committed offsets), then the partitions they touch (whose log offsets it asks
for next), then the committed offsets worth reading a record at, then the snapshot itself.
What cannot be reconciled (offsets on a topic the cluster does not have, say) is recorded as a
CollectionError and the rest is kept.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from groupscope.contract.model import (
    CollectionError,
    CommittedOffset,
    Group,
    GroupType,
    Member,
    PartitionOffsets,
    RecordTimestamp,
    SharePartition,
    Snapshot,
    Stage,
    TopicInfo,
    TopicPartition,
)
from groupscope.kafka.adapter import (
    OFFSETS_TOPIC,
    ClassicGroup,
    ClusterMetadata,
    Described,
    Listing,
    OffsetKind,
    Retention,
)
from groupscope.kafka.coordinator import offsets_partition_for
from groupscope.kafka.java_admin import KindDescription, KindListing
from groupscope.kafka.protocol import ProtocolDecodeError, decode_subscription
from groupscope.kafka.sampling import SampleRequest

log = logging.getLogger(__name__)

__all__ = [
    "assemble_groups",
    "assemble_snapshot",
    "classic_descriptions",
    "kind_groups",
    "other_kinds_hinted",
    "other_protocol_listings",
    "partition_offsets",
    "record_timestamp_requests",
    "touched_partitions",
    "unlisted_errors",
    "unlisted_groups",
]


def other_protocol_listings(
    classic_view: Mapping[str, ClassicGroup], errors: list[CollectionError]
) -> list[Listing]:
    """Classic groups whose protocol type is neither consumer nor empty (Kafka Connect
    workers, schema registries...), which the consumer-group APIs leave out."""
    found: list[Listing] = []
    for g in classic_view.values():
        if g.protocol_type in ("", "consumer", None):
            continue
        if g.error is not None:
            errors.append(g.error)
        members = tuple(
            Member(
                member_id=m.member_id,
                client_id=m.client_id or "",
                host=m.client_host or "",
                instance_id=None,
                assignment=(),  # a non-consumer protocol's assignment is opaque bytes
            )
            for m in g.members
        )
        found.append(
            Listing(
                group_id=g.group_id,
                group_type=GroupType.CLASSIC,
                state=g.state or "Unknown",
                protocol_type=g.protocol_type,
                assignor=g.protocol or None,
                members=members,
            )
        )
    return found


def classic_descriptions(
    listings: Iterable[Listing], classic_view: Mapping[str, ClassicGroup]
) -> tuple[dict[str, Described], list[str]]:
    """The groups the classic view already describes completely, and the ids of the consumer
    and simple groups still to describe. Groups of other protocols are neither: the classic
    view is all there is of them."""
    described: dict[str, Described] = {}
    wanted = []
    for listing in listings:
        if listing.protocol_type not in ("", "consumer"):
            continue
        memberless = _memberless(classic_view.get(listing.group_id))
        if listing.group_type is not GroupType.CONSUMER and memberless is not None:
            described[listing.group_id] = memberless
        else:
            wanted.append(listing.group_id)
    return described, wanted


def _memberless(seen: ClassicGroup | None) -> Described | None:
    """A classic group the classic view describes completely: answered without error, a
    consumer (or simple) group, Empty, no members. Anything else is described on its own."""
    if (
        seen is None
        or seen.error is not None
        or seen.protocol_type not in ("", "consumer")
        or seen.state != "Empty"
        or seen.members
    ):
        return None
    return Described(
        group_type=GroupType.CLASSIC, state=seen.state, protocol_type=seen.protocol_type,
        assignor=seen.protocol or None, coordinator_id=seen.coordinator_id,
        members=(), from_classic_view=True,
    )


def assemble_groups(
    listings: Iterable[Listing],
    described: Mapping[str, Described],
    committed: Mapping[str, tuple[CommittedOffset, ...]],
    metadata: ClusterMetadata,
    classic_view: Mapping[str, ClassicGroup],
) -> tuple[Group, ...]:
    return tuple(
        _group(listing, described.get(listing.group_id), committed, metadata,
               classic_view.get(listing.group_id))
        for listing in listings
    )


def _group(
    listing: Listing,
    described: Described | None,
    committed: Mapping[str, tuple[CommittedOffset, ...]],
    metadata: ClusterMetadata,
    seen: ClassicGroup | None,
) -> Group:
    expected = _expected_coordinator(listing.group_id, metadata)
    offsets = committed.get(listing.group_id, ())
    if described is None:
        return Group(
            group_id=listing.group_id,
            group_type=listing.group_type,
            state=listing.state,
            protocol_type=listing.protocol_type,
            assignor=listing.assignor,
            coordinator_id=None,
            expected_coordinator_id=expected,
            members=listing.members,
            offsets=offsets,
            described=listing.protocol_type not in ("", "consumer"),
        )
    group_type = (listing.group_type if described.group_type is GroupType.UNKNOWN
                  else described.group_type)
    return Group(
        group_id=listing.group_id,
        group_type=group_type,
        state=consumer_group_state(group_type, described.state, described.members),
        protocol_type=described.protocol_type,
        assignor=described.assignor,
        coordinator_id=described.coordinator_id,
        expected_coordinator_id=expected,
        members=_with_subscriptions(described.members, seen),
        offsets=offsets,
    )


def _expected_coordinator(group_id: str, metadata: ClusterMetadata) -> int | None:
    if not metadata.offsets_leaders:
        return None
    partition = offsets_partition_for(group_id, len(metadata.offsets_leaders))
    return metadata.offsets_leaders.get(partition)


def coordinator_outages(metadata: ClusterMetadata) -> list[CollectionError]:
    """One error per ``__consumer_offsets`` partition without a leader. Such a partition's
    groups have no coordinator: no broker lists them, and they can be neither described nor
    committed to, nor rebalanced. Without this error a snapshot taken once the broker was
    fenced is complete and misses them, as if they had been deleted."""
    errors = []
    for partition, leader in sorted(metadata.offsets_leaders.items()):
        if leader >= 0:
            continue
        replicas = metadata.offsets_replicas.get(partition, ())
        on = (f"its replica{'s' if len(replicas) > 1 else ''}: broker"
              f"{'s' if len(replicas) > 1 else ''} {', '.join(map(str, replicas))}"
              if replicas else "no replica listed")
        errors.append(CollectionError(
            Stage.LIST_GROUPS, "COORDINATOR_NOT_AVAILABLE",
            f"{OFFSETS_TOPIC} partition {partition} has no leader ({on}, none in sync and"
            " up): the groups it coordinates cannot be listed, described or committed to",
            topic=OFFSETS_TOPIC, partition=partition, retriable=True))
    return errors


def unlisted_groups(expected: Iterable[str], listed: Iterable[str],
                    limit: int) -> tuple[list[str], list[CollectionError]]:
    """The groups expected (``land.snapshots.expected_groups``) that ListGroups no longer
    lists, to probe: at most ``limit``, the first by name; and one error when more are
    missing (the others' fate unknown this once: a mass deletion, or Describe lost on all)."""
    missing = sorted(set(expected) - set(listed))
    if len(missing) <= limit:
        return missing, []
    return missing[:limit], [CollectionError(
        Stage.LIST_GROUPS, "_NOT_PROBED",
        f"{len(missing)} groups the snapshot before listed are no longer listed by ListGroups;"
        f" only the first {limit} were probed, so whether the others ({missing[limit]}, ...)"
        " were deleted or hidden (the monitor's Describe on them removed) is unknown")]


def unlisted_errors(probed: Iterable[str],
                    committed: Mapping[str, tuple[CommittedOffset, ...]],
                    failed: Iterable[CollectionError]) -> list[CollectionError]:
    """What the OffsetFetch probe of groups ListGroups no longer lists says. ListGroups
    leaves out silently a group the monitor may no longer Describe (the same ACL OffsetFetch
    needs), and a coordinator handing a group over lists nothing for it a while: a group
    whose offsets are still committed, or that cannot be read, exists or may, and is one
    error (the snapshot partial, the group's incidents kept). One that is gone answers no
    offset, or GROUP_ID_NOT_FOUND: deleted, nothing to record."""
    first_failure: dict[str, CollectionError] = {}
    for error in failed:
        if error.group_id is not None:
            first_failure.setdefault(error.group_id, error)
    errors = []
    for group_id in probed:
        failure = first_failure.get(group_id)
        unlisted = f"group {group_id} is no longer listed by ListGroups"
        if failure is not None and failure.code == "GROUP_ID_NOT_FOUND":
            continue
        if failure is not None and failure.code == "GROUP_AUTHORIZATION_FAILED":
            message = (f"{unlisted}, and Describe on it is denied (GROUP_AUTHORIZATION_FAILED):"
                       f" grant the monitor's principal Describe on group {group_id} (or"
                       " delete the group if it is no longer used); until then whether it"
                       " still runs is unknown")
        elif failure is not None:
            message = (f"{unlisted}, and fetching its committed offsets failed "
                       f"({failure.code}: {failure.message}): whether it was deleted is "
                       "unknown")
        elif committed.get(group_id):
            message = (f"{unlisted} but its offsets are still committed "
                       f"({len(committed[group_id])} partition(s)): check the monitor's "
                       f"Describe ACL on group {group_id} (or its coordinator is moving, which"
                       " lists nothing for it a while)")
        else:
            continue
        errors.append(CollectionError(
            Stage.LIST_GROUPS, failure.code if failure is not None else "_NOT_LISTED",
            message, group_id=group_id,
            retriable=failure.retriable if failure is not None else True,
            attempts=failure.attempts if failure is not None else 1))
    return errors


def other_kinds_hinted(classic_view: Mapping[str, ClassicGroup],
                       consumer_listed: Iterable[str]) -> bool:
    """Whether the cluster may have share or streams groups. librdkafka's ListConsumerGroups
    leaves them out, but the classic ListGroups round lists every group, and shows these
    as protocol-less Dead groups: a group it lists that the consumer listing did not is the
    hint (or a classic group created between the two calls: a false hint costs one Java
    Admin round, a missed one would cost the groups)."""
    listed = set(consumer_listed)
    return any(group_id not in listed and g.protocol_type in ("", None)
               for group_id, g in classic_view.items())


def kind_groups(
    listings: Iterable[KindListing],
    described: Mapping[str, KindDescription],
    share_offsets: Mapping[str, tuple[SharePartition, ...]],
    streams_offsets: Mapping[str, tuple[CommittedOffset, ...]],
    metadata: ClusterMetadata,
) -> tuple[Group, ...]:
    """Share and streams groups from the Java Admin client's answers. A group whose
    description failed keeps its listing's state and ``described=False``."""
    groups = []
    for listing in listings:
        d = described.get(listing.group_id)
        groups.append(Group(
            group_id=listing.group_id,
            group_type=listing.group_type,
            state=d.state if d is not None else listing.state,
            protocol_type=listing.group_type.value,
            assignor=None,
            coordinator_id=d.coordinator_id if d is not None else None,
            expected_coordinator_id=_expected_coordinator(listing.group_id, metadata),
            members=d.members if d is not None else (),
            offsets=streams_offsets.get(listing.group_id, ()),
            described=d is not None,
            group_epoch=d.group_epoch if d is not None else None,
            assignment_epoch=d.assignment_epoch if d is not None else None,
            topology_epoch=d.topology_epoch if d is not None else None,
            subtopologies=d.subtopologies if d is not None else (),
            share_partitions=share_offsets.get(listing.group_id, ()),
        ))
    return tuple(groups)


def consumer_group_state(group_type: GroupType, state: str,
                         members: Sequence[Member]) -> str:
    """The group's state, with what librdkafka cannot say put back: it knows the classic
    states only, so a consumer-protocol (KIP-848) group that is Assigning or Reconciling
    arrives as Unknown. Its members tell Reconciling apart: one whose current assignment is
    not its target is still reconciling. (Assigning, the assignor not done yet, leaves no such
    trace: it stays Unknown, and lasts a heartbeat or so.)"""
    if state != "Unknown" or group_type is not GroupType.CONSUMER:
        return state
    if any(m.target_assignment is not None
           and set(m.assignment) != set(m.target_assignment) for m in members):
        return "Reconciling"
    return state


def _with_subscriptions(
    members: tuple[Member, ...], seen: ClassicGroup | None
) -> tuple[Member, ...]:
    """Adds each member's subscribed topics, decoded from the metadata the classic view
    carries (ConsumerProtocolSubscription). Undecodable metadata leaves it unknown."""
    if seen is None or seen.protocol_type != "consumer":
        return members
    metadata = {m.member_id: m.metadata for m in seen.members}
    out = []
    for member in members:
        raw = metadata.get(member.member_id)
        topics = None
        if raw:
            try:
                topics = tuple(sorted(decode_subscription(raw).topics))
            except ProtocolDecodeError:
                log.warning("undecodable subscription of a member of %r", seen.group_id)
        out.append(dataclasses.replace(member, subscription=topics))
    return tuple(out)


def touched_partitions(
    groups: Iterable[Group], metadata: ClusterMetadata, errors: list[CollectionError]
) -> list[TopicPartition]:
    """The partitions groups commit to or are assigned that the cluster has, whose log
    offsets are worth asking for; the others are recorded as errors."""
    touched: set[TopicPartition] = set()
    for g in groups:
        touched.update(TopicPartition(o.topic, o.partition) for o in g.offsets)
        touched.update(TopicPartition(p.topic, p.partition) for p in g.share_partitions)
        for m in g.members:
            touched.update(m.assignment)
            touched.update(m.target_assignment or ())
    known: list[TopicPartition] = []
    missing_topics: set[str] = set()
    for tp in sorted(touched):
        info = metadata.topics.get(tp.topic)
        if info is not None and tp.partition < info.partition_count:
            known.append(tp)
        elif info is None:
            missing_topics.add(tp.topic)
        else:
            errors.append(
                CollectionError(
                    Stage.TOPIC_METADATA, "UNKNOWN_TOPIC_OR_PART",
                    f"partition not in the topic's metadata ({info.partition_count} "
                    "partitions)",
                    topic=tp.topic, partition=tp.partition,
                )
            )
    for topic in sorted(missing_topics):
        errors.append(
            metadata.topic_errors.get(topic)
            or CollectionError(
                Stage.TOPIC_METADATA, "UNKNOWN_TOPIC_OR_PART",
                "groups hold offsets or assignments for a topic the cluster does not have "
                "(deleted?)",
                topic=topic,
            )
        )
    return known


def apparent_losses(groups: Iterable[Group], partitions: Iterable[PartitionOffsets]
                    ) -> dict[str, list[TopicPartition]]:
    """The partitions, per group, whose committed offset is below the log start as read: lost
    records, or a read skew. The committed offsets are read before the log start, and an
    owner that deletes what it has just committed (a Kafka Streams application's repartition
    topics, DeleteRecords) moves the log start past the offset read a moment before."""
    starts = {(p.topic, p.partition): p.log_start for p in partitions}
    found: dict[str, list[TopicPartition]] = {}
    for g in groups:
        for o in g.offsets:
            start = starts.get((o.topic, o.partition))
            if o.offset is not None and start is not None and o.offset < start:
                found.setdefault(g.group_id, []).append(TopicPartition(o.topic, o.partition))
    return found


def with_rereads(groups: Sequence[Group], partitions: Sequence[PartitionOffsets],
                 suspects: Mapping[str, Sequence[TopicPartition]],
                 reread: Mapping[str, Sequence[CommittedOffset]],
                 later: Sequence[PartitionOffsets]) -> tuple[list[Group], list[PartitionOffsets]]:
    """The snapshot's groups and partitions with the suspect offsets read again: each
    suspect partition's committed offset as ``reread`` has it (read after the log start), and
    its high watermark and last stable offset as ``later`` has them (read after that), so the
    three are read in the order that cannot skew. Its log start stays the one first read (a
    later one could pass the reread offset again). A group or partition not read again keeps
    its first figures: a real loss reads the same the second time."""
    again = {(group_id, o.topic, o.partition): o
             for group_id, offsets in reread.items() for o in offsets}
    wanted = {(group_id, tp.topic, tp.partition)
              for group_id, tps in suspects.items() for tp in tps}
    fixed = []
    for g in groups:
        if g.group_id in suspects:
            g = dataclasses.replace(g, offsets=tuple(
                again.get((g.group_id, o.topic, o.partition), o)
                if (g.group_id, o.topic, o.partition) in wanted else o for o in g.offsets))
        fixed.append(g)
    ends = {(p.topic, p.partition): p for p in later
            if p.high_watermark is not None}
    return fixed, [
        dataclasses.replace(p, high_watermark=ends[key].high_watermark,
                            last_stable=ends[key].last_stable)
        if (key := (p.topic, p.partition)) in ends else p
        for p in partitions]


def partition_offsets(
    partitions: Iterable[TopicPartition],
    values: Mapping[OffsetKind, Mapping[TopicPartition, int]],
    leaders: Mapping[tuple[str, int], int] | None = None,
) -> tuple[PartitionOffsets, ...]:
    """One record per partition from the offsets each ListOffsets kind answered (None where
    it did not), with its leader from the snapshot's metadata."""
    return tuple(
        PartitionOffsets(
            topic=tp.topic,
            partition=tp.partition,
            log_start=values["log_start"].get(tp),
            high_watermark=values["high_watermark"].get(tp),
            last_stable=_at_most(values["last_stable"].get(tp),
                                 values["high_watermark"].get(tp)),
            leader=(leaders or {}).get((tp.topic, tp.partition)),
        )
        for tp in partitions
    )


def _at_most(last_stable: int | None, high_watermark: int | None) -> int | None:
    """The last stable offset never exceeds the high watermark at any one moment, but the two
    are answered by separate requests in flight together: one that arrives after more records
    were appended can read higher. Read at the high watermark's moment, it is at most that."""
    if last_stable is None or high_watermark is None:
        return last_stable
    return min(last_stable, high_watermark)


def record_timestamp_requests(
    groups: Iterable[Group], partitions: Iterable[PartitionOffsets]
) -> list[SampleRequest]:
    """A record to read at every committed offset with lag: inside the log and below the high
    watermark (at the high watermark there is no record yet; below the log start, none left)."""
    logs = {TopicPartition(p.topic, p.partition): p for p in partitions}
    requests = []
    for g in groups:
        for o in g.offsets:
            partition = logs.get(TopicPartition(o.topic, o.partition))
            if (o.offset is None or partition is None or partition.high_watermark is None
                    or partition.log_start is None):
                continue
            if partition.log_start <= o.offset < partition.high_watermark:
                requests.append(SampleRequest(TopicPartition(o.topic, o.partition),
                                              o.offset, partition.high_watermark - o.offset))
    return requests


def _with_retention(topic: TopicInfo, retention: Retention | None) -> TopicInfo:
    if retention is None:
        return topic
    return dataclasses.replace(
        topic, retention_ms=retention.retention_ms, retention_bytes=retention.retention_bytes,
        segment_bytes=retention.segment_bytes, cleanup_policy=retention.cleanup_policy)


def assemble_snapshot(
    cluster: str,
    snapshot_ts: datetime,
    metadata: ClusterMetadata,
    groups: Sequence[Group],
    partitions: Sequence[PartitionOffsets],
    record_timestamps: Iterable[RecordTimestamp],
    errors: Iterable[CollectionError],
    retention: Mapping[str, Retention] | None = None,
    notes: Iterable[str] = (),
) -> Snapshot:
    """``partitions``: the log offsets of every touched partition; ``retention``: topic ->
    its retention settings (TopicInfo fields), where they were read."""
    # Partition counts of subscribed topics too: what-if needs them even for topics no
    # member owns or commits yet.
    subscribed = {t for g in groups for m in g.members for t in m.subscription or ()}
    used_topics = sorted(({p.topic for p in partitions} | subscribed) & set(metadata.topics))
    return Snapshot(
        cluster=cluster,
        snapshot_ts=snapshot_ts,
        groups=tuple(sorted(groups, key=lambda g: g.group_id)),
        partitions=tuple(partitions),
        topics=tuple(_with_retention(metadata.topics[t], (retention or {}).get(t))
                     for t in used_topics),
        errors=tuple(errors),
        offsets_topic_partitions=len(metadata.offsets_leaders) or None,
        record_timestamps=tuple(record_timestamps),
        notes=tuple(notes),
    )
