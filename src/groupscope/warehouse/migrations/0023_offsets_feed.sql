-- How far the offsets-topic feed has come, per cluster (groupscope.warehouse.generations):
-- complete_at is the time of the newest ingest run that read every partition of
-- __consumer_offsets to its end and whose batches are all loaded (the warehouse holds every
-- rebalance before it); checked_at the newest run recorded, with the partitions it left
-- unfinished. The offsets_feed_stale condition counts from complete_at (from first_checked_at
-- while no run has been complete): a paused ingest DAG, or an ingest that stays incomplete,
-- would otherwise only show as rebalance counts decaying to 0.
CREATE TABLE ops.offsets_feed (
    cluster          text        PRIMARY KEY,
    complete_at      timestamptz,
    checked_at       timestamptz NOT NULL,
    first_checked_at timestamptz NOT NULL,
    incomplete       jsonb       NOT NULL DEFAULT '[]'
);
