-- Alert incidents and their notifications (groupscope.serve.incidents). An incident is one
-- episode of one rule holding for one subject (a group, or a cluster for the collector rules):
-- pending while its `for` runs, firing, then resolved. Each notification it owes a channel is
-- a delivery row, so a channel that failed is retried at the next evaluation and a rerun of
-- the same evaluation sends nothing twice.
CREATE SCHEMA IF NOT EXISTS ops;

CREATE TABLE ops.alert_incidents (
    incident_id     text        PRIMARY KEY,  -- stable for the episode: fingerprint + start
    fingerprint     text        NOT NULL,     -- rule, cluster, group (and topic where relevant)
    rule            text        NOT NULL,
    severity        text        NOT NULL,     -- critical | warning | info
    cluster         text        NOT NULL,
    group_id        text        NOT NULL,     -- '' for a cluster-wide rule
    topic           text        NOT NULL,     -- '' unless the rule is per topic
    state           text        NOT NULL CHECK (state IN ('pending', 'firing', 'resolved')),
    started_at      timestamptz NOT NULL,     -- first seen (the condition started to hold)
    firing_at       timestamptz,
    last_seen_at    timestamptz NOT NULL,     -- the last evaluation the condition held at
    evaluated_at    timestamptz NOT NULL,     -- the last evaluation that looked at it
    resolved_at     timestamptz,
    value           double precision NOT NULL,
    threshold       double precision NOT NULL,
    details         jsonb       NOT NULL,     -- what the message says (partitions, members, ...)
    labels          jsonb       NOT NULL,
    runbook         text        NOT NULL,
    notifications   integer     NOT NULL DEFAULT 0,  -- firing notifications owed so far
    last_notified_at timestamptz
);
-- At most one open episode per fingerprint.
CREATE UNIQUE INDEX alert_incidents_open ON ops.alert_incidents (fingerprint)
    WHERE state <> 'resolved';
CREATE INDEX alert_incidents_cluster ON ops.alert_incidents (cluster, state, started_at);

CREATE TABLE ops.alert_deliveries (
    incident_id     text        NOT NULL REFERENCES ops.alert_incidents ON DELETE CASCADE,
    notification    text        NOT NULL,     -- firing | repeat-N | resolved
    channel         text        NOT NULL,
    state           text        NOT NULL CHECK (state IN ('pending', 'sent', 'failed')),
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    last_attempt_at timestamptz,
    sent_at         timestamptz,
    error           text,                     -- the last failure, never a secret
    PRIMARY KEY (incident_id, notification, channel)
);
CREATE INDEX alert_deliveries_undelivered ON ops.alert_deliveries (channel)
    WHERE state <> 'sent';
