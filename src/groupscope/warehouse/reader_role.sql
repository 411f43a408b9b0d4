-- grafana_reader: the read-only role Grafana logs in as. SELECT on the views of the `serve`
-- schema and nothing else (no access to raw, mart or ops: the views run with their owner's
-- rights), read-only transactions by default and a 10 s statement timeout.
--
-- Run by a role that may create roles and grant for the warehouse owner (a superuser or a DBA
-- member of the owner role), in the warehouse database, after or before the migrations, as
-- often as wanted: it creates or updates. Two ways, one file:
--   psql -v ON_ERROR_STOP=1 -v reader_password=... -v owner=groupscope -f reader_role.sql
--   groupscope.warehouse.create_reader_role(conn, password)   (substitutes the same variables)
-- The reader_password variable may be a SCRAM-SHA-256 verifier (create_reader_role sends one,
-- so the server never receives the password itself).
--
-- default_transaction_read_only and statement_timeout are defaults the role could SET away:
-- guards against mistakes and runaway panels. The privileges are the boundary.

DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'grafana_reader') THEN
    CREATE ROLE grafana_reader LOGIN;
  END IF;
END
$$;

ALTER ROLE grafana_reader WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT
  NOREPLICATION NOBYPASSRLS PASSWORD :'reader_password';
ALTER ROLE grafana_reader SET default_transaction_read_only = on;
ALTER ROLE grafana_reader SET statement_timeout = '10s';
-- Grafana's ${var:sqlstring} doubles ' and leaves \ alone: safe only while a backslash is an
-- ordinary character in a string literal (the default since PostgreSQL 9.1; pinned here).
ALTER ROLE grafana_reader SET standard_conforming_strings = on;

DO $$
BEGIN
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO grafana_reader', current_database());
END
$$;

-- The migrations create `serve` too (0009); owned by the warehouse owner either way, so that
-- the owner's default privileges below cover the views later migrations add.
CREATE SCHEMA IF NOT EXISTS serve AUTHORIZATION :"owner";
GRANT USAGE ON SCHEMA serve TO grafana_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA serve TO grafana_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA serve
  GRANT SELECT ON TABLES TO grafana_reader;
