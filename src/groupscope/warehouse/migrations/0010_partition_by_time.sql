-- The tables that grow with every snapshot become range-partitioned on their time column
-- (declarative partitioning), so that retention drops whole partitions instead of deleting
-- rows (groupscope.warehouse.partitions). Three families, each with its own retention
-- (GROUPSCOPE_RETENTION_*_DAYS):
--   raw    one partition per UTC day: the raw snapshot tables, keyed by snapshot_ts;
--   mart   one partition per UTC day: the per-snapshot marts (lag, status, skew, what-if) and
--          the rebalance events;
--   hourly one partition per UTC month: the hourly roll-ups (a row per group and hour: small,
--          and kept 400 days, so a day each would be 400 tiny tables per roll-up).
-- Partitions are named <table>_pYYYYMMDD (day) or <table>_pYYYYMM (month).
--
-- No DEFAULT partition: the writers create the partitions of the days they write, before
-- writing (groupscope.warehouse), and the retention task creates the coming days ahead. A
-- DEFAULT partition would hide rows from retention (it is never dropped) and make every
-- later partition creation scan it, and fail when it holds rows of that day.
--
-- The existing tables are converted in place: for each, a partitioned table of the same
-- columns, its partitions for the days its rows cover (any number of days, created a
-- thousand at a time), the rows moved, the old table dropped, then its keys and indexes
-- rebuilt under their old names. Every view over them (raw, serve) is dropped first and
-- recreated afterwards from its own definition, with its privileges.
--
-- In steps (groupscope_meta.migration_steps, run by groupscope.warehouse.migrate): this file
-- saves the definitions of the views, keys, indexes and grants in groupscope_meta.p0010_*
-- tables, drops the views and lists one step per table and a last one that recreates the
-- views. Each step is a transaction of its own that holds the locks of one table only, and a
-- table already partitioned is skipped: a migration killed halfway continues where it
-- stopped when `groupscope warehouse migrate` runs again, and the tasks refuse to run on the
-- half-converted warehouse meanwhile (warehouse.check_migrated). The disk it needs at once is
-- about twice the largest table (its copy and the WAL of the copy), not the whole warehouse.
--
-- The way back (to a warehouse on 0009, same rows), per converted table <s>.<t>, in one
-- transaction (keys and indexes come along with LIKE; rename the indexes back after):
--   CREATE TABLE <s>.<t>__flat (LIKE <s>.<t> INCLUDING ALL);
--   INSERT INTO <s>.<t>__flat SELECT * FROM <s>.<t>;
--   DROP TABLE <s>.<t>; ALTER TABLE <s>.<t>__flat RENAME TO <t>;
-- with the views over the tables dropped before and recreated after (their definitions:
-- pg_get_viewdef; the migrations 0001-0009 hold them), then
--   DROP TABLE ops.retention_drops; DROP VIEW groupscope_meta.partitions;
--   DROP FUNCTION groupscope_meta.create_partitions; DROP TABLE groupscope_meta.partitioned_tables;
--   DELETE FROM groupscope_meta.schema_migrations WHERE version >= 10;
-- and the migrations after 0010 undone first, newest first. Take a pg_dump before instead
-- where the disk allows: restoring it is the simpler way back.

CREATE TABLE groupscope_meta.partitioned_tables (
    schema_name text NOT NULL,
    table_name  text NOT NULL,
    time_column text NOT NULL,
    family      text NOT NULL CHECK (family IN ('raw', 'mart', 'hourly')),
    granularity text NOT NULL CHECK (granularity IN ('day', 'month')),
    PRIMARY KEY (schema_name, table_name)
);

INSERT INTO groupscope_meta.partitioned_tables VALUES
    ('raw', 'snapshots', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'consumer_groups', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'group_members', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'member_assignments', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'member_subscriptions', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'committed_offsets', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'partition_offsets', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'record_timestamps', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'topics', 'snapshot_ts', 'raw', 'day'),
    ('raw', 'collection_errors', 'snapshot_ts', 'raw', 'day'),
    ('mart', 'assignment_whatif', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'assignment_advice', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'partition_lag', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'member_lag', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'topic_lag', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'group_lag', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'cluster_lag', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'partition_status', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'group_status', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'group_skew', 'snapshot_ts', 'mart', 'day'),
    ('mart', 'rebalance_events', 'event_ts', 'mart', 'day'),
    ('mart', 'rebalance_hourly', 'period_start', 'hourly', 'month'),
    ('mart', 'strategy_skew_hourly', 'period_start', 'hourly', 'month');

