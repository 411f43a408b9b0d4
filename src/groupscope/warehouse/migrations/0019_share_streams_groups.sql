-- Share groups (KIP-932) and streams groups (KIP-1071), issue 27: what only their kind has,
-- as the collector reads it through Kafka's Java Admin client (groupscope.kafka.java_admin).
-- raw.consumer_groups keeps one row per group of every kind (group_type: classic, consumer,
-- share, streams); members go to raw.group_members, a share member's partitions to
-- raw.member_assignments, a streams group's committed offsets to raw.committed_offsets, as for
-- the other kinds. Partitioned by day like every raw snapshot table (0010).

CREATE TABLE raw.group_epochs (
    cluster          text        NOT NULL,
    snapshot_ts      timestamptz NOT NULL,
    group_id         text        NOT NULL,
    group_epoch      integer,
    assignment_epoch integer,   -- the target assignment's epoch
    topology_epoch   integer,   -- streams groups only
    PRIMARY KEY (cluster, snapshot_ts, group_id)
) PARTITION BY RANGE (snapshot_ts);

CREATE TABLE raw.member_epochs (
    cluster      text        NOT NULL,
    snapshot_ts  timestamptz NOT NULL,
    group_id     text        NOT NULL,
    member_id    text        NOT NULL,
    member_epoch integer,
    process_id   text,       -- streams groups: the Kafka Streams instance of the member
    PRIMARY KEY (cluster, snapshot_ts, group_id, member_id)
) PARTITION BY RANGE (snapshot_ts);

-- A share group's position per partition: the start offset (the earliest offset still in
-- flight) and the broker's lag (records not yet acknowledged, Kafka 4.2+); both null where the
-- group has no state for the partition yet.
CREATE TABLE raw.share_partition_offsets (
    cluster      text        NOT NULL,
    snapshot_ts  timestamptz NOT NULL,
    group_id     text        NOT NULL,
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    start_offset bigint,
    lag          bigint,
    leader_epoch integer,
    PRIMARY KEY (cluster, snapshot_ts, group_id, topic, partition)
) PARTITION BY RANGE (snapshot_ts);

CREATE TABLE raw.streams_subtopology_topics (
    cluster        text        NOT NULL,
    snapshot_ts    timestamptz NOT NULL,
    group_id       text        NOT NULL,
    subtopology_id text        NOT NULL,
    role           text        NOT NULL
        CHECK (role IN ('source', 'repartition_sink', 'repartition_source', 'changelog')),
    topic          text        NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, group_id, subtopology_id, role, topic)
) PARTITION BY RANGE (snapshot_ts);

CREATE TABLE raw.streams_member_tasks (
    cluster        text        NOT NULL,
    snapshot_ts    timestamptz NOT NULL,
    group_id       text        NOT NULL,
    member_id      text        NOT NULL,
    kind           text        NOT NULL CHECK (kind IN ('current', 'target')),
    role           text        NOT NULL CHECK (role IN ('active', 'standby', 'warmup')),
    subtopology_id text        NOT NULL,
    partition      integer     NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, group_id, member_id, kind, role, subtopology_id,
                 partition)
) PARTITION BY RANGE (snapshot_ts);

-- What a snapshot skipped by design, not by failure (e.g. a cluster too old for share and
-- streams groups).
CREATE TABLE raw.snapshot_notes (
    cluster     text        NOT NULL,
    snapshot_ts timestamptz NOT NULL,
    seq         integer     NOT NULL,
    note        text        NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, seq)
) PARTITION BY RANGE (snapshot_ts);

INSERT INTO groupscope_meta.partitioned_tables VALUES
    ('raw', 'group_epochs', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'member_epochs', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'share_partition_offsets', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'streams_subtopology_topics', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'streams_member_tasks', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'snapshot_notes', 'snapshot_ts', 'raw', 'day');
