"""What each assignment strategy would do to a real group, how skewed that is, and what to
recommend. Pure functions over a snapshot's group: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from groupscope.contract.model import (
    Assignment,
    Group,
    GroupType,
    Snapshot,
    TopicPartition,
    offset_lag,
)
from groupscope.contract.skew import FIELDS, GroupSkew, member_loads
from groupscope.contract.skew import skew as group_skew
from groupscope.contract.tables import WHATIF_SCHEMAS
from groupscope.simulate.assignors import EAGER, AssignmentInput, MemberSpec, assign

CLASSIC_STRATEGIES = ("range", "roundrobin", "cooperative-sticky")
CONSUMER_STRATEGIES = ("uniform", "server-range")


@dataclass(frozen=True)
class Skew(GroupSkew):
    """The skew figures (``groupscope.contract.skew``) and what the advice explains them with."""

    topics_with_extra: Mapping[str, int]  # member -> topics where it got more than its floor


def skew(assignment: Assignment, lag: Mapping[TopicPartition, int] | None = None) -> Skew:
    figures = group_skew(member_loads(assignment, lag or {}))
    return Skew(**{name: getattr(figures, name) for name in FIELDS},
                topics_with_extra=_extra_by_topic(assignment))


def _extra_by_topic(assignment: Assignment) -> dict[str, int]:
    """For each member, on how many topics it holds more partitions than the topic's least
    loaded member (0 when some member holds none of that topic). Exact for equal
    subscriptions; with unequal ones it also counts topics others do not subscribe to."""
    per_topic: dict[str, dict[str, int]] = {}
    for member, parts in assignment.items():
        for p in parts:
            per_topic.setdefault(p.topic, {}).setdefault(member, 0)
            per_topic[p.topic][member] += 1
    extra: dict[str, int] = dict.fromkeys(assignment, 0)
    for holders in per_topic.values():
        floor = min(holders.values()) if len(holders) == len(assignment) else 0
        for member, count in holders.items():
            if count > floor:
                extra[member] += 1
    return extra


def moved(before: Assignment, after: Assignment) -> int:
    """Partitions whose owner changed (a partition of a member that left counts)."""
    owner = {p: m for m, parts in before.items() for p in parts}
    return sum(1 for m, parts in after.items() for p in parts if owner.get(p) != m)


def group_input(group: Group, snapshot: Snapshot) -> tuple[AssignmentInput, bool]:
    """The group's members, subscriptions and the partition counts of their topics.
    Returns (input, subscriptions_inferred): members whose subscription is unknown (KIP-848)
    are taken to subscribe to the topics they are assigned."""
    counts = {t.topic: t.partition_count for t in snapshot.topics}
    inferred = False
    members = []
    for m in group.members:
        topics = m.subscription
        if topics is None:
            inferred = True
            topics = tuple({p.topic for p in (*m.assignment, *(m.target_assignment or ()))})
        members.append(MemberSpec(m.member_id, frozenset(topics), m.instance_id))
    wanted = {t for m in members for t in m.topics}
    current = {m.member_id: tuple(sorted(m.assignment)) for m in group.members}
    return (
        AssignmentInput(tuple(members), {t: counts[t] for t in wanted if t in counts}, current),
        inferred,
    )


def partition_lag(group: Group, snapshot: Snapshot) -> dict[TopicPartition, int]:
    by_tp = snapshot.partition_offsets()
    lags = {}
    for o in group.offsets:
        tp = TopicPartition(o.topic, o.partition)
        p = by_tp.get(tp)
        value = offset_lag(o.offset, p.high_watermark if p else None)
        if value is not None:
            lags[tp] = value
    return lags


@dataclass(frozen=True)
class Scenario:
    strategy: str
    is_current: bool  # the group's real assignment, not a simulation
    assignment: Assignment
    skew: Skew
    # Partitions this strategy moves when the last member in order leaves.
    moved_on_leave: int | None


@dataclass(frozen=True)
class WhatIf:
    group_id: str
    current_strategy: str | None
    subscriptions_inferred: bool
    scenarios: tuple[Scenario, ...]
    recommendations: tuple[tuple[str, str], ...]  # (recommendation, reason)


def what_if(group: Group, snapshot: Snapshot,
            strategies: tuple[str, ...] | None = None) -> WhatIf | None:
    """Every strategy's assignment and skew on this group's real members, plus advice.
    None for groups it does not apply to (no members, or another protocol type)."""
    if not group.members or group.protocol_type != "consumer":
        return None
    spec, inferred = group_input(group, snapshot)
    lag = partition_lag(group, snapshot)
    if strategies is None:
        strategies = CONSUMER_STRATEGIES if group.group_type is GroupType.CONSUMER \
            else CLASSIC_STRATEGIES
    current = {m.member_id: tuple(sorted(m.assignment)) for m in group.members}
    scenarios = [Scenario("current", True, current, skew(current, lag), None)]
    for strategy in strategies:
        result = assign(strategy, spec)
        scenarios.append(
            Scenario(strategy, False, result, skew(result, lag),
                     _moved_on_leave(strategy, spec, result))
        )
    return WhatIf(group.group_id, group.assignor, inferred, tuple(scenarios),
                  tuple(advise(group.assignor, scenarios)))


def _moved_on_leave(strategy: str, spec: AssignmentInput, before: Assignment) -> int | None:
    if len(spec.members) < 2:
        return None
    leaving = spec.members[-1].member_id
    remaining = tuple(m for m in spec.members if m.member_id != leaving)
    after = assign(strategy, AssignmentInput(remaining, spec.partitions,
                                             {m: before[m] for m in before if m != leaving}))
    return moved(before, after)


def advise(current_strategy: str | None, scenarios: list[Scenario]) -> list[tuple[str, str]]:
    """Recommendations with their reasons, most useful first. Only what the numbers show."""
    current = scenarios[0]
    alternatives = [s for s in scenarios[1:] if s.strategy != current_strategy]
    name = current_strategy or "the current assignment"
    advice: list[tuple[str, str]] = []

    # Among equally balanced strategies, prefer the one that moves least when a member leaves.
    best = min(alternatives, key=lambda s: (s.skew.max_minus_min, s.moved_on_leave or 0,
                                            s.strategy), default=None)
    if best and current.skew.max_minus_min >= 2 and best.skew.max_minus_min < \
            current.skew.max_minus_min:
        counts = {m: len(p) for m, p in current.assignment.items()}
        heavy = max(sorted(counts), key=lambda m: counts[m])
        extra = counts[heavy] - min(counts.values())
        topics = current.skew.topics_with_extra.get(heavy, 0)
        advice.append((
            f"switch to {best.strategy}",
            f"{name} gives member {heavy} {extra} extra partitions across {topics} topics; "
            f"{best.strategy} would give max-min {best.skew.max_minus_min}",
        ))

    if current.skew.most_lagged_share is not None and current.skew.members > 1 \
            and current.skew.most_lagged_share > 0.5:
        spread = [s for s in alternatives if s.skew.most_lagged_share is not None
                  and s.skew.most_lagged_share < current.skew.most_lagged_share - 0.2]
        if spread:
            better = min(spread, key=lambda s: (s.skew.most_lagged_share or 0, s.strategy))
            advice.append((
                f"spread the lag with {better.strategy}",
                f"member {current.skew.most_lagged_member} holds "
                f"{current.skew.most_lagged_share:.0%} of the group's lag; {better.strategy} "
                f"would leave at most {better.skew.most_lagged_share:.0%} on one member",
            ))

    if current.skew.idle_members:
        fewer = [s for s in alternatives if s.skew.idle_members < current.skew.idle_members]
        reason = (f"{current.skew.idle_members} of {current.skew.members} members own no "
                  "partition")
        if fewer:
            target = min(fewer, key=lambda s: (s.skew.idle_members, s.strategy))
            advice.append((f"switch to {target.strategy}",
                           f"{reason}; {target.strategy} would leave "
                           f"{target.skew.idle_members} idle"))
        else:
            advice.append(("scale the group down or add partitions",
                           f"{reason} under every strategy: there are fewer partitions than "
                           "members"))

    if current_strategy in EAGER and current.skew.members > 1:
        eager = next((s for s in scenarios if s.strategy == current_strategy), None)
        coop = next((s for s in scenarios if s.strategy == "cooperative-sticky"), None)
        if eager and coop and eager.moved_on_leave is not None \
                and coop.moved_on_leave is not None:
            advice.append((
                "use cooperative-sticky",
                f"eager {current_strategy} revokes all {current.skew.partitions} partitions "
                f"and moves {eager.moved_on_leave} when a member leaves; cooperative-sticky "
                f"would move about {coop.moved_on_leave} and keep the rest consuming",
            ))
    return advice


def mart_tables(snapshot: Snapshot) -> list[tuple[str, pa.Table]]:
    """The what-if of every group of a snapshot, as the two mart tables (in load order)."""
    head = {"cluster": snapshot.cluster, "snapshot_ts": snapshot.snapshot_ts}
    whatif_rows: list[dict[str, object]] = []
    advice_rows: list[dict[str, object]] = []
    for group in snapshot.groups:
        result = what_if(group, snapshot)
        if result is None:
            continue
        for scenario in result.scenarios:
            record = scenario.skew.as_record()
            whatif_rows.append({
                **head, "group_id": group.group_id, "strategy": scenario.strategy,
                "current_strategy": result.current_strategy,
                "subscriptions_inferred": result.subscriptions_inferred,
                **record, "moved_on_leave": scenario.moved_on_leave,
            })
        advice_rows.extend(
            {**head, "group_id": group.group_id, "seq": seq, "recommendation": text,
             "reason": reason}
            for seq, (text, reason) in enumerate(result.recommendations)
        )
    rows = {"assignment_whatif": whatif_rows, "assignment_advice": advice_rows}
    return [(name, pa.Table.from_pylist(rows[name], schema=schema))
            for name, schema in WHATIF_SCHEMAS.items()]
