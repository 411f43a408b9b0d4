-- Unknown lag stays unknown (issue 41): a group's lag is never the sum of the partitions that
-- could be read. When the high watermark or log start of a partition the group has a position
-- on (a committed offset, a share group's start offset) was not read (its leader down, a
-- timeout, no access), the roll-ups' lag, max_lag, time lags and beyond_retention_partitions
-- are null (groupscope.analyze.lag, rollups), as is the lag of a roll-up none of whose
-- partitions has a position. lag_unknown_partitions counts those partitions, lag_lower_bound
-- is the sum over the others (what the lag is at least; null on rows computed before this
-- migration). A partition's lag_beyond_retention is null when its log start was not read.
--
-- serve.group_conditions: lag_records, lag_seconds and lag_beyond_retention read the roll-up
-- and are null (unknown: the alert keeps its incident's state) with it;
-- group_empty_lag_growing and lag_growth are null when the lag is unknown now or at the
-- snapshot before (they were 0). The views are re-created whole, their new columns
-- (lag_unknown_partitions, lag_lower_bound) at the end. serve.kind_groups_now's lag of a
-- streams or share group is likewise null when a partition's lag is unknown (it was the sum
-- of the others).

ALTER TABLE mart.partition_lag ALTER COLUMN lag_beyond_retention DROP NOT NULL;

ALTER TABLE mart.member_lag
    ALTER COLUMN lag DROP NOT NULL,
    ALTER COLUMN beyond_retention_partitions DROP NOT NULL,
    ADD COLUMN lag_lower_bound bigint,
    ADD COLUMN lag_unknown_partitions integer NOT NULL DEFAULT 0;

ALTER TABLE mart.topic_lag
    ALTER COLUMN lag DROP NOT NULL,
    ALTER COLUMN beyond_retention_partitions DROP NOT NULL,
    ADD COLUMN lag_lower_bound bigint,
    ADD COLUMN lag_unknown_partitions integer NOT NULL DEFAULT 0;

ALTER TABLE mart.group_lag
    ALTER COLUMN lag DROP NOT NULL,
    ALTER COLUMN beyond_retention_partitions DROP NOT NULL,
    ADD COLUMN lag_lower_bound bigint,
    ADD COLUMN lag_unknown_partitions integer NOT NULL DEFAULT 0;

ALTER TABLE mart.cluster_lag
    ALTER COLUMN lag DROP NOT NULL,
    ALTER COLUMN beyond_retention_partitions DROP NOT NULL,
    ADD COLUMN lag_lower_bound bigint,
    ADD COLUMN lag_unknown_partitions integer NOT NULL DEFAULT 0;

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
       -- Unknown (null) when the lag is, now or at the snapshot before (greatest() would
       -- read a null as 0); 0 with no snapshot before.
       CASE WHEN e.empty_partitions = 0 THEN 0
            WHEN l.lag IS NULL OR (previous.found AND previous.lag IS NULL) THEN NULL
            WHEN previous.found THEN greatest(l.lag - previous.lag, 0)
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
       CASE WHEN previous.found THEN l.lag - previous.lag WHEN l.lag IS NOT NULL THEN 0 END
         AS lag_growth,
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
       tc.retention_ms AS loss_retention_ms, tc.retention_bytes AS loss_retention_bytes,
       l.lag_unknown_partitions, l.lag_lower_bound
FROM params p
CROSS JOIN serve.latest_snapshots t
JOIN mart.group_status s ON s.cluster = t.cluster AND s.snapshot_ts = t.status_snapshot_time
LEFT JOIN mart.group_lag l
  ON l.cluster = s.cluster AND l.snapshot_ts = s.snapshot_ts AND l.group_id = s.group_id
LEFT JOIN raw.consumer_groups c
  ON c.cluster = s.cluster AND c.snapshot_ts = s.snapshot_ts AND c.group_id = s.group_id
