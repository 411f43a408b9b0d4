"""Why a group is in trouble: the probable causes of its alert, ranked, each with the evidence
line it rests on. An on-call paged with "STOPPED" or "lag 40 minutes" next asks why; the
answer is in the group's own history, which the warehouse holds snapshot by snapshot.

``read_evidence`` reads a group's history up to the judged snapshot (its membership, coordinator
and snapshot completeness from ``raw``, its partitions' commits, high watermarks and lag from
``mart.partition_lag``, its generations from ``raw.group_generations``); ``rank`` is a pure
function of that evidence and the condition the alert is about. The causes it knows:

- ``members_silent``: members still listed whose partitions stopped committing (no advance
  for a snapshot interval) while records wait: crashed or hung (a crashed member is removed
  when its session times out, a hung one when ``max.poll.interval.ms`` passes);
- ``member_crashed``: a member that stopped committing and stayed listed until the coordinator
  removed it (session expiry: no LeaveGroup);
- ``member_hung``: a member that stopped committing, and held the group's rebalance longer
  than a session until the coordinator removed it (``max.poll.interval.ms``: it stopped
  polling while its heartbeats went on);
- ``member_left``: a member that committed up to its last listing and was gone at the next
  (a LeaveGroup: a clean close, a scale-down);
- ``stuck_on_record``: one partition's committed offset frozen while the same member's other
  partitions advance (a poison message), with the offset;
- ``rebalance_storm`` (and, for a storm alert, ``members_churning``): the generations of the
  window, and who joined and left;
- ``coordinator_down``: the ``__consumer_offsets`` partition that coordinates the group has no
  leader (its brokers down, no replica in sync to take over): the group has no coordinator;
- ``coordinator_moved`` and ``broker_unreachable``: the group's coordinator changed, or a
  snapshot was partial (a broker did not answer);
- ``partition_leader``: partitions whose commits stopped while they had no leader (their broker
  down: the partition is offline) or just after their leader moved;
- ``producer_surge``: production up 3x or more against the window before, over the newest run
  of intervals above that, while consumption holds;
- ``consumer_slower``: a group that consumes, slower than production, its lag growing;
- ``rewind``: a committed offset moved back, and whether members were listed then (an admin's
  reset needs an empty group).

A cause is named only on its evidence; when none matches, the alert says "no known cause"
rather than guessing. Leave and crash are told apart by the commits before a member's last
listing, which needs snapshots more frequent than the session timeout (15 s against the 45 s
default). The look-back is ``LOOKBACK`` (an hour), shortened for a large group so that at most
``MAX_PARTITION_ROWS`` partition rows are read: the evaluation stays bounded.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from groupscope.kafka.coordinator import offsets_partition_for

LOOKBACK = timedelta(hours=1)
MAX_PARTITION_ROWS = 20_000
# The newest snapshot intervals a rate is "recent" over; the rest of the look-back is the
# baseline it is compared with.
RECENT_INTERVALS = 5
SURGE_FACTOR = 3.0
STORM_GENERATIONS = 6  # in the look-back: fewer is the churn of ordinary restarts
MAX_CAUSES = 3
# The consumers' default session.timeout.ms: a member removed after holding a rebalance longer
# than this was heartbeating (hung), not dead. A longer session than this is rare.
USUAL_SESSION = timedelta(seconds=45)
# How far back an evaluation reads a __consumer_offsets partition's run without a leader.
OUTAGE_HORIZON = timedelta(days=1)
MAX_NAMED = 3  # members named in one evidence line


@dataclass(frozen=True)
class Cause:
    """One probable cause: its kind, a short title, its evidence line, since when, and how
    strongly it explains the condition (the ranking's score, 0-100)."""

    kind: str
    title: str
    evidence: str
    since: str | None
    score: float

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "score"}


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None = None

    def named(self) -> str:
        """How a line names the member: what finds it in the consumer's logs and hosts."""
        static = f", static instance {self.instance_id}" if self.instance_id else ""
        return f"member {self.member_id} (client {self.client_id}, host {self.host}{static})"


@dataclass(frozen=True)
class Change:
    """A member that joined, or left, between two of the group's described snapshots."""

    change: str  # joined | left
    at: datetime  # the first snapshot that shows the change
    before: datetime  # the snapshot before it
    member: Member


@dataclass(frozen=True)
class GroupPoint:
    """The group at one snapshot."""

    ts: datetime
    state: str
    members: int
    coordinator: int | None
    described: bool
    complete: bool
    error: str | None  # the snapshot's first collection error, if partial


@dataclass(frozen=True)
class Totals:
    """Sums over the group's partitions at one snapshot (mart.partition_lag)."""

    ts: datetime
    produced: int  # sum of high watermarks
    committed: int
    lag: int


@dataclass(frozen=True)
class PartitionPoint:
    ts: datetime
    topic: str
    partition: int
    member_id: str | None
    committed: int | None
    lag: int | None
    leader: int | None = None  # -1: none (offline); None: not read


@dataclass(frozen=True)
class Outage:
    """A ``__consumer_offsets`` partition without a leader at the judged snapshot: the groups
    it coordinates have no coordinator (``collect.assemble.coordinator_outages``)."""

    partition: int
    since: datetime  # the first snapshot of the run of snapshots that saw it without a leader
    message: str  # the collection error's, naming its replicas
    # The last snapshot before the run at which it had a leader (its groups were listed up to
    # there); None when the run is longer than the horizon read.
    led_until: datetime | None = None

    def since_text(self) -> str:
        return (f"since {_clock(self.since)}" if self.led_until is not None
                else f"since before {_clock(self.since)} (more than"
                     f" {OUTAGE_HORIZON.total_seconds() / 3600:g} h)")


