-- Fresh rebalance counts, and one definition of every alert condition's value.
--
-- raw.group_generations: every rebalance the offsets-topic ingest has decoded, one row per
-- GroupMetadata record (classic groups: a generation; a rewrite of the same generation, e.g. a
-- static member replaced, is a row with the same generation) and per ConsumerGroupMetadata
-- record (consumer-protocol groups: a group epoch). The ingest task loads them as it lands
-- them (groupscope.warehouse.generations), so the rebalance-storm condition counts over a
-- sliding window that is as fresh as the ingest, instead of the hourly mart's whole hours
-- (a steady storm fired at :05, resolved by :30 and fired again the next hour).
CREATE TABLE raw.group_generations (
    cluster          text        NOT NULL,
    group_id         text        NOT NULL,
    group_protocol   text        NOT NULL CHECK (group_protocol IN ('classic', 'consumer')),
    generation       integer     NOT NULL,  -- the generation, or the consumer group's epoch
    event_ts         timestamptz NOT NULL,  -- the record's timestamp: when it was written
    source_partition integer     NOT NULL,
    source_offset    bigint      NOT NULL,
    PRIMARY KEY (cluster, source_partition, source_offset, event_ts)
) PARTITION BY RANGE (event_ts);
CREATE INDEX ON raw.group_generations (cluster, group_id, event_ts);
INSERT INTO groupscope_meta.partitioned_tables VALUES
    ('raw', 'group_generations', 'event_ts', 'raw', 'day');

-- How far the landed offsets-topic batches have been loaded into raw.group_generations, per
-- partition of __consumer_offsets (the next offset to load): a load that failed, or a warehouse
-- that was down, is caught up by the next ingest run; a batch is never loaded twice.
CREATE TABLE ops.offsets_loaded (
    cluster          text        NOT NULL,
    source_partition integer     NOT NULL,
    next_offset      bigint      NOT NULL,
    loaded_at        timestamptz NOT NULL,
    PRIMARY KEY (cluster, source_partition)
);

-- The value of every group condition at each cluster's newest status snapshot, with what a
-- notification says about the group. groupscope's own evaluation
-- (groupscope.serve.alerting.conditions) and the exported Grafana rules
-- (serve.alert_conditions below) both read this: a condition's value is defined here only.
--
-- rebalances_per_hour counts the distinct generations (or epochs) in the sliding window
-- before the snapshot, from raw.group_generations; a group with no offsets-topic history
-- (no read access to __consumer_offsets, or the ingest not scheduled) counts the events of
-- mart.rebalance_events (estimated from snapshots by the hourly job). The window is the
-- session setting groupscope.rebalance_window (the rules' `rebalance_window`; an hour when
-- unset), and the count is scaled to an hour.
CREATE VIEW serve.group_conditions AS
WITH params AS (
    SELECT coalesce(nullif(current_setting('groupscope.rebalance_window', true), '')::interval,
                    interval '1 hour') AS rebalance_window
)
SELECT s.cluster, s.snapshot_ts, s.group_id,
       s.stop_partitions + s.stall_partitions AS group_status_err,
       s.rewind_partitions AS partition_rewind,
       coalesce(l.max_time_lag_exact_s, l.max_time_lag_estimated_s) AS lag_seconds,
       l.lag AS lag_records,
       l.beyond_retention_partitions AS lag_beyond_retention,
       -- Lag growing while the status rule says the group lost its members (rule
       -- group_empty, which knows the guards: a commit-only group is always Empty).
       CASE WHEN e.empty_partitions > 0 THEN greatest(coalesce(l.lag - previous.lag, 0), 0)
            ELSE 0 END AS group_empty_lag_growing,
       r.rebalances * 3600.0 / greatest(extract(epoch FROM p.rebalance_window), 1)
         AS rebalances_per_hour,
       s.status,
       s.ok_partitions + s.warn_partitions + s.stall_partitions + s.stop_partitions
         + s.rewind_partitions AS partitions,
       s.stall_partitions, s.stop_partitions, s.rewind_partitions,
       s.worst_topic, s.worst_partition, s.worst_reason,
       l.lag, l.max_lag, l.beyond_retention_partitions,
       coalesce(l.max_time_lag_exact_s, l.max_time_lag_estimated_s) AS time_lag_s,
       l.max_time_lag_exact_s IS NOT NULL AS time_lag_exact,
       c.state, c.member_count, previous.lag AS previous_lag,
       coalesce(l.lag - previous.lag, 0) AS lag_growth,
       e.empty_partitions, r.rebalances, r.rebalances_source,
       extract(epoch FROM p.rebalance_window)::double precision AS rebalance_window_s
FROM params p
CROSS JOIN serve.latest_snapshots t
JOIN mart.group_status s ON s.cluster = t.cluster AND s.snapshot_ts = t.status_snapshot_time
LEFT JOIN mart.group_lag l
  ON l.cluster = s.cluster AND l.snapshot_ts = s.snapshot_ts AND l.group_id = s.group_id
LEFT JOIN raw.consumer_groups c
  ON c.cluster = s.cluster AND c.snapshot_ts = s.snapshot_ts AND c.group_id = s.group_id