-- Every partition of the partitioned tables, with its bounds.
CREATE VIEW groupscope_meta.partitions AS
SELECT t.schema_name, t.table_name, t.family, t.granularity, c.relname AS partition_name,
       b.bound[1]::timestamptz AS range_start, b.bound[2]::timestamptz AS range_end
FROM groupscope_meta.partitioned_tables t
JOIN pg_inherits i ON i.inhparent = to_regclass(format('%I.%I', t.schema_name, t.table_name))
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                        $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$) AS bound) b;

-- The partitions holding the given times, created where missing, of the given tables
-- (schema.table; NULL: every partitioned table); returns how many were created. Concurrent
-- callers are serialised by an advisory lock, taken only when something is missing.
CREATE FUNCTION groupscope_meta.create_partitions(p_times timestamptz[],
                                                  p_tables text[] DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    t record;
    bucket timestamp;  -- the partition's start, UTC
    step interval;
    child text;
    created integer := 0;
    locked boolean := false;
    wanted integer;
BEGIN
    FOR t IN SELECT * FROM groupscope_meta.partitioned_tables
             WHERE p_tables IS NULL OR schema_name || '.' || table_name = ANY (p_tables)
             ORDER BY schema_name, table_name LOOP
        step := ('1 ' || t.granularity)::interval;
        SELECT count(DISTINCT date_trunc(t.granularity, x AT TIME ZONE 'UTC')) INTO wanted
        FROM unnest(p_times) x;
        -- A bad timestamp (epoch 0, year 9999) must not become thousands of tables.
        IF wanted > 1000 THEN
            RAISE EXCEPTION 'refusing to create % partitions of %.% at once (times from % to %)',
                wanted, t.schema_name, t.table_name,
                (SELECT min(x) FROM unnest(p_times) x), (SELECT max(x) FROM unnest(p_times) x);
        END IF;
        FOR bucket IN SELECT DISTINCT date_trunc(t.granularity, x AT TIME ZONE 'UTC')
                      FROM unnest(p_times) x WHERE x IS NOT NULL ORDER BY 1 LOOP
            child := t.table_name || '_p'
                || to_char(bucket, CASE t.granularity WHEN 'day' THEN 'YYYYMMDD' ELSE 'YYYYMM' END);
            IF to_regclass(format('%I.%I', t.schema_name, child)) IS NOT NULL THEN
                CONTINUE;
            END IF;
            IF NOT locked THEN
                PERFORM pg_advisory_xact_lock(hashtext('groupscope_meta.create_partitions'));
                locked := true;
                IF to_regclass(format('%I.%I', t.schema_name, child)) IS NOT NULL THEN
                    CONTINUE;  -- another caller created it while this one waited
                END IF;
            END IF;
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                           t.schema_name, child, t.schema_name, t.table_name,
                           to_char(bucket, 'YYYY-MM-DD HH24:MI:SS') || '+00',
                           to_char(bucket + step, 'YYYY-MM-DD HH24:MI:SS') || '+00');
            created := created + 1;
        END LOOP;
    END LOOP;
    RETURN created;
END
$fn$;

-- What retention dropped: one row per partition, kept (visible to an operator, like
-- ops.quality_results).
CREATE TABLE ops.retention_drops (
    dropped_at     timestamptz NOT NULL,
    schema_name    text        NOT NULL,
    table_name     text        NOT NULL,
    partition_name text        NOT NULL,
    family         text        NOT NULL,
    range_start    timestamptz NOT NULL,
    range_end      timestamptz NOT NULL,
    retention_days integer     NOT NULL,  -- the family's retention it was dropped under
    bytes          bigint      NOT NULL,  -- its size on disk, indexes included
    PRIMARY KEY (schema_name, partition_name, dropped_at)
);