@dataclass(frozen=True)
class Evidence:
    """What ``rank`` works from: one group's history up to the judged snapshot ``at``."""

    at: datetime
    every: timedelta  # the configured snapshot interval (``interval`` is what the points show)
    points: Sequence[GroupPoint] = ()
    changes: Sequence[Change] = ()
    listed: Mapping[str, Member] = field(default_factory=dict)  # members listed at ``at``
    totals: Sequence[Totals] = ()
    partitions: Sequence[PartitionPoint] = ()
    generations: int = 0
    first_generation_at: datetime | None = None
    # Members listed at ``at`` whose current assignment differs from their target (a
    # consumer-protocol group reconciling): member id -> (current, target) partition counts.
    unreconciled: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # The group's offsets partition, when it has no leader at ``at``.
    outage: Outage | None = None

    @property
    def interval(self) -> timedelta:
        """The snapshot interval as the group's points show it (their median spacing): a
        schedule that runs late, or a loop that runs early, counts in real snapshots."""
        gaps = sorted(b.ts - a.ts for a, b in itertools.pairwise(self.points))
        return gaps[len(gaps) // 2] if gaps else self.every


# --- ranking (pure) ---------------------------------------------------------------------

# A cause found, before ranking: kind, title, evidence line, since when.
Found = tuple[str, str, str, datetime | None]

# How strongly each cause explains each kind of alert (0: never named for it).
_FAMILY = {"group_status_err": "err", "group_empty_lag_growing": "stop",
           "lag_seconds": "lag", "lag_records": "lag", "lag_beyond_retention": "lag",
           "rebalances_per_hour": "storm", "partition_rewind": "rewind",
           "rebalance_stuck": "stuck", "loss_forecast_s": "lag"}
_WEIGHT: Mapping[str, Mapping[str, float]] = {
    "members_silent": {"err": 95, "stop": 60, "lag": 45},
    "member_crashed": {"err": 100, "stop": 100, "lag": 50, "stuck": 60},
    "member_hung": {"err": 100, "stop": 100, "lag": 50, "stuck": 60},
    "member_left": {"err": 90, "stop": 100, "lag": 40, "stuck": 40},
    "rebalance_waits": {"stuck": 100, "err": 100, "lag": 80},
    "stuck_on_record": {"err": 100, "stop": 50, "lag": 85},
    "members_churning": {"storm": 100},
    "rebalance_storm": {"err": 75, "stop": 50, "lag": 70},
    "coordinator_down": {"err": 100, "stop": 100, "lag": 100, "storm": 90, "rewind": 50,
                         "stuck": 100},
    "coordinator_moved": {"err": 85, "stop": 60, "lag": 40, "storm": 70, "rewind": 20,
                          "stuck": 50},
    "broker_unreachable": {"err": 80, "stop": 55, "lag": 35, "storm": 60, "stuck": 50},
    "partition_leader": {"err": 98, "stop": 65, "lag": 75, "stuck": 45},
    "producer_surge": {"err": 20, "lag": 100},
    "consumer_slower": {"err": 30, "lag": 95},
    "rewind": {"rewind": 100, "lag": 60, "err": 20},
}


def rank(evidence: Evidence, condition: str) -> list[Cause]:
    """The probable causes of ``condition`` (a condition kind) for the group, best first, at
    most ``MAX_CAUSES``; empty when no cause has evidence."""
    family = _FAMILY.get(condition)
    if family is None:
        return []
    found: list[Found] = []
    found += _membership(evidence, family)
    found += _stuck(evidence)
    found += _storm(evidence, family)
    found += _coordinator(evidence)
    found += _leaders(evidence)
    found += _rates(evidence)
    found += _rewinds(evidence)
    found += _rebalance_waits(evidence)
    if any(f[0] in ("stuck_on_record", "members_silent") for f in found):
        # Partitions nobody consumes explain a group that consumes less than is produced.
        found = [f for f in found if f[0] != "consumer_slower"]
    if any(f[0] == "rebalance_waits" for f in found):
        # A rebalance in progress silences every member: the one it waits for is the cause.
        found = [f for f in found if f[0] != "members_silent"]
    if _recent_move(evidence) is not None:
        # Commits pause while the new coordinator loads the group and its members rejoin: a
        # consumption rate measured over that pause is the move's, not a slow consumer's.
        found = [f for f in found if f[0] != "consumer_slower"]
    if any(f[0] == "members_silent" and _silenced_by_the_move(evidence, f[3]) for f in found):
        # So does a coordinator that goes away: the move is the cause, not the members.
        found = [f for f in found if f[0] != "members_silent"]
    lookback = max((evidence.at - evidence.points[0].ts).total_seconds()
                   if evidence.points else 0.0, evidence.interval.total_seconds())
    causes = []
    for kind, title, line, since in found:
        weight = _WEIGHT.get(kind, {}).get(family, 0.0)
        if weight <= 0:
            continue
        # Of two causes equally apt, the more recent explains more.
        age = (evidence.at - since).total_seconds() if since is not None else lookback
        score = weight * (1.0 - 0.3 * min(max(age / lookback, 0.0), 1.0))
        causes.append(Cause(kind, title, line, since.isoformat() if since else None,
                            round(score, 1)))
    causes.sort(key=lambda c: -c.score)
    return causes[:MAX_CAUSES]


def _clock(ts: datetime) -> str:
    """A time as the rest of a notification says it: UTC, marked."""
    return ts.astimezone(UTC).strftime("%H:%M:%SZ")


def _names(members: Sequence[Member]) -> str:
    shown = ", ".join(m.named() for m in members[:MAX_NAMED])
    return shown + (f" and {len(members) - MAX_NAMED} more" if len(members) > MAX_NAMED
                    else "")


def _seconds(value: float) -> str:
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


def _progress(evidence: Evidence) -> dict[tuple[str, int], list[PartitionPoint]]:
    """Each partition's points, oldest first."""
    out: dict[tuple[str, int], list[PartitionPoint]] = {}
    for point in sorted(evidence.partitions, key=lambda p: p.ts):
        out.setdefault((point.topic, point.partition), []).append(point)
    return out


def _last_advance(points: Sequence[PartitionPoint], upto: datetime) -> datetime | None:
    """The newest snapshot at or before ``upto`` at which the partition's committed offset
    had moved since the one before (None: not within its points)."""
    newest = None
    for before, now in itertools.pairwise(points):
        if now.ts > upto:
            break
        if (now.committed is not None and before.committed is not None
                and now.committed != before.committed):
            newest = now.ts
    return newest


def _member_partitions(evidence: Evidence, member_id: str, at: datetime
                       ) -> list[tuple[str, int]]:
    return sorted((p.topic, p.partition) for p in evidence.partitions
                  if p.ts == at and p.member_id == member_id)


def _waiting(evidence: Evidence, keys: Sequence[tuple[str, int]], at: datetime) -> bool:
    """Records were waiting on these partitions at ``at`` (a lag above 0)."""
    wanted = set(keys)
    return any((p.lag or 0) > 0 for p in evidence.partitions
               if p.ts == at and (p.topic, p.partition) in wanted)


def _silence(evidence: Evidence, progress: Mapping[tuple[str, int], list[PartitionPoint]],
             keys: Sequence[tuple[str, int]], at: datetime) -> datetime | bool | None:
    """When these partitions last advanced, at or before ``at``: a time if they then stopped
    (no advance at ``at`` itself), True if they advanced at ``at``, None if their points cannot
    tell (no earlier point)."""
    advances = [_last_advance(progress.get(k, []), at) for k in keys]
    if any(a == at for a in advances):
        return True
    known = [a for a in advances if a is not None]
    if known:
        return max(known)
    first = min((progress[k][0].ts for k in keys if progress.get(k)), default=None)
    if first is not None and first < at:
        return first  # no advance within the points: silent at least since the first
    return None


def _removed(kind: str, title: str, removed: Sequence[tuple[Member, datetime, datetime]],
             meanwhile: str, why: str) -> Found:
    """Members that stopped committing, then were removed by the coordinator: who, their
    last commit, what they did ``meanwhile``, when they were gone, and ``why``."""
    newest = max(at for _, _, at in removed)
    silent = max((gone - last).total_seconds() for _, last, gone in removed)
    return (kind, title,
            f"{_names([m for m, _, _ in removed])} stopped committing"
            f" (last commit seen {_clock(min(last for _, last, _ in removed))}) and {meanwhile}"
            f" until the coordinator removed {'them' if len(removed) > 1 else 'it'}"
            f" by {_clock(newest)}, {_seconds(silent)} later: {why}", newest)


def _held_a_rebalance(evidence: Evidence, after: datetime, removed: datetime) -> bool:
    """The group rebalanced, from a snapshot after a member's last commit until it was removed,
    for longer than a session: the coordinator waited for it to rejoin and removed it when the
    rebalance timed out (max.poll.interval.ms), so its heartbeats went on: it hung. A dead
    member is removed at its session timeout, rebalance or not."""
    began = min((p.ts for p in evidence.points
                 if after < p.ts < removed and p.state in REBALANCING), default=None)
    return began is not None and removed - began > USUAL_SESSION


def _membership(evidence: Evidence, family: str) -> list[Found]:
    if family == "storm":
        return _churn(evidence)
    found: list[Found] = []
    progress = _progress(evidence)
    crashed: list[tuple[Member, datetime, datetime]] = []
    hung: list[tuple[Member, datetime, datetime]] = []
    left: list[tuple[Member, datetime, datetime]] = []
    unclear: list[tuple[Member, datetime]] = []
    for change in evidence.changes:
        if change.change != "left" or _rejoined_after_the_move(evidence, change):
            continue
        keys = _member_partitions(evidence, change.member.member_id, change.before)
        last = _silence(evidence, progress, keys, change.before) if keys else None
        if last is True:
            left.append((change.member, change.before, change.at))
        elif isinstance(last, datetime) and _waiting(evidence, keys, change.before):
            (hung if _held_a_rebalance(evidence, last, change.at) else crashed).append(
                (change.member, last, change.at))
        else:
            unclear.append((change.member, change.at))
    if crashed:
        found.append(_removed(
            "member_crashed", "member crashed", crashed, "stayed listed",
            "a session that expired, no LeaveGroup (killed, OOM, host lost)"))
    if hung:
        found.append(_removed(
            "member_hung", "member hung (stopped polling), then removed", hung,
            "held the group's rebalance",
            "its poll loop blocked while its heartbeats went on, until max.poll.interval.ms"
            " (the rebalance timeout) passed"))
    if left:
        newest = max(at for _, _, at in left)
        found.append((
            "member_left", "member left the group",
            f"{_names([m for m, _, _ in left])} committed up to"
            f" {_clock(max(b for _, b, _ in left))} and {'were' if len(left) > 1 else 'was'}"
            f" gone at {_clock(newest)}: a LeaveGroup (a clean close, a scale-down or a"
            " deploy)", newest))
    if unclear:
        newest = max(at for _, at in unclear)
        found.append((
            "member_left", "member left the group",
            f"{_names([m for m, _ in unclear])} left by {_clock(newest)} (whether cleanly or"
            " by a crash cannot be told: no records were waiting on its partitions)", newest))
    silent_now = _silent_members(evidence, progress, family)
    if silent_now:
        since = min(s for _, s in silent_now)
        found.append((
            "members_silent", "member stopped committing (crashed or hung)",
            f"{_names([m for m, _ in silent_now])} still listed, but"
            f" {'their' if len(silent_now) > 1 else 'its'} partitions have not committed"
            f" since {_clock(since)} ({_seconds((evidence.at - since).total_seconds())}) while"
            " records wait: crashed (removed when its session times out) or hung (removed"
            " after max.poll.interval.ms)", since))
    return found


def _silent_members(evidence: Evidence,
                    progress: Mapping[tuple[str, int], list[PartitionPoint]], family: str
                    ) -> list[tuple[Member, datetime]]:
    """Members listed at ``at`` with records waiting on their partitions, none of which has
    advanced for a snapshot interval (for a STOP or STALL, which already says the group's
    progress stopped: this says whose) or for two (for other alerts, so that a member that
    commits less often than the snapshots are taken is not called silent)."""
    out = []
    for member in evidence.listed.values():
        keys = _member_partitions(evidence, member.member_id, evidence.at)
        if not keys or not _waiting(evidence, keys, evidence.at):
            continue
        last = _silence(evidence, progress, keys, evidence.at)
        # Half an interval short of it still counts: snapshots come a little early or late
        # (a STOP fired 15.0 s after the last commit, against a median spacing of 15.2 s,
        # named no cause).
        intervals = 1 if family in ("err", "stop") else 2
        if isinstance(last, datetime) and \
                evidence.at - last >= (intervals - 0.5) * evidence.interval:
            out.append((member, last))
    return out


def _stuck(evidence: Evidence) -> list[Found]:
    """Partitions frozen with records waiting while their member's other partitions advance."""
    progress = _progress(evidence)
    troubled = _leader_trouble(evidence, progress)
    owners: dict[str, list[tuple[str, int]]] = {}
    for point in evidence.partitions:
        if point.ts == evidence.at and point.member_id:
            owners.setdefault(point.member_id, []).append((point.topic, point.partition))
    found: list[Found] = []
    for member_id, keys in owners.items():
        if len(keys) < 2:
            continue
        last = {k: _last_advance(progress.get(k, []), evidence.at) for k in keys}
        for key in sorted(keys):
            points = progress.get(key, [])
            now = points[-1] if points else None
            if now is None or now.ts != evidence.at or not (now.lag or 0) > 0:
                continue
            if key in troubled:  # its leader's doing, not a record's
                continue
            frozen_since = last[key] or points[0].ts
            if evidence.at - frozen_since < 3 * evidence.interval:
                continue
            # ... while they still advance (a member that hangs stopped them all, one by
            # one as their last commits came: that is a silent member, not a poison record).
            others = [k for k in keys if k != key and (advanced := last[k]) is not None
                      and advanced > frozen_since
                      and evidence.at - advanced <= 1.5 * evidence.interval]
            if not others:
                continue
            member = evidence.listed.get(member_id)
            who = member.named() if member else member_id
            found.append((
                "stuck_on_record", "stuck on a record",
                f"{key[0]}[{key[1]}] has stayed at offset {now.committed} since"
                f" {_clock(frozen_since)} (lag {now.lag}) while the other {len(others)}"
                f" partition{'s' if len(others) > 1 else ''} of {who} advance: the record"
                f" at offset {now.committed} likely fails every time (a poison message)",
                frozen_since))
    return found[:2]


def _churn(evidence: Evidence) -> list[Found]:
    """Who joined and left, for a storm alert."""
    joined = Counter(c.member.client_id or c.member.member_id for c in evidence.changes
                     if c.change == "joined")
    left = Counter(c.member.client_id or c.member.member_id for c in evidence.changes
                   if c.change == "left")
    found: list[Found] = []
    if joined or left:
        clients = sorted(set(joined) | set(left), key=lambda c: -(joined[c] + left[c]))
        hosts = {c.member.client_id or c.member.member_id: c.member.host
                 for c in evidence.changes}
        shown = "; ".join(f"{c} ({hosts[c]}) joined {joined[c]}x, left {left[c]}x"
                          for c in clients[:MAX_NAMED])
        first = min(c.at for c in evidence.changes)
        found.append(("members_churning", "members joining and leaving",
                      f"{sum(joined.values())} joins and {sum(left.values())} leaves since"
                      f" {_clock(first)}: {shown}"
                      + (f" and {len(clients) - MAX_NAMED} more clients"
                         if len(clients) > MAX_NAMED else "")
                      + " (crash-looping pods, session timeouts or slow processing past"
                        " max.poll.interval.ms)", max(c.at for c in evidence.changes)))
    elif evidence.generations:
        found.append(("members_churning", "rebalances without a membership change",
                      f"{evidence.generations} generations since"
                      f" {_clock(evidence.first_generation_at or evidence.at)} while the"
                      " snapshots saw no member join or leave (members rejoining between"
                      " snapshots, subscription changes, or coordinator moves)",
                      evidence.first_generation_at))
    return found


def _storm(evidence: Evidence, family: str) -> list[Found]:
    if family == "storm" or evidence.generations < STORM_GENERATIONS:
        return []
    changes = len(evidence.changes)
    return [("rebalance_storm", "a rebalance storm",
             f"{evidence.generations} rebalances since"
             f" {_clock(evidence.first_generation_at or evidence.at)}"
             f" ({changes} member joins and leaves seen): the group barely consumes while it"
             " rebalances", evidence.first_generation_at)]


def _coordinator_moves(evidence: Evidence) -> list[tuple[GroupPoint, GroupPoint]]:
    """The group's coordinator moves in the look-back: (the last snapshot on the old one, the
    first on the new one), oldest first."""
    known = [p for p in evidence.points if p.coordinator is not None]
    return [(b, a) for b, a in itertools.pairwise(known) if a.coordinator != b.coordinator]


def _silenced_by_the_move(evidence: Evidence, silent_since: datetime | None) -> bool:
    """The members' commits stopped with the coordinator's last move: between the interval
    before the last snapshot on the old coordinator and the first on the new one. A group's
    commits go to its coordinator: while it is down, and until the new one has loaded the
    group and the members have rejoined it, every member is silent, crashed or not. That
    takes a session at most: members still silent later (say, the host that ran the broker
    ran them too) are named again."""
    move = _recent_move(evidence)
    if move is None or silent_since is None:
        return False
    before, after = move
    return before.ts - evidence.interval <= silent_since <= after.ts


def _recent_move(evidence: Evidence) -> tuple[GroupPoint, GroupPoint] | None:
    """The coordinator's last move, while it still explains a pause: within a session and an
    interval of the first snapshot on the new coordinator."""
    moves = _coordinator_moves(evidence)
    if moves and evidence.at - moves[-1][1].ts <= USUAL_SESSION + evidence.interval:
        return moves[-1]
    return None


def _rejoined_after_the_move(evidence: Evidence, change: Change) -> bool:
    """A member that left around the coordinator's last move while the same client (id and
    host) joined again: its consumer lost the coordinator for longer than its session (a
    broker killed, then fenced), dropped its membership and rejoined under a new member id,
    and the new coordinator expired the old id a session later. The move is the cause, not a
    crash."""
    moves = _coordinator_moves(evidence)
    if not moves:
        return False
    before, after = moves[-1]
    window = USUAL_SESSION + evidence.interval
    if not before.ts - evidence.interval <= change.at <= after.ts + window:
        return False
    who = (change.member.client_id, change.member.host)
    return any(other.change == "joined" and (other.member.client_id, other.member.host) == who
               and before.ts - evidence.interval <= other.at <= change.at
               for other in evidence.changes)


def _coordinator(evidence: Evidence) -> list[Found]:
    found: list[Found] = []
    if evidence.outage is not None:
        last = evidence.points[-1] if evidence.points else None
        coordinated = (f"; broker {last.coordinator} coordinated it at its last listing,"
                       f" {_clock(last.ts)}" if last is not None and last.coordinator is not None
                       else "")
        found.append(("coordinator_down", "the group's coordinator is down",
                      f"{evidence.outage.message.split(': the groups')[0]},"
                      f" {evidence.outage.since_text()}{coordinated}. The group can be neither"
                      " read nor committed to, and cannot rebalance; its members stop"
                      " consuming once their sessions expire, and resume when a replica of"
                      " the partition is back", evidence.outage.since))
    moves = _coordinator_moves(evidence)
    if moves:
        before, after = moves[-1]
        found.append(("coordinator_moved", "the group's coordinator moved",
                      f"from broker {before.coordinator} to broker {after.coordinator} at"
                      f" {_clock(after.ts)}"
                      + (f" ({len(moves)} moves in the look-back)" if len(moves) > 1 else "")
                      + ": its members rejoin and its commits pause while the new coordinator"
                        " loads the group", after.ts))
    partial = [p for p in evidence.points if not p.complete]
    if partial:
        last = partial[-1]
        found.append(("broker_unreachable", "a broker did not answer",
                      f"{len(partial)} partial snapshot{'s' if len(partial) > 1 else ''} since"
                      f" {_clock(partial[0].ts)}, the last at {_clock(last.ts)}: "
                      f"{last.error or 'a request failed'}", last.ts))
    return found


def _leader_trouble(evidence: Evidence,
                    progress: Mapping[tuple[str, int], list[PartitionPoint]]
                    ) -> dict[tuple[str, int], tuple[str, datetime, datetime, int | None, int]]:
    """The group's partitions at ``at`` whose commits stopped (no advance for a snapshot
    interval) while they had no leader, or after their leader moved: partition -> (``offline``
    or ``moved``, when that began, when its commits stopped, the leader before, the leader
    now)."""
    out: dict[tuple[str, int], tuple[str, datetime, datetime, int | None, int]] = {}
    for key, points in progress.items():
        now = points[-1]
        if now.ts != evidence.at or now.leader is None:
            continue
        stopped = _silence(evidence, progress, [key], evidence.at)
        if not isinstance(stopped, datetime) or evidence.at - stopped < evidence.interval:
            continue
        known = [p for p in points if p.leader is not None]
        if now.leader < 0:
            start = now.ts
            for point in reversed(known):
                if point.leader is None or point.leader >= 0:
                    break
                start = point.ts
            led_by = next((p.leader for p in reversed(known)
                           if p.ts < start and p.leader is not None and p.leader >= 0), None)
            out[key] = ("offline", start, stopped, led_by, now.leader)
            continue
        moves = [(a, b) for a, b in itertools.pairwise(known)
                 if a.leader != b.leader and (a.leader or 0) >= 0]
        # A move that came as its commits stopped (within an interval before) explains them.
        if moves and moves[-1][1].ts >= stopped - evidence.interval:
            before, after = moves[-1]
            out[key] = ("moved", after.ts, stopped, before.leader, now.leader)
    return out


def _leaders(evidence: Evidence) -> list[Found]:
    troubled = _leader_trouble(evidence, _progress(evidence))
    found: list[Found] = []
    offline = sorted((k, v) for k, v in troubled.items() if v[0] == "offline")
    if offline:
        since = min(v[1] for _, v in offline)
        brokers = sorted({v[3] for _, v in offline if v[3] is not None})
        shown = ", ".join(f"{t}[{p}] (led by broker {v[3]} before; commits stopped"
                          f" {_clock(v[2])})" if v[3] is not None else f"{t}[{p}]"
                          for (t, p), v in offline[:MAX_NAMED])
        more = f" and {len(offline) - MAX_NAMED} more" if len(offline) > MAX_NAMED else ""
        down = (f"broker{'s' if len(brokers) > 1 else ''} {', '.join(map(str, brokers))}"
                f" down" if brokers else "its broker down")
        found.append((
            "partition_leader", "a partition without a leader (its broker down)",
            f"{shown}{more} {'have' if len(offline) > 1 else 'has'} had no leader since"
            f" {_clock(since)}: {down} and no in-sync replica to take over, so nothing can be"
            " read from or written to the partition until it returns (its lag is the last"
            " high watermark read)", since))
    moved = sorted((k, v) for k, v in troubled.items() if v[0] == "moved")
    if moved:
        since = max(v[1] for _, v in moved)
        shown = ", ".join(f"{t}[{p}] from broker {v[3]} to broker {v[4]} at {_clock(v[1])}"
                          for (t, p), v in moved[:MAX_NAMED])
        more = f" and {len(moved) - MAX_NAMED} more" if len(moved) > MAX_NAMED else ""
        found.append((
            "partition_leader", "the partition leader moved",
            f"{shown}{more}, and {'their' if len(moved) > 1 else 'its'} commits stopped"
            f" since {_clock(min(v[2] for _, v in moved))}: the consumer has not followed the"
            " new leader (its broker down or restarting, a preferred-leader election, or"
            " a reassignment)", since))
    return found


def _rate(points: Sequence[Totals], attr: str) -> float | None:
    """Records per second between the first and the last point (None: fewer than two)."""
    if len(points) < 2:
        return None
    seconds = (points[-1].ts - points[0].ts).total_seconds()
    if seconds <= 0:
        return None
    moved: int = getattr(points[-1], attr) - getattr(points[0], attr)
    return max(moved, 0) / seconds


def _per_minute(rate: float) -> str:
    return f"{rate * 60:,.0f}/min"


def _rates(evidence: Evidence) -> list[Found]:
    totals = sorted(evidence.totals, key=lambda t: t.ts)
    if len(totals) < RECENT_INTERVALS + 3:
        return []
    recent, baseline = totals[-(RECENT_INTERVALS + 1):], totals[:-RECENT_INTERVALS]
    produced_now, produced_before = _rate(recent, "produced"), _rate(baseline, "produced")
    consumed_now, consumed_before = _rate(recent, "committed"), _rate(baseline, "committed")
    if None in (produced_now, produced_before, consumed_now, consumed_before):
        return []
    assert produced_now is not None and produced_before is not None
    assert consumed_now is not None and consumed_before is not None
    found: list[Found] = []
    lag_grew = recent[-1].lag > recent[0].lag
    # Still consuming at the newest snapshot: a consumer that stopped is not "slow" (its
    # members' causes say why it stopped).
    consuming = recent[-1].committed > recent[-2].committed
    # A surge is measured over its own run of intervals, not over the recent window: a lag
    # alert fires one or two intervals into a surge, when the window's average still
    # dilutes it below the factor (the demo's surge fired as "slower than production").
    # A lag alert often fires just after a short surge ended: the run is looked for among
    # the recent intervals, not only at the newest one.
    since, until = _surge_run(totals, produced_before) or (totals[-1].ts, totals[-1].ts)
    run = [t for t in totals if since <= t.ts <= until]
    produced_surge, consumed_surge = _rate(run, "produced"), _rate(run, "committed")
    surge = (produced_surge is not None and consumed_surge is not None
             and produced_surge >= SURGE_FACTOR * max(produced_before, 1e-9)
             and produced_surge - produced_before >= 1.0)
    if surge and produced_surge is not None and consumed_surge is not None:
        # Consumption holding (not stopped): the lag is production's doing, not the
        # consumer's.
        holding = consumed_surge >= 0.5 * consumed_before and consuming
        if holding and run[-1].lag > run[0].lag:
            when = (f"since {_clock(since)}" if until == totals[-1].ts
                    else f"from {_clock(since)} until {_clock(until)}")
            found.append(("producer_surge", "a producer surge",
                          f"production up {produced_surge / max(produced_before, 1e-9):.1f}x"
                          f" {when} ({_per_minute(produced_surge)}"
                          f" against {_per_minute(produced_before)} before), while"
                          f" consumption holds at {_per_minute(consumed_surge)}", since))
    slower = consuming and produced_now > 1.1 * consumed_now and lag_grew
    # A surge named explains the slowness; one whose consumption did not hold does not.
    if slower and not any(f[0] == "producer_surge" for f in found):
        since = _growth_start(totals)
        found.append(("consumer_slower", "the consumers are slower than production",
                      f"consuming {_per_minute(consumed_now)} against"
                      f" {_per_minute(produced_now)} produced; the lag has grown since"
                      f" {_clock(since)} (+{recent[-1].lag - _lag_at(totals, since):,} records):"
                      " add consumers (up to the partition count) or find what slows them",
                      since))
    return found


def _surge_run(totals: Sequence[Totals], baseline: float) -> tuple[datetime, datetime] | None:
    """The newest run of intervals produced above the surge factor, if it lasted into the last
    ``RECENT_INTERVALS`` intervals: (its first snapshot, its last); None without one."""
    intervals = list(itertools.pairwise(totals))
    run: tuple[datetime, datetime] | None = None
    for age, (before, now) in enumerate(reversed(intervals)):
        seconds = (now.ts - before.ts).total_seconds()
        above = seconds > 0 and (now.produced - before.produced) / seconds \
            >= SURGE_FACTOR * max(baseline, 1e-9)
        if run is None:
            if above:
                run = (before.ts, now.ts)
            elif age + 1 >= RECENT_INTERVALS:
                return None
        elif above:
            run = (before.ts, run[1])
        else:
            break
    return run


def _growth_start(totals: Sequence[Totals]) -> datetime:
    """Where the newest run of a growing lag began (one interval of a flat or shrinking lag
    does not end it, a second does)."""
    start = totals[-1].ts
    dips = 0
    for before, now in reversed(list(itertools.pairwise(totals))):
        if now.lag <= before.lag:  # a flat interval is no growth either
            dips += 1
            if dips > 1:
                break
        start = before.ts
    return start


def _lag_at(totals: Sequence[Totals], ts: datetime) -> int:
    return next((t.lag for t in totals if t.ts == ts), totals[0].lag)


def _rewinds(evidence: Evidence) -> list[Found]:
    found: list[Found] = []
    members_at = {p.ts: p.members for p in evidence.points}
    for key, points in sorted(_progress(evidence).items()):
        for before, now in itertools.pairwise(points):
            if (before.committed is not None and now.committed is not None
                    and now.committed < before.committed):
                members = members_at.get(now.ts, members_at.get(before.ts))
                who = ("while the group had no member: an offset reset (kafka-consumer-groups"
                       " --reset-offsets, or a tool that commits for the group)"
                       if members == 0 else
                       f"by one of its {members} members: a seek back, or auto.offset.reset"
                       " after its offset was lost" if members else "by an unknown client")
                found.append(("rewind", "committed offsets moved back",
                              f"{key[0]}[{key[1]}] from {before.committed} to {now.committed}"
                              f" at {_clock(now.ts)}, {who}", now.ts))
    found.sort(key=lambda f: f[3] or evidence.at)
    return found[-1:]


REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning",
                         "Reconciling"})


