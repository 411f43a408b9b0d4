-- The group kinds on the dashboards (issue 27): what only share groups (KIP-932, queues) and
-- streams groups (KIP-1071, Kafka Streams applications) have, read from the raw tables of 0019
-- for the Overview and Group detail panels. "now" is the cluster's newest raw snapshot (what
-- the collector last saw: the kinds have no mart of their own to wait for). Conventions as in
-- 0009: time series name their time column "time", lag in records is lag_records.

-- The panels ask for one group over a time range; the raw keys start (cluster, snapshot_ts).
CREATE INDEX IF NOT EXISTS share_partition_offsets_group_time
    ON raw.share_partition_offsets (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS streams_member_tasks_group_time
    ON raw.streams_member_tasks (cluster, group_id, snapshot_ts);
CREATE INDEX IF NOT EXISTS group_epochs_group_time
    ON raw.group_epochs (cluster, group_id, snapshot_ts);

-- Share and streams groups now, one row each: the Overview's "Queues and Streams applications"
-- (which groups are which). partitions: a share group's partitions with a start offset, a
-- streams group's committed partitions (its sources and repartition topics); lag_records: the
-- broker's share lag (records not yet acknowledged), or the streams group's committed lag
-- (high watermark - committed offset); tasks: the members' current ones.
CREATE VIEW serve.kind_groups_now AS
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
    SELECT count(*)::integer AS partitions, sum(s.lag)::bigint AS lag
    FROM raw.share_partition_offsets s
    WHERE s.cluster = g.cluster AND s.snapshot_ts = g.snapshot_ts AND s.group_id = g.group_id
      AND s.start_offset IS NOT NULL) sp ON g.group_type = 'share'
LEFT JOIN LATERAL (
    SELECT count(*)::integer AS partitions,
           sum(greatest(p.high_watermark - c.committed_offset, 0))::bigint AS lag
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

-- A share group's position on each partition over time: the start offset (the earliest
-- offset still in flight: every record below it is acknowledged) and the broker's lag, beside
-- the partition's high watermark. Null where the group has no state for the partition yet.
CREATE VIEW serve.share_partition_history AS
SELECT s.snapshot_ts AS "time", s.cluster, s.group_id, s.topic, s.partition,
       s.topic || '-' || s.partition AS series,
       s.start_offset, s.lag AS lag_records, p.high_watermark, p.log_start_offset
FROM raw.share_partition_offsets s
LEFT JOIN raw.partition_offsets p
  ON p.cluster = s.cluster AND p.snapshot_ts = s.snapshot_ts AND p.topic = s.topic
 AND p.partition = s.partition;

-- The same now, with the members the partition is assigned to (a share group's members may
-- share a partition: that is the point).
CREATE VIEW serve.share_partitions_now AS
SELECT h.cluster, h.group_id, h.topic, h.partition, h.start_offset, h.lag_records,
       h.high_watermark, h.log_start_offset,
       (SELECT count(*)::integer FROM raw.member_assignments a
        WHERE a.cluster = h.cluster AND a.snapshot_ts = h."time" AND a.group_id = h.group_id
          AND a.kind = 'current' AND a.topic = h.topic AND a.partition = h.partition)
         AS members,
       h."time" AS snapshot_time
FROM serve.latest_snapshots t
JOIN serve.share_partition_history h
  ON h.cluster = t.cluster AND h."time" = t.raw_snapshot_time;

