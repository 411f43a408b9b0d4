"""The rebalance timeline, from decoded records through the event tables (pure, no Kafka).
Each case says why its answer is right."""

from __future__ import annotations

from typing import Any

from groupscope.contract.model import TopicPartition
from groupscope.offsets.decoder import (
    ClassicMember,
    GroupKey,
    GroupMetadataValue,
    MemberKey,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicIdPartitions,
)
from groupscope.offsets.events import EventBuilder
from groupscope.offsets.timeline import build_timeline

T0 = 1_800_000_000_000


class Log:
    """Records of one offsets-topic partition, in order."""

    def __init__(self) -> None:
        self.builder = EventBuilder("c", topic_names={"ID-orders": "orders"})
        self.offset = 0

    def add(self, record: Record) -> None:
        self.builder.add(7, self.offset, T0 + self.offset * 1000, record)
        self.offset += 1

    def generation(self, gen: int, protocol: str | None,
                   members: dict[str, list[int]], static: dict[str, str] | None = None,
                   group: str = "g") -> None:
        static = static or {}
        self.add(Record(2, GroupKey(group), GroupMetadataValue(
            3, "consumer", gen, protocol, next(iter(members), None), None,
            tuple(ClassicMember(m, static.get(m), "client", "/h", 60_000, 10_000, None,
                                tuple(TopicPartition("orders", p) for p in parts))
                  for m, parts in members.items()))))

    def events(self) -> dict[str, list[dict[str, Any]]]:
        return {name: t.to_pylist() for name, t in self.builder.tables().items()}


def test_classic_generations_joins_leaves_moves_and_gaps() -> None:
    log = Log()
    log.generation(0, None, {})  # 1. creation record: not a rebalance
    log.generation(1, "range", {"a": [0, 1, 2, 3]})
    log.add(Record(1, OffsetCommitKey("g", "orders", 0), OffsetCommitValue(3, 5, None, "", T0,
                                                                            None)))
    log.generation(2, "range", {"a": [0, 1], "b": [2, 3]})  # 2. b joined, took 2 partitions
    log.generation(4, "range", {"b": [0, 1, 2, 3]})  # 3. gen 3 never completed; a left
    log.generation(5, None, {})  # 4. the last member left: an Empty generation
    timeline = build_timeline("g", log.events())
    assert timeline.type == "classic" and timeline.protocol_type == "consumer"
    gens = timeline.generations
    assert [g.generation for g in gens] == [1, 2, 4, 5]
    assert [(g.joined, g.left) for g in gens] == [
        (["a"], []), (["b"], []), ([], ["a"]), ([], ["b"])]
    assert [g.partitions_moved for g in gens] == [0, 2, 2, 0]
    assert [g.missing_before for g in gens] == [0, 0, 1, 0]
    assert gens[-1].empty and gens[-1].rebalance_type == "eager"
    assert gens[1].members[1].partitions == (TopicPartition("orders", 2),
                                             TopicPartition("orders", 3))
    assert gens[1].members[0].session_timeout_ms == 10_000
    assert gens[1].members[0].rebalance_timeout_ms == 60_000


def test_static_member_restart_within_its_timeout_is_not_a_generation() -> None:
    # The coordinator rewrites the same generation with the new member id: no rebalance.
    log = Log()
    log.generation(1, "range", {"s-1": [0, 1]}, static={"s-1": "static-a"})
    log.generation(1, "range", {"s-2": [0, 1]}, static={"s-2": "static-a"})
    (gen,) = build_timeline("g", log.events()).generations
    assert gen.rewrites == 1
    assert gen.replaced == [{"instance_id": "static-a", "old_member_id": "s-1",
                             "new_member_id": "s-2"}]
    assert [m.member_id for m in gen.members] == ["s-2"]


def test_static_member_restart_after_its_timeout_is_a_leave_and_a_join() -> None:
    log = Log()
    log.generation(1, "range", {"s-1": [0], "x": [1]}, static={"s-1": "static-a"})
    log.generation(2, "range", {"x": [0, 1]})
    log.generation(3, "range", {"s-2": [0], "x": [1]}, static={"s-2": "static-a"})
    gens = build_timeline("g", log.events()).generations
    assert [(g.joined, g.left, g.partitions_moved) for g in gens[1:]] == [
        ([], ["s-1"], 1), (["s-2"], [], 1)]