def _rebalance_waits(evidence: Evidence) -> list[Found]:
    """A rebalance in progress at ``at``: the members it waits for. A classic group's members
    that stopped committing before it began (they stopped polling: their heartbeats keep them
    in the group, and the rebalance waits for them up to max.poll.interval.ms); a
    consumer-protocol group's members that have not reconciled their target assignment."""
    points = [p for p in evidence.points if p.described]
    if not points or points[-1].ts != evidence.at or points[-1].state not in REBALANCING:
        return []
    start = evidence.at
    for point in reversed(points):
        if point.state not in REBALANCING:
            break
        start = point.ts
    before = [p for p in points if p.ts < start]
    found: list[Found] = []
    if before:
        pre = before[-1].ts
        progress = _progress(evidence)
        owners: dict[str, list[tuple[str, int]]] = {}
        for part in evidence.partitions:
            if part.ts == pre and part.member_id:
                owners.setdefault(part.member_id, []).append((part.topic, part.partition))
        silent: list[tuple[str, datetime]] = []
        for member_id, keys in owners.items():
            last = _silence(evidence, progress, keys, pre)
            if isinstance(last, datetime) and _waiting(evidence, keys, pre):
                silent.append((member_id, last))
        if silent and len(silent) < len(owners):
            names = [evidence.listed.get(m) or Member(m, "?", "?") for m, _ in silent]
            since = min(last for _, last in silent)
            found.append((
                "rebalance_waits", "a member that stopped polling holds the rebalance",
                f"{_names(names)} stopped committing at {_clock(since)}, before the rebalance"
                f" began ({_clock(start)}), while the others went on: it no longer polls, yet"
                " its heartbeats keep it in the group, and the rebalance waits for it to"
                " rejoin until max.poll.interval.ms passes", since))
    if evidence.unreconciled:
        # Those holding more than their target first: they must give partitions up before
        # the others can have them (a member that stopped polling never does).
        ids = sorted(evidence.unreconciled, key=lambda m: (
            evidence.unreconciled[m][1] - evidence.unreconciled[m][0], m))
        names = [evidence.listed.get(m) or Member(m, "?", "?") for m in ids]
        shown = ", ".join(f"{name.named()} holds {evidence.unreconciled[m][0]} partitions,"
                          f" its target {evidence.unreconciled[m][1]}"
                          for m, name in list(zip(ids, names, strict=True))[:MAX_NAMED])
        found.append((
            "rebalance_waits", "members that have not reconciled",
            f"{len(names)} member{'s' if len(names) > 1 else ''} still"
            f" {'hold' if len(names) > 1 else 'holds'} an assignment other than the target"
            f" since {_clock(start)}: {shown} (a member that stopped polling does not"
            " reconcile; the coordinator fences it after rebalance.timeout.ms)", start))
    return found


