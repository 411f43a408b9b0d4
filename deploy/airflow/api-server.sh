#!/bin/sh
# Airflow's API server and UI with the simple auth manager's one user, `admin`, whose password
# is AIRFLOW_ADMIN_PASSWORD (from .env): written to the passwords file the auth manager reads,
# so it generates none. The file lives in the container only, never in a volume or the image.
set -eu
: "${AIRFLOW_ADMIN_PASSWORD:?}" "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?}"
umask 077
python -c 'import json, os, sys; json.dump({"admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, sys.stdout)' \
  > "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
unset AIRFLOW_ADMIN_PASSWORD
exec airflow api-server --port 8080
