"""``range``: per topic, the sorted subscribers take contiguous ranges; the first P mod N of
them take one partition more. Members are never balanced across topics, which is why range
skews on groups with many topics of few partitions."""

from __future__ import annotations

from collections import defaultdict

from groupscope.contract.model import Assignment, TopicPartition
from groupscope.simulate.assignors import AssignmentInput, MemberSpec, Ordering, member_order


def _ranges(members: list[MemberSpec], topic: str, count: int,
            out: dict[str, list[TopicPartition]]) -> None:
    if not members:
        return
    per_member, extra = divmod(count, len(members))
    start = 0
    for index, member in enumerate(members):
        length = per_member + (1 if index < extra else 0)
        out[member.member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
        start += length


def assign(spec: AssignmentInput, ordering: Ordering) -> Assignment:
    out: dict[str, list[TopicPartition]] = defaultdict(list)
    for topic in sorted(spec.partitions):
        subscribers = member_order(spec.subscribed(topic), ordering)
        _ranges(subscribers, topic, spec.partitions[topic], out)
    return {k: tuple(v) for k, v in out.items()}


def assign_server(spec: AssignmentInput, ordering: Ordering) -> Assignment:
    """KIP-848's server-side ``range``: the same per-topic quotas over members sorted by
    member id, but sticky: a member keeps the partitions it owned while within its quota,
    and the rest are dealt out in ascending order to members under quota."""
    del ordering  # the broker sorts by member id; client-side ordering does not apply
    out: dict[str, list[TopicPartition]] = defaultdict(list)
    for topic in sorted(spec.partitions):
        subscribers = sorted(spec.subscribed(topic), key=lambda m: m.member_id)
        if not subscribers:
            continue
        count = spec.partitions[topic]
        per_member, extra = divmod(count, len(subscribers))
        quota = {m.member_id: per_member + (1 if i < extra else 0)
                 for i, m in enumerate(subscribers)}
        taken: set[int] = set()
        for member in subscribers:
            kept = sorted(tp.partition for tp in spec.previous.get(member.member_id, ())
                          if tp.topic == topic and tp.partition < count)
            for p in kept[: quota[member.member_id]]:
                if p not in taken:
                    out[member.member_id].append(TopicPartition(topic, p))
                    taken.add(p)
        free = iter(p for p in range(count) if p not in taken)
        for member in subscribers:
            while sum(1 for tp in out[member.member_id] if tp.topic == topic) < \
                    quota[member.member_id]:
                out[member.member_id].append(TopicPartition(topic, next(free)))
    return {k: tuple(v) for k, v in out.items()}
