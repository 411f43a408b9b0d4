-- Alerting that does not fail silently (groupscope.serve: conditions, incidents, notify).
--
-- Deliveries: each attempt is recorded on its own (outside the evaluation's transaction), a
-- failed one waits `next_attempt_at` (exponential backoff), and one that stays undelivered past
-- the rules' `delivery_max_age` is given up ('given_up'; the channel's failure is then an
-- incident of its own, sent through the other channels). A delivery to a channel that is no
-- longer in the rules is 'dropped'.
ALTER TABLE ops.alert_deliveries DROP CONSTRAINT alert_deliveries_state_check;
ALTER TABLE ops.alert_deliveries ADD CONSTRAINT alert_deliveries_state_check
    CHECK (state IN ('pending', 'sent', 'failed', 'given_up', 'dropped'));
ALTER TABLE ops.alert_deliveries ADD COLUMN next_attempt_at timestamptz;

-- The last rules file that was valid, per path: a bad file dropped in while running does not
-- stop alerting; the evaluation keeps using these and raises an incident naming the error.
CREATE TABLE ops.alert_rules_valid (
    source      text        PRIMARY KEY,   -- the rules file's path
    rules_text  text        NOT NULL,      -- its text, as read
    sha256      text        NOT NULL,
    loaded_at   timestamptz NOT NULL       -- when it was last read and found valid
);

-- The latest outcome of every groupscope task, per cluster (its success and failure callbacks):
-- a task whose latest try failed for good is the `task_failed` condition, an incident like any
-- other; its next success is the evidence that resolves it.
CREATE TABLE ops.task_runs (
    cluster     text        NOT NULL,
    dag_id      text        NOT NULL,
    task_id     text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('success', 'failed')),
    run_id      text        NOT NULL,
    try_number  integer,
    at          timestamptz NOT NULL,
    failed_since timestamptz,              -- the first failure of the current failing streak
    reason      text        NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, dag_id, task_id)
);

-- The heartbeat ("groupscope is alive") last sent per cluster and channel.
CREATE TABLE ops.alert_heartbeats (
    cluster     text        NOT NULL,
    channel     text        NOT NULL,
    sent_at     timestamptz,
    attempted_at timestamptz NOT NULL,
    error       text,
    PRIMARY KEY (cluster, channel)
);
