#!/bin/bash
# The warehouse server's first start (postgres image, /docker-entrypoint-initdb.d; runs once, on
# an empty data volume, as the superuser): the warehouse owner `groupscope` and its database,
# and Airflow's metadata database `airflow` with a role of its own. Neither role is a superuser
# or may create roles: the warehouse schema is migrated by its owner (the warehouse-migrate
# service) and the read-only grafana_reader role is created by the superuser afterwards
# (deploy/postgres/reader-role.sh, the warehouse-reader service).
set -euo pipefail
: "${WAREHOUSE_PASSWORD:?}" "${AIRFLOW_DB_PASSWORD:?}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v warehouse_password="$WAREHOUSE_PASSWORD" -v airflow_password="$AIRFLOW_DB_PASSWORD" <<'SQL'
CREATE ROLE groupscope LOGIN PASSWORD :'warehouse_password';
CREATE DATABASE groupscope OWNER groupscope;
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
SQL