def test_cooperative_moves_are_counted_when_the_revoked_partition_is_reassigned() -> None:
    # Generation 2 revokes partition 1 from a (it is nobody's); generation 3 gives it to b.
    log = Log()
    log.generation(1, "cooperative-sticky", {"a": [0, 1]})
    log.generation(2, "cooperative-sticky", {"a": [0], "b": []})
    log.generation(3, "cooperative-sticky", {"a": [0], "b": [1]})
    gens = build_timeline("g", log.events()).generations
    assert [g.partitions_moved for g in gens] == [0, 0, 1]
    assert {g.rebalance_type for g in gens} == {"cooperative"}


def test_new_partitions_are_not_moves() -> None:
    log = Log()
    log.generation(1, "range", {"a": [0], "b": [1]})
    log.generation(2, "range", {"a": [0, 1], "b": [2, 3]})  # 1 moved a<-b; 2, 3 are new
    assert build_timeline("g", log.events()).generations[1].partitions_moved == 1


def test_group_deletion_restarts_the_history() -> None:
    log = Log()
    log.generation(1, "range", {"a": [0]})
    log.generation(2, None, {})
    log.add(Record(2, GroupKey("g"), None))
    log.generation(1, "roundrobin", {"z": [0]})
    timeline = build_timeline("g", log.events())
    assert len(timeline.deleted_at) == 1
    last = timeline.generations[-1]
    assert (last.generation, last.joined, last.missing_before, last.partitions_moved) == \
        (1, ["z"], 0, 0)


def test_other_groups_in_the_same_partition_are_ignored() -> None:
    log = Log()
    log.generation(1, "range", {"a": [0]}, group="other")
    log.generation(1, "range", {"b": [0]})
    (gen,) = build_timeline("g", log.events()).generations
    assert gen.joined == ["b"]


def _member(log: Log, member: str, assignor: str | None = None) -> None:
    log.add(Record(5, MemberKey("k", member), MemberMetadataValue(
        0, None, None, "client", "/h", ("orders",), None, 45_000, assignor, None)))


def _target(log: Log, member: str, partitions: list[int]) -> None:
    log.add(Record(7, MemberKey("k", member), TargetAssignmentMemberValue(
        0, (TopicIdPartitions("ID-orders", tuple(partitions)),) if partitions else ())))


def _epoch(log: Log, epoch: int) -> None:
    log.add(Record(6, GroupKey("k"), TargetAssignmentMetadataValue(0, epoch, None)))


def test_consumer_protocol_epochs_members_and_targets() -> None:
    log = Log()
    _member(log, "m1", "uniform")
    _target(log, "m1", [0, 1, 2, 3])
    _epoch(log, 2)  # first epoch: m1 alone
    _member(log, "m2", "uniform")
    _target(log, "m1", [0, 1])
    _target(log, "m2", [2, 3])
    _epoch(log, 3)  # m2 joined and took two partitions
    log.add(Record(7, MemberKey("k", "m1"), None))
    log.add(Record(5, MemberKey("k", "m1"), None))  # m1 left
    _target(log, "m2", [0, 1, 2, 3])
    _epoch(log, 5)
    _member(log, "m3")
    _target(log, "m3", [])  # an empty target still names the member
    _epoch(log, 6)
    timeline = build_timeline("k", log.events())
    assert timeline.type == "consumer"
    gens = timeline.generations
    assert [g.generation for g in gens] == [2, 3, 5, 6]
    assert [(g.joined, g.left, g.partitions_moved) for g in gens] == [
        (["m1"], [], 0), (["m2"], [], 2), ([], ["m1"], 2), (["m3"], [], 0)]
    assert [g.missing_before for g in gens] == [0, 0, 0, 0]  # epoch gaps mean nothing here
    assert gens[1].protocol == "uniform" and gens[1].rebalance_type == "consumer"
    assert gens[1].members[1].partitions == (TopicPartition("orders", 2),
                                             TopicPartition("orders", 3))
    assert gens[3].members[1].partitions == ()


def test_unknown_topic_ids_stay_visible() -> None:
    log = Log()
    _member(log, "m1")
    log.add(Record(7, MemberKey("k", "m1"), TargetAssignmentMemberValue(
        0, (TopicIdPartitions("ID-gone", (0,)),))))
    _epoch(log, 1)
    (gen,) = build_timeline("k", log.events()).generations
    assert gen.members[0].partitions == (TopicPartition("<topic id ID-gone>", 0),)
