"""The three analytics jobs, each: read the landed data of one interval (plus a lookback) and run
the pure transforms. ``groupscope.pipeline.analytics`` replaces the interval's mart rows with
what they compute; ``spark_jobs/*.py`` are the spark-submit entry points."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from groupscope.analyze.io import Interval, local_relation, read_snapshot_table

# The history the rebalance job reads before its interval (a rebalance in progress at the
# interval's start needs the snapshots before it).
DEFAULT_LOOKBACK = timedelta(hours=6)


@dataclass(frozen=True)
class JobArgs:
    landing: Path
    cluster: str
    interval: Interval
    warehouse: str | None
    lookback: timedelta


def parse_args(prog: str, argv: Sequence[str] | None = None) -> JobArgs:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--landing", required=True, help="the landing folder")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--start", required=True, help="interval start, ISO 8601 (UTC)")
    parser.add_argument("--end", required=True, help="interval end (exclusive)")
    parser.add_argument("--warehouse", help="PostgreSQL URL (default: env WAREHOUSE_URL)")
    parser.add_argument("--lookback-minutes", type=float,
                        default=DEFAULT_LOOKBACK.total_seconds() / 60,
                        help="history the rebalance job reads before the interval (the lag "
                             "job reads what its windows need: analyze.jobs.lag_read_span)")
    args = parser.parse_args(argv)
    import os

    return JobArgs(Path(args.landing), args.cluster,
                   Interval(_utc(args.start), _utc(args.end)),
                   args.warehouse or os.environ.get("WAREHOUSE_URL"),
                   timedelta(minutes=args.lookback_minutes))


def _utc(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _on_the_hour(interval: Interval) -> None:
    for bound in (interval.start, interval.end):
        if bound != bound.replace(minute=0, second=0, microsecond=0):
            raise ValueError(f"this job writes hourly rows: its interval must start and end on "
                             f"the hour, not at {bound.isoformat()}")


def _table(spark: Any, job: JobArgs, table: str, start: datetime, end: datetime) -> Any:
    return read_snapshot_table(spark, job.landing, table, job.cluster, start, end)


READ_MARGIN = timedelta(minutes=10)

# The windows of the lag and status marts: how far back a snapshot's values look. Named here
# and never derived from how far a job reads, so every path that computes a snapshot (the
# hourly lag job, a backfill, the live path of each new snapshot) gives it the same rows.
TIME_LAG_HISTORY = timedelta(hours=1)  # the high-watermark history of the estimated time lag
RATE_WINDOW = timedelta(minutes=5)  # production and consumption rates


def lag_read_span() -> timedelta:
    """How far before its interval the lag job reads: its longest window (the time-lag
    history, the status windows of ``StatusSettings()``), plus ``READ_MARGIN`` so that the
    oldest row of a window has its predecessor (pauses, segments). Reading more changes no
    value; reading less would. A live run of one new snapshot reads this much and no more."""
    from groupscope.analyze.status import StatusSettings

    status = StatusSettings()
    longest = max(TIME_LAG_HISTORY, RATE_WINDOW, timedelta(seconds=status.history_s),
                  timedelta(seconds=status.window_s))
    return longest + READ_MARGIN


PARTITION_LAG_COLUMNS = [
    "cluster", "snapshot_ts", "group_id", "topic", "partition", "member_id", "committed_offset",
    "log_start_offset", "high_watermark", "last_stable_offset", "lag", "lag_beyond_retention",
    "production_rate", "consumption_rate", "catch_up_s", "time_lag_estimated_s",
    "time_lag_kind", "time_lag_exact_s", "lag_growth_rate", "loss_in_s", "loss_basis",
    "share_lag",
]


def lag_frames(spark: Any, job: JobArgs, small: bool = False) -> list[tuple[str, Any]]:
    """mart.partition_lag, its roll-ups, mart.partition_status and mart.group_status.

    The marts derive from two frames of the interval, the lag rows and the statuses. An hour
    of rows (the hourly job) reads them from the cached lag and cached statuses; a ``small``
    interval (a live run's few snapshots) computes each once as a local relation
    (``io.local_relation``), so each mart is a query of a few operators over a few rows."""
    from groupscope.analyze.lag import lag_mart, rollups, within
    from groupscope.analyze.status import (
        StatusSettings,
        group_status,
        partition_status,
        streams_task_owners,
    )

    # Each snapshot looks back its windows (TIME_LAG_HISTORY, StatusSettings()): the values
    # of an interval's rows do not depend on the interval that computed them (reruns,
    # backfills and the live path give identical rows), and the job reads only what the
    # windows need (lag_read_span).
    start, end = job.interval.start - lag_read_span(), job.interval.end
    lag = lag_mart(_table(spark, job, "committed_offsets", start, end),
                   _table(spark, job, "partition_offsets", start, end),
                   _table(spark, job, "member_assignments", start, end),
                   _table(spark, job, "record_timestamps", start, end),
                   rate_window_s=int(RATE_WINDOW.total_seconds()),
                   history_s=TIME_LAG_HISTORY.total_seconds(),
                   topics=_table(spark, job, "topics", start, end),
                   share_offsets=_table(spark, job, "share_partition_offsets", start,
                                        end)).cache()
    in_interval = within(lag, job.interval.start, job.interval.end)
    task_owners = streams_task_owners(
        _table(spark, job, "streams_subtopology_topics", start, end),
        _table(spark, job, "streams_member_tasks", start, end))
    statuses = within(partition_status(lag, _table(spark, job, "consumer_groups", start, end),
                                       StatusSettings(), task_owners),
                      job.interval.start, job.interval.end)
    if small:
        in_interval, statuses = local_relation(in_interval), local_relation(statuses)
    else:
        statuses = statuses.cache()
    frames = [("partition_lag", in_interval.select(*PARTITION_LAG_COLUMNS))]
    frames += list(rollups(in_interval).items())
    frames += [("partition_status", statuses), ("group_status", group_status(statuses))]
    return frames


def rebalance_events_frame(spark: Any, job: JobArgs) -> tuple[Any, Any]:
    """The interval's rebalance events (exact from the landed offsets-topic events, else
    estimated from snapshots) and the groups that have exact history."""
    from groupscope.analyze.lag import within
    from groupscope.analyze.rebalance import (
        estimated_events,
        exact_events,
        known_groups,
        rebalance_events,
        streams_events,
    )
    from groupscope.offsets import store
    from groupscope.offsets.events import EVENT_SCHEMAS
    from groupscope.offsets.timeline import all_timelines

    events = {name: store.read_events(job.landing, job.cluster, name).to_pylist()
              for name in EVENT_SCHEMAS if name != "offset_commits"}
    timelines = all_timelines(events)
    exact = exact_events(job.cluster, timelines, job.interval.start, job.interval.end)
    known = known_groups(spark, [(job.cluster, t.group_id) for t in timelines])
    # One snapshot before the interval is enough to see the first change in it.
    start = job.interval.start - min(job.lookback, timedelta(hours=1))
    members = _table(spark, job, "group_members", start, job.interval.end)
    groups = _table(spark, job, "consumer_groups", start, job.interval.end)
    estimated = within(estimated_events(members, groups).unionByName(streams_events(
        members, groups, _table(spark, job, "group_epochs", start, job.interval.end),
        _table(spark, job, "streams_member_tasks", start, job.interval.end))),
        job.interval.start, job.interval.end, "event_ts")
    return rebalance_events(spark, exact, estimated, known), known


def rebalance_frames(spark: Any, job: JobArgs) -> tuple[list[tuple[str, Any]],
                                                        list[tuple[str, Any]]]:
    """(mart.rebalance_events, keyed by event_ts), (mart.rebalance_hourly, by period_start)."""
    from groupscope.analyze.rebalance import MAX_STATE_GAP_S, hourly, state_durations

    _on_the_hour(job.interval)
    events, known = rebalance_events_frame(spark, job)
    events = events.cache()
    groups = _table(spark, job, "consumer_groups", job.interval.start,
                    job.interval.end + timedelta(seconds=MAX_STATE_GAP_S))
    durations = state_durations(groups, start=job.interval.start, end=job.interval.end)
    return [("rebalance_events", events)], [("rebalance_hourly", hourly(events, durations,
                                                                        known))]


def skew_frames(spark: Any, job: JobArgs) -> tuple[list[tuple[str, Any]],
                                                   list[tuple[str, Any]]]:
    """(mart.group_skew, by snapshot_ts), (mart.strategy_skew_hourly, by period_start)."""
    from groupscope.analyze.lag import partition_lag
    from groupscope.analyze.skew import group_skew, strategy_skew_hourly

    _on_the_hour(job.interval)
    start, end = job.interval.start, job.interval.end
    assignments = _table(spark, job, "member_assignments", start, end)
    lag = partition_lag(_table(spark, job, "committed_offsets", start, end),
                        _table(spark, job, "partition_offsets", start, end), assignments)
    skew = group_skew(_table(spark, job, "group_members", start, end), assignments,
                      _table(spark, job, "consumer_groups", start, end), lag).cache()
    events, _ = rebalance_events_frame(spark, job)
    return [("group_skew", skew)], [("strategy_skew_hourly", strategy_skew_hourly(skew, events))]


def compute(spark: Any, job: JobArgs, kind: str, small: bool = False,
            ) -> list[tuple[str, list[tuple[str, Any]]]]:
    """One job's marts (``lag``, ``rebalance`` or ``skew``) for the interval, as
    (time column, [(mart table, frame)]): the rows to replace, by the column that places them
    in the interval. Writing them is the caller's (``groupscope.pipeline.analytics``).
    ``small``: see ``lag_frames``."""
    if kind == "lag":
        return [("snapshot_ts", lag_frames(spark, job, small))]
    if kind == "rebalance":
        by_time, hourly = rebalance_frames(spark, job)
        return [("event_ts", by_time), ("period_start", hourly)]
    if kind == "skew":
        by_time, hourly = skew_frames(spark, job)
        return [("snapshot_ts", by_time), ("period_start", hourly)]
    raise ValueError(f"unknown job {kind!r}: lag, rebalance or skew")
