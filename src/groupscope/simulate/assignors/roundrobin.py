"""``roundrobin``: all subscribed topic-partitions, sorted by topic then partition, are dealt
one at a time round the sorted members, skipping members not subscribed to the topic. The
position in the circle carries over from topic to topic."""

from __future__ import annotations

from collections import defaultdict

from groupscope.contract.model import Assignment, TopicPartition
from groupscope.simulate.assignors import AssignmentInput, Ordering, member_order


def assign(spec: AssignmentInput, ordering: Ordering) -> Assignment:
    members = member_order(spec.members, ordering)
    out: dict[str, list[TopicPartition]] = defaultdict(list)
    if not members:
        return {}
    position = -1
    for tp in spec.all_partitions():
        for _ in range(len(members)):
            position = (position + 1) % len(members)
            if tp.topic in members[position].topics:
                out[members[position].member_id].append(tp)
                break
    return {k: tuple(v) for k, v in out.items()}
