-- mart.rebalance_events gets its natural key: one row per group, event time, source, and
-- generation (an estimated event has none: one per group and snapshot). Without a key, two
-- writers of the same hour at once (an overlapping rerun, a backfill beside the schedule)
-- each deleted the hour, each copied it in, and left every event twice, silently. The writers
-- now take turns (groupscope.warehouse.lock_writers), and the key makes any duplicate an error.
--
-- The duplicates such writes left are deleted first, one row of each key kept: they are
-- copies of the same event from two runs of the same job. The way back: DROP INDEX
-- mart.rebalance_events_key (the deleted rows were duplicates; an hour's rows come back
-- whole by rerunning the rebalance job over it).

DELETE FROM mart.rebalance_events e
USING (SELECT tableoid, ctid,
              row_number() OVER (PARTITION BY cluster, group_id, event_ts, source,
                                              coalesce(generation, -1)
                                 ORDER BY ctid) AS copy
       FROM mart.rebalance_events) d
WHERE e.tableoid = d.tableoid AND e.ctid = d.ctid AND d.copy > 1;

CREATE UNIQUE INDEX rebalance_events_key
    ON mart.rebalance_events (cluster, group_id, event_ts, source, coalesce(generation, -1));
