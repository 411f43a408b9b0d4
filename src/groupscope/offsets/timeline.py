"""The rebalance timeline of one group, from its ``__consumer_offsets`` events (pure).

- **Classic groups**: one entry per generation. The coordinator writes a group-metadata record
  when a rebalance completes (the leader's SyncGroup) and when the group empties. The same
  generation written again (a static member's restart within its session timeout replaces its
  member id without a rebalance) is folded into that generation as a rewrite. A jump in
  generation numbers means rebalances that never completed, or records compacted away before
  they were read: counted as ``missing_before``. The group-creation record (generation 0, no
  members) is not a rebalance.
- **Consumer-protocol (KIP-848) groups**: one entry per target-assignment epoch, with the
  members alive at that point (member-metadata records and their tombstones) and the target
  assignment in force (target-assignment-member records). Assignment epochs follow group
  epochs, which may advance several times before one assignment: their gaps mean nothing.

Members are matched across generations by group instance id when they have one (a static member
keeps its identity across restarts), else by member id. ``partitions_moved`` counts partitions
assigned to a different member than their last owner (a cooperative rebalance revokes in one
generation and assigns in the next); a partition new to the group (a partition-count increase,
a new subscription) is not a move.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from groupscope.contract.model import Assignment, TopicPartition

Row = Mapping[str, Any]
COOPERATIVE_PROTOCOLS = frozenset({"cooperative-sticky"})


@dataclass
class TimelineMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    partitions: tuple[TopicPartition, ...]
    session_timeout_ms: int | None = None  # classic only
    rebalance_timeout_ms: int | None = None

    @property
    def identity(self) -> str:
        return self.instance_id or self.member_id

    def as_dict(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id, "instance_id": self.instance_id,
            "client_id": self.client_id, "client_host": self.client_host,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "partitions": [f"{tp.topic}-{tp.partition}" for tp in self.partitions],
        }


@dataclass
class Generation:
    generation: int  # the classic generation id, or the KIP-848 assignment epoch
    timestamp: datetime
    protocol: str | None  # the assignor
    leader: str | None
    rebalance_type: str  # eager | cooperative | consumer (KIP-848, incremental by design)
    members: list[TimelineMember]
    joined: list[str] = field(default_factory=list)  # member ids
    left: list[str] = field(default_factory=list)
    partitions_moved: int = 0
    missing_before: int = 0
    rewrites: int = 0  # the generation written again without a rebalance
    replaced: list[dict[str, str]] = field(default_factory=list)
    source: tuple[int, int] = (0, 0)  # offsets-topic partition and offset of the record

    @property
    def empty(self) -> bool:
        return not self.members

    def assignment(self) -> Assignment:
        return {m.identity: m.partitions for m in self.members}

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation, "timestamp": self.timestamp.isoformat(),
            "protocol": self.protocol, "leader": self.leader,
            "rebalance_type": self.rebalance_type,
            "members": [m.as_dict() for m in self.members],
            "joined": self.joined, "left": self.left,
            "partitions_moved": self.partitions_moved, "missing_before": self.missing_before,
            "rewrites": self.rewrites, "replaced": self.replaced, "empty": self.empty,
            "source": {"partition": self.source[0], "offset": self.source[1]},
        }


@dataclass
class Timeline:
    group_id: str
    type: str  # classic | consumer | unknown (no membership record seen)
    protocol_type: str | None
    generations: list[Generation] = field(default_factory=list)
    deleted_at: list[datetime] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id, "type": self.type, "protocol_type": self.protocol_type,
            "generations": [g.as_dict() for g in self.generations],
            "deleted_at": [d.isoformat() for d in self.deleted_at],
        }


def _pos(row: Row) -> tuple[int, int]:
    return int(row["source_partition"]), int(row["source_offset"])


def build_timeline(group_id: str, events: Mapping[str, Iterable[Row]]) -> Timeline:
    """The timeline of ``group_id`` from event-table rows (any superset: other groups' rows are
    ignored). ``events`` maps table names of ``groupscope.offsets.events`` to rows."""

    def rows(table: str) -> list[Row]:
        return [r for r in events.get(table, ()) if r["group_id"] == group_id]

    members_at: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for r in rows("generation_members"):
        members_at[_pos(r)].append(r)
    partitions_at: dict[tuple[tuple[int, int], str, str], list[TopicPartition]] = \
        defaultdict(list)
    for r in rows("member_partitions"):
        topic = r["topic"] if r["topic"] is not None else f"<topic id {r['topic_id']}>"
        partitions_at[(_pos(r), r["member_id"], r["kind"])].append(
            TopicPartition(topic, int(r["partition"])))

    # One stream in log order: every record of a group lives in one offsets-topic partition.
    stream: list[tuple[tuple[int, int], str, Row]] = []
    for table in ("group_generations", "consumer_members", "target_members",
                  "assignment_epochs", "deletions"):
        stream.extend((_pos(r), table, r) for r in rows(table))
    stream.sort(key=lambda item: item[0])

    timeline = Timeline(group_id, "unknown", None)
    builder = _Builder(timeline, members_at, partitions_at)
    for pos, table, row in stream:
        if table == "group_generations":
            builder.classic(pos, row)
        elif table == "consumer_members":
            builder.consumer_members[row["member_id"]] = row
        elif table == "target_members":
            builder.targets[row["member_id"]] = tuple(
                sorted(partitions_at.get((pos, row["member_id"], "target"), ())))
        elif table == "assignment_epochs":
            builder.consumer_epoch(pos, row)
        else:
            builder.deletion(row)
    return timeline


@dataclass
class _Builder:
    timeline: Timeline
    members_at: Mapping[tuple[int, int], list[Row]]
    partitions_at: Mapping[tuple[tuple[int, int], str, str], list[TopicPartition]]
    consumer_members: dict[str, Row] = field(default_factory=dict)
    targets: dict[str, tuple[TopicPartition, ...]] = field(default_factory=dict)
    previous: Generation | None = None
    # A cooperative rebalance revokes in one generation and assigns in the next: a move is
    # judged against the partition's last owner, not only the previous generation's.
    last_owner: dict[TopicPartition, str] = field(default_factory=dict)

    def classic(self, pos: tuple[int, int], row: Row) -> None:
        generation, members = int(row["generation"]), self._classic_members(pos)
        self.timeline.type = "classic"
        if row["protocol_type"]:
            self.timeline.protocol_type = row["protocol_type"]
        if generation == 0 and not members:
            return  # the group was created; nothing has rebalanced yet
        prev = self.previous
        if prev is not None and prev.generation == generation and prev.source[0] == pos[0]:
            self._rewrite(prev, members)
            return
        protocol = row["protocol"]
        rebalance_type = "cooperative" if protocol in COOPERATIVE_PROTOCOLS else "eager"
        if protocol is None and prev is not None:
            rebalance_type = prev.rebalance_type  # an Empty generation names no assignor
        self._emit(Generation(generation, row["record_ts"], protocol, row["leader"],
                              rebalance_type, members, source=pos))

    def _classic_members(self, pos: tuple[int, int]) -> list[TimelineMember]:
        return [
            TimelineMember(
                m["member_id"], m["instance_id"], m["client_id"], m["client_host"],
                tuple(sorted(self.partitions_at.get((pos, m["member_id"], "assigned"), ()))),
                m["session_timeout_ms"], m["rebalance_timeout_ms"],
            )
            for m in self.members_at.get(pos, ())
        ]

    def _rewrite(self, prev: Generation, members: list[TimelineMember]) -> None:
        prev.rewrites += 1
        before = {m.identity: m for m in prev.members}
        for m in members:
            old = before.get(m.identity)
            if old is not None and old.member_id != m.member_id:
                prev.replaced.append({"instance_id": m.identity, "old_member_id": old.member_id,
                                      "new_member_id": m.member_id})
        prev.members = members

    def consumer_epoch(self, pos: tuple[int, int], row: Row) -> None:
        self.timeline.type = "consumer"
        self.timeline.protocol_type = "consumer"
        members = [
            TimelineMember(m["member_id"], m["instance_id"], m["client_id"], m["client_host"],
                           self.targets.get(member_id, ()),
                           rebalance_timeout_ms=m["rebalance_timeout_ms"])
            for member_id, m in sorted(self.consumer_members.items())
        ]
        assignors = sorted({m["server_assignor"] for m in self.consumer_members.values()
                            if m["server_assignor"]})
        self._emit(Generation(int(row["assignment_epoch"]), row["record_ts"],
                              ",".join(assignors) or None, None, "consumer", members,
                              source=pos))

    def _emit(self, current: Generation) -> None:
        prev = self.previous
        if prev is not None:
            before = {m.identity: m for m in prev.members}
            after = {m.identity: m for m in current.members}
            current.joined = [m.member_id for i, m in after.items() if i not in before]
            current.left = [m.member_id for i, m in before.items() if i not in after]
            current.partitions_moved = sum(
                1 for identity, parts in current.assignment().items() for p in parts
                if self.last_owner.get(p, identity) != identity)
            if current.rebalance_type != "consumer":
                current.missing_before = max(0, current.generation - prev.generation - 1)
        else:
            current.joined = [m.member_id for m in current.members]
            if current.rebalance_type != "consumer":
                # A first generation above 1: earlier history is not in the log any more.
                current.missing_before = max(0, current.generation - 1)
        for identity, parts in current.assignment().items():
            self.last_owner.update(dict.fromkeys(parts, identity))
        self.timeline.generations.append(current)
        self.previous = current

    def deletion(self, row: Row) -> None:
        kind = int(row["record_type"])
        if kind in (2, 3):  # the group's metadata is gone: the group was deleted
            self.timeline.deleted_at.append(row["record_ts"])
            self.previous = None
            self.last_owner.clear()
            self.consumer_members.clear()
            self.targets.clear()
        elif kind == 5 and row["member_id"] is not None:
            self.consumer_members.pop(row["member_id"], None)
        elif kind == 7 and row["member_id"] is not None:
            self.targets.pop(row["member_id"], None)


def all_timelines(events: Mapping[str, Iterable[Row]]) -> list[Timeline]:
    """The timeline of every group with membership records, by group id."""
    groups = {r["group_id"] for table in ("group_generations", "assignment_epochs")
              for r in events.get(table, ())}
    return [build_timeline(g, events) for g in sorted(groups)]