# --- the warehouse (I/O) ----------------------------------------------------------------

_POINTS = text("""
SELECT g.snapshot_ts, g.state, g.member_count, g.coordinator_id, g.described, s.complete,
       CASE WHEN NOT s.complete THEN (
           SELECT e.message FROM raw.collection_errors e
           WHERE e.cluster = s.cluster AND e.snapshot_ts = s.snapshot_ts
           ORDER BY (e.group_id = g.group_id) DESC NULLS LAST, e.seq LIMIT 1) END AS error
FROM raw.consumer_groups g
JOIN raw.snapshots s USING (cluster, snapshot_ts)
WHERE g.cluster = :cluster AND g.group_id = :group_id
  AND g.snapshot_ts > :since AND g.snapshot_ts <= :at
ORDER BY g.snapshot_ts
""")

# Members that joined or left between two described snapshots of the group (index lookups
# per snapshot: raw.group_members is keyed by snapshot first).
_CHANGES = text("""
WITH snaps AS (
    SELECT snapshot_ts, lag(snapshot_ts) OVER (ORDER BY snapshot_ts) AS before_ts
    FROM raw.consumer_groups
    WHERE cluster = :cluster AND group_id = :group_id AND described
      AND snapshot_ts > :since AND snapshot_ts <= :at
)
(SELECT 'left' AS change, s.snapshot_ts AS at, s.before_ts AS before, m.member_id,
        m.client_id, m.host, m.instance_id
 FROM snaps s JOIN raw.group_members m
   ON m.cluster = :cluster AND m.snapshot_ts = s.before_ts AND m.group_id = :group_id
 WHERE NOT EXISTS (SELECT 1 FROM raw.group_members n WHERE n.cluster = :cluster
                   AND n.snapshot_ts = s.snapshot_ts AND n.group_id = :group_id
                   AND n.member_id = m.member_id)
 UNION ALL
 SELECT 'joined', s.snapshot_ts, s.before_ts, m.member_id, m.client_id, m.host, m.instance_id
 FROM snaps s JOIN raw.group_members m
   ON m.cluster = :cluster AND m.snapshot_ts = s.snapshot_ts AND m.group_id = :group_id
 WHERE s.before_ts IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM raw.group_members n WHERE n.cluster = :cluster
                   AND n.snapshot_ts = s.before_ts AND n.group_id = :group_id
                   AND n.member_id = m.member_id))
ORDER BY at DESC
LIMIT 500
""")

