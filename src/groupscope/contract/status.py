"""Consumer status: the names, the rules that give a partition its status, and the roll-up of
partition statuses into a group status. The Spark transforms (``groupscope.analyze.status``)
evaluate them, the warehouse stores them (``mart.partition_status``, ``mart.group_status``)
and the quality suite checks the stored values against them: all take the names from here.
tests/unit/test_contract.py checks that the migrations name the same sets.

Also the kinds of time-lag estimate (``mart.partition_lag.time_lag_kind``), a closed set too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum


class PartitionStatus(StrEnum):
    """A partition's status. The order is the column order of the per-status counts of
    ``mart.group_status`` (``ok_partitions``, ``warn_partitions``, ...)."""

    OK = "OK"
    WARN = "WARN"  # lag growing while committing
    STALL = "STALL"  # members present, committed offset not moving, behind
    STOP = "STOP"  # no members: the group lost them while its lag grows, or the committed
    # offset has not moved for the stop threshold while behind
    REWIND = "REWIND"  # committed offset moved back


class GroupStatus(StrEnum):
    """A group's status, least to most severe."""

    OK = "OK"
    WARN = "WARN"
    ERR = "ERR"


class Rule(StrEnum):
    """The rules that decide a partition's status, in the order they are tried (first match
    wins). What each one tests: ``groupscope.analyze.status``."""

    REWIND = "rewind"
    STREAMS_NOT_READY = "streams_not_ready"
    STREAMS_ASSIGNING_STUCK = "streams_assigning_stuck"
    NO_LAG = "no_lag"
    TOO_LITTLE_HISTORY = "too_little_history"
    SHARE_NO_MEMBERS = "share_no_members"
    GROUP_EMPTY = "group_empty"
    PROGRESS_STOPPED = "progress_stopped"
    STREAMS_TASK_UNOWNED = "streams_task_unowned"
    STOPPED = "stopped"
    SHARE_STALLED = "share_stalled"
    STALLED = "stalled"
    FALLING_BEHIND = "falling_behind"
    CONSUMING = "consuming"


# (rule, the status it gives), in the order the rules are tried.
RULES: tuple[tuple[Rule, PartitionStatus], ...] = (
    (Rule.REWIND, PartitionStatus.REWIND),
    (Rule.STREAMS_NOT_READY, PartitionStatus.STOP),
    (Rule.STREAMS_ASSIGNING_STUCK, PartitionStatus.STALL),
    (Rule.NO_LAG, PartitionStatus.OK),
    (Rule.TOO_LITTLE_HISTORY, PartitionStatus.OK),
    (Rule.SHARE_NO_MEMBERS, PartitionStatus.STOP),
    (Rule.GROUP_EMPTY, PartitionStatus.STOP),
    (Rule.PROGRESS_STOPPED, PartitionStatus.STOP),
    (Rule.STREAMS_TASK_UNOWNED, PartitionStatus.STALL),
    (Rule.STOPPED, PartitionStatus.STOP),
    (Rule.SHARE_STALLED, PartitionStatus.STALL),
    (Rule.STALLED, PartitionStatus.STALL),
    (Rule.FALLING_BEHIND, PartitionStatus.WARN),
    (Rule.CONSUMING, PartitionStatus.OK),
)

# What one partition in a status makes its group at least. A rewind is a warning, not an
# error: the consumer is moving (a reset or a replay), only not forward.
ROLL_UP: Mapping[PartitionStatus, GroupStatus] = {
    PartitionStatus.OK: GroupStatus.OK,
    PartitionStatus.WARN: GroupStatus.WARN,
    PartitionStatus.REWIND: GroupStatus.WARN,
    PartitionStatus.STALL: GroupStatus.ERR,
    PartitionStatus.STOP: GroupStatus.ERR,
}


def severity(status: GroupStatus) -> int:
    """0 for OK, higher for worse: the position in ``GroupStatus``."""
    return list(GroupStatus).index(status)


def group_status(partitions: Iterable[PartitionStatus]) -> GroupStatus:
    """ERR if any partition is STOP or STALL, WARN if any is WARN or REWIND, else OK (a group
    with no partition status is OK)."""
    return max((ROLL_UP[p] for p in partitions), key=severity, default=GroupStatus.OK)


def count_column(status: PartitionStatus) -> str:
    """The ``mart.group_status`` column counting the group's partitions in ``status``."""
    return f"{status.lower()}_partitions"


class TimeLagKind(StrEnum):
    """How a partition's time lag was estimated (``groupscope.analyze.lag``)."""

    INTERPOLATED = "interpolated"
    EXTRAPOLATED = "extrapolated"
    AT_LEAST = "at_least"
    CAUGHT_UP = "caught_up"
    UNKNOWN = "unknown"
