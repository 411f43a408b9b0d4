"""The simulated range and roundrobin assignments equal the real ones exactly: Kafka's Java
assignor classes (Java member ordering) and real librdkafka consumer groups on a real broker
(librdkafka ordering), over seeded random groups: 1-12 members, 1-5 topics, mixed partition
counts and subscriptions, static members."""

from __future__ import annotations

import random
import subprocess
import textwrap
from functools import partial
from pathlib import Path

import pytest
from conftest import unique
from kafkautil import Member, create_topic, stop_all, take_snapshot, wait_until

from groupscope.contract.model import TopicPartition
from groupscope.simulate.assignors import AssignmentInput, MemberSpec, assign
from groupscope.simulate.whatif import moved
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION, KafkaCluster, classpath, kafka_libs

pytestmark = pytest.mark.integration

JAVA_ASSIGN = textwrap.dedent("""
    import org.apache.kafka.clients.consumer.*;
    import org.apache.kafka.clients.consumer.internals.AbstractPartitionAssignor;
    import org.apache.kafka.common.TopicPartition;
    import java.nio.file.*;
    import java.util.*;
    public class Assign {
      public static void main(String[] args) throws Exception {
        String id = null, strategy = null;
        Map<String, Integer> topics = new HashMap<>();
        Map<String, ConsumerPartitionAssignor.Subscription> subs = new HashMap<>();
        for (String line : Files.readAllLines(Path.of(args[0]))) {
          String[] f = line.split(" ");
          switch (f[0]) {
            case "CASE": id = f[1]; strategy = f[2]; topics.clear(); subs.clear(); break;
            case "TOPIC": topics.put(f[1], Integer.parseInt(f[2])); break;
            case "MEMBER": {
              var s = new ConsumerPartitionAssignor.Subscription(Arrays.asList(f[3].split(",")));
              s.setGroupInstanceId(f[2].equals("-") ? Optional.empty() : Optional.of(f[2]));
              subs.put(f[1], s); break;
            }
            case "END": {
              AbstractPartitionAssignor a = strategy.equals("range")
                  ? new RangeAssignor() : new RoundRobinAssignor();
              for (var e : new TreeMap<>(a.assign(topics, subs)).entrySet()) {
                StringBuilder out = new StringBuilder(id + " " + e.getKey());
                for (TopicPartition tp : e.getValue()) out.append(" ").append(tp.topic())
                    .append(":").append(tp.partition());
                System.out.println(out);
              }
            }
          }
        }
      }
    }
""")


def _random_group(rng: random.Random, tag: str, max_members: int = 12,
                  static_share: float = 0.3) -> AssignmentInput:
    topics = {f"{tag}.t{i}": rng.randint(1, 12) for i in range(rng.randint(1, 5))}
    names = sorted(topics)
    members = []
    for i in range(rng.randint(1, max_members)):
        subscribed = frozenset(rng.sample(names, rng.randint(1, len(names))))
        instance = f"{tag}-static-{rng.randint(0, 99):02d}-{i}" \
            if rng.random() < static_share else None
        members.append(MemberSpec(f"{tag}-m{rng.randint(0, 999):03d}-{i}", subscribed, instance))
    return AssignmentInput(tuple(members), topics)


