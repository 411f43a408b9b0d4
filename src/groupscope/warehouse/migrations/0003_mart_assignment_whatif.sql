-- What each assignment strategy would do to each group with members, per snapshot, and the
-- advice drawn from it (the Assignment strategies dashboard reads these). One row set per
-- (cluster, snapshot_ts), replaced whole on every write.
CREATE SCHEMA IF NOT EXISTS mart;

CREATE TABLE mart.assignment_whatif (
    cluster                  text        NOT NULL,
    snapshot_ts              timestamptz NOT NULL,
    group_id                 text        NOT NULL,
    strategy                 text        NOT NULL,  -- 'current' is the real assignment
    current_strategy         text,
    subscriptions_inferred   boolean     NOT NULL,
    members                  integer     NOT NULL,
    partitions               integer     NOT NULL,
    max_minus_min            integer     NOT NULL,
    coefficient_of_variation double precision,
    idle_members             integer     NOT NULL,
    most_lagged_member       text,
    most_lagged_share        double precision,
    moved_on_leave           integer,
    PRIMARY KEY (cluster, snapshot_ts, group_id, strategy)
);

CREATE TABLE mart.assignment_advice (
    cluster        text        NOT NULL,
    snapshot_ts    timestamptz NOT NULL,
    group_id       text        NOT NULL,
    seq            integer     NOT NULL,
    recommendation text        NOT NULL,
    reason         text        NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, group_id, seq)
);
