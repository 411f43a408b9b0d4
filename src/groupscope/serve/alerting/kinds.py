"""Every condition kind, defined once: what its value is, whose it is, which way it fires, why
it is unknown when the view holds no value, and the headline of its notifications. The rules
(``rules``: which conditions a rule may name, which way it compares), the observations
(``conditions``: which are read per group, which per cluster) and the messages (``notify``:
the headline) all read this table, and so does the Grafana export.

Subjects:

- ``group``: one value per group, read from ``serve.group_conditions`` (a column of that name);
- ``collector``: one value per cluster, about the collector (``serve.cluster_conditions``);
- ``self``: one value per cluster (or per task or channel, named in the topic), about
  groupscope's own parts; Grafana cannot see them (they are read outside the marts).

A headline is a template: ``{duration}`` and ``{count}`` are the value as a duration and as a
count; any other field is an incident detail (escaped), ``?`` when it is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Subject = Literal["group", "collector", "self"]


@dataclass(frozen=True)
class Kind:
    name: str
    subject: Subject
    meaning: str  # what its value is
    headline: str  # what is wrong, upper case for what an on-call pages on (a template)
    below: bool = False  # fires when the value is below the threshold (a time left)
    unknown: str = ""  # why, when the view holds no value for the subject
    # Read from the group's lag roll-up: unknown whenever a partition's lag is (issue 41).
    reads_lag: bool = False


KINDS: tuple[Kind, ...] = (
    Kind("group_status_err", "group",
         "partitions of the group in STOP or STALL (group status ERR)",
         # STOPPED or STALLED, or COORDINATOR DOWN: notify.headline picks by the details
         "STOPPED"),
    Kind("partition_rewind", "group",
         "partitions of the group whose committed offset moved back (REWIND)",
         "REWIND (committed offsets moved back)"),
    Kind("lag_seconds", "group", "the group's largest time lag, in seconds",
         "lag {duration} behind", reads_lag=True,
         unknown="its time lag cannot be computed (no record timestamp at the committed "
                 "offsets, and too little high-watermark history to estimate it)"),
    Kind("lag_records", "group", "the group's lag, in records", "lag {count} records",
         reads_lag=True,
         unknown="its lag cannot be computed (no committed offset or high watermark)"),
    Kind("lag_beyond_retention", "group",
         "partitions whose committed offset is below the log start (records lost to the group)",
         "LAG BEYOND RETENTION (data lost to the consumer)", reads_lag=True,
         unknown="its lag cannot be computed (no committed offset or log start)"),
    Kind("group_empty_lag_growing", "group",
         "records the lag of a group without members grew by since the previous snapshot",
         "EMPTY while its lag grows", reads_lag=True),
    Kind("rebalances_per_hour", "group", "rebalances of the group in the last hour",
         "REBALANCE STORM ({count} an hour)"),
    Kind("rebalance_stuck", "group",
         "seconds the group has been rebalancing without a break (a member that does not "
         "rejoin blocks every other)",
         "REBALANCE STUCK for {duration}"),
    Kind("loss_forecast_s", "group",
         "seconds until retention deletes records the group has not read, at the current rates "
         "(7 days when no loss is forecast); fires BELOW the threshold",
         # "DATA LOSS now" once records are being lost: notify.headline picks by the details
         "DATA LOSS forecast in {duration} (retention deletes records it has not read)",
         below=True,
         unknown="its loss forecast cannot be computed for some partition (no rates yet, a "
                 "gap in the snapshots, or its topic's retention settings not read)"),
    Kind("collector_stale", "collector",
         "snapshot intervals since the cluster's last complete snapshot", "collector STALE"),
    Kind("snapshot_incomplete", "collector", "incomplete snapshots of the cluster in a row",
         "snapshots INCOMPLETE"),
    Kind("quality_gate_failed", "collector", "data-quality suites whose latest check failed",
         "quality gate FAILED"),
    Kind("analytics_stale", "self",
         "snapshot intervals the newest computed status rows are behind the newest loaded "
         "snapshot",
         "analytics STALE (alerts on groups cannot be judged)"),
    Kind("task_failed", "self",
         "1 while a groupscope task's latest try failed (per DAG and task)",
         "task {dag_id}.{task_id} FAILED"),
    Kind("channel_failing", "self",
         "seconds an alert channel has been failing (its deliveries retried or given up)",
         "alert channel {channel} FAILING"),
    Kind("rules_invalid", "self",
         "1 while the rules file is invalid and the last valid rules are in use",
         "rules file INVALID (the last valid rules are in use)"),
    Kind("offsets_feed_stale", "self",
         "seconds since the offsets-topic feed (exact rebalance history) was last read to its "
         "end and loaded",
         "offsets-topic feed STALE for {duration}"),
)
BY_NAME = {k.name: k for k in KINDS}


def _names(*subjects: Subject) -> tuple[str, ...]:
    return tuple(k.name for k in KINDS if k.subject in subjects)


GROUP_KINDS = _names("group")
COLLECTOR_KINDS = _names("collector")
SELF_KINDS = _names("self")
# The kinds whose subject is the cluster: their group is '' (a group override never matches).
CLUSTER_SUBJECT_KINDS = _names("collector", "self")
BELOW_KINDS = frozenset(k.name for k in KINDS if k.below)