_LISTED = text("""
SELECT member_id, client_id, host, instance_id FROM raw.group_members
WHERE cluster = :cluster AND snapshot_ts = :at AND group_id = :group_id
""")

_WIDTH = text("""
SELECT count(*) FROM mart.partition_lag
WHERE cluster = :cluster AND group_id = :group_id AND snapshot_ts = :at
""")

_TOTALS = text("""
SELECT snapshot_ts, sum(high_watermark) AS produced, sum(committed_offset) AS committed,
       sum(greatest(lag, 0)) AS lag
FROM mart.partition_lag
WHERE cluster = :cluster AND group_id = :group_id AND snapshot_ts > :since
  AND snapshot_ts <= :at
GROUP BY snapshot_ts ORDER BY snapshot_ts
""")

_PARTITIONS = text("""
SELECT l.snapshot_ts, l.topic, l.partition, l.member_id, l.committed_offset, l.lag, p.leader
FROM mart.partition_lag l
LEFT JOIN raw.partition_offsets p
  ON p.cluster = l.cluster AND p.snapshot_ts = l.snapshot_ts AND p.topic = l.topic
 AND p.partition = l.partition
WHERE l.cluster = :cluster AND l.group_id = :group_id AND l.snapshot_ts >= :since
  AND l.snapshot_ts <= :at
""")

