"""The pure assembly of a snapshot, on plain data: what the admin API answered, already read by
the adapter, turned into groups, touched partitions, sampling requests and the snapshot."""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import groupscope
from groupscope.collect.assemble import (
    apparent_losses,
    assemble_groups,
    assemble_snapshot,
    classic_descriptions,
    consumer_group_state,
    coordinator_outages,
    other_protocol_listings,
    partition_offsets,
    record_timestamp_requests,
    touched_partitions,
    unlisted_errors,
    unlisted_groups,
    with_rereads,
)
from groupscope.contract.model import (
    CollectionError,
    CommittedOffset,
    Group,
    GroupType,
    Member,
    PartitionOffsets,
    Stage,
    TopicInfo,
    TopicPartition,
)
from groupscope.kafka.adapter import (
    ClassicGroup,
    ClassicMember,
    ClusterMetadata,
    Described,
    Listing,
    OffsetKind,
)
from groupscope.kafka.sampling import SampleRequest

TS = datetime(2026, 11, 21, tzinfo=UTC)
T0 = TopicPartition("orders", 0)
T1 = TopicPartition("orders", 1)


def _metadata(topics: dict[str, int] | None = None,
              topic_errors: dict[str, CollectionError] | None = None) -> ClusterMetadata:
    # Three __consumer_offsets partitions led by distinct brokers: a group's expected
    # coordinator tells which partition the assembly picked. "payments" hashes to 2.
    return ClusterMetadata(
        brokers={10, 11, 12},
        topics={name: TopicInfo(name, count)
                for name, count in (topics or {"orders": 2}).items()},
        offsets_leaders={0: 10, 1: 11, 2: 12},
        topic_errors=topic_errors or {},
    )


def _member(member_id: str, *assignment: TopicPartition) -> Member:
    return Member(member_id=member_id, client_id="app", host="/10.0.0.1", instance_id=None,
                  assignment=assignment)


def _committed(group_id: str, *offsets: tuple[TopicPartition, int | None]
               ) -> dict[str, tuple[CommittedOffset, ...]]:
    return {group_id: tuple(CommittedOffset(tp.topic, tp.partition, o) for tp, o in offsets)}


def _consumer_listing(group_id: str, group_type: GroupType = GroupType.CLASSIC) -> Listing:
    return Listing(group_id, group_type, "Stable", "consumer")


def _classic(group_id: str, *, state: str = "Empty", protocol_type: str = "consumer",
             protocol: str = "", members: tuple[ClassicMember, ...] = (),
             error: CollectionError | None = None) -> ClassicGroup:
    return ClassicGroup(group_id=group_id, error=error, state=state,
                        protocol_type=protocol_type, protocol=protocol, coordinator_id=11,
                        members=members)


def _subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def test_a_described_group_with_committed_offsets() -> None:
    members = (_member("m1", T0), _member("m2", T1))
    described = Described(group_type=GroupType.CLASSIC, state="Stable",
                          protocol_type="consumer", assignor="range", coordinator_id=12,
                          members=members)
    committed = _committed("payments", (T0, 7), (T1, None))

    (group,) = assemble_groups([_consumer_listing("payments")], {"payments": described},
                               committed, _metadata(), {})

    assert group == Group(
        group_id="payments", group_type=GroupType.CLASSIC, state="Stable",
        protocol_type="consumer", assignor="range", coordinator_id=12,
        expected_coordinator_id=12, members=members, offsets=committed["payments"],
        described=True,
    )
    assert not group.coordinator_mismatch


def test_a_coordinator_other_than_the_offsets_partition_leader_is_a_mismatch() -> None:
    described = Described(GroupType.CLASSIC, "Stable", "consumer", "range",
                          coordinator_id=10, members=())
    (group,) = assemble_groups([_consumer_listing("payments")], {"payments": described}, {},
                               _metadata(), {})
    assert (group.coordinator_id, group.expected_coordinator_id) == (10, 12)
    assert group.coordinator_mismatch


def test_a_describe_of_unknown_type_keeps_the_listed_type() -> None:
    described = Described(GroupType.UNKNOWN, "Stable", "consumer", None, 12, ())
    (group,) = assemble_groups([_consumer_listing("payments", GroupType.CONSUMER)],
                               {"payments": described}, {}, _metadata(), {})
    assert group.group_type is GroupType.CONSUMER


