"""What-if and advice on crafted groups: the numbers and the sentences an operator reads."""

from datetime import UTC, datetime

from groupscope.contract.model import (
    CommittedOffset,
    Group,
    GroupType,
    Member,
    PartitionOffsets,
    Snapshot,
    TopicInfo,
    TopicPartition,
)
from groupscope.simulate.whatif import mart_tables, moved, skew, what_if

TS = datetime(2026, 11, 21, tzinfo=UTC)
TOPICS = ["a", "b", "c", "d"]


def _range_skewed_group() -> Snapshot:
    """Two members on four one-partition topics under range: m1 gets all four."""
    every = tuple(TOPICS)
    members = (
        Member("m1", "c", "/h", None, tuple(TopicPartition(t, 0) for t in TOPICS),
               subscription=every),
        Member("m2", "c", "/h", None, (), subscription=every),
    )
    offsets = tuple(CommittedOffset(t, 0, 10) for t in TOPICS)
    group = Group("g", GroupType.CLASSIC, "Stable", "consumer", "range", 1, 1, members, offsets)
    partitions = tuple(PartitionOffsets(t, 0, 0, 10 + i * 10, 10 + i * 10)
                       for i, t in enumerate(TOPICS))
    return Snapshot("c", TS, (group,), partitions, tuple(TopicInfo(t, 1) for t in TOPICS))


def test_skew_numbers() -> None:
    s = skew({"x": (TopicPartition("a", 0), TopicPartition("a", 1)), "y": ()},
             {TopicPartition("a", 0): 30, TopicPartition("a", 1): 10})
    assert (s.members, s.partitions, s.max_minus_min, s.idle_members) == (2, 2, 2, 1)
    assert s.coefficient_of_variation == 1.0  # std 1 over mean 1
    assert (s.most_lagged_member, s.most_lagged_share) == ("x", 1.0)


def test_moved_counts_owner_changes() -> None:
    p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert moved({"x": (p0, p1)}, {"x": (p0,), "y": (p1,)}) == 1
    assert moved({"x": (p0,)}, {"x": (p0,)}) == 0


def test_range_skew_is_explained_and_roundrobin_recommended() -> None:
    snapshot = _range_skewed_group()
    result = what_if(snapshot.groups[0], snapshot)
    assert result is not None and not result.subscriptions_inferred
    by_strategy = {s.strategy: s for s in result.scenarios}
    assert by_strategy["current"].skew.max_minus_min == 4
    assert by_strategy["range"].assignment == by_strategy["current"].assignment  # reproduced
    assert by_strategy["roundrobin"].skew.max_minus_min == 0
    texts = [f"{r}: {why}" for r, why in result.recommendations]
    # roundrobin balances as well, but cooperative-sticky also moves least on a leave
    assert texts[0] == ("switch to cooperative-sticky: range gives member m1 4 extra "
                        "partitions across 4 topics; cooperative-sticky would give max-min 0")
    assert any(t.startswith("spread the lag with ") and "member m1 holds 100% of the "
               "group's lag" in t for t in texts)
    assert any(t.startswith("use cooperative-sticky: eager range revokes all 4 partitions")
               for t in texts)


def test_groups_without_members_or_of_other_protocols_are_skipped() -> None:
    snapshot = _range_skewed_group()
    empty = Group("e", GroupType.CLASSIC, "Empty", "consumer", None, 1, 1, (), ())
    connect = Group("k", GroupType.CLASSIC, "Stable", "connect", "sessioned", 1, 1,
                    snapshot.groups[0].members, ())
    assert what_if(empty, snapshot) is None
    assert what_if(connect, snapshot) is None


def test_mart_rows() -> None:
    tables = dict(mart_tables(_range_skewed_group()))
    whatif = tables["assignment_whatif"].to_pylist()
    assert {r["strategy"] for r in whatif} == {"current", "range", "roundrobin",
                                              "cooperative-sticky"}
    assert all(r["group_id"] == "g" and r["current_strategy"] == "range" for r in whatif)
    advice = tables["assignment_advice"].to_pylist()
    assert [r["seq"] for r in advice] == list(range(len(advice))) and advice


def test_kip848_members_without_subscriptions_are_inferred() -> None:
    snapshot = _range_skewed_group()
    g = snapshot.groups[0]
    members = tuple(Member(m.member_id, m.client_id, m.host, None, m.assignment)
                    for m in g.members)
    kip = Group("g2", GroupType.CONSUMER, "Stable", "consumer", "uniform", 1, 1, members, ())
    result = what_if(kip, snapshot)
    assert result is not None and result.subscriptions_inferred
    assert {s.strategy for s in result.scenarios} == {"current", "uniform", "server-range"}