_ASSIGNMENTS = text("""
SELECT member_id, kind, count(*) AS partitions,
       array_agg(topic || '/' || partition ORDER BY topic, partition) AS assigned
FROM raw.member_assignments
WHERE cluster = :cluster AND snapshot_ts = :at AND group_id = :group_id
GROUP BY member_id, kind
""")

_GENERATIONS = text("""
SELECT count(DISTINCT (group_protocol, generation)) AS generations, min(event_ts) AS first
FROM raw.group_generations
WHERE cluster = :cluster AND group_id = :group_id AND event_ts > :since AND event_ts <= :at
""")


# The snapshots of the horizon, and those at which a __consumer_offsets partition had no
# leader (the partial index of migration 0022).
_SNAPSHOTS = text("""
SELECT snapshot_ts, offsets_topic_partitions FROM raw.snapshots
WHERE cluster = :cluster AND snapshot_ts >= :horizon AND snapshot_ts <= :at
ORDER BY snapshot_ts DESC
""")
_LEADERLESS = text("""
SELECT snapshot_ts, partition, message FROM raw.collection_errors
WHERE cluster = :cluster AND snapshot_ts >= :horizon AND snapshot_ts <= :at
  AND code = 'COORDINATOR_NOT_AVAILABLE' AND topic = '__consumer_offsets'
""")


