"""Skew: how unevenly a group's assignment spreads its partitions and its lag over its members.
The one definition; the what-if simulator (``groupscope.simulate.whatif``) calls it on every
assignment it compares, and the Spark skew job (``groupscope.analyze.skew``) implements it as
column expressions over every snapshot (a Python call per group would be far too slow there).
tests/unit/test_skew_parity.py runs both on the same cases.

The figures of a group (``skew``), from each member's partitions and lag (``member_loads``):

- ``members``: how many; ``partitions``: how many they own in all;
- ``max_minus_min``: the most partitions a member owns minus the fewest (0 with no members);
- ``coefficient_of_variation``: population standard deviation / mean of the partitions per
  member; None when no member owns a partition (no mean to compare with);
- ``idle_members``: members that own no partition;
- ``most_lagged_member``: the member with the most lag, the smallest member id among equals;
  ``most_lagged_share``: its lag over the group's. Both None when the group has no positive lag.

A member's lag is the positive lag (high watermark - committed, negative counted as 0) of the
partitions it currently owns. A partition that two members' current assignments both list (an
anomaly, which a faulty client-side assignor can cause) counts in both members' partitions but
in the lag of the smallest member id only, as in ``mart.member_lag``: the group's lag counts
each partition once.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, fields
from typing import TypeVar

P = TypeVar("P", bound=Hashable)  # a partition, however the caller names it


@dataclass(frozen=True)
class MemberLoad:
    partitions: int
    lag: int  # positive lag of its partitions


@dataclass(frozen=True)
class GroupSkew:
    members: int
    partitions: int
    max_minus_min: int
    coefficient_of_variation: float | None
    idle_members: int
    most_lagged_member: str | None
    most_lagged_share: float | None

    def as_record(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in FIELDS}


# The names of the figures, in the column order of mart.group_skew and mart.assignment_whatif.
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GroupSkew))


def member_loads(assignment: Mapping[str, Collection[P]],
                 lag: Mapping[P, int]) -> dict[str, MemberLoad]:
    """Each member's load from the partitions it currently owns and their lag (a partition
    missing from ``lag`` has none known, e.g. it was never committed)."""
    owner: dict[P, str] = {}
    for member in sorted(assignment):
        for p in assignment[member]:
            owner.setdefault(p, member)
    return {m: MemberLoad(len(owned),
                          sum(max(lag.get(p, 0), 0) for p in owned if owner[p] == m))
            for m, owned in assignment.items()}


def skew(members: Mapping[str, MemberLoad]) -> GroupSkew:
    counts = [load.partitions for load in members.values()]
    total = sum(counts)
    cv = None
    if total:
        mean = total / len(counts)
        cv = math.sqrt(sum((c - mean) ** 2 for c in counts) / len(counts)) / mean
    group_lag = sum(load.lag for load in members.values())
    most, share = None, None
    if group_lag > 0:
        most = min(members, key=lambda m: (-members[m].lag, m))
        share = members[most].lag / group_lag
    return GroupSkew(
        members=len(counts),
        partitions=total,
        max_minus_min=(max(counts) - min(counts)) if counts else 0,
        coefficient_of_variation=cv,
        idle_members=sum(1 for c in counts if c == 0),
        most_lagged_member=most,
        most_lagged_share=share,
    )