-- A streams group's members over time with their current tasks by role (a member without
-- tasks counts 0): tasks moving when an instance joins or leaves. member: client id @ host.
CREATE VIEW serve.streams_member_task_history AS
SELECT gm.snapshot_ts AS "time", gm.cluster, gm.group_id, gm.member_id,
       gm.client_id || '@' || gm.host AS member, gm.client_id, gm.host,
       me.process_id, me.member_epoch,
       count(k.partition) FILTER (WHERE k.role = 'active')::integer AS active_tasks,
       count(k.partition) FILTER (WHERE k.role = 'standby')::integer AS standby_tasks,
       count(k.partition) FILTER (WHERE k.role = 'warmup')::integer AS warmup_tasks,
       string_agg(k.subtopology_id || '_' || k.partition, ', '
                  ORDER BY k.subtopology_id, k.partition) FILTER (WHERE k.role = 'active')
         AS active,
       string_agg(k.subtopology_id || '_' || k.partition, ', '
                  ORDER BY k.subtopology_id, k.partition) FILTER (WHERE k.role = 'standby')
         AS standby,
       string_agg(k.subtopology_id || '_' || k.partition, ', '
                  ORDER BY k.subtopology_id, k.partition) FILTER (WHERE k.role = 'warmup')
         AS warmup
FROM raw.consumer_groups g
JOIN raw.group_members gm
  ON gm.cluster = g.cluster AND gm.snapshot_ts = g.snapshot_ts AND gm.group_id = g.group_id
LEFT JOIN raw.member_epochs me
  ON me.cluster = gm.cluster AND me.snapshot_ts = gm.snapshot_ts AND me.group_id = gm.group_id
 AND me.member_id = gm.member_id
LEFT JOIN raw.streams_member_tasks k
  ON k.cluster = gm.cluster AND k.snapshot_ts = gm.snapshot_ts AND k.group_id = gm.group_id
 AND k.member_id = gm.member_id AND k.kind = 'current'
WHERE g.group_type = 'streams'
GROUP BY gm.snapshot_ts, gm.cluster, gm.group_id, gm.member_id, gm.client_id, gm.host,
         me.process_id, me.member_epoch;

-- A streams group's subtopologies now: their topics by role and the current tasks of each
-- (tasks are named subtopology_partition, as Kafka Streams names them).
CREATE VIEW serve.streams_subtopologies_now AS
SELECT s.cluster, s.group_id, s.subtopology_id,
       string_agg(s.topic, ', ' ORDER BY s.topic) FILTER (WHERE s.role = 'source')
         AS source_topics,
       string_agg(s.topic, ', ' ORDER BY s.topic) FILTER (WHERE s.role = 'repartition_sink')
         AS repartition_sink_topics,
       string_agg(s.topic, ', ' ORDER BY s.topic) FILTER (WHERE s.role = 'repartition_source')
         AS repartition_source_topics,
       string_agg(s.topic, ', ' ORDER BY s.topic) FILTER (WHERE s.role = 'changelog')
         AS changelog_topics,
       (SELECT count(*)::integer FROM raw.streams_member_tasks k
        WHERE k.cluster = s.cluster AND k.snapshot_ts = s.snapshot_ts
          AND k.group_id = s.group_id AND k.subtopology_id = s.subtopology_id
          AND k.kind = 'current' AND k.role = 'active') AS active_tasks,
       (SELECT count(*)::integer FROM raw.streams_member_tasks k
        WHERE k.cluster = s.cluster AND k.snapshot_ts = s.snapshot_ts
          AND k.group_id = s.group_id AND k.subtopology_id = s.subtopology_id
          AND k.kind = 'current' AND k.role IN ('standby', 'warmup')) AS replica_tasks,
       s.snapshot_ts AS snapshot_time
FROM serve.latest_snapshots t
JOIN raw.streams_subtopology_topics s
  ON s.cluster = t.cluster AND s.snapshot_ts = t.raw_snapshot_time
GROUP BY s.cluster, s.group_id, s.subtopology_id, s.snapshot_ts;

-- Group, target-assignment and topology epochs over time (share, streams and consumer-protocol
-- groups): a rising group epoch is a membership or topology change, an assignment epoch behind
-- it a rebalance the broker has not finished computing.
CREATE VIEW serve.group_epoch_history AS
SELECT snapshot_ts AS "time", cluster, group_id, group_epoch, assignment_epoch, topology_epoch
FROM raw.group_epochs;
