"""deploy/postgres/initdb.sh, the first-start script of both PostgreSQL servers of the compose
stack (the warehouse's and Airflow's metadata database's, airflow-db), run as the postgres
image runs it: as the superuser, with the owner's name and password in its environment,
against a real server. It makes one database and its owner, who can log in with the password
and is neither a superuser nor able to create roles."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from conftest import unique

from groupscope_dev.postgres import LocalPostgres

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "postgres" / "initdb.sh"


def test_the_init_script_makes_one_database_and_its_unprivileged_owner(
        postgres: LocalPostgres) -> None:
    owner, password = unique("initdb_owner"), "owner-pw-1"
    env = {**os.environ, "POSTGRES_USER": "postgres", "PGHOST": str(postgres.home),
           "PGPORT": str(postgres.port), "DATABASE_OWNER": owner,
           "DATABASE_OWNER_PASSWORD": password,
           "PATH": f"{Path(postgres.bin('psql')).parent}{os.pathsep}{os.environ['PATH']}"}
    try:
        subprocess.run(["bash", str(SCRIPT)], env=env, check=True, capture_output=True,
                       timeout=60)
        url = postgres.database_url(owner, role=owner, password=password)
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT r.rolsuper, r.rolcreaterole, r.rolcreatedb,"
                " pg_get_userbyid(d.datdba), current_database()"
                " FROM pg_roles r, pg_database d"
                " WHERE r.rolname = current_user AND d.datname = current_database()").fetchone()
        assert row == (False, False, False, owner, owner)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(postgres.database_url(owner, role=owner, password="wrong")).close()
        # Without the owner's name or password it refuses to run.
        for missing in ("DATABASE_OWNER", "DATABASE_OWNER_PASSWORD"):
            bare = {k: v for k, v in env.items() if k != missing}
            failed = subprocess.run(["bash", str(SCRIPT)], env=bare, capture_output=True,
                                    text=True, timeout=60, check=False)
            assert failed.returncode != 0 and missing in failed.stderr
    finally:
        with psycopg.connect(postgres.superuser_url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{owner}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{owner}"')