def test_a_group_that_could_not_be_described_keeps_what_the_listing_said() -> None:
    committed = _committed("payments", (T0, 3))
    (group,) = assemble_groups([_consumer_listing("payments")], {}, committed, _metadata(),
                               {})
    assert (group.state, group.coordinator_id, group.members, group.described) == (
        "Stable", None, (), False)
    assert group.offsets == committed["payments"]
    assert group.expected_coordinator_id == 12


def test_an_empty_classic_group_is_described_by_the_classic_view_alone() -> None:
    listings = [
        Listing("idle", GroupType.CLASSIC, "Empty", "consumer"),
        Listing("busy", GroupType.CLASSIC, "Empty", "consumer"),
        Listing("rebalancing", GroupType.CLASSIC, "PreparingRebalance", "consumer"),
        Listing("kip848", GroupType.CONSUMER, "Empty", "consumer"),
        Listing("failed", GroupType.CLASSIC, "Empty", "consumer"),
    ]
    view = {
        "idle": _classic("idle", protocol="range"),
        # Empty as listed, but a member joined before the classic view was taken
        "busy": _classic("busy", members=(ClassicMember("m1", "app", "/10.0.0.1", None),)),
        "rebalancing": _classic("rebalancing", state="PreparingRebalance"),
        "kip848": _classic("kip848"),
        "failed": _classic("failed", error=CollectionError(
            Stage.DESCRIBE_GROUP, "COORDINATOR_LOAD_IN_PROGRESS", "loading", group_id="failed")),
    }

    described, wanted = classic_descriptions(listings, view)

    assert wanted == ["busy", "rebalancing", "kip848", "failed"]
    assert described == {"idle": Described(
        group_type=GroupType.CLASSIC, state="Empty", protocol_type="consumer",
        assignor="range", coordinator_id=11, members=(), from_classic_view=True)}
    (group,) = assemble_groups(listings[:1], described, {}, _metadata(), view)
    assert (group.state, group.group_type, group.coordinator_id, group.members) == (
        "Empty", GroupType.CLASSIC, 11, ())


def test_groups_of_other_protocols_come_from_the_classic_view_with_their_errors() -> None:
    error = CollectionError(Stage.DESCRIBE_GROUP, "GROUP_AUTHORIZATION_FAILED", "denied",
                            group_id="connect-cluster")
    view = {
        "connect-cluster": _classic(
            "connect-cluster", state="Stable", protocol_type="connect", protocol="sessioned",
            members=(ClassicMember("w1", None, "/10.0.0.2", b"\x00\x01"),), error=error),
        "payments": _classic("payments"),
    }
    errors: list[CollectionError] = []

    listings = other_protocol_listings(view, errors)

    assert listings == [Listing(
        group_id="connect-cluster", group_type=GroupType.CLASSIC, state="Stable",
        protocol_type="connect", assignor="sessioned",
        members=(Member("w1", "", "/10.0.0.2", None, ()),))]
    assert errors == [error]
    assert classic_descriptions(listings, view) == ({}, [])  # never described on its own
    (group,) = assemble_groups(listings, {}, {}, _metadata(), view)
    assert group.described and group.members == listings[0].members


def test_subscriptions_are_decoded_and_undecodable_ones_stay_unknown() -> None:
    view = {"payments": _classic("payments", state="Stable", members=(
        ClassicMember("m1", "app", "/10.0.0.1", _subscription("payments", "orders")),
        ClassicMember("m2", "app", "/10.0.0.1", b"\x00\x00\x00"),  # truncated
    ))}
    described = Described(GroupType.CLASSIC, "Stable", "consumer", "range", 12,
                          (_member("m1", T0), _member("m2", T1), _member("m3")))

    (group,) = assemble_groups([_consumer_listing("payments")], {"payments": described}, {},
                               _metadata(), view)

    assert [m.subscription for m in group.members] == [("orders", "payments"), None, None]
    assert [m.assignment for m in group.members] == [(T0,), (T1,), ()]


