-- The timestamp of the record at each lagging committed offset, sampled by the collector: the
-- exact time lag is snapshot_ts - record_ts (groupscope.sampling bounds what is sampled).
CREATE TABLE raw.record_timestamps (
    cluster        text        NOT NULL,
    snapshot_ts    timestamptz NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    committed_offset bigint    NOT NULL,
    record_offset  bigint      NOT NULL,
    record_ts      timestamptz NOT NULL,
    timestamp_type text        NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, topic, partition, committed_offset)
);