-- The saved definitions, by table name (the tables are renamed and dropped on the way).
DO $prepare$
BEGIN
    -- Definitions printed fully qualified, whatever the caller's search_path.
    PERFORM set_config('search_path', 'pg_catalog', true);

    IF EXISTS (SELECT 1 FROM pg_constraint c JOIN groupscope_meta.partitioned_tables p
                 ON c.confrelid = to_regclass(format('%I.%I', p.schema_name, p.table_name))
               WHERE c.contype = 'f') THEN
        RAISE EXCEPTION 'a foreign key references a table to partition; not converted';
    END IF;

    -- The views over the tables, directly or through other views, deepest last.
    CREATE TABLE groupscope_meta.p0010_views AS
    WITH RECURSIVE targets AS (
        SELECT to_regclass(format('%I.%I', schema_name, table_name))::oid AS oid
        FROM groupscope_meta.partitioned_tables
    ), deps (oid, depth) AS (
        SELECT r.ev_class, 1
        FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
        WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
          AND d.refobjid IN (SELECT oid FROM targets)
          AND r.ev_class NOT IN (SELECT oid FROM targets)
        UNION
        SELECT r.ev_class, deps.depth + 1
        FROM deps JOIN pg_depend d ON d.refobjid = deps.oid
        JOIN pg_rewrite r ON r.oid = d.objid
        WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
          AND r.ev_class <> deps.oid
    )
    SELECT max(deps.depth) AS depth, n.nspname, c.relname, c.relkind, c.reloptions,
           c.relacl, pg_get_userbyid(c.relowner) AS owner,
           pg_get_viewdef(c.oid) AS definition, obj_description(c.oid, 'pg_class') AS comment
    FROM deps JOIN pg_class c ON c.oid = deps.oid JOIN pg_namespace n ON n.oid = c.relnamespace
    GROUP BY c.oid, n.nspname, c.relname, c.relkind, c.reloptions, c.relacl, c.relowner;

    IF EXISTS (SELECT 1 FROM groupscope_meta.p0010_views WHERE relkind <> 'v') THEN
        RAISE EXCEPTION 'a materialized view depends on a table to partition; not converted';
    END IF;

    -- Keys and indexes, to rebuild on the partitioned tables under the same names.
    CREATE TABLE groupscope_meta.p0010_constraints AS
    SELECT p.schema_name, p.table_name, c.conname, pg_get_constraintdef(c.oid) AS definition
    FROM pg_constraint c JOIN groupscope_meta.partitioned_tables p
      ON c.conrelid = to_regclass(format('%I.%I', p.schema_name, p.table_name))
    WHERE c.contype IN ('p', 'u', 'x', 'f');
    CREATE TABLE groupscope_meta.p0010_indexes AS
    SELECT p.schema_name, p.table_name, pg_get_indexdef(i.indexrelid) AS definition
    FROM pg_index i JOIN groupscope_meta.partitioned_tables p
      ON i.indrelid = to_regclass(format('%I.%I', p.schema_name, p.table_name))
    WHERE NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid
                                                      AND c.conrelid = i.indrelid);
    CREATE TABLE groupscope_meta.p0010_grants AS
    SELECT p.schema_name, p.table_name, a.grantee, a.privilege_type, a.is_grantable
    FROM groupscope_meta.partitioned_tables p
    JOIN pg_class c ON c.oid = to_regclass(format('%I.%I', p.schema_name, p.table_name))
    CROSS JOIN LATERAL aclexplode(c.relacl) a
    WHERE a.grantee <> c.relowner;
END
$prepare$;

DO $drop_views$
DECLARE
    vw record;
BEGIN
    FOR vw IN SELECT * FROM groupscope_meta.p0010_views ORDER BY depth DESC LOOP
        EXECUTE format('DROP VIEW %I.%I', vw.nspname, vw.relname);
    END LOOP;
END
$drop_views$;

-- One step: one table converted, in the caller's transaction; nothing if it already is.
CREATE FUNCTION groupscope_meta.p0010_partition_table(p_schema text, p_table text)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    tgt groupscope_meta.partitioned_tables;
    item record;
    chunk timestamptz[];
