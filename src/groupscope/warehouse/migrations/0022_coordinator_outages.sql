-- The __consumer_offsets partitions without a leader (issue 28): the collector records one
-- COORDINATOR_NOT_AVAILABLE error per such partition and snapshot, and every alert evaluation
-- reads the run of them up to its judged snapshot. A partial index keeps that read to those
-- rows, not every collection error of the day.
CREATE INDEX IF NOT EXISTS collection_errors_coordinator_outages
    ON raw.collection_errors (cluster, snapshot_ts)
    WHERE code = 'COORDINATOR_NOT_AVAILABLE';
