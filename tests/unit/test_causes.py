"""The probable causes of a group's alert (``groupscope.serve.alerting.causes.rank``), on tiny
inline histories: each cause named first where its evidence is, and nothing named where there
is none. The same causes on real clusters: tests/integration/test_alert_causes.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from groupscope.serve.alerting.causes import (
    Change,
    Evidence,
    GroupPoint,
    Member,
    Outage,
    PartitionPoint,
    Totals,
    rank,
)
from groupscope.serve.alerting.incidents import Incident
from groupscope.serve.alerting.notify import cause_lines, headline, single

T0 = datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC)
EVERY = timedelta(seconds=15)
ALICE = Member("m-alice", "orders-svc-1", "/10.0.0.1")
BOB = Member("m-bob", "orders-svc-2", "/10.0.0.2")


def ts(i: int) -> datetime:
    return T0 + i * EVERY


# A partition's history: snapshot i -> (member, committed, high watermark).
History = Callable[[int], tuple[str | None, int, int | None]]


def evidence(snapshots: int, partitions: dict[tuple[str, int], History], *,
             listed: Sequence[Member] = (ALICE,), members_at: Callable[[int], int] = lambda i: 1,
             changes: Sequence[Change] = (), coordinator: Callable[[int], int] = lambda i: 1,
             complete: Callable[[int], bool] = lambda i: True, generations: int = 1,
             state: Callable[[int], str] | None = None,
             unreconciled: dict[str, tuple[int, int]] | None = None,
             leader: Callable[[int, tuple[str, int]], int] = lambda i, key: 1,
             early: timedelta = timedelta(0)) -> Evidence:
    """A history returning None for the high watermark: not read (its leader down). ``early``:
    the newest snapshot came that much before its time."""
    def ts(i: int) -> datetime:
        return T0 + i * EVERY - (early if i == snapshots - 1 else timedelta(0))

    points, parts, totals = [], [], []
    for i in range(snapshots):
        produced = committed = lag = 0
        for (topic, partition), history in partitions.items():
            member, offset, hw = history(i)
            known = hw if hw is not None else offset
            parts.append(PartitionPoint(ts(i), topic, partition, member, offset,
                                        None if hw is None else hw - offset,
                                        leader(i, (topic, partition))))
            produced, committed, lag = produced + known, committed + offset, lag + known - offset
        totals.append(Totals(ts(i), produced, committed, lag))
        now = state(i) if state else "Stable" if members_at(i) else "Empty"
        points.append(GroupPoint(ts(i), now, members_at(i),
                                 coordinator(i), True, complete(i),
                                 None if complete(i) else "ListGroups on broker 2 timed out"))
    return Evidence(ts(snapshots - 1), EVERY, points, changes, {m.member_id: m for m in listed},
                    totals, parts, generations, T0, unreconciled or {})


def steady(member: str | None = "m-alice", produce: int = 100, consume: int = 100,
           stop_at: int | None = None) -> History:
    """Produced ``produce`` a snapshot; committed ``consume`` a snapshot until ``stop_at``."""
    def at(i: int) -> tuple[str | None, int, int]:
        done = i if stop_at is None else min(i, stop_at)
        return member, 1000 + done * consume, 1000 + i * produce + 5
    return at


def kinds(found: Sequence[object]) -> list[str]:
    return [c.kind for c in found]  # type: ignore[attr-defined]


def test_a_killed_member_still_listed_is_named_alone_on_a_quiet_cluster() -> None:
    # kill -9 at snapshot 16: no commit since, the member still listed (its session lives on)
    found = rank(evidence(20, {("orders", 0): steady(stop_at=16)}), "group_status_err")
    assert kinds(found) == ["members_silent"]
    assert found[0].evidence.startswith(
        "member m-alice (client orders-svc-1, host /10.0.0.1) still listed")
    assert "not committed since 10:04:00Z" in found[0].evidence


def test_a_member_silent_since_a_snapshot_that_came_early_is_named() -> None:
    # the STOP fires at the first snapshot without a commit; that snapshot came 0.2 s early
    found = rank(evidence(20, {("orders", 0): steady(stop_at=18)},
                          early=timedelta(seconds=0.2)), "group_status_err")
    assert kinds(found) == ["members_silent"]


def test_the_same_member_once_expired_is_a_crash_not_a_leave() -> None:
    gone = Change("left", ts(19), ts(18), ALICE)
    found = rank(evidence(20, {("orders", 0): steady(stop_at=16)}, listed=(),
                          members_at=lambda i: 1 if i < 19 else 0, changes=[gone]),
                 "group_status_err")
    assert kinds(found)[0] == "member_crashed"
    assert "stayed listed until the coordinator removed it by 10:04:45Z, 45 s later" in \
        found[0].evidence
    assert "no LeaveGroup" in found[0].evidence


def test_a_member_that_held_a_rebalance_longer_than_a_session_hung() -> None:
    # its commits stop at 6; a join at 8 starts a rebalance that waits for it until 19
    gone = Change("left", ts(19), ts(18), ALICE)
    found = rank(evidence(20, {("orders", 0): steady(stop_at=6)}, listed=(),
                          members_at=lambda i: 1 if i < 19 else 0, changes=[gone],
                          state=lambda i: "PreparingRebalance" if 8 <= i < 19 else "Stable"),
                 "group_status_err")
    assert kinds(found)[0] == "member_hung"
    assert "held the group's rebalance until the coordinator removed it by 10:04:45Z" in \
        found[0].evidence
    assert "max.poll.interval.ms" in found[0].evidence


def test_a_dead_member_a_rebalance_waited_for_briefly_crashed() -> None:
    # killed at 16; a join at 17 starts a rebalance its session expiry ends 30 s later
    gone = Change("left", ts(19), ts(18), ALICE)
    found = rank(evidence(20, {("orders", 0): steady(stop_at=16)}, listed=(),
                          members_at=lambda i: 1 if i < 19 else 0, changes=[gone],
                          state=lambda i: "PreparingRebalance" if 17 <= i < 19 else "Stable"),
                 "group_status_err")
    assert kinds(found)[0] == "member_crashed"


def test_a_member_that_committed_until_it_left_left_cleanly() -> None:
    gone = Change("left", ts(19), ts(18), ALICE)
    found = rank(evidence(20, {("orders", 0): steady(stop_at=18)}, listed=(),
                          members_at=lambda i: 1 if i < 19 else 0, changes=[gone]),
                 "group_empty_lag_growing")
    assert kinds(found) == ["member_left"]
    assert "committed up to 10:04:30Z and was gone at 10:04:45Z: a LeaveGroup" in \
        found[0].evidence


def test_one_frozen_partition_among_advancing_ones_is_a_poison_record() -> None:
    history = {("orders", 0): steady(stop_at=10), ("orders", 1): steady(),
               ("orders", 2): steady()}
    for condition in ("group_status_err", "lag_records"):
        found = rank(evidence(20, history), condition)
        assert kinds(found)[0] == "stuck_on_record", (condition, found)
    assert "orders[0] has stayed at offset 2000 since 10:02:30Z" in found[0].evidence
    assert "while the other 2 partitions of member m-alice (client orders-svc-1, host " \
        "/10.0.0.1) advance" in found[0].evidence


def test_ten_times_the_production_with_steady_consumption_is_a_surge() -> None:
    def surging(i: int) -> tuple[str | None, int, int]:
        hw = 1000 + i * 100 if i <= 14 else 1000 + 1400 + (i - 14) * 1000
        return "m-alice", 1000 + i * 100, hw
    found = rank(evidence(20, {("orders", 0): surging}), "lag_records")
    assert kinds(found)[0] == "producer_surge", found
    assert "production up 10.0x since 10:03:30Z" in found[0].evidence
    assert "consumption holds at 400/min" in found[0].evidence
    assert "consumer_slower" not in kinds(found)  # the surge explains it


def test_a_surge_one_interval_old_is_named_at_once() -> None:
    # 10x production in the newest interval only: averaged over the five recent intervals it
    # is 2.8x, under the factor, yet a lag alert firing now is the surge's doing.
    def surging(i: int) -> tuple[str | None, int, int]:
        hw = 1000 + i * 100 if i <= 18 else 1000 + 1800 + (i - 18) * 1000
        return "m-alice", 1000 + i * 100, hw
    found = rank(evidence(20, {("orders", 0): surging}), "lag_records")
    assert kinds(found)[0] == "producer_surge", found
    assert "production up 10.0x since 10:04:30Z" in found[0].evidence
    assert "consumer_slower" not in kinds(found)


def test_a_surge_that_just_ended_is_still_the_cause() -> None:
    # 10x production in intervals 16-18, back to normal in the newest one; the consumer holds
    # at 110 a snapshot (faster than normal production): the lag alert firing now is the
    # surge's doing, and adding consumers is not the advice.
    def surged(i: int) -> tuple[str | None, int, int]:
        hw = 1000 + i * 100 + 900 * max(0, min(i, 18) - 15)
        return "m-alice", 1000 + i * 110, hw
    found = rank(evidence(20, {("orders", 0): surged}), "lag_seconds")
    assert kinds(found)[0] == "producer_surge", found
    assert "production up 10.0x from 10:03:45Z until 10:04:30Z" in found[0].evidence
    assert "consumer_slower" not in kinds(found)


def test_a_surge_older_than_the_recent_intervals_is_not_named() -> None:
    # The same surge ten intervals ago; the consumer is slower than production since.
    def surged(i: int) -> tuple[str | None, int, int]:
        hw = 1000 + i * 100 + 900 * max(0, min(i, 9) - 6)
        return "m-alice", 1000 + i * 60, hw
    found = rank(evidence(20, {("orders", 0): surged}), "lag_seconds")
    assert "producer_surge" not in kinds(found), found
    assert kinds(found) == ["consumer_slower"], found


def test_a_surge_while_consumption_falls_leaves_the_slow_consumer_named() -> None:
    # Production 10x and consumption down to 40% in the newest interval: not the surge's
    # doing alone (consumption did not hold), so the slow consumer is still named.
    def surging(i: int) -> tuple[str | None, int, int]:
        committed = 1000 + i * 100 if i <= 18 else 1000 + 1800 + 40
        hw = 1000 + i * 100 if i <= 18 else 1000 + 1800 + 1000
        return "m-alice", committed, hw
    found = rank(evidence(20, {("orders", 0): surging}), "lag_records")
    assert kinds(found) == ["consumer_slower"], found


def test_a_consumer_slower_than_steady_production_is_named() -> None:
    found = rank(evidence(20, {("orders", 0): steady(produce=100, consume=60)}), "lag_seconds")
    assert kinds(found) == ["consumer_slower"], found
    assert "consuming 240/min against 400/min produced" in found[0].evidence


def test_a_coordinator_move_and_a_partial_snapshot_explain_a_stall() -> None:
    found = rank(evidence(20, {("orders", 0): steady(stop_at=17)}, listed=(),
                          coordinator=lambda i: 2 if i < 17 else 1,
                          complete=lambda i: i != 16),
                 "group_status_err")
    assert kinds(found)[:2] == ["coordinator_moved", "broker_unreachable"], found
    assert "from broker 2 to broker 1 at 10:04:15Z" in found[0].evidence
    assert "ListGroups on broker 2 timed out" in found[1].evidence


def test_members_silenced_by_their_coordinators_move_are_not_the_cause() -> None:
    # The coordinator's broker stops after snapshot 16: the member, still listed, commits
    # nothing from then on; the group is on broker 1 from snapshot 18 (17 was partial).
    found = rank(evidence(20, {("orders", 0): steady(stop_at=16)},
                          coordinator=lambda i: 2 if i < 17 else 1,
                          complete=lambda i: i != 17),
                 "group_status_err")
    assert kinds(found)[:2] == ["coordinator_moved", "broker_unreachable"], found
    assert "members_silent" not in kinds(found)
    # Near misses: a member silent since long before the move, or since long after it, is
    # named (first, when the move is old news).
    earlier = rank(evidence(20, {("orders", 0): steady(stop_at=10)},
                            coordinator=lambda i: 2 if i < 17 else 1),
                   "group_status_err")
    assert "members_silent" in kinds(earlier), earlier
    later = rank(evidence(20, {("orders", 0): steady(stop_at=16)},
                          coordinator=lambda i: 2 if i < 5 else 1),
                 "group_status_err")
    assert kinds(later)[0] == "members_silent", later
    # ... or silent with the move, but still silent more than a session after it
    still = rank(evidence(30, {("orders", 0): steady(stop_at=16)},
                          coordinator=lambda i: 2 if i < 17 else 1),
                 "group_status_err")
    assert "members_silent" in kinds(still), still


def test_a_rewind_while_the_group_was_empty_is_an_offset_reset() -> None:
    def reset(i: int) -> tuple[str | None, int, int]:
        return None, (5000 if i < 12 else 100), 5000
    found = rank(evidence(20, {("orders", 0): reset}, listed=(), members_at=lambda i: 0),
                 "partition_rewind")
    assert kinds(found) == ["rewind"]
    assert "orders[0] from 5000 to 100 at 10:03:00Z, while the group had no member: an " \
           "offset reset" in found[0].evidence


def test_a_storm_names_who_joins_and_leaves() -> None:
    flapper = Member("m-flap", "flapper", "/10.0.0.9")
    churn = [Change(kind, ts(i), ts(i - 1), flapper) for i in range(2, 20, 2)
             for kind in ("joined", "left")]
    found = rank(evidence(20, {("orders", 0): steady()}, changes=churn, generations=18),
                 "rebalances_per_hour")
    assert kinds(found) == ["members_churning"]
    assert "flapper (/10.0.0.9) joined 9x, left 9x" in found[0].evidence, found
    # The same storm explains a stalled group too.
    stalled = rank(evidence(20, {("orders", 0): steady(stop_at=15)}, changes=churn,
                            generations=18), "group_status_err")
    assert "rebalance_storm" in kinds(stalled)


def test_no_evidence_names_nothing_and_the_message_says_so() -> None:
    healthy = evidence(20, {("orders", 0): steady()})
    assert rank(healthy, "lag_records") == []
    assert rank(healthy, "collector_stale") == []  # not a group condition: never explained
    incident = Incident("i1", "fp", "lag_records_high", "warning", "prod", "orders", "", "firing",
                        T0, T0, T0, 200_000.0, 100_000.0,
                        {"condition": "lag_records", "causes": [], "lag": 200_000,
                         "member_count": 1, "state": "Stable"})
    assert cause_lines(incident) == [
        "Likely cause: none known (no member crashed or left, no stuck record, rebalance "
        "storm, coordinator or partition leader move, producer surge, slow consumer or rewind "
        "in the group's last hour)."]


def test_the_message_names_the_likeliest_cause_first_then_the_others() -> None:
    history = {("orders", 0): steady(stop_at=10), ("orders", 1): steady(),
               ("orders", 2): steady()}
    found = [c.as_dict() for c in rank(evidence(20, history, coordinator=lambda i: 2 if i < 18
                                                else 1), "group_status_err")]
    incident = Incident("i1", "fp", "group_err", "critical", "prod", "orders", "", "firing",
                        T0, T0, T0, 1.0, 0.0,
                        {"condition": "group_status_err", "causes": found, "stall_partitions": 1,
                         "stop_partitions": 0, "partitions": 3, "member_count": 1,
                         "state": "Stable", "lag": 905})
    from groupscope.serve.alerting.incidents import Undelivered
    text = single(Undelivered(incident, "firing", "webhook", 0, T0, None, None),
                  "http://grafana").text
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Likely cause:"))
    assert lines[first].startswith("Likely cause: stuck on a record: orders[0] has stayed at "
                                   "offset 2000"), text
    assert lines[first + 1].startswith("Also possible: the group's coordinator moved: from "
                                       "broker 2 to broker 1"), text


def test_a_stuck_rebalance_names_the_member_that_stopped_polling_before_it() -> None:
    # alice stops committing at 10 (its poll loop is blocked, its heartbeats go on); a
    # rebalance begins at 14 and waits for her; bob committed until the rebalance.
    history = {("orders", 0): steady("m-alice", stop_at=10),
               ("orders", 1): steady("m-bob", stop_at=14)}
    found = rank(evidence(20, history, listed=(ALICE, BOB), members_at=lambda i: 2,
                          state=lambda i: "Stable" if i < 14 else "PreparingRebalance"),
                 "rebalance_stuck")
    assert kinds(found)[0] == "rebalance_waits", found
    assert found[0].evidence.startswith(
        "member m-alice (client orders-svc-1, host /10.0.0.1) stopped committing at 10:02:30Z, "
        "before the rebalance began (10:03:30Z)"), found[0].evidence
    assert "m-bob" not in found[0].evidence


def test_a_consumer_group_reconciling_names_who_has_not_reconciled() -> None:
    found = rank(evidence(20, {("orders", 0): steady()}, listed=(ALICE, BOB),
                          state=lambda i: "Stable" if i < 15 else "Reconciling",
                          unreconciled={"m-bob": (2, 1)}),
                 "rebalance_stuck")
    assert kinds(found) == ["rebalance_waits"], found
    assert "member m-bob (client orders-svc-2, host /10.0.0.2) holds 2 partitions, its target " \
        "1" in found[0].evidence
    # Stable again: nothing is waited for.
    assert rank(evidence(20, {("orders", 0): steady()}), "rebalance_stuck") == []


def test_a_hung_member_whose_partitions_stopped_one_by_one_is_not_a_poison_record() -> None:
    # Its quietest partition's last commit came a snapshot before the others' last ones: all
    # three stopped, none advances now.
    history = {("orders", 0): steady(stop_at=12), ("orders", 1): steady(stop_at=13),
               ("orders", 2): steady(stop_at=13)}
    found = rank(evidence(20, history), "group_status_err")
    assert kinds(found) == ["members_silent"], found


def _offline_from(i: int, hw_too: bool) -> History:
    """Partition 1 of three: broker 2 leads it until snapshot 16, when it goes down (no
    replica to take over): no commit since, and (``hw_too``) no high watermark read."""
    history = steady(stop_at=16)

    def at(j: int) -> tuple[str | None, int, int | None]:
        member, offset, hw = history(j)
        return member, offset, None if hw_too and j >= i else hw
    return at


def test_a_partition_whose_broker_went_down_names_the_broker_not_a_poison_record() -> None:
    partitions = {("orders", 0): steady(), ("orders", 1): _offline_from(16, hw_too=True),
                  ("orders", 2): steady()}

    def offline(i: int, key: tuple[str, int]) -> int:
        return -1 if key == ("orders", 1) and i >= 16 else 2 if key == ("orders", 1) else 1
    found = rank(evidence(21, partitions, leader=offline), "group_status_err")
    assert kinds(found)[0] == "partition_leader"
    assert "stuck_on_record" not in kinds(found)
    assert found[0].evidence.startswith(
        "orders[1] (led by broker 2 before; commits stopped 10:04:00Z) has had no leader since"
        " 10:04:00Z: broker 2 down")


def test_a_leader_move_as_commits_stopped_is_named_and_an_old_one_is_not() -> None:
    partitions = {("orders", 0): steady(), ("orders", 1): steady(stop_at=16),
                  ("orders", 2): steady()}

    def moved_at(at: int) -> Callable[[int, tuple[str, int]], int]:
        return lambda i, key: 3 if key == ("orders", 1) and i >= at else 2
    found = rank(evidence(21, partitions, leader=moved_at(17)), "group_status_err")
    assert kinds(found)[0] == "partition_leader"
    assert found[0].evidence.startswith(
        "orders[1] from broker 2 to broker 3 at 10:04:15Z, and its commits stopped since"
        " 10:04:00Z")
    assert "stuck_on_record" not in kinds(found)
    # A move long before the commits stopped explains nothing: the frozen partition among
    # advancing ones is then a poison record.
    assert kinds(rank(evidence(21, partitions, leader=moved_at(3)), "group_status_err")) \
        == ["stuck_on_record"]


def test_a_group_whose_offsets_partition_has_no_leader_names_its_coordinator_down() -> None:
    # Listed up to snapshot 16, coordinated by broker 2; from 17 its __consumer_offsets
    # partition has no leader, so no snapshot lists it: the history ends there.
    listed = evidence(17, {("orders", 0): steady()}, coordinator=lambda i: 2)
    outage = Outage(7, ts(17), "__consumer_offsets partition 7 has no leader (its replica: "
                    "broker 2, none in sync and up): the groups it coordinates cannot be "
                    "listed, described or committed to", led_until=ts(16))
    hidden = dataclasses.replace(listed, at=ts(19), outage=outage)
    found = rank(hidden, "group_status_err")
    assert kinds(found)[:1] == ["coordinator_down"], found
    assert found[0].evidence.startswith(
        "__consumer_offsets partition 7 has no leader (its replica: broker 2, none in sync and "
        "up), since 10:04:15Z; broker 2 coordinated it at its last listing, 10:04:00Z."), found
    # It explains a lag alert as well; and a group whose partition is led is not named so.
    assert kinds(rank(hidden, "lag_seconds"))[:1] == ["coordinator_down"]
    assert "coordinator_down" not in kinds(rank(listed, "group_status_err"))
    # An outage longer than the evaluation reads back says so, not a start it did not see.
    longer = rank(dataclasses.replace(hidden, outage=dataclasses.replace(outage,
                                                                          led_until=None)),
                  "group_status_err")
    assert "up), since before 10:04:15Z (more than 24 h);" in longer[0].evidence
    incident = Incident("i1", "fp", "group_err", "critical", "prod", "ledger", "", "firing",
                        T0, T0, T0, 1.0, 0.0,
                        {"condition": "group_status_err", "coordinator_down": True,
                         "offsets_partition": 7, "down_since": ts(17).isoformat(),
                         "last_listed": ts(16).isoformat(), "member_count": 1,
                         "state": "Stable", "coordinator": 2,
                         "causes": [c.as_dict() for c in found]})
    assert headline(incident) == "COORDINATOR DOWN (it can neither commit nor rebalance)"
    from groupscope.serve.alerting.incidents import Undelivered
    text = single(Undelivered(incident, "firing", "webhook", 0, T0, None, None),
                  "http://grafana").text
    assert ("Its offsets partition, __consumer_offsets-7, has had no leader since 10:04:15Z: "
            "no broker coordinates the group, so its commits fail and no broker lists it."
            ) in text, text
    assert "Last listed 10:04:00Z with 1 member(s) (Stable), coordinated by broker 2." in text
    assert "Likely cause: the group's coordinator is down: __consumer_offsets partition 7" \
        in text, text


def test_a_member_that_rejoined_after_its_coordinator_moved_did_not_crash() -> None:
    # Broker 2, the coordinator, is killed after snapshot 15; the group is on broker 1 from
    # snapshot 17. Its consumer lost the coordinator for longer than its session, rejoined as
    # m-alice-2 (listed from 17) and the new coordinator expired the old id at 18. Commits
    # stopped from 15 to 17 while production went on, so the lag grew.
    again = Member("m-alice-2", ALICE.client_id, ALICE.host)
    changes = [Change("joined", ts(17), ts(16), again), Change("left", ts(18), ts(17), ALICE)]

    def paused(i: int) -> tuple[str | None, int, int]:
        done = min(i, 15) + max(i - 17, 0)  # the same rate afterwards: the lag stays
        return ("m-alice" if i < 17 else "m-alice-2"), 1000 + done * 100, 1000 + i * 100 + 5
    moved = evidence(20, {("orders", 0): paused}, listed=(again,), changes=changes,
                     coordinator=lambda i: 2 if i < 17 else 1, complete=lambda i: i != 16)
    for condition in ("lag_seconds", "group_status_err"):
        found = rank(moved, condition)
        assert kinds(found)[0] == "coordinator_moved", (condition, found)
        assert not {"member_crashed", "member_left", "consumer_slower"} & set(kinds(found))
    # Near misses: the same leave without the move is named, and so is one at the move that
    # no rejoin of the same client explains; without the move the slow consumption is too.
    stayed = dataclasses.replace(moved, points=[dataclasses.replace(p, coordinator=1)
                                                for p in moved.points])
    assert "member_left" in kinds(rank(stayed, "group_status_err"))
    assert "consumer_slower" in kinds(rank(stayed, "lag_seconds"))
    other = Member("m-bob-2", BOB.client_id, BOB.host)
    alone = dataclasses.replace(moved, changes=[Change("joined", ts(17), ts(16), other),
                                                changes[1]])
    assert "member_left" in kinds(rank(alone, "group_status_err"))
