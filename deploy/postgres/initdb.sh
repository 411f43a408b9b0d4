#!/bin/bash
# A groupscope PostgreSQL server's first start (postgres image, /docker-entrypoint-initdb.d; runs
# once, on an empty data volume, as the superuser): one database and its owner role, both named
# DATABASE_OWNER. Two servers run it: the warehouse's (`groupscope`) and Airflow's metadata
# database's (`airflow`, service airflow-db), apart so that the warehouse failing does not stop
# Airflow. Neither role is a superuser or may create roles: the warehouse schema is migrated by
# its owner (the warehouse-migrate service), Airflow's by `airflow db migrate` (airflow-init),
# and the read-only grafana_reader role is created by the superuser afterwards
# (deploy/postgres/reader-role.sh, the warehouse-reader service).
set -euo pipefail
: "${DATABASE_OWNER:?}" "${DATABASE_OWNER_PASSWORD:?}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v owner="$DATABASE_OWNER" -v owner_password="$DATABASE_OWNER_PASSWORD" <<'SQL'
CREATE ROLE :"owner" LOGIN PASSWORD :'owner_password';
CREATE DATABASE :"owner" OWNER :"owner";
SQL