LEFT JOIN LATERAL (
    SELECT g.lag FROM mart.group_lag g
    WHERE g.cluster = s.cluster AND g.group_id = s.group_id AND g.snapshot_ts < s.snapshot_ts
    ORDER BY g.snapshot_ts DESC LIMIT 1) previous ON true
CROSS JOIN LATERAL (
    SELECT count(*) AS empty_partitions FROM mart.partition_status ps
    WHERE ps.cluster = s.cluster AND ps.snapshot_ts = s.snapshot_ts
      AND ps.group_id = s.group_id AND ps.rule = 'group_empty') e
CROSS JOIN LATERAL (
    SELECT CASE WHEN x.exact THEN x.generations ELSE x.events END AS rebalances,
           CASE WHEN x.exact THEN 'offsets_topic' ELSE 'rebalance_events' END
             AS rebalances_source
    FROM (SELECT
            EXISTS (SELECT 1 FROM raw.group_generations h
                    WHERE h.cluster = s.cluster AND h.group_id = s.group_id) AS exact,
            (SELECT count(DISTINCT (h.group_protocol, h.generation))
             FROM raw.group_generations h
             WHERE h.cluster = s.cluster AND h.group_id = s.group_id
               AND h.event_ts > s.snapshot_ts - p.rebalance_window
               AND h.event_ts <= s.snapshot_ts) AS generations,
            (SELECT count(*) FROM mart.rebalance_events ev
             WHERE ev.cluster = s.cluster AND ev.group_id = s.group_id
               AND ev.event_ts > s.snapshot_ts - p.rebalance_window
               AND ev.event_ts <= s.snapshot_ts) AS events) x) r;

-- The collector's health per cluster at the evaluation time: the session setting
-- groupscope.evaluated_at (groupscope's evaluation passes its own clock), else now().
-- collector_stale_s counts from the last complete snapshot (a cluster that has only ever had
-- partial snapshots, from its first: as blind as one that has none); it and
-- snapshot_incomplete are null when the cluster has no snapshot left (unknown, not OK).
-- quality_gate_failed: suites whose latest result in the last 24 hours failed.
CREATE VIEW serve.cluster_conditions AS
WITH params AS (
    SELECT coalesce(nullif(current_setting('groupscope.evaluated_at', true), '')::timestamptz,
                    now()) AS at
), clusters AS (
    SELECT cluster FROM serve.clusters
    UNION
    SELECT DISTINCT q.cluster FROM ops.quality_results q, params p
    WHERE q.checked_at > p.at - interval '24 hours'
), collector AS (
    SELECT c.cluster,
           max(s.snapshot_ts) FILTER (WHERE s.complete) AS last_complete,
           min(s.snapshot_ts) AS first_snapshot,
           max(s.snapshot_ts) AS last_snapshot
    FROM clusters c LEFT JOIN raw.snapshots s ON s.cluster = c.cluster
    GROUP BY c.cluster
), quality AS (
    SELECT DISTINCT ON (q.cluster, q.suite) q.cluster, q.suite, q.success
    FROM ops.quality_results q, params p
    WHERE q.checked_at > p.at - interval '24 hours'
    ORDER BY q.cluster, q.suite, q.checked_at DESC
)
SELECT p.at AS "time", c.cluster,
       greatest(extract(epoch FROM p.at - coalesce(c.last_complete, c.first_snapshot)), 0)
         ::double precision AS collector_stale_s,
       CASE WHEN c.last_snapshot IS NOT NULL THEN
           (SELECT count(*) FROM raw.snapshots s
            WHERE s.cluster = c.cluster AND NOT s.complete
              AND s.snapshot_ts > coalesce(c.last_complete, '-infinity'))
       END AS snapshot_incomplete,
       (SELECT count(*) FROM quality q WHERE q.cluster = c.cluster AND NOT q.success)
         AS quality_gate_failed,
       c.last_complete, c.first_snapshot, c.last_snapshot
FROM collector c, params p;

-- What the exported Grafana rules read (groupscope.serve.grafana.alerting): the two views
-- above, one row per subject and condition; an unknown value is no row (Grafana's NoData).
CREATE OR REPLACE VIEW serve.alert_conditions AS
SELECT g.snapshot_ts AS "time", g.cluster, g.group_id, v.condition, v.value
FROM serve.group_conditions g
CROSS JOIN LATERAL (VALUES
    ('group_status_err', g.group_status_err::double precision),
    ('partition_rewind', g.partition_rewind::double precision),
    ('lag_seconds', g.lag_seconds::double precision),
    ('lag_records', g.lag_records::double precision),
    ('lag_beyond_retention', g.lag_beyond_retention::double precision),
    ('group_empty_lag_growing', g.group_empty_lag_growing::double precision),
    ('rebalances_per_hour', g.rebalances_per_hour::double precision)
) AS v (condition, value)
WHERE v.value IS NOT NULL
UNION ALL
SELECT c."time", c.cluster, '', v.condition, v.value
FROM serve.cluster_conditions c
CROSS JOIN LATERAL (VALUES
    ('collector_stale_s', c.collector_stale_s),
    ('snapshot_incomplete', c.snapshot_incomplete::double precision),
    ('quality_gate_failed', c.quality_gate_failed::double precision)
) AS v (condition, value)
WHERE v.value IS NOT NULL;
