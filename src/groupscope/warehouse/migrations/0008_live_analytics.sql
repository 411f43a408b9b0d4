-- The live analytics watermark (groupscope.pipeline.live_analytics): per cluster, the end
-- (exclusive) of the last interval the live path computed. The next live run starts at the
-- first loaded snapshot at or after it, so each snapshot is computed once by the live path;
-- snapshots loaded late, behind it, are left to the hourly lag job.
CREATE SCHEMA IF NOT EXISTS ops;

CREATE TABLE ops.live_analytics (
    cluster          text        PRIMARY KEY,
    computed_through timestamptz NOT NULL,  -- exclusive end of the last live interval
    computed_at      timestamptz NOT NULL   -- when that run wrote its rows
);