def test_member_metadata_of_a_group_that_is_not_a_consumer_group_is_not_decoded() -> None:
    # A simple group's members (if any) carry no ConsumerProtocolSubscription.
    view = {"payments": _classic("payments", state="Stable", protocol_type="", members=(
        ClassicMember("m1", "app", "/10.0.0.1", _subscription("payments")),))}
    described = Described(GroupType.CLASSIC, "Stable", "", None, 12, (_member("m1"),))
    (group,) = assemble_groups([_consumer_listing("payments")], {"payments": described}, {},
                               _metadata(), view)
    assert group.members[0].subscription is None


def _group(*offsets: tuple[TopicPartition, int | None], members: tuple[Member, ...] = ()
           ) -> Group:
    return Group("g", GroupType.CLASSIC, "Stable", "consumer", None, None, None, members,
                 tuple(CommittedOffset(tp.topic, tp.partition, o) for tp, o in offsets))


def test_offsets_on_a_deleted_topic_are_an_error_and_no_partition() -> None:
    gone = [TopicPartition("gone", 0), TopicPartition("gone", 3)]
    errors: list[CollectionError] = []

    touched = touched_partitions([_group((gone[0], 5), (T0, 1), members=(
        _member("m1", gone[1]),))], _metadata(), errors)

    assert touched == [T0]
    assert [(e.stage, e.code, e.topic, e.partition) for e in errors] == [
        (Stage.TOPIC_METADATA, "UNKNOWN_TOPIC_OR_PART", "gone", None)]


def test_a_touched_topic_whose_metadata_failed_reports_that_failure() -> None:
    failure = CollectionError(Stage.TOPIC_METADATA, "LEADER_NOT_AVAILABLE", "electing",
                              topic="new", retriable=True)
    errors: list[CollectionError] = []
    touched = touched_partitions([_group((TopicPartition("new", 0), 1))],
                                 _metadata(topic_errors={"new": failure}), errors)
    assert (touched, errors) == ([], [failure])


def test_a_partition_beyond_the_topics_partition_count_is_an_error() -> None:
    beyond = TopicPartition("orders", 2)  # "orders" has partitions 0 and 1
    errors: list[CollectionError] = []

    touched = touched_partitions([_group((T1, 4), (beyond, 4))], _metadata(), errors)

    assert touched == [T1]
    assert [(e.stage, e.code, e.topic, e.partition) for e in errors] == [
        (Stage.TOPIC_METADATA, "UNKNOWN_TOPIC_OR_PART", "orders", 2)]


def test_assigned_and_target_partitions_are_touched_too() -> None:
    member = Member("m1", "app", "h", None, assignment=(T0,), target_assignment=(T1,))
    assert touched_partitions([_group(members=(member,))], _metadata(), []) == [T0, T1]


def test_a_last_stable_offset_above_the_high_watermark_is_capped() -> None:
    late = TopicPartition("orders", 0)  # answered after more records were appended
    on_time = TopicPartition("orders", 1)
    unanswered = TopicPartition("other", 0)  # its high watermark request failed
    values: dict[OffsetKind, dict[TopicPartition, int]] = {
        "log_start": {late: 0, on_time: 2},
        "high_watermark": {late: 10, on_time: 10},
        "last_stable": {late: 13, on_time: 7, unanswered: 5},
    }

    # ... and each partition's leader from the metadata: -1 for one that has none (offline).
    offsets = partition_offsets([late, on_time, unanswered], values,
                                {("orders", 0): 2, ("orders", 1): 3, ("other", 0): -1})

    assert offsets == (
        PartitionOffsets("orders", 0, log_start=0, high_watermark=10, last_stable=10, leader=2),
        PartitionOffsets("orders", 1, log_start=2, high_watermark=10, last_stable=7, leader=3),
        PartitionOffsets("other", 0, log_start=None, high_watermark=None, last_stable=5,
                         leader=-1),
    )


def test_record_timestamps_are_requested_only_where_a_lagging_offset_is_inside_the_log() -> None:
    tp = {name: TopicPartition("orders", p) for p, name in enumerate(
        ["lagging", "caught_up", "below_log_start", "no_commit", "no_log", "unknown_hw"])}
    partitions = [
        PartitionOffsets("orders", tp["lagging"].partition, 2, 10, 10),
        PartitionOffsets("orders", tp["caught_up"].partition, 2, 10, 10),
        PartitionOffsets("orders", tp["below_log_start"].partition, 5, 10, 10),
        PartitionOffsets("orders", tp["no_commit"].partition, 0, 10, 10),
        PartitionOffsets("orders", tp["unknown_hw"].partition, 0, None, None),
    ]
    group = _group((tp["lagging"], 2), (tp["caught_up"], 10), (tp["below_log_start"], 4),
                   (tp["no_commit"], None), (tp["no_log"], 3), (tp["unknown_hw"], 1))

    assert record_timestamp_requests([group], partitions) == [
        SampleRequest(tp["lagging"], offset=2, lag=8)]


