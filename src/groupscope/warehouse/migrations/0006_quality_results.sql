-- Every data-quality check the pipeline runs (groupscope.quality): one row per suite run on one
-- subject (a landed snapshot, or one interval of the marts), kept whether it passed or not, so
-- an operator can see what was checked, what failed and why.
CREATE SCHEMA IF NOT EXISTS ops;

CREATE TABLE ops.quality_results (
    checked_at    timestamptz NOT NULL,
    cluster       text        NOT NULL,
    suite         text        NOT NULL,   -- landed_snapshot | marts
    subject       text        NOT NULL,   -- a snapshot id, or the interval of the marts
    success       boolean     NOT NULL,
    expectations  integer     NOT NULL,
    failed        integer     NOT NULL,
    failures      jsonb       NOT NULL,   -- [{table, expectation, kwargs, observed}, ...]
    PRIMARY KEY (cluster, suite, subject, checked_at)
);

CREATE INDEX quality_results_failed ON ops.quality_results (checked_at) WHERE NOT success;
