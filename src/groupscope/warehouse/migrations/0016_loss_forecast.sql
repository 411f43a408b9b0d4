-- The loss forecast (issue 28): when retention will delete records a group has not read.
-- raw.topics gets each topic's retention settings (DescribeConfigs; -1 is unlimited, null
-- unread), mart.partition_lag the forecast of each partition (groupscope.analyze.lag,
-- with_loss_forecast): the lag's growth since the previous snapshot, loss_in_s, null when
-- none is forecast, 0 once lost, and its basis (log_start, retention_ms or lost).
--
-- serve.group_conditions gets loss_forecast_s: the group's earliest forecast, in seconds,
-- capped at 7 days (604800), which is also its value when every partition is known to lose
-- nothing (basis 'none': a group that keeps up); null (unknown) when some partition cannot
-- be told. A rule fires when it is BELOW its threshold. With it, the partition forecast
-- first, its basis, rates and headroom (records between the log start and the committed
-- offset), and its topic's retention. The views are those of 0015 with the new columns (and
-- the new condition) at the end.
ALTER TABLE raw.topics
    ADD COLUMN retention_ms bigint,
    ADD COLUMN retention_bytes bigint,
    ADD COLUMN segment_bytes bigint,
    ADD COLUMN cleanup_policy text;

ALTER TABLE mart.partition_lag
    ADD COLUMN lag_growth_rate double precision,  -- records/s, since the previous snapshot
    ADD COLUMN loss_in_s double precision,
    ADD COLUMN loss_basis text;

CREATE OR REPLACE VIEW serve.group_conditions AS
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
       extract(epoch FROM p.rebalance_window)::double precision AS rebalance_window_s,
       CASE WHEN c.state IN ('PreparingRebalance', 'CompletingRebalance', 'Assigning',
                             'Reconciling')
            THEN extract(epoch FROM s.snapshot_ts - coalesce(rs.since, s.snapshot_ts))
                   ::double precision
            ELSE 0 END AS rebalance_stuck,
       CASE WHEN c.state IN ('PreparingRebalance', 'CompletingRebalance', 'Assigning',
                             'Reconciling') THEN coalesce(rs.since, s.snapshot_ts) END
         AS rebalancing_since,
       CASE WHEN lf.loss_in_s IS NOT NULL THEN least(lf.loss_in_s, 604800)
            WHEN lk.partitions > 0 AND lk.unknown = 0 THEN 604800 END AS loss_forecast_s,
       lf.topic AS loss_topic, lf.partition AS loss_partition, lf.loss_basis,
       lf.committed_offset - lf.log_start_offset AS loss_headroom,
       lf.production_rate AS loss_production_rate,
       lf.consumption_rate AS loss_consumption_rate, lf.lag_growth_rate AS loss_growth_rate,
       tc.retention_ms AS loss_retention_ms, tc.retention_bytes AS loss_retention_bytes
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
               AND ev.event_ts <= s.snapshot_ts) AS events) x) r
-- Since when the group has been rebalancing without a break: the first snapshot after the
-- newest one that described it in another state.
LEFT JOIN LATERAL (
    SELECT min(h.snapshot_ts) AS since FROM raw.consumer_groups h
    WHERE h.cluster = s.cluster AND h.group_id = s.group_id AND h.snapshot_ts <= s.snapshot_ts
      AND h.snapshot_ts > coalesce((
          SELECT max(x.snapshot_ts) FROM raw.consumer_groups x
          WHERE x.cluster = s.cluster AND x.group_id = s.group_id
            AND x.snapshot_ts < s.snapshot_ts AND x.described
            AND x.state NOT IN ('PreparingRebalance', 'CompletingRebalance', 'Assigning',
                                'Reconciling')), '-infinity')) rs ON true
-- The partition whose loss is forecast first, and its topic's retention settings.
LEFT JOIN LATERAL (
    SELECT pl.topic, pl.partition, pl.loss_in_s, pl.loss_basis, pl.committed_offset,
           pl.log_start_offset, pl.production_rate, pl.consumption_rate, pl.lag_growth_rate
    FROM mart.partition_lag pl
    WHERE pl.cluster = s.cluster AND pl.snapshot_ts = s.snapshot_ts
      AND pl.group_id = s.group_id AND pl.loss_in_s IS NOT NULL
    ORDER BY pl.loss_in_s, pl.topic, pl.partition LIMIT 1) lf ON true
LEFT JOIN raw.topics tc
  ON tc.cluster = s.cluster AND tc.snapshot_ts = s.snapshot_ts AND tc.topic = lf.topic
-- Whether every partition without a forecast is known to lose nothing (basis 'none'), or
-- some cannot be told (no rates yet, a gap in the snapshots, settings not read).
CROSS JOIN LATERAL (
    SELECT count(*) AS partitions, count(*) FILTER (WHERE pl.loss_basis IS NULL) AS unknown
    FROM mart.partition_lag pl
    WHERE pl.cluster = s.cluster AND pl.snapshot_ts = s.snapshot_ts
      AND pl.group_id = s.group_id) lk;

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
    ('rebalances_per_hour', g.rebalances_per_hour::double precision),
    ('rebalance_stuck', g.rebalance_stuck),
    ('loss_forecast_s', g.loss_forecast_s)
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

-- The loss forecast of each partition over time (group detail's time-until-loss panel; null
-- where none is forecast), with its topic's retention at that snapshot.
CREATE VIEW serve.loss_forecast_history AS
SELECT pl.snapshot_ts AS "time", pl.cluster, pl.group_id, pl.topic, pl.partition,
       pl.topic || '-' || pl.partition AS series, pl.loss_in_s, pl.loss_basis,
       pl.committed_offset - pl.log_start_offset AS headroom_records,
       pl.production_rate, pl.consumption_rate, pl.lag_growth_rate, t.retention_ms,
       t.retention_bytes
FROM mart.partition_lag pl
LEFT JOIN raw.topics t
  ON t.cluster = pl.cluster AND t.snapshot_ts = pl.snapshot_ts AND t.topic = pl.topic;
