-- The serving schema: views shaped for the Grafana panels (groupscope.serve.grafana), over the
-- marts, the raw snapshots and the ops tables. Grafana logs in as a read-only role that may
-- SELECT in `serve` and nowhere else (groupscope.warehouse roles, run by a DBA: it grants
-- SELECT on this schema, also by default privileges), so every panel and variable query reads
-- only these views. The views run with their owner's rights (no security_invoker), which is
-- what lets that role read through them without any grant on the base tables.
--
-- Conventions: a time-series view names its time column "time"; "latest" means the newest
-- snapshot of the cluster in the base table (one consistent snapshot, as the alert conditions
-- read it); lag in records is `lag_records`, durations end in `_s` (seconds).
CREATE SCHEMA IF NOT EXISTS serve;

-- Indexes for the panels' filters (cluster, group, time) the primary keys do not serve: the
-- marts' keys start (cluster, snapshot_ts), the panels ask for one group over a time range.
CREATE INDEX IF NOT EXISTS group_lag_group_time ON mart.group_lag (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS topic_lag_group_time ON mart.topic_lag (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS member_lag_group_time ON mart.member_lag (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS partition_lag_group_time
    ON mart.partition_lag (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS group_status_group_time
    ON mart.group_status (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS group_skew_group_time ON mart.group_skew (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS rebalance_hourly_time ON mart.rebalance_hourly (cluster, period_start);
CREATE INDEX IF NOT EXISTS consumer_groups_group_time
    ON raw.consumer_groups (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS quality_results_cluster_time ON ops.quality_results (cluster, checked_at);

-- Clusters: every cluster the collector has landed a snapshot of, with its newest snapshot.
CREATE VIEW serve.clusters AS
SELECT DISTINCT ON (cluster)
       cluster, snapshot_ts AS last_snapshot_time, complete AS last_snapshot_complete,
       group_count AS groups, partition_count AS partitions, error_count AS errors
FROM raw.snapshots
ORDER BY cluster, snapshot_ts DESC;

-- The newest snapshot per cluster of the raw snapshots and of the status mart (an index
-- lookup per cluster, not a scan of the mart).
CREATE VIEW serve.latest_snapshots AS
SELECT c.cluster, c.last_snapshot_time AS raw_snapshot_time,
       (SELECT max(s.snapshot_ts) FROM mart.group_status s WHERE s.cluster = c.cluster)
         AS status_snapshot_time,
       (SELECT max(w.snapshot_ts) FROM mart.assignment_whatif w WHERE w.cluster = c.cluster)
         AS whatif_snapshot_time,
       (SELECT max(k.snapshot_ts) FROM mart.group_skew k WHERE k.cluster = c.cluster)
         AS skew_snapshot_time
FROM serve.clusters c;

-- Latest status per group, with its lag, time lag, members and state: the Overview's table,
-- top lagging groups and the Group detail's headline.
CREATE VIEW serve.group_status_latest AS
SELECT s.cluster, s.group_id, s.status,
       CASE s.status WHEN 'ERR' THEN 2 WHEN 'WARN' THEN 1 ELSE 0 END AS status_level,
       l.lag AS lag_records, l.max_lag AS max_partition_lag_records,
       coalesce(l.max_time_lag_exact_s, l.max_time_lag_estimated_s) AS max_time_lag_s,
       CASE WHEN l.max_time_lag_exact_s IS NOT NULL THEN 'exact'
            WHEN l.max_time_lag_estimated_s IS NOT NULL THEN 'estimated' END AS time_lag_kind,
       l.max_time_lag_exact_s, l.max_time_lag_estimated_s,
       l.production_rate, l.consumption_rate,
       g.member_count AS members, g.state, g.group_type, g.assignor,
       g.coordinator_id AS coordinator,
       s.ok_partitions + s.warn_partitions + s.stall_partitions + s.stop_partitions
         + s.rewind_partitions AS partitions,
       s.ok_partitions, s.warn_partitions, s.stall_partitions, s.stop_partitions,
       s.rewind_partitions, l.beyond_retention_partitions,
       s.worst_topic, s.worst_partition, s.worst_reason,
       s.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN mart.group_status s ON s.cluster = t.cluster AND s.snapshot_ts = t.status_snapshot_time
LEFT JOIN mart.group_lag l
  ON l.cluster = s.cluster AND l.snapshot_ts = s.snapshot_ts AND l.group_id = s.group_id
LEFT JOIN raw.consumer_groups g
  ON g.cluster = s.cluster AND g.snapshot_ts = s.snapshot_ts AND g.group_id = s.group_id;

-- Top lagging groups: the latest status rows ranked within their cluster by lag in records
-- and by time lag (1 = most behind).
CREATE VIEW serve.top_lagging_groups AS
SELECT cluster, group_id, status, lag_records, max_time_lag_s, time_lag_kind, members, state,
       rank() OVER (PARTITION BY cluster ORDER BY lag_records DESC NULLS LAST) AS rank_by_records,
       rank() OVER (PARTITION BY cluster ORDER BY max_time_lag_s DESC NULLS LAST)
         AS rank_by_seconds,
       snapshot_time
FROM serve.group_status_latest;

-- The groups of each cluster (the group variable): those at the newest raw snapshot and those
-- the status mart judged at its newest snapshot, once each (the raw row's type and state
-- first: it is the newer).
CREATE VIEW serve.groups AS
SELECT DISTINCT ON (cluster, group_id) cluster, group_id, group_type, state
FROM (SELECT g.cluster, g.group_id, g.group_type, g.state, 0 AS preference
      FROM serve.latest_snapshots t
      JOIN raw.consumer_groups g
        ON g.cluster = t.cluster AND g.snapshot_ts = t.raw_snapshot_time
      UNION ALL
      SELECT s.cluster, s.group_id, s.group_type, s.state, 1
      FROM serve.group_status_latest s) found
ORDER BY cluster, group_id, preference;

-- The topics each group consumes, at the newest status snapshot (the topic variable).
CREATE VIEW serve.group_topics AS
SELECT l.cluster, l.group_id, l.topic, l.partitions, l.lag AS lag_records
FROM serve.latest_snapshots t
JOIN mart.topic_lag l ON l.cluster = t.cluster AND l.snapshot_ts = t.status_snapshot_time;

-- Group lag over time (time lag exact: the sampled record's age; estimated: interpolated
-- over the high-watermark history).
CREATE VIEW serve.group_lag_history AS
SELECT snapshot_ts AS "time", cluster, group_id, lag AS lag_records,
       max_lag AS max_partition_lag_records, partitions,
       max_time_lag_exact_s AS time_lag_exact_s,
       max_time_lag_estimated_s AS time_lag_estimated_s,
       production_rate, consumption_rate, beyond_retention_partitions
FROM mart.group_lag;

-- Topic lag over time, per group.
CREATE VIEW serve.topic_lag_history AS
SELECT snapshot_ts AS "time", cluster, group_id, topic, lag AS lag_records,
       max_lag AS max_partition_lag_records, partitions,
       max_time_lag_exact_s AS time_lag_exact_s,
       max_time_lag_estimated_s AS time_lag_estimated_s,
       production_rate, consumption_rate
FROM mart.topic_lag;

-- Partition lag over time (`series`: topic-partition, a label for the panel legend).
CREATE VIEW serve.partition_lag_history AS
SELECT snapshot_ts AS "time", cluster, group_id, topic, partition,
       topic || '-' || partition AS series, member_id,
       lag AS lag_records, committed_offset, high_watermark, log_start_offset,
       lag_beyond_retention, production_rate, consumption_rate, catch_up_s,
       time_lag_exact_s, time_lag_estimated_s, time_lag_kind
FROM mart.partition_lag;

-- Member lag over time (a member by its client id and host where the snapshot has them).
CREATE VIEW serve.member_lag_history AS
SELECT m.snapshot_ts AS "time", m.cluster, m.group_id, m.member_id,
       coalesce(gm.client_id || '@' || gm.host, m.member_id) AS member,
       gm.client_id, gm.host, gm.instance_id,
       m.partitions, m.lag AS lag_records, m.max_lag AS max_partition_lag_records,
       m.max_time_lag_exact_s AS time_lag_exact_s,
       m.max_time_lag_estimated_s AS time_lag_estimated_s,
       m.production_rate, m.consumption_rate
FROM mart.member_lag m
LEFT JOIN raw.group_members gm
  ON gm.cluster = m.cluster AND gm.snapshot_ts = m.snapshot_ts AND gm.group_id = m.group_id
 AND gm.member_id = m.member_id;

-- Status history per group (status_level 0 OK, 1 WARN, 2 ERR).
CREATE VIEW serve.group_status_history AS
SELECT snapshot_ts AS "time", cluster, group_id, status,
       CASE status WHEN 'ERR' THEN 2 WHEN 'WARN' THEN 1 ELSE 0 END AS status_level,
       ok_partitions, warn_partitions, stall_partitions, stop_partitions, rewind_partitions,
       worst_topic, worst_partition, worst_reason
FROM mart.group_status;

-- Partition status history (OK, WARN, STALL, STOP, REWIND and the rule that decided).
CREATE VIEW serve.partition_status_history AS
SELECT snapshot_ts AS "time", cluster, group_id, topic, partition,
       topic || '-' || partition AS series, status, rule, lag AS lag_records, reason
FROM mart.partition_status;

-- Group state history from the coordinator (Stable, PreparingRebalance, Empty, ...).
CREATE VIEW serve.group_state_history AS
SELECT snapshot_ts AS "time", cluster, group_id, state, group_type, assignor,
       member_count AS members, coordinator_id AS coordinator, described
FROM raw.consumer_groups;

-- Members and their assignment now: at the newest snapshot the status marts have computed
-- (the one the headline stats show, so lag is there), or the newest raw one before any.
CREATE VIEW serve.members_now AS
SELECT gm.cluster, gm.group_id, gm.member_id, gm.client_id, gm.host, gm.instance_id,
       count(a.partition)::integer AS assigned_partitions,
       string_agg(a.topic || '-' || a.partition, ', ' ORDER BY a.topic, a.partition)
         AS assignment,
       ml.lag AS lag_records, ml.max_time_lag_exact_s AS time_lag_exact_s,
       ml.max_time_lag_estimated_s AS time_lag_estimated_s,
       gm.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN raw.group_members gm
  ON gm.cluster = t.cluster
 AND gm.snapshot_ts = coalesce(t.status_snapshot_time, t.raw_snapshot_time)
LEFT JOIN raw.member_assignments a
  ON a.cluster = gm.cluster AND a.snapshot_ts = gm.snapshot_ts AND a.group_id = gm.group_id
 AND a.member_id = gm.member_id AND a.kind = 'current'
LEFT JOIN mart.member_lag ml
  ON ml.cluster = gm.cluster AND ml.snapshot_ts = gm.snapshot_ts AND ml.group_id = gm.group_id
 AND ml.member_id = gm.member_id
GROUP BY gm.cluster, gm.group_id, gm.member_id, gm.client_id, gm.host, gm.instance_id,
         ml.lag, ml.max_time_lag_exact_s, ml.max_time_lag_estimated_s, gm.snapshot_ts;

-- The assignment now (the same snapshot as members_now), one row per assigned partition.
CREATE VIEW serve.assignment_now AS
SELECT a.cluster, a.group_id, a.member_id, gm.client_id, gm.host, a.topic, a.partition,
       pl.lag AS lag_records, pl.committed_offset, pl.high_watermark,
       a.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN raw.member_assignments a
  ON a.cluster = t.cluster AND a.snapshot_ts = coalesce(t.status_snapshot_time, t.raw_snapshot_time)
 AND a.kind = 'current'
LEFT JOIN raw.group_members gm
  ON gm.cluster = a.cluster AND gm.snapshot_ts = a.snapshot_ts AND gm.group_id = a.group_id
 AND gm.member_id = a.member_id
LEFT JOIN mart.partition_lag pl
  ON pl.cluster = a.cluster AND pl.snapshot_ts = a.snapshot_ts AND pl.group_id = a.group_id
 AND pl.topic = a.topic AND pl.partition = a.partition;

-- The rebalance timeline with causes (joined, left, both, none) and protocol.
CREATE VIEW serve.rebalance_timeline AS
SELECT event_ts AS "time", cluster, group_id, generation, source, estimated,
       protocol, coalesce(rebalance_type, 'unknown') AS rebalance_type,
       members, joined AS members_joined, "left" AS members_left, cause,
       CASE cause WHEN 'joined' THEN 'members joined'
                  WHEN 'left' THEN 'members left'
                  WHEN 'both' THEN 'members joined and left'
                  ELSE 'no membership change' END AS cause_text,
       partitions_moved
FROM mart.rebalance_events;

-- Rebalances per group and hour: frequency, causes, protocols, partitions moved, and the
-- time spent stable, rebalancing and empty.
CREATE VIEW serve.rebalance_hourly AS
SELECT period_start AS "time", cluster, group_id, rebalances,
       joined_only, left_only, joined_and_left, no_membership_change,
       coalesce(partitions_moved, 0) AS partitions_moved,
       eager, cooperative, consumer_protocol,
       stable_s, rebalancing_s, empty_s, other_s, source, estimated
FROM mart.rebalance_hourly;

-- Rebalance storms: hours in which a group rebalanced more than the built-in rebalance_storm
-- rule's threshold (serve/default_rules.yaml: 10 per hour).
CREATE VIEW serve.rebalance_storms AS
SELECT "time", cluster, group_id, rebalances, partitions_moved,
       joined_only + left_only + joined_and_left AS with_membership_change,
       no_membership_change, eager, cooperative, consumer_protocol
FROM serve.rebalance_hourly
WHERE rebalances > 10;

-- Skew per assignment strategy, hourly, across the cluster's groups.
CREATE VIEW serve.strategy_skew AS
SELECT period_start AS "time", cluster, coalesce(group_type, 'unknown') AS group_type,
       strategy, groups, group_snapshots,
       avg_max_minus_min, avg_coefficient_of_variation, avg_idle_members,
       avg_most_lagged_share, rebalances, avg_partitions_moved
FROM mart.strategy_skew_hourly;

-- Skew per group over time.
CREATE VIEW serve.group_skew AS
SELECT snapshot_ts AS "time", cluster, group_id, coalesce(group_type, 'unknown') AS group_type,
       strategy, members, partitions, max_minus_min, coefficient_of_variation, idle_members,
       most_lagged_member, most_lagged_share
FROM mart.group_skew;

-- Skew per group at the newest skew snapshot of the cluster (idle members, distribution).
CREATE VIEW serve.group_skew_latest AS
SELECT k.cluster, k.group_id, coalesce(k.group_type, 'unknown') AS group_type, k.strategy,
       k.members, k.partitions, k.max_minus_min, k.coefficient_of_variation, k.idle_members,
       k.most_lagged_member, k.most_lagged_share, k.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN mart.group_skew k ON k.cluster = t.cluster AND k.snapshot_ts = t.skew_snapshot_time;

-- The what-if comparison at the newest what-if snapshot of the cluster: per group, what each
-- strategy would give ('current' is the real assignment).
CREATE VIEW serve.whatif_comparison AS
SELECT w.cluster, w.group_id, w.strategy, w.strategy = 'current' AS is_current,
       w.current_strategy, w.subscriptions_inferred, w.members, w.partitions,
       w.max_minus_min, w.coefficient_of_variation, w.idle_members,
       w.most_lagged_member, w.most_lagged_share, w.moved_on_leave,
       w.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN mart.assignment_whatif w ON w.cluster = t.cluster AND w.snapshot_ts = t.whatif_snapshot_time;

-- The advice drawn from it, at the same (newest what-if) snapshot of the cluster.
CREATE VIEW serve.whatif_advice AS
SELECT a.cluster, a.group_id, a.seq, a.recommendation, a.reason, a.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN mart.assignment_advice a ON a.cluster = t.cluster AND a.snapshot_ts = t.whatif_snapshot_time;

-- Coordinator load now: groups and members per coordinating broker at the newest snapshot.
CREATE VIEW serve.coordinator_load AS
SELECT g.cluster, coalesce(g.coordinator_id::text, 'unknown') AS coordinator,
       count(*)::integer AS groups, coalesce(sum(g.member_count), 0)::integer AS members,
       count(*) FILTER (WHERE g.coordinator_mismatch)::integer AS groups_not_on_expected,
       g.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN raw.consumer_groups g ON g.cluster = t.cluster AND g.snapshot_ts = t.raw_snapshot_time
GROUP BY g.cluster, g.coordinator_id, g.snapshot_ts;

-- Coordinator load over time.
CREATE VIEW serve.coordinator_load_history AS
SELECT snapshot_ts AS "time", cluster, coalesce(coordinator_id::text, 'unknown') AS coordinator,
       count(*)::integer AS groups, coalesce(sum(member_count), 0)::integer AS members
FROM raw.consumer_groups
GROUP BY snapshot_ts, cluster, coalesce(coordinator_id::text, 'unknown');

-- Coordinator moves: a group whose coordinator differs from the last one known before (the
-- snapshots in between may have none: a failover, a failed describe, a partial snapshot).
CREATE VIEW serve.coordinator_moves AS
SELECT g.snapshot_ts AS "time", g.cluster, g.group_id,
       p.coordinator_id AS from_coordinator, g.coordinator_id AS to_coordinator,
       g.expected_coordinator_id AS expected_coordinator
FROM raw.consumer_groups g
JOIN LATERAL (
    SELECT c.coordinator_id FROM raw.consumer_groups c
    WHERE c.cluster = g.cluster AND c.group_id = g.group_id AND c.snapshot_ts < g.snapshot_ts
      AND c.coordinator_id IS NOT NULL
    ORDER BY c.snapshot_ts DESC LIMIT 1) p ON true
WHERE g.coordinator_id IS NOT NULL AND g.coordinator_id <> p.coordinator_id;

-- Collector health per cluster, as of now(): the newest snapshot and the newest complete one
-- and their ages, completeness and errors over the last 24 hours.
CREATE VIEW serve.collector_health AS
SELECT c.cluster, c.last_snapshot_time,
       extract(epoch FROM now() - c.last_snapshot_time)::double precision
         AS last_snapshot_age_s,
       c.last_snapshot_complete,
       lc.snapshot_ts AS last_complete_snapshot_time,
       extract(epoch FROM now() - lc.snapshot_ts)::double precision
         AS last_complete_snapshot_age_s,
       day.snapshots AS snapshots_24h, day.complete AS complete_snapshots_24h,
       CASE WHEN day.snapshots > 0 THEN day.complete::double precision / day.snapshots END
         AS completeness_24h,
       day.errors AS errors_24h, c.groups, c.partitions
FROM serve.clusters c
LEFT JOIN LATERAL (
    SELECT max(s.snapshot_ts) AS snapshot_ts FROM raw.snapshots s
    WHERE s.cluster = c.cluster AND s.complete) lc ON true
LEFT JOIN LATERAL (
    SELECT count(*)::integer AS snapshots, (count(*) FILTER (WHERE s.complete))::integer AS complete,
           coalesce(sum(s.error_count), 0)::integer AS errors
    FROM raw.snapshots s
    WHERE s.cluster = c.cluster AND s.snapshot_ts > now() - interval '24 hours') day ON true;

-- Every snapshot the collector landed (complete is 1 or 0, for a time series).
CREATE VIEW serve.collector_snapshots AS
SELECT snapshot_ts AS "time", cluster, snapshot_id, complete, complete::integer AS complete_value,
       group_count AS groups, partition_count AS partitions, error_count AS errors
FROM raw.snapshots;

-- The collector's errors.
CREATE VIEW serve.collection_errors AS
SELECT snapshot_ts AS "time", cluster, stage, code, message, group_id, topic, partition,
       retriable, attempts
FROM raw.collection_errors;

-- Data-quality results (groupscope.quality).
CREATE VIEW serve.quality_results AS
SELECT checked_at AS "time", cluster, suite, subject, success, expectations, failed
FROM ops.quality_results;

-- Open alert incidents (pending or firing), newest first when ordered by started_at.
CREATE VIEW serve.open_alert_incidents AS
SELECT incident_id, rule, severity,
       CASE severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END AS severity_level,
       cluster, group_id, topic, state, started_at, firing_at, last_seen_at,
       extract(epoch FROM now() - started_at)::double precision AS open_for_s,
       value, threshold, runbook
FROM ops.alert_incidents
WHERE state <> 'resolved';

-- The values the alert conditions look at (groupscope.serve.conditions mirrored in SQL), for
-- Grafana alerting: per cluster, at its newest status snapshot, one row per group and group
-- condition kind; and per cluster (group_id '') as of now(): collector_stale_s (seconds since
-- the last complete snapshot, or the first snapshot if none was complete),
-- snapshot_incomplete (incomplete snapshots since the last complete one) and
-- quality_gate_failed (suites whose latest result in the last 24 hours failed).
CREATE VIEW serve.alert_conditions AS
WITH clusters AS (
    SELECT cluster FROM serve.clusters
    UNION
    SELECT DISTINCT cluster FROM ops.quality_results
    WHERE checked_at > now() - interval '24 hours'
), groups AS (
    SELECT s.cluster, s.snapshot_ts, s.group_id,
           s.stop_partitions + s.stall_partitions AS status_err,
           s.rewind_partitions,
           coalesce(l.max_time_lag_exact_s, l.max_time_lag_estimated_s) AS time_lag_s,
           l.lag, l.beyond_retention_partitions,
           CASE WHEN EXISTS (
                    SELECT 1 FROM mart.partition_status p
                    WHERE p.cluster = s.cluster AND p.snapshot_ts = s.snapshot_ts
                      AND p.group_id = s.group_id AND p.rule = 'group_empty')
                THEN greatest(coalesce(l.lag - previous.lag, 0), 0)
                ELSE 0 END AS empty_lag_growth,
           (SELECT count(*) FROM mart.rebalance_events e
            WHERE e.cluster = s.cluster AND e.group_id = s.group_id
              AND e.event_ts > s.snapshot_ts - interval '1 hour'
              AND e.event_ts <= s.snapshot_ts) AS rebalances
    FROM serve.latest_snapshots t
    JOIN mart.group_status s ON s.cluster = t.cluster AND s.snapshot_ts = t.status_snapshot_time
    LEFT JOIN mart.group_lag l
      ON l.cluster = s.cluster AND l.snapshot_ts = s.snapshot_ts AND l.group_id = s.group_id
    LEFT JOIN LATERAL (
        SELECT p.lag FROM mart.group_lag p
        WHERE p.cluster = s.cluster AND p.group_id = s.group_id
          AND p.snapshot_ts < s.snapshot_ts
        ORDER BY p.snapshot_ts DESC LIMIT 1) previous ON true
), collector AS (
    SELECT c.cluster,
           max(s.snapshot_ts) FILTER (WHERE s.complete) AS last_complete,
           min(s.snapshot_ts) AS first_snapshot
    FROM clusters c JOIN raw.snapshots s ON s.cluster = c.cluster
    GROUP BY c.cluster
), quality AS (
    SELECT DISTINCT ON (cluster, suite) cluster, suite, success
    FROM ops.quality_results
    WHERE checked_at > now() - interval '24 hours'
    ORDER BY cluster, suite, checked_at DESC
)
SELECT g.snapshot_ts AS "time", g.cluster, g.group_id, v.condition, v.value
FROM groups g
CROSS JOIN LATERAL (VALUES
    ('group_status_err', g.status_err::double precision),
    ('partition_rewind', g.rewind_partitions::double precision),
    ('lag_seconds', g.time_lag_s),
    ('lag_records', g.lag::double precision),
    ('lag_beyond_retention', g.beyond_retention_partitions::double precision),
    ('group_empty_lag_growing', g.empty_lag_growth::double precision),
    ('rebalances_per_hour', g.rebalances::double precision)
) AS v (condition, value)
WHERE v.value IS NOT NULL
UNION ALL
SELECT now(), c.cluster, '', 'collector_stale_s',
       greatest(extract(epoch FROM now() - coalesce(c.last_complete, c.first_snapshot)), 0)
         ::double precision
FROM collector c
UNION ALL
SELECT now(), c.cluster, '', 'snapshot_incomplete',
       (SELECT count(*) FROM raw.snapshots s
        WHERE s.cluster = c.cluster AND NOT s.complete
          AND s.snapshot_ts > coalesce(c.last_complete, '-infinity'))::double precision
FROM collector c
UNION ALL
SELECT now(), c.cluster, '', 'quality_gate_failed',
       (SELECT count(*) FROM quality q WHERE q.cluster = c.cluster AND NOT q.success)
         ::double precision
FROM clusters c;