def test_the_snapshot_lists_touched_and_subscribed_topics_and_sorts_the_groups() -> None:
    subscriber = dataclasses.replace(_member("m1"), subscription=("payments",))
    groups = (
        Group("b", GroupType.CLASSIC, "Stable", "consumer", None, None, None, (subscriber,), ()),
        Group("a", GroupType.CLASSIC, "Empty", "", None, None, None, (), ()),
    )
    partitions = (PartitionOffsets("orders", 0, 0, 10, 10),)
    error = CollectionError(Stage.GROUP_OFFSETS, "NOT_COORDINATOR", "moved", group_id="a")
    metadata = _metadata({"orders": 2, "payments": 3, "unused": 1})

    snapshot = assemble_snapshot("c", TS, metadata, groups, partitions, [], [error])

    assert [g.group_id for g in snapshot.groups] == ["a", "b"]
    assert snapshot.topics == (TopicInfo("orders", 2), TopicInfo("payments", 3))
    assert snapshot.partitions == partitions
    assert snapshot.errors == (error,)
    assert snapshot.offsets_topic_partitions == 3
    assert (snapshot.cluster, snapshot.snapshot_ts) == ("c", TS)


def test_the_assembly_loads_without_confluent_kafka() -> None:
    src = Path(groupscope.__file__).parents[1]
    probe = ("import sys, groupscope.collect.assemble; "
             "print(sorted(m for m in sys.modules if m.startswith('confluent_kafka')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(src)})
    assert out.stdout.strip() == "[]"


def test_a_kip848_group_reported_unknown_with_a_member_off_its_target_is_reconciling() -> None:
    """librdkafka knows the classic states only: Assigning and Reconciling come as Unknown."""
    def member(name: str, current: list[int], target: list[int]) -> Member:
        return Member(name, name, "/10.0.0.1", None,
                      tuple(TopicPartition("orders", p) for p in current),
                      tuple(TopicPartition("orders", p) for p in target))

    blocked, joiner = member("blocked", [0, 1, 2], [0, 1]), member("joiner", [], [2])
    settled = [member("a", [1, 0], [0, 1]), member("b", [2], [2])]
    consumer, classic = GroupType.CONSUMER, GroupType.CLASSIC
    assert consumer_group_state(consumer, "Unknown", [blocked, joiner]) == "Reconciling"
    assert consumer_group_state(consumer, "Unknown", settled) == "Unknown"
    assert consumer_group_state(consumer, "Stable", [blocked, joiner]) == "Stable"
    assert consumer_group_state(classic, "Unknown", [blocked, joiner]) == "Unknown"


def _offsets_group(group_id: str, *offsets: tuple[int, int | None]) -> Group:
    return Group(group_id, GroupType.CLASSIC, "Stable", "consumer", "range", 1, 1, (),
                 tuple(CommittedOffset("t", p, o) for p, o in offsets))


def test_a_reread_replaces_only_the_suspect_offsets_and_their_ends() -> None:
    # "skew": partition 0 read at 10 under a log start of 40 (its owner purged after
    # committing 40); "lost": 5 under 40, and still 5 when read again; partition 1 is fine.
    groups = [_offsets_group("skew", (0, 10), (1, 7)), _offsets_group("lost", (0, 5)),
              _offsets_group("fine", (0, 45))]
    logs = [PartitionOffsets("t", 0, 40, 60, 60), PartitionOffsets("t", 1, 0, 9, 9)]
    suspects = apparent_losses(groups, logs)
    assert suspects == {"skew": [TopicPartition("t", 0)], "lost": [TopicPartition("t", 0)]}
    fixed, ends = with_rereads(
        groups, logs, suspects,
        {"skew": [CommittedOffset("t", 0, 41), CommittedOffset("t", 1, 8)],
         "lost": [CommittedOffset("t", 0, 5)]},
        [PartitionOffsets("t", 0, 44, 66, 65)])
    offsets = {g.group_id: [o.offset for o in g.offsets] for g in fixed}
    assert offsets == {"skew": [41, 7], "lost": [5], "fine": [45]}
    # the later ends, and the first log start (a later one could pass the reread offset)
    assert ends == [PartitionOffsets("t", 0, 40, 66, 65), PartitionOffsets("t", 1, 0, 9, 9)]
    assert apparent_losses(fixed, ends) == {"lost": [TopicPartition("t", 0)]}


def test_an_offsets_partition_without_a_leader_is_an_error_naming_its_replicas() -> None:
    # Its groups have no coordinator: no broker lists them, so without the error the
    # snapshot would be complete and miss them as if they had been deleted.
    metadata = dataclasses.replace(_metadata(), offsets_leaders={0: 10, 1: -1, 2: 12},
                                   offsets_replicas={0: (10,), 1: (11,), 2: (12, 10)})
    errors = coordinator_outages(metadata)
    assert [(e.stage, e.code, e.topic, e.partition) for e in errors] == [
        (Stage.LIST_GROUPS, "COORDINATOR_NOT_AVAILABLE", "__consumer_offsets", 1)]
    assert errors[0].message.startswith(
        "__consumer_offsets partition 1 has no leader (its replica: broker 11, none in sync "
        "and up)"), errors[0].message
    assert coordinator_outages(_metadata()) == []  # every partition led
    two = dataclasses.replace(metadata, offsets_replicas={1: (11, 12)})
    assert "(its replicas: brokers 11, 12," in coordinator_outages(two)[0].message


def test_the_groups_listed_before_and_missing_now_are_probed_up_to_a_bound() -> None:
    assert unlisted_groups({"a", "b", "c"}, ["b"], 5) == (["a", "c"], [])
    assert unlisted_groups({"a"}, ["a", "new"], 5) == ([], [])
    probed, cut = unlisted_groups({"d", "c", "b", "a"}, [], 2)
    assert probed == ["a", "b"]
    (error,) = cut  # the others unprobed: the snapshot is partial, and says so
    assert (error.stage, error.code, error.group_id) == (Stage.LIST_GROUPS, "_NOT_PROBED", None)
    assert "4 groups" in error.message and "only the first 2 were probed" in error.message


def test_an_unlisted_group_that_exists_or_cannot_be_read_is_an_error_a_deleted_one_is_not(
) -> None:
    """ListGroups leaves out a group the monitor may no longer Describe: its probe is
    denied, or finds its offsets (a coordinator handing it over). Deleted: no offset, or
    GROUP_ID_NOT_FOUND."""
    failed = [
        CollectionError(Stage.GROUP_OFFSETS, "GROUP_AUTHORIZATION_FAILED", "denied",
                        group_id="hidden"),
        CollectionError(Stage.GROUP_OFFSETS, "_TIMED_OUT", "no answer", group_id="slow",
                        retriable=True, attempts=3),
        CollectionError(Stage.GROUP_OFFSETS, "GROUP_ID_NOT_FOUND", "gone", group_id="dead"),
    ]
    committed = {"moving": _committed("moving", (T0, 4), (T1, 5))["moving"], "deleted": ()}

    errors = unlisted_errors(["dead", "deleted", "hidden", "moving", "slow"], committed,
                             failed)

    by_group = {e.group_id: e for e in errors}
    assert sorted(by_group) == ["hidden", "moving", "slow"]
    assert all(e.stage is Stage.LIST_GROUPS for e in errors)
    hidden = by_group["hidden"]
    assert hidden.code == "GROUP_AUTHORIZATION_FAILED" and not hidden.retriable
    assert "group hidden is no longer listed by ListGroups" in hidden.message
    assert "grant the monitor's principal Describe on group hidden" in hidden.message
    moving = by_group["moving"]
    assert moving.code == "_NOT_LISTED"
    assert "its offsets are still committed (2 partition(s))" in moving.message
    assert "Describe ACL on group moving" in moving.message
    slow = by_group["slow"]
    assert (slow.code, slow.retriable, slow.attempts) == ("_TIMED_OUT", True, 3)
    assert "whether it was deleted is unknown" in slow.message