@dataclass(frozen=True)
class Outages:
    """The offsets topic's partition count at the judged snapshot and its partitions without a
    leader there (partition -> outage)."""

    partitions: int | None = None
    by_partition: Mapping[int, Outage] = field(default_factory=dict)

    def of(self, group_id: str) -> Outage | None:
        """The outage of the partition that coordinates ``group_id``, if it has one."""
        if not self.partitions or not self.by_partition:
            return None
        return self.by_partition.get(offsets_partition_for(group_id, self.partitions))


def coordinator_outages(conn: Any, cluster: str, at: datetime,
                        horizon: timedelta = OUTAGE_HORIZON) -> Outages:
    """The __consumer_offsets partitions without a leader at ``at``, each with the run of
    snapshots that saw it so: its first, and the last snapshot before it at which the
    partition had a leader (within ``horizon``; none: the run is longer)."""
    params = {"cluster": cluster, "at": at, "horizon": at - horizon}
    leaderless: dict[int, dict[datetime, str]] = {}
    for row in conn.execute(_LEADERLESS, params):
        leaderless.setdefault(int(row.partition), {})[row.snapshot_ts] = row.message
    if not leaderless:
        return Outages()
    snapshots = conn.execute(_SNAPSHOTS, params).fetchall()  # newest first
    if not snapshots or snapshots[0].snapshot_ts != at:
        return Outages()
    found = {}
    for partition, seen in leaderless.items():
        if at not in seen:
            continue
        run = 0  # the snapshots, newest first, that saw it without a leader
        while run < len(snapshots) and snapshots[run].snapshot_ts in seen:
            run += 1
        led = snapshots[run].snapshot_ts if run < len(snapshots) else None
        found[partition] = Outage(partition, snapshots[run - 1].snapshot_ts, seen[at], led)
    return Outages(snapshots[0].offsets_topic_partitions, found)


