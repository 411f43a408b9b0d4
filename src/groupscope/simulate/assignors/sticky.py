"""The sticky family: ``sticky`` / ``cooperative-sticky`` (client side) and KIP-848's
``uniform`` (server side). Balance first, then stickiness:

1. every member keeps the previous partitions it still may own (topic still subscribed,
   partition still there, nobody else claims it first), up to its fair share;
2. partitions left over go, hardest-to-place first (fewest eligible members), to the
   eligible member with the fewest partitions;
3. while a partition can move from a member to an eligible one with two or more fewer
   partitions, it moves (the most recently received one first).

The result satisfies the properties the real assignors promise (each partition exactly once,
only to subscribers, counts within one of each other when subscriptions are equal, no
partition moved that balance did not require); the exact choice among equally good answers
may differ from a given client's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

from groupscope.contract.model import Assignment, TopicPartition
from groupscope.simulate.assignors import AssignmentInput, MemberSpec, Ordering, member_order


def assign(spec: AssignmentInput, ordering: Ordering) -> Assignment:
    members = member_order(spec.members, ordering)
    if not members:
        return {}
    partitions = spec.all_partitions()
    eligible: dict[TopicPartition, list[MemberSpec]] = {
        tp: [m for m in members if tp.topic in m.topics] for tp in partitions
    }
    share = _fair_shares(members, partitions, eligible)

    owned: dict[str, list[TopicPartition]] = defaultdict(list)
    owner: dict[TopicPartition, str] = {}
    for member in members:  # 1. keep what may be kept, up to the fair share
        for tp in sorted(spec.previous.get(member.member_id, ())):
            if (tp in eligible and tp not in owner and member in eligible[tp]
                    and len(owned[member.member_id]) < share[member.member_id]):
                owned[member.member_id].append(tp)
                owner[tp] = member.member_id

    unassigned = [tp for tp in partitions if tp not in owner]
    unassigned.sort(key=lambda tp: (len(eligible[tp]), tp))
    position = {m.member_id: i for i, m in enumerate(members)}
    for tp in unassigned:  # 2. hardest first, to the least loaded eligible member
        if not eligible[tp]:
            continue
        target = min(eligible[tp], key=lambda m: (len(owned[m.member_id]), position[m.member_id]))
        owned[target.member_id].append(tp)
        owner[tp] = target.member_id

    _balance(members, owned, eligible, position)  # 3.
    return {m.member_id: tuple(sorted(owned[m.member_id])) for m in members}


def assign_uniform(spec: AssignmentInput, ordering: Ordering) -> Assignment:
    """KIP-848 ``uniform``: the broker orders members by member id (no client ordering)."""
    del ordering
    ordered = AssignmentInput(
        tuple(sorted(spec.members, key=lambda m: m.member_id)), spec.partitions, spec.previous
    )
    return assign(ordered, "java")


def _fair_shares(
    members: list[MemberSpec],
    partitions: list[TopicPartition],
    eligible: dict[TopicPartition, list[MemberSpec]],
) -> dict[str, int]:
    """How many partitions each member may keep in step 1: its even split of the partitions
    it can own, rounded up (step 3 evens out any excess)."""
    # Exact fractions: a float sum like 2.0000000000000004 would round up to 3.
    counts: dict[str, Fraction] = defaultdict(Fraction)
    for tp in partitions:
        for m in eligible[tp]:
            counts[m.member_id] += Fraction(1, len(eligible[tp]))
    return {m.member_id: math.ceil(counts[m.member_id]) for m in members}


def _balance(
    members: list[MemberSpec],
    owned: dict[str, list[TopicPartition]],
    eligible: dict[TopicPartition, list[MemberSpec]],
    position: dict[str, int],
) -> None:
    moved = True
    while moved:  # each move lowers the sum of squared counts, so this ends
        moved = False
        for giver in sorted(members, key=lambda m: (-len(owned[m.member_id]),
                                                    position[m.member_id])):
            for tp in reversed(owned[giver.member_id]):
                takers = [m for m in eligible[tp]
                          if len(owned[m.member_id]) + 1 < len(owned[giver.member_id])]
                if not takers:
                    continue
                taker = min(takers, key=lambda m: (len(owned[m.member_id]),
                                                   position[m.member_id]))
                owned[giver.member_id].remove(tp)
                owned[taker.member_id].append(tp)
                moved = True
                break
            if moved:
                break
