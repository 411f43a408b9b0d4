"""Pure implementations of the consumer-group assignment strategies, for what-if analysis.

Every strategy takes the same inputs (members with their subscriptions and instance ids, the
partition count of each topic, the previous assignment) and returns member id -> partitions.
``range`` and ``roundrobin`` are deterministic and reproduce real clients exactly (tests
compare them with real librdkafka groups and with Kafka's Java assignor classes); the sticky
family is explained by its properties: balance first, then keep previous owners.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from groupscope.contract.model import Assignment, TopicPartition

Ordering = Literal["java", "librdkafka"]


@dataclass(frozen=True)
class MemberSpec:
    member_id: str
    topics: frozenset[str]
    instance_id: str | None = None  # group.instance.id: a static member


@dataclass(frozen=True)
class AssignmentInput:
    members: tuple[MemberSpec, ...]
    partitions: Mapping[str, int]  # topic -> partition count
    previous: Mapping[str, tuple[TopicPartition, ...]] = field(default_factory=dict)

    def subscribed(self, topic: str) -> list[MemberSpec]:
        return [m for m in self.members if topic in m.topics]

    def all_partitions(self) -> list[TopicPartition]:
        """Every partition of every topic some member subscribes to, sorted."""
        wanted = sorted({t for m in self.members for t in m.topics if t in self.partitions})
        return [TopicPartition(t, p) for t in wanted for p in range(self.partitions[t])]


Strategy = Callable[[AssignmentInput, Ordering], Assignment]


def _registry() -> dict[str, Strategy]:
    from groupscope.simulate.assignors import range_assignor, roundrobin, sticky

    return {
        "range": range_assignor.assign,
        "roundrobin": roundrobin.assign,
        "sticky": sticky.assign,
        # The same target as sticky; cooperative only changes how the client gets there
        # (revoke what moves first, then a second rebalance), not where it ends.
        "cooperative-sticky": sticky.assign,
        "uniform": sticky.assign_uniform,  # KIP-848 server-side default
        "server-range": range_assignor.assign_server,  # KIP-848 server-side range
    }


STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky", "uniform", "server-range")
EAGER = frozenset({"range", "roundrobin", "sticky"})


def assign(strategy: str, spec: AssignmentInput, ordering: Ordering = "librdkafka") -> Assignment:
    try:
        implementation = _registry()[strategy]
    except KeyError:
        raise ValueError(
            f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
        ) from None
    result = implementation(spec, ordering)
    return {m.member_id: tuple(sorted(result.get(m.member_id, ()))) for m in spec.members}


def member_order(members: Iterable[MemberSpec], ordering: Ordering) -> list[MemberSpec]:
    """The order a client leader sorts members in before assigning.

    Java (``MemberInfo.compareTo``): static members first, by instance id, then dynamic
    members by member id. librdkafka (``rd_kafka_group_member_cmp``): by instance id when
    both members are static, otherwise by member id. That comparison is not a total order
    when static and dynamic members mix, so the result depends on the sort algorithm:
    librdkafka calls the C library's qsort, which in glibc (up to 2.36, Debian 12) is a
    top-down merge sort, reproduced here step for step.
    """
    listed = list(members)
    if ordering == "java":
        return sorted(listed, key=lambda m: (0, m.instance_id, "") if m.instance_id is not None
                      else (1, "", m.member_id))
    return _glibc_msort(listed, _librdkafka_cmp)


def _librdkafka_cmp(a: MemberSpec, b: MemberSpec) -> int:
    if a.instance_id is not None and b.instance_id is not None:
        x, y = a.instance_id.encode(), b.instance_id.encode()
    else:
        x, y = a.member_id.encode(), b.member_id.encode()
    return (x > y) - (x < y)


def _glibc_msort(items: list[MemberSpec],
                 cmp: Callable[[MemberSpec, MemberSpec], int]) -> list[MemberSpec]:
    if len(items) <= 1:
        return items
    half = len(items) // 2
    left, right = _glibc_msort(items[:half], cmp), _glibc_msort(items[half:], cmp)
    merged: list[MemberSpec] = []
    i = j = 0
    while i < len(left) and j < len(right):
        if cmp(left[i], right[j]) <= 0:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    return merged + left[i:] + right[j:]
