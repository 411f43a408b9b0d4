-- What each classic-protocol member subscribes to (decoded from its group metadata): the
-- input the assignment what-if needs besides partition counts.
CREATE TABLE raw.member_subscriptions (
    cluster     text        NOT NULL,
    snapshot_ts timestamptz NOT NULL,
    group_id    text        NOT NULL,
    member_id   text        NOT NULL,
    topic       text        NOT NULL,
    PRIMARY KEY (cluster, snapshot_ts, group_id, member_id, topic)
);