BEGIN
    SELECT * INTO STRICT tgt FROM groupscope_meta.partitioned_tables
    WHERE schema_name = p_schema AND table_name = p_table;
    IF (SELECT relkind FROM pg_class
        WHERE oid = to_regclass(format('%I.%I', p_schema, p_table))) = 'p' THEN
        RETURN;
    END IF;
    PERFORM set_config('search_path', 'pg_catalog', true);
    EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', p_schema, p_table,
                   p_table || '__unpartitioned');
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
                   ' INCLUDING COMMENTS INCLUDING STORAGE INCLUDING COMPRESSION)'
                   ' PARTITION BY RANGE (%I)',
                   p_schema, p_table, p_schema, p_table || '__unpartitioned', tgt.time_column);
    -- create_partitions makes at most a thousand at once (a guard against a bad timestamp):
    -- the days are handed over a thousand at a time, so any age of warehouse converts.
    FOR chunk IN EXECUTE format(
            'SELECT array_agg(day ORDER BY day) FROM ('
            '  SELECT day, (row_number() OVER (ORDER BY day) - 1) / 1000 AS batch FROM ('
            '    SELECT DISTINCT date_trunc(''day'', %I AT TIME ZONE ''UTC'') AT TIME ZONE ''UTC'''
            '    AS day FROM %I.%I WHERE %I IS NOT NULL) d) b GROUP BY batch',
            tgt.time_column, p_schema, p_table || '__unpartitioned', tgt.time_column) LOOP
        PERFORM groupscope_meta.create_partitions(chunk, ARRAY[p_schema || '.' || p_table]);
    END LOOP;
    EXECUTE format('INSERT INTO %I.%I SELECT * FROM %I.%I', p_schema, p_table, p_schema,
                   p_table || '__unpartitioned');
    EXECUTE format('DROP TABLE %I.%I', p_schema, p_table || '__unpartitioned');
    FOR item IN SELECT * FROM groupscope_meta.p0010_constraints
                WHERE schema_name = p_schema AND table_name = p_table LOOP
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s', p_schema, p_table,
                       item.conname, item.definition);
    END LOOP;
    -- Printed with the old table's name, which is the new table's again.
    FOR item IN SELECT * FROM groupscope_meta.p0010_indexes
                WHERE schema_name = p_schema AND table_name = p_table LOOP
        EXECUTE item.definition;
    END LOOP;
    FOR item IN SELECT * FROM groupscope_meta.p0010_grants
                WHERE schema_name = p_schema AND table_name = p_table LOOP
        EXECUTE format('GRANT %s ON %I.%I TO %s%s', item.privilege_type, p_schema, p_table,
                       CASE item.grantee WHEN 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(item.grantee)) END,
                       CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$fn$;

-- The last step: the views back, with their owners, comments and privileges; the saved
-- definitions and the step functions dropped.
CREATE FUNCTION groupscope_meta.p0010_finish() RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    vw record;
    item record;
BEGIN
    PERFORM set_config('search_path', 'pg_catalog', true);
    FOR vw IN SELECT * FROM groupscope_meta.p0010_views ORDER BY depth LOOP
        EXECUTE format('CREATE VIEW %I.%I%s AS %s', vw.nspname, vw.relname,
                       CASE WHEN vw.reloptions IS NULL THEN ''
                            ELSE ' WITH (' || array_to_string(vw.reloptions, ', ') || ')' END,
                       vw.definition);
        IF vw.owner <> current_user THEN
            EXECUTE format('ALTER VIEW %I.%I OWNER TO %I', vw.nspname, vw.relname, vw.owner);
        END IF;
        IF vw.comment IS NOT NULL THEN
            EXECUTE format('COMMENT ON VIEW %I.%I IS %L', vw.nspname, vw.relname, vw.comment);
        END IF;
        FOR item IN SELECT a.grantee, a.privilege_type, a.is_grantable
                 FROM aclexplode(vw.relacl) a
                 WHERE a.grantee <> (SELECT oid FROM pg_roles WHERE rolname = vw.owner) LOOP
            EXECUTE format('GRANT %s ON %I.%I TO %s%s', item.privilege_type, vw.nspname,
                           vw.relname,
                           CASE item.grantee WHEN 0 THEN 'PUBLIC'
                                ELSE quote_ident(pg_get_userbyid(item.grantee)) END,
                           CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
    DROP TABLE groupscope_meta.p0010_views, groupscope_meta.p0010_constraints,
               groupscope_meta.p0010_indexes, groupscope_meta.p0010_grants;
    DROP FUNCTION groupscope_meta.p0010_partition_table(text, text);
END
$fn$;

INSERT INTO groupscope_meta.migration_steps (version, step, statement)
SELECT 10, row_number() OVER (ORDER BY schema_name, table_name),
       format('SELECT groupscope_meta.p0010_partition_table(%L, %L)', schema_name, table_name)
FROM groupscope_meta.partitioned_tables
UNION ALL
SELECT 10, (SELECT count(*) FROM groupscope_meta.partitioned_tables) + 1,
       'SELECT groupscope_meta.p0010_finish(); DROP FUNCTION groupscope_meta.p0010_finish()';
