-- The Spark analytics marts (spark_jobs/): each job replaces exactly one data interval of
-- rows, in one transaction, keyed by cluster and the time column (snapshot_ts, event_ts or
-- period_start). Definitions: groupscope/analytics/*.py and DESIGN.md.

CREATE TABLE mart.partition_lag (
    cluster               text        NOT NULL,
    snapshot_ts           timestamptz NOT NULL,
    group_id              text        NOT NULL,
    topic                 text        NOT NULL,
    partition             integer     NOT NULL,
    member_id             text,
    committed_offset      bigint,
    log_start_offset      bigint,
    high_watermark        bigint,
    last_stable_offset    bigint,
    lag                   bigint,
    lag_beyond_retention  boolean     NOT NULL,
    production_rate       double precision,   -- records/s, trailing window
    consumption_rate      double precision,
    catch_up_s            double precision,   -- null: not gaining on the log
    time_lag_estimated_s  double precision,
    time_lag_kind         text        NOT NULL, -- interpolated|extrapolated|at_least|caught_up|unknown
    time_lag_exact_s      double precision,   -- null where the record was not sampled
    PRIMARY KEY (cluster, snapshot_ts, group_id, topic, partition)
);

CREATE TABLE mart.member_lag (
    cluster text NOT NULL, snapshot_ts timestamptz NOT NULL, group_id text NOT NULL,
    member_id text NOT NULL,
    partitions integer NOT NULL, lag bigint NOT NULL, max_lag bigint,
    negative_lag_partitions integer NOT NULL, beyond_retention_partitions integer NOT NULL,
    max_time_lag_estimated_s double precision, max_time_lag_exact_s double precision,
    production_rate double precision, consumption_rate double precision,
    PRIMARY KEY (cluster, snapshot_ts, group_id, member_id)
);

CREATE TABLE mart.topic_lag (
    cluster text NOT NULL, snapshot_ts timestamptz NOT NULL, group_id text NOT NULL,
    topic text NOT NULL,
    partitions integer NOT NULL, lag bigint NOT NULL, max_lag bigint,
    negative_lag_partitions integer NOT NULL, beyond_retention_partitions integer NOT NULL,
    max_time_lag_estimated_s double precision, max_time_lag_exact_s double precision,
    production_rate double precision, consumption_rate double precision,
    PRIMARY KEY (cluster, snapshot_ts, group_id, topic)
);

CREATE TABLE mart.group_lag (
    cluster text NOT NULL, snapshot_ts timestamptz NOT NULL, group_id text NOT NULL,
    partitions integer NOT NULL, lag bigint NOT NULL, max_lag bigint,
    negative_lag_partitions integer NOT NULL, beyond_retention_partitions integer NOT NULL,
    max_time_lag_estimated_s double precision, max_time_lag_exact_s double precision,
    production_rate double precision, consumption_rate double precision,
    PRIMARY KEY (cluster, snapshot_ts, group_id)
);

CREATE TABLE mart.cluster_lag (
    cluster text NOT NULL, snapshot_ts timestamptz NOT NULL,
    partitions integer NOT NULL, lag bigint NOT NULL, max_lag bigint,
    negative_lag_partitions integer NOT NULL, beyond_retention_partitions integer NOT NULL,
    max_time_lag_estimated_s double precision, max_time_lag_exact_s double precision,
    production_rate double precision, consumption_rate double precision,
    PRIMARY KEY (cluster, snapshot_ts)
);

CREATE TABLE mart.partition_status (
    cluster text NOT NULL, snapshot_ts timestamptz NOT NULL, group_id text NOT NULL,
    topic text NOT NULL, partition integer NOT NULL,
    status text NOT NULL,   -- OK | WARN | STALL | STOP | REWIND
    rule   text NOT NULL,   -- the rule that decided (groupscope.analytics.status.RULES)
    lag bigint, reason text NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, group_id, topic, partition)
);

CREATE TABLE mart.group_status (
    cluster text NOT NULL, snapshot_ts timestamptz NOT NULL, group_id text NOT NULL,
    status text NOT NULL,   -- OK | WARN | ERR
    ok_partitions integer NOT NULL, warn_partitions integer NOT NULL,
    stall_partitions integer NOT NULL, stop_partitions integer NOT NULL,
    rewind_partitions integer NOT NULL,
    worst_topic text, worst_partition integer, worst_reason text,
    PRIMARY KEY (cluster, snapshot_ts, group_id)
);

CREATE TABLE mart.rebalance_events (
    cluster text NOT NULL, event_ts timestamptz NOT NULL, group_id text NOT NULL,
    generation integer,          -- null for an estimated event
    source text NOT NULL,        -- offsets_topic | snapshots
    estimated boolean NOT NULL,
    protocol text, rebalance_type text,  -- eager | cooperative | consumer
    members integer NOT NULL, joined integer NOT NULL, "left" integer NOT NULL,
    cause text NOT NULL,         -- joined | left | both | none
    partitions_moved integer
);
CREATE INDEX ON mart.rebalance_events (cluster, event_ts);
CREATE INDEX ON mart.rebalance_events (cluster, group_id, event_ts);

CREATE TABLE mart.rebalance_hourly (
    cluster text NOT NULL, group_id text NOT NULL, period_start timestamptz NOT NULL,
    rebalances integer NOT NULL, joined_only integer NOT NULL, left_only integer NOT NULL,
    joined_and_left integer NOT NULL, no_membership_change integer NOT NULL,
    partitions_moved bigint, eager integer NOT NULL, cooperative integer NOT NULL,
    consumer_protocol integer NOT NULL,
    stable_s double precision NOT NULL, rebalancing_s double precision NOT NULL,
    empty_s double precision NOT NULL, other_s double precision NOT NULL,
    source text NOT NULL, estimated boolean NOT NULL,
    PRIMARY KEY (cluster, group_id, period_start)
);

CREATE VIEW mart.rebalance_daily AS
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
       bool_or(estimated) AS estimated
FROM mart.rebalance_hourly
GROUP BY cluster, group_id, date_trunc('day', period_start);

CREATE TABLE mart.group_skew (
    cluster text NOT NULL, snapshot_ts timestamptz NOT NULL, group_id text NOT NULL,
    group_type text, strategy text NOT NULL,
    members integer NOT NULL, partitions integer NOT NULL, max_minus_min integer NOT NULL,
    coefficient_of_variation double precision, idle_members integer NOT NULL,
    most_lagged_member text, most_lagged_share double precision,
    PRIMARY KEY (cluster, snapshot_ts, group_id)
);

CREATE TABLE mart.strategy_skew_hourly (
    cluster text NOT NULL, period_start timestamptz NOT NULL, group_type text,
    strategy text NOT NULL,
    groups integer NOT NULL, group_snapshots integer NOT NULL,
    avg_max_minus_min double precision, avg_coefficient_of_variation double precision,
    avg_idle_members double precision, avg_most_lagged_share double precision,
    rebalances integer NOT NULL, avg_partitions_moved double precision
);
CREATE UNIQUE INDEX ON mart.strategy_skew_hourly (cluster, period_start, coalesce(group_type, ''), strategy);
