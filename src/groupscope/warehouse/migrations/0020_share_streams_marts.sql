-- Share and streams groups in the marts (issue 27, groupscope.analyze): a share group's rows
-- of mart.partition_lag are those of its start offset (in committed_offset: where it stands,
-- every record below it acknowledged), with share_lag, KIP-1226's lag (the broker's count of
-- records not acknowledged yet; null for other kinds and before Kafka 4.2). Streams groups'
-- rebalances (changes of the target assignment's epoch) are counted apart in
-- mart.rebalance_hourly.streams_protocol, their tasks moved in partitions_moved. The views keep
-- their columns and get the new ones at the end.
ALTER TABLE mart.partition_lag ADD COLUMN share_lag bigint;

ALTER TABLE mart.rebalance_hourly ADD COLUMN streams_protocol integer NOT NULL DEFAULT 0;

CREATE OR REPLACE VIEW mart.rebalance_daily AS
SELECT cluster, group_id, date_trunc('day', period_start) AS day,
       sum(rebalances)::integer AS rebalances, sum(joined_only)::integer AS joined_only,
       sum(left_only)::integer AS left_only, sum(joined_and_left)::integer AS joined_and_left,
       sum(no_membership_change)::integer AS no_membership_change,
       sum(partitions_moved) AS partitions_moved,
       sum(eager)::integer AS eager, sum(cooperative)::integer AS cooperative,
       sum(consumer_protocol)::integer AS consumer_protocol,
       CASE WHEN sum(eager + cooperative + consumer_protocol) > 0
            THEN sum(eager)::double precision / sum(eager + cooperative + consumer_protocol)
       END AS eager_share,
       sum(stable_s) AS stable_s, sum(rebalancing_s) AS rebalancing_s,
       sum(empty_s) AS empty_s, sum(other_s) AS other_s,
       bool_or(estimated) AS estimated,
       sum(streams_protocol)::integer AS streams_protocol
FROM mart.rebalance_hourly
GROUP BY cluster, group_id, date_trunc('day', period_start);

CREATE OR REPLACE VIEW serve.rebalance_hourly AS
SELECT period_start AS "time", cluster, group_id, rebalances,
       joined_only, left_only, joined_and_left, no_membership_change,
       coalesce(partitions_moved, 0) AS partitions_moved,
       eager, cooperative, consumer_protocol,
       stable_s, rebalancing_s, empty_s, other_s, source, estimated, streams_protocol
FROM mart.rebalance_hourly;

CREATE OR REPLACE VIEW serve.partition_lag_history AS
SELECT snapshot_ts AS "time", cluster, group_id, topic, partition,
       topic || '-' || partition AS series, member_id,
       lag AS lag_records, committed_offset, high_watermark, log_start_offset,
       lag_beyond_retention, production_rate, consumption_rate, catch_up_s,
       time_lag_exact_s, time_lag_estimated_s, time_lag_kind, share_lag
FROM mart.partition_lag;