LEFT JOIN LATERAL (
    -- found: null when there is no snapshot before.
    SELECT g.lag, true AS found FROM mart.group_lag g
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

CREATE OR REPLACE VIEW serve.group_status_latest AS
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
       s.snapshot_ts AS snapshot_time, l.lag_unknown_partitions, l.lag_lower_bound
FROM serve.latest_snapshots t
JOIN mart.group_status s ON s.cluster = t.cluster AND s.snapshot_ts = t.status_snapshot_time
LEFT JOIN mart.group_lag l
  ON l.cluster = s.cluster AND l.snapshot_ts = s.snapshot_ts AND l.group_id = s.group_id
LEFT JOIN raw.consumer_groups g
  ON g.cluster = s.cluster AND g.snapshot_ts = s.snapshot_ts AND g.group_id = s.group_id;

CREATE OR REPLACE VIEW serve.group_lag_history AS
SELECT snapshot_ts AS "time", cluster, group_id, lag AS lag_records,
       max_lag AS max_partition_lag_records, partitions,
       max_time_lag_exact_s AS time_lag_exact_s,
       max_time_lag_estimated_s AS time_lag_estimated_s,
       production_rate, consumption_rate, beyond_retention_partitions,
       lag_unknown_partitions, lag_lower_bound
FROM mart.group_lag;

CREATE OR REPLACE VIEW serve.kind_groups_now AS
SELECT g.cluster, g.group_id, g.group_type AS kind, g.state, g.member_count AS members,
       CASE g.group_type WHEN 'share' THEN sp.partitions ELSE so.partitions END AS partitions,
       CASE g.group_type WHEN 'share' THEN sp.lag ELSE so.lag END AS lag_records,
       st.subtopologies, tk.active_tasks, tk.standby_tasks, tk.warmup_tasks,
       e.group_epoch, e.assignment_epoch, e.topology_epoch,
       g.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN raw.consumer_groups g
  ON g.cluster = t.cluster AND g.snapshot_ts = t.raw_snapshot_time
 AND g.group_type IN ('share', 'streams')
LEFT JOIN raw.group_epochs e
  ON e.cluster = g.cluster AND e.snapshot_ts = g.snapshot_ts AND e.group_id = g.group_id
LEFT JOIN LATERAL (
    SELECT count(*)::integer AS partitions,
           CASE WHEN count(*) = count(s.lag) THEN sum(s.lag)::bigint END AS lag
    FROM raw.share_partition_offsets s
    WHERE s.cluster = g.cluster AND s.snapshot_ts = g.snapshot_ts AND s.group_id = g.group_id
      AND s.start_offset IS NOT NULL) sp ON g.group_type = 'share'
LEFT JOIN LATERAL (
    SELECT count(*)::integer AS partitions,
           CASE WHEN count(*) FILTER (WHERE c.committed_offset IS NOT NULL
                                        AND p.high_watermark IS NULL) = 0
                THEN sum(greatest(p.high_watermark - c.committed_offset, 0))::bigint END
             AS lag
    FROM raw.committed_offsets c
    LEFT JOIN raw.partition_offsets p
      ON p.cluster = c.cluster AND p.snapshot_ts = c.snapshot_ts AND p.topic = c.topic
     AND p.partition = c.partition
    WHERE c.cluster = g.cluster AND c.snapshot_ts = g.snapshot_ts
      AND c.group_id = g.group_id) so ON g.group_type = 'streams'
LEFT JOIN LATERAL (
    SELECT count(DISTINCT s.subtopology_id)::integer AS subtopologies
    FROM raw.streams_subtopology_topics s
    WHERE s.cluster = g.cluster AND s.snapshot_ts = g.snapshot_ts
      AND s.group_id = g.group_id) st ON g.group_type = 'streams'
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE k.role = 'active')::integer AS active_tasks,
           count(*) FILTER (WHERE k.role = 'standby')::integer AS standby_tasks,
           count(*) FILTER (WHERE k.role = 'warmup')::integer AS warmup_tasks
    FROM raw.streams_member_tasks k
    WHERE k.cluster = g.cluster AND k.snapshot_ts = g.snapshot_ts AND k.group_id = g.group_id
      AND k.kind = 'current') tk ON g.group_type = 'streams';