def test_range_and_roundrobin_equal_kafkas_java_assignors(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    cases = {}
    lines = []
    for n in range(60):
        strategy = "range" if n % 2 == 0 else "roundrobin"
        group = _random_group(rng, f"c{n}")
        cases[f"c{n}"] = (strategy, group)
        lines.append(f"CASE c{n} {strategy}")
        lines += [f"TOPIC {t} {c}" for t, c in group.partitions.items()]
        lines += [f"MEMBER {m.member_id} {m.instance_id or '-'} {','.join(sorted(m.topics))}"
                  for m in group.members]
        lines.append("END")
    (tmp_path / "cases.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "Assign.java").write_text(JAVA_ASSIGN)
    run = subprocess.run(
        ["java", "-cp", classpath(kafka_libs(DEFAULT_KAFKA_VERSION)),
         str(tmp_path / "Assign.java"), str(tmp_path / "cases.txt")],
        capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    java: dict[str, dict[str, tuple[TopicPartition, ...]]] = {c: {} for c in cases}
    for line in out.splitlines():
        case, member, *parts = line.split(" ")
        java[case][member] = tuple(sorted(
            TopicPartition(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in parts))
    for case, (strategy, group) in cases.items():
        ours = assign(strategy, group, ordering="java")
        expected = {m.member_id: java[case].get(m.member_id, ()) for m in group.members}
        assert ours == expected, (case, strategy)


def _settled_group(bootstrap: str, group_id: str, members: int, partitions: int):  # type: ignore[no-untyped-def]
    """The group if it is Stable with all its members owning all partitions, else None. The
    classic view (subscriptions) and the describe are two requests: wait for a snapshot in
    which both saw the same, settled generation."""
    snapshot = take_snapshot(bootstrap)
    group = next((g for g in snapshot.groups if g.group_id == group_id), None)
    if (group is None or group.state != "Stable" or len(group.members) != members
            or sum(len(x.assignment) for x in group.members) != partitions
            or not all(x.subscription for x in group.members)):
        return None
    return group


def _start_members(bootstrap: str, group_id: str, blueprint: AssignmentInput,
                   strategy: str) -> list[Member]:
    members = []
    for m in blueprint.members:
        config = {"bootstrap.servers": bootstrap, "group.id": group_id,
                  "partition.assignment.strategy": strategy, "client.id": m.member_id,
                  "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500}
        if m.instance_id:
            config["group.instance.id"] = m.instance_id
        members.append(Member(config, sorted(m.topics)))
    for member in members:
        member.start()
    return members


def _as_input(group, partitions) -> AssignmentInput:  # type: ignore[no-untyped-def]
    """The real group as the simulator sees it: the broker's member ids, and the
    subscriptions and instance ids the members sent, read back from the group."""
    return AssignmentInput(
        tuple(MemberSpec(x.member_id, frozenset(x.subscription or ()), x.instance_id)
              for x in group.members),
        partitions,
        {x.member_id: tuple(sorted(x.assignment)) for x in group.members},
    )


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_range_and_roundrobin_equal_real_librdkafka_groups(
    kafka: KafkaCluster, strategy: str
) -> None:
    rng = random.Random(f"librdkafka-{strategy}")
    for n in range(6):
        tag = unique(f"{strategy[:2]}{n}")
        blueprint = _random_group(rng, tag)
        for topic, count in blueprint.partitions.items():
            create_topic(kafka.bootstrap, topic, count)
        group_id = f"{tag}-group"
        total = sum(blueprint.partitions[t] for t in {t for m in blueprint.members
                                                       for t in m.topics})
        members = _start_members(kafka.bootstrap, group_id, blueprint, strategy)
        try:
            group = wait_until(partial(_settled_group, kafka.bootstrap, group_id,
                                       len(members), total), 90, f"{group_id} to settle")
        finally:
            stop_all(members)
        real = _as_input(group, blueprint.partitions)
        simulated = assign(strategy, real, ordering="librdkafka")
        assert simulated == real.previous, (group_id, strategy)


MOVE_TOLERANCE = 1  # partitions: ties among equally good sticky answers may differ by one


def test_cooperative_sticky_matches_real_balance_stickiness_and_movement(
    kafka: KafkaCluster,
) -> None:
    tag = unique("coop")
    partitions = {f"{tag}.a": 6, f"{tag}.b": 4}
    for topic, count in partitions.items():
        create_topic(kafka.bootstrap, topic, count)
    every = frozenset(partitions)
    blueprint = AssignmentInput(tuple(MemberSpec(f"{tag}-c{i}", every) for i in range(4)),
                                partitions)
    group_id = f"{tag}-group"
    members = _start_members(kafka.bootstrap, group_id, blueprint, "cooperative-sticky")
    try:
        settle = partial(_settled_group, kafka.bootstrap, group_id)
        first = _as_input(wait_until(partial(settle, 4, 10), 90, "4 members"), partitions)

        members.pop().stop()  # a graceful leave
        second = _as_input(wait_until(partial(settle, 3, 10), 90, "3 members"), partitions)
        survivors = AssignmentInput(second.members, partitions,
                                    {m.member_id: first.previous[m.member_id]
                                     for m in second.members})
        simulated = assign("cooperative-sticky", survivors)
        for name, result in (("real", second.previous), ("simulated", simulated)):
            counts = sorted(len(v) for v in result.values())
            assert counts == [3, 3, 4], name  # balanced
            for member, owned in first.previous.items():  # sticky: survivors keep theirs
                if member in result:
                    assert set(owned) <= set(result[member]), (name, member)
        assert moved(first.previous, second.previous) <= \
            moved(first.previous, simulated) + MOVE_TOLERANCE

        joiner = _start_members(kafka.bootstrap, group_id, AssignmentInput(
            (MemberSpec(f"{tag}-late", every),), partitions), "cooperative-sticky")
        members += joiner
        third = _as_input(wait_until(partial(settle, 4, 10), 90, "the join"), partitions)
        rejoined = AssignmentInput(third.members, partitions,
                                   {m.member_id: second.previous.get(m.member_id, ())
                                    for m in third.members})
        simulated = assign("cooperative-sticky", rejoined)
        assert sorted(len(v) for v in third.previous.values()) == [2, 2, 3, 3]
        assert sorted(len(v) for v in simulated.values()) == [2, 2, 3, 3]
        assert moved(second.previous, third.previous) <= \
            moved(second.previous, simulated) + MOVE_TOLERANCE
    finally:
        stop_all(members)
