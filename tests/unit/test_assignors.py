"""The assignment strategies: documented examples as numbered cases, member ordering, and
properties every strategy keeps on any input (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupscope.contract.model import TopicPartition
from groupscope.simulate.assignors import (
    STRATEGIES,
    AssignmentInput,
    MemberSpec,
    assign,
    member_order,
)


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def spec(subscriptions: dict[str, list[str]], partitions: dict[str, int],
         previous: dict[str, list[TopicPartition]] | None = None,
         static: dict[str, str] | None = None) -> AssignmentInput:
    static = static or {}
    return AssignmentInput(
        tuple(MemberSpec(m, frozenset(t), static.get(m)) for m, t in subscriptions.items()),
        partitions,
        {m: tuple(p) for m, p in (previous or {}).items()},
    )


def test_1_range_is_per_topic_and_favours_the_first_members() -> None:
    # Kafka's RangeAssignor javadoc: C0 and C1 on t0 and t1 of 3 partitions each.
    result = assign("range", spec({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3}))
    assert result == {"C0": (tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)),
                      "C1": (tp("t0", 2), tp("t1", 2))}


def test_2_roundrobin_deals_across_topics() -> None:
    # Kafka's RoundRobinAssignor javadoc, same group: 3 and 3, alternating.
    result = assign("roundrobin", spec({"C0": ["t0", "t1"], "C1": ["t0", "t1"]},
                                       {"t0": 3, "t1": 3}))
    assert result == {"C0": (tp("t0", 0), tp("t0", 2), tp("t1", 1)),
                      "C1": (tp("t0", 1), tp("t1", 0), tp("t1", 2))}


def test_3_roundrobin_skips_members_not_subscribed() -> None:
    # The javadoc's unequal subscriptions: C2 ends up with four partitions.
    result = assign("roundrobin", spec(
        {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]},
        {"t0": 1, "t1": 2, "t2": 3}))
    assert result == {"C0": (tp("t0", 0),), "C1": (tp("t1", 0),),
                      "C2": (tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2))}


def test_4_range_leaves_extra_members_idle() -> None:
    result = assign("range", spec({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 2}))
    assert result == {"a": (tp("t", 0),), "b": (tp("t", 1),), "c": ()}


def test_5_java_orders_static_members_first_by_instance_id() -> None:
    members = [MemberSpec("a-dyn", frozenset()), MemberSpec("z-static", frozenset(), "i-2"),
               MemberSpec("b-static", frozenset(), "i-1")]
    assert [m.member_id for m in member_order(members, "java")] == [
        "b-static", "z-static", "a-dyn"]


def test_6_librdkafka_compares_instance_ids_only_between_static_members() -> None:
    # all static: by instance id, whatever the member ids say
    both = [MemberSpec("a", frozenset(), "i-2"), MemberSpec("b", frozenset(), "i-1")]
    assert [m.member_id for m in member_order(both, "librdkafka")] == ["b", "a"]
    # mixed: static vs dynamic compares member ids; the merge sort decides the rest
    mixed = [MemberSpec("m3", frozenset(), "i-1"), MemberSpec("m1", frozenset()),
             MemberSpec("m2", frozenset(), "i-0")]
    assert [m.member_id for m in member_order(mixed, "librdkafka")] == ["m1", "m2", "m3"]
    assert [m.member_id for m in member_order(mixed, "java")] == ["m2", "m3", "m1"]


def test_7_sticky_keeps_owners_when_a_member_leaves() -> None:
    before = assign("sticky", spec({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 6}))
    after = assign("sticky", spec({"a": ["t"], "b": ["t"]}, {"t": 6},
                                  previous={"a": list(before["a"]), "b": list(before["b"])}))
    for member in ("a", "b"):
        assert set(before[member]) <= set(after[member])  # nothing taken from survivors
    assert sorted(len(v) for v in after.values()) == [3, 3]


def test_8_sticky_rebalances_only_what_balance_needs() -> None:
    previous = {"a": [tp("t", p) for p in range(6)]}
    after = assign("sticky", spec({"a": ["t"], "b": ["t"]}, {"t": 6}, previous=previous))
    assert len(after["a"]) == len(after["b"]) == 3
    assert set(after["a"]) <= set(previous["a"])


def test_9_eager_range_versus_sticky_movement_on_a_leave() -> None:
    three = {"a": ["t"], "b": ["t"], "c": ["t"]}
    before = assign("range", spec(three, {"t": 12}))
    # "a" (the first in order) leaves: range shifts every range down, sticky re-homes 4
    after_range = assign("range", spec({"b": ["t"], "c": ["t"]}, {"t": 12}))
    after_sticky = assign("sticky", spec({"b": ["t"], "c": ["t"]}, {"t": 12},
                                         previous={m: list(before[m]) for m in ("b", "c")}))
    moved = {name: sum(1 for m in ("b", "c") for p in result[m] if p not in before[m])
             for name, result in (("range", after_range), ("sticky", after_sticky))}
    assert moved == {"range": 6, "sticky": 4}  # sticky moves only a's 4 orphans


def test_10_server_range_is_sticky_within_quotas() -> None:
    previous = {"b": [tp("t", 0), tp("t", 1)], "a": [tp("t", 2), tp("t", 3)]}
    result = assign("server-range", spec({"a": ["t"], "b": ["t"]}, {"t": 4},
                                         previous=previous))
    assert result == {"a": (tp("t", 2), tp("t", 3)), "b": (tp("t", 0), tp("t", 1))}


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        assign("fastest", spec({"a": ["t"]}, {"t": 1}))


# -- properties --------------------------------------------------------------------------
@st.composite
def groups(draw: st.DrawFn) -> AssignmentInput:
    topics = {f"t{i}": draw(st.integers(0, 12)) for i in range(draw(st.integers(1, 5)))}
    names = list(topics)
    members = []
    for i in range(draw(st.integers(1, 12))):
        subscribed = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        static = draw(st.one_of(st.none(), st.text("abc", min_size=1, max_size=3)))
        members.append(MemberSpec(f"m-{draw(st.uuids()).hex[:6]}-{i}", frozenset(subscribed),
                                  static))
    previous: dict[str, tuple[TopicPartition, ...]] = {}
    for m in members:
        owned = draw(st.lists(st.tuples(st.sampled_from(names), st.integers(0, 12)),
                              max_size=6))
        previous[m.member_id] = tuple(TopicPartition(t, p) for t, p in owned)
    return AssignmentInput(tuple(members), topics, previous)


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(STRATEGIES), st.sampled_from(["java", "librdkafka"]))
def test_every_partition_exactly_once_and_only_to_subscribers(
    group: AssignmentInput, strategy: str, ordering: str
) -> None:
    result = assign(strategy, group, ordering)  # type: ignore[arg-type]
    given_out = [p for parts in result.values() for p in parts]
    assert sorted(given_out) == group.all_partitions()
    topics_of = {m.member_id: m.topics for m in group.members}
    for member, parts in result.items():
        assert all(p.topic in topics_of[member] for p in parts)


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(STRATEGIES))
def test_balance_with_equal_subscriptions(group: AssignmentInput, strategy: str) -> None:
    every = frozenset(group.partitions)
    same = AssignmentInput(tuple(MemberSpec(m.member_id, every, m.instance_id)
                                 for m in group.members), group.partitions, group.previous)
    counts = [len(v) for v in assign(strategy, same).values()]
    spread = max(counts) - min(counts)
    if strategy in ("range", "server-range"):
        assert spread <= len(group.partitions)  # at most one extra per topic
    else:
        assert spread <= 1


@settings(max_examples=100, deadline=None)
@given(groups())
def test_sticky_never_leaves_a_movable_imbalance(group: AssignmentInput) -> None:
    result = assign("sticky", group)
    owners = {m.member_id: m for m in group.members}
    for giver, parts in result.items():
        for part in parts:
            for taker, theirs in result.items():
                if part.topic in owners[taker].topics:
                    assert len(theirs) + 1 >= len(parts), (part, giver, taker)
