-- Raw consumer-group snapshots, one row set per (cluster, snapshot_ts), loaded from the landing
-- zone. Loading replaces a snapshot's rows whole, so loading it twice changes nothing.
CREATE SCHEMA IF NOT EXISTS raw;

CREATE TABLE raw.snapshots (
    cluster                  text        NOT NULL,
    snapshot_ts              timestamptz NOT NULL,
    snapshot_id              text        NOT NULL,
    complete                 boolean     NOT NULL,
    group_count              integer     NOT NULL,
    partition_count          integer     NOT NULL,
    error_count              integer     NOT NULL,
    offsets_topic_partitions integer,
    PRIMARY KEY (cluster, snapshot_ts)
);

CREATE TABLE raw.consumer_groups (
    cluster                 text        NOT NULL,
    snapshot_ts             timestamptz NOT NULL,
    group_id                text        NOT NULL,
    group_type              text        NOT NULL,
    state                   text        NOT NULL,
    protocol_type           text,
    assignor                text,
    coordinator_id          integer,
    expected_coordinator_id integer,
    coordinator_mismatch    boolean     NOT NULL,
    described               boolean     NOT NULL,
    member_count            integer     NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, group_id)
);

CREATE TABLE raw.group_members (
    cluster     text        NOT NULL,
    snapshot_ts timestamptz NOT NULL,
    group_id    text        NOT NULL,
    member_id   text        NOT NULL,
    client_id   text        NOT NULL,
    host        text        NOT NULL,
    instance_id text,
    PRIMARY KEY (cluster, snapshot_ts, group_id, member_id)
);

CREATE TABLE raw.member_assignments (
    cluster     text        NOT NULL,
    snapshot_ts timestamptz NOT NULL,
    group_id    text        NOT NULL,
    member_id   text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('current', 'target')),
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, group_id, member_id, kind, topic, partition)
);

CREATE TABLE raw.committed_offsets (
    cluster          text        NOT NULL,
    snapshot_ts      timestamptz NOT NULL,
    group_id         text        NOT NULL,
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    committed_offset bigint,
    leader_epoch     integer,
    commit_metadata  text,
    PRIMARY KEY (cluster, snapshot_ts, group_id, topic, partition)
);

CREATE TABLE raw.partition_offsets (
    cluster            text        NOT NULL,
    snapshot_ts        timestamptz NOT NULL,
    topic              text        NOT NULL,
    partition          integer     NOT NULL,
    log_start_offset   bigint,
    high_watermark     bigint,
    last_stable_offset bigint,
    PRIMARY KEY (cluster, snapshot_ts, topic, partition)
);

CREATE TABLE raw.topics (
    cluster         text        NOT NULL,
    snapshot_ts     timestamptz NOT NULL,
    topic           text        NOT NULL,
    partition_count integer     NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, topic)
);

CREATE TABLE raw.collection_errors (
    cluster     text        NOT NULL,
    snapshot_ts timestamptz NOT NULL,
    seq         integer     NOT NULL,
    stage       text        NOT NULL,
    code        text        NOT NULL,
    message     text        NOT NULL,
    group_id    text,
    topic       text,
    partition   integer,
    retriable   boolean     NOT NULL,
    attempts    integer     NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, seq)
);

-- The latest snapshot per cluster, with lag per partition: what an operator asks first.
CREATE VIEW raw.latest_group_lag AS
WITH latest AS (
    SELECT cluster, max(snapshot_ts) AS snapshot_ts FROM raw.snapshots GROUP BY cluster
)
SELECT c.cluster, c.snapshot_ts, c.group_id, c.topic, c.partition, c.committed_offset,
       p.log_start_offset, p.high_watermark, p.last_stable_offset,
       p.high_watermark - c.committed_offset AS lag,
       c.committed_offset < p.log_start_offset AS below_log_start
FROM raw.committed_offsets c
JOIN latest USING (cluster, snapshot_ts)
LEFT JOIN raw.partition_offsets p USING (cluster, snapshot_ts, topic, partition);