def read_evidence(conn: Any, cluster: str, group_id: str, at: datetime, every: timedelta,
                  lookback: timedelta = LOOKBACK, outages: Outages | None = None) -> Evidence:
    """The group's history from ``at - lookback`` to ``at`` (the judged snapshot).
    ``outages``: the cluster's at ``at`` (read here when not given: one evaluation reads them
    once for all its groups)."""
    params: dict[str, Any] = {"cluster": cluster, "group_id": group_id, "at": at,
                              "since": at - lookback}
    points = [GroupPoint(r.snapshot_ts, r.state, int(r.member_count), r.coordinator_id,
                         bool(r.described), bool(r.complete), r.error)
              for r in conn.execute(_POINTS, params)]
    changes = [Change(r.change, r.at, r.before,
                      Member(r.member_id, r.client_id, r.host, r.instance_id))
               for r in conn.execute(_CHANGES, params)]
    listed = {r.member_id: Member(r.member_id, r.client_id, r.host, r.instance_id)
              for r in conn.execute(_LISTED, params)}
    # A large group reads its partitions over fewer snapshots: the evaluation stays bounded.
    width = int(conn.execute(_WIDTH, params).scalar_one())
    keep = max(MAX_PARTITION_ROWS // max(width, 1), RECENT_INTERVALS + 4)
    spacing = Evidence(at, every, points).interval
    since: datetime = max(at - lookback, at - keep * spacing)
    totals = [Totals(r.snapshot_ts, int(r.produced or 0), int(r.committed or 0),
                     int(r.lag or 0))
              for r in conn.execute(_TOTALS, {**params, "since": since})]
    partitions = [PartitionPoint(r.snapshot_ts, r.topic, int(r.partition), r.member_id,
                                 r.committed_offset, r.lag, r.leader)
                  for r in conn.execute(_PARTITIONS, {**params, "since": since})]
    generations = conn.execute(_GENERATIONS, params).one()
    assigned: dict[str, dict[str, tuple[int, list[str]]]] = {}
    for r in conn.execute(_ASSIGNMENTS, params):
        assigned.setdefault(r.member_id, {})[r.kind] = (int(r.partitions), list(r.assigned))
    unreconciled = {m: (kinds.get("current", (0, []))[0], kinds["target"][0])
                    for m, kinds in assigned.items()
                    if "target" in kinds and kinds.get("current", (0, []))[1] != kinds["target"][1]}
    outage = (outages if outages is not None else coordinator_outages(conn, cluster, at)
              ).of(group_id)
    return Evidence(at, every, points, changes, listed, totals, partitions,
                    int(generations.generations or 0), generations.first, unreconciled, outage)


def explains(condition: str) -> bool:
    """Whether the causes explain this condition kind (its message then says "no known cause"
    when none has evidence)."""
    return condition in _FAMILY
