#!/bin/bash
# The read-only role Grafana logs in as (grafana_reader: SELECT on the serve schema only,
# read-only transactions, a statement timeout), created or updated by the superuser with the
# project's own SQL (src/groupscope/warehouse/reader_role.sql, mounted from the source tree).
# Run by the one-shot warehouse-reader service at every `docker compose up`, after the
# migrations (they create the serve schema it grants on), so new views and a changed
# GROUPSCOPE_READER_PASSWORD take effect. The SQL is rerunnable.
set -euo pipefail
: "${POSTGRES_PASSWORD:?}" "${GROUPSCOPE_READER_PASSWORD:?}"
export PGHOST="${PGHOST:-warehouse}" PGUSER="${PGUSER:-postgres}" PGPASSWORD="$POSTGRES_PASSWORD"
exec psql -v ON_ERROR_STOP=1 --no-psqlrc --dbname groupscope \
  -v reader_password="$GROUPSCOPE_READER_PASSWORD" -v owner=groupscope \
  -f /opt/groupscope/reader_role.sql
