"""The PostgreSQL warehouse: versioned migrations (``migrations/*.sql``, shipped in the package and
found with ``importlib.resources``) and idempotent loads.

A snapshot is loaded by replacing its rows whole (delete by natural key prefix, then COPY) in
one transaction, so loading it once or five times leaves the same rows, and a half-done load
leaves none. Two writers of the same rows take turns (``lock_writers``): the live path and the
hourly lag job replace overlapping intervals of the same marts, and two delete-then-copy
transactions at once would fail on a key (or, on a table without one, duplicate rows).

The growing tables are partitioned by time (``partitions``): before each load, in a short
transaction of its own, the partitions of the times it writes are created where missing, so a
load never fails for want of one (an interval across midnight writes to both days').
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from groupscope.contract.tables import LOAD_ORDER

RAW_SCHEMA = "raw"
_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_LOCK_ID = 0x67726F7570  # "group": serialises concurrent migrators


class WarehouseUnavailable(RuntimeError):
    """The warehouse could not be reached. Landed data is kept; load it again later."""


class WriterBusy(RuntimeError):
    """Another writer kept the same rows longer than ``WRITER_LOCK_TIMEOUT``; nothing was
    written, and running again writes them."""


# How long a writer waits for another writer of the same table and cluster (a live run waits
# for the hourly lag job's write, or the reverse): under the live task's shortest timeout
# (90 s), so a wait ends in WriterBusy, not in the task being killed.
WRITER_LOCK_TIMEOUT = timedelta(seconds=60)


def engine_for(url: str) -> Engine:
    """An engine for a ``postgresql://`` URL, using psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 10})


def safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations(directory: Path | None = None) -> list[Migration]:
    """The migrations in order: the package's own, or those of ``directory/migrations``
    (tests; the layout of the package and of the checkout's ``sql/``, as before the move)."""
    root: Traversable = directory or resources.files(__package__)
    folder = root.joinpath("migrations")
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        match = _MIGRATION.match(entry.name)
        if not match:
            raise ValueError(f"migration file {entry.name} is not named NNNN_name.sql")
        found.append(Migration(int(match.group(1)), entry.name.removesuffix(".sql"),
                               entry.read_text(encoding="utf-8")))
    if not found:
        raise RuntimeError(f"no migrations found in {folder}: a broken installation")
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"two migrations share a version in {folder}")
    return found


def migrate(engine: Engine, directory: Path | None = None,
            now: datetime | None = None) -> list[str]:
    """Applies the migrations not yet applied, in order; returns their names. An applied
    migration whose file changed since is an error, not something to silently skip. Then
    creates the partitions of the day of ``now`` (default: the clock) and of the
    ``partitions.DAYS_AHEAD`` days after, where missing."""
    from groupscope.warehouse import partitions

    applied_now: list[str] = []
    with connect(engine) as conn, conn.begin():
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
        conn.execute(text("CREATE SCHEMA IF NOT EXISTS groupscope_meta"))
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS groupscope_meta.schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
        )
        done = {
            row.version: row.checksum
            for row in conn.execute(
                text("SELECT version, checksum FROM groupscope_meta.schema_migrations")
            )
        }
        for m in migrations(directory):
            if m.version in done:
                if done[m.version] != m.checksum:
                    raise RuntimeError(
                        f"migration {m.name} was applied with different contents; "
                        "add a new migration instead of editing an applied one"
                    )
                continue
            # On the driver's cursor, without parameters: a migration's '%' (format('%I'))
            # are SQL, not placeholders.
            conn.connection.driver_connection.cursor().execute(m.sql)
            conn.execute(
                text(
                    "INSERT INTO groupscope_meta.schema_migrations (version, name, checksum)"
                    " VALUES (:v, :n, :c)"
                ),
                {"v": m.version, "n": m.name, "c": m.checksum},
            )
            applied_now.append(m.name)
        if conn.execute(text("SELECT to_regclass('groupscope_meta.partitioned_tables')"))\
                .scalar_one() is not None:
            partitions.create_partitions(conn, partitions.days_ahead(now or datetime.now(UTC)))
    return applied_now


# The warehouses this process has migrated, by URL without its password; one lock per URL so
# that a warehouse that is slow to answer does not hold up the others.
_migrated: set[str] = set()
_migrating: dict[str, threading.Lock] = {}
_migrating_guard = threading.Lock()


def ensure_migrated(engine: Engine) -> list[str]:
    """``migrate`` once per process and warehouse: the first call migrates (and returns what it
    applied), later ones return ``[]`` without connecting. The stages call this on every run;
    ``migrate`` itself is for when migrating is the point (``groupscope warehouse migrate``).
    A migration that fails is not remembered, so the next call tries again."""
    key = engine.url.render_as_string(hide_password=True)
    with _migrating_guard:
        lock = _migrating.setdefault(key, threading.Lock())
    with lock:
        if key in _migrated:
            return []
        applied = migrate(engine)
        _migrated.add(key)
    return applied


def load_snapshot(engine: Engine, tables: dict[str, pa.Table]) -> None:
    """Replaces one snapshot's rows in the raw tables with ``tables`` (from ``to_tables`` or
    read back from the landing zone)."""
    manifest = tables["snapshots"].to_pylist()
    if len(manifest) != 1:
        raise ValueError("a snapshot load needs exactly one manifest row")
    replace_snapshot_rows(engine, RAW_SCHEMA, [(n, tables[n]) for n in LOAD_ORDER],
                          manifest[0]["cluster"], manifest[0]["snapshot_ts"])


def load_landed(engine: Engine, landed: Any) -> None:
    """Loads one landed snapshot (a ``landing.LandedSnapshot``): its raw tables and its
    what-if mart, in one transaction."""
    tables = landed.read()
    raw = [(RAW_SCHEMA, n, tables[n]) for n in LOAD_ORDER]
    whatif = [("mart", n, t) for n, t in landed.read_whatif()]
    _ensure_partitions(engine, raw + whatif, "snapshot_ts")
    _replace(engine, raw + whatif, landed.cluster, "snapshot_ts = :start",
             {"start": landed.snapshot_ts})


def load_whatif(engine: Engine, snapshot: Any) -> list[tuple[str, pa.Table]]:
    """Computes and loads the assignment what-if mart of one snapshot
    (mart.assignment_whatif, mart.assignment_advice); returns what it loaded."""
    from groupscope.simulate.whatif import mart_tables

    tables = mart_tables(snapshot)
    replace_snapshot_rows(engine, "mart", tables, snapshot.cluster, snapshot.snapshot_ts)
    return tables


def replace_snapshot_rows(engine: Engine, schema: str, tables: list[tuple[str, pa.Table]],
                          cluster: str, snapshot_ts: Any) -> None:
    """In one transaction, deletes every row of (cluster, snapshot_ts) from each table and
    copies the new ones in: a rerun or a backfill leaves exactly the same rows."""
    qualified = [(schema, n, t) for n, t in tables]
    _ensure_partitions(engine, qualified, "snapshot_ts")
    _replace(engine, qualified, cluster, "snapshot_ts = :start", {"start": snapshot_ts})


def replace_interval_rows(engine: Engine, schema: str, tables: list[tuple[str, pa.Table]],
                          cluster: str, ts_column: str, start: Any, end: Any) -> None:
    """Like replace_snapshot_rows, for every row with ``ts_column`` in [start, end)."""
    qualified = [(schema, n, t) for n, t in tables]
    _ensure_partitions(engine, qualified, ts_column)
    _replace(engine, qualified, cluster, f"{ts_column} >= :start AND {ts_column} < :end",
             {"start": start, "end": end})


def _ensure_partitions(engine: Engine, tables: list[tuple[str, str, pa.Table]],
                       ts_column: str) -> None:
    """The partitions of every ``ts_column`` value in ``tables``, created where missing, in a
    transaction of its own: creating one locks its parent table, which a load's transaction
    must not hold (two loads would wait on each other)."""
    from groupscope.warehouse import partitions

    times = partitions.times_in((t for _, _, t in tables), ts_column)
    if times:
        with connect(engine) as conn, conn.begin():
            partitions.create_partitions(conn, times, [f"{s}.{n}" for s, n, _ in tables])


def _replace(engine: Engine, tables: list[tuple[str, str, pa.Table]], cluster: str, where: str,
             params: dict[str, Any]) -> None:
    """In one transaction, holding the writer locks of every table (``lock_writers``): for
    each table, deletes the cluster's rows matching ``where`` and copies the new ones in."""
    params = {**params, "cluster": cluster}
    with connect(engine) as conn, conn.begin():
        lock_writers(conn, cluster, [f"{s}.{n}" for s, n, _ in tables])
        for schema, name, table in tables:
            conn.execute(
                text(f"DELETE FROM {schema}.{name} WHERE cluster = :cluster AND {where}"), params,
            )
            _copy(conn, f"{schema}.{name}", table)


def lock_writers(conn: Any, cluster: str, tables: Iterable[str]) -> None:
    """Takes the writer lock of each table (``schema.table``) for ``cluster`` until the end of
    the transaction: a transaction-scoped advisory lock per (cluster, table), in one order
    (no two writers wait on each other), each wait at most ``WRITER_LOCK_TIMEOUT``, then
    ``WriterBusy``. The transaction's other lock waits (its delete, its copy) are bounded
    alike.

    Per table rather than per job: the live path and the hourly lag job write the same seven
    marts, the rebalance and skew jobs theirs, and a table is what two writers collide on.
    Serialised, a second writer deletes what the first committed and copies its own rows in:
    an interval's rows are the same whichever writer came last (the same transforms)."""
    keys = sorted({f"groupscope-writer:{cluster}:{t}" for t in tables})
    milliseconds = int(WRITER_LOCK_TIMEOUT.total_seconds() * 1000)
    conn.execute(text(f"SET LOCAL lock_timeout = {milliseconds}"))
    try:  # one round trip: the keys are locked in the array's order
        conn.execute(text("SELECT count(pg_advisory_xact_lock(hashtext(k)))"
                          " FROM unnest(CAST(:keys AS text[])) AS k"), {"keys": keys})
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        names = ", ".join(sorted(k.rsplit(":", 1)[1] for k in keys))
        raise WriterBusy(
            f"another writer kept the rows of {names} for cluster {cluster!r} longer than "
            f"{WRITER_LOCK_TIMEOUT.total_seconds():g} s (the live path and the hourly jobs "
            "take turns); nothing was written: run it again") from None


def _copy(conn: Any, qualified_name: str, table: pa.Table) -> None:
    if table.num_rows == 0:
        return
    columns = table.schema.names
    cursor = conn.connection.driver_connection.cursor()
    column_list = ", ".join(f'"{c}"' for c in columns)  # quoted: identifiers, not SQL
    with cursor.copy(f"COPY {qualified_name} ({column_list}) FROM STDIN") as copy:
        for row in _rows(table, columns):
            copy.write_row(row)


def _rows(table: pa.Table, columns: list[str]) -> Iterable[tuple[Any, ...]]:
    data = [table.column(c).to_pylist() for c in columns]
    return zip(*data, strict=True)


def loaded_snapshot_keys(engine: Engine, cluster: str | None = None,
                         since: Any = None) -> set[tuple[str, Any]]:
    query = "SELECT cluster, snapshot_ts FROM raw.snapshots WHERE true"
    params: dict[str, Any] = {}
    if cluster:
        query += " AND cluster = :cluster"
        params["cluster"] = cluster
    if since is not None:
        query += " AND snapshot_ts >= :since"
        params["since"] = since
    with connect(engine) as conn:
        return {(r.cluster, r.snapshot_ts) for r in conn.execute(text(query), params)}


# The read-only role Grafana logs in as; groupscope.serve.grafana.READER_ROLE names the same
# (the warehouse may not import serve), as does reader_role.sql.
READER_ROLE = "grafana_reader"
READER_ROLE_SQL = "reader_role.sql"
_PSQL_VARIABLE = re.compile(r":'([A-Za-z_]\w*)'" r'|:"([A-Za-z_]\w*)"')


def reader_role_sql() -> str:
    """The SQL that creates or updates the read-only role Grafana logs in as, with psql
    variables ``:'reader_password'`` and ``:"owner"`` (``psql -v ... -f``; shipped in the
    package as ``groupscope/warehouse/reader_role.sql``)."""
    return resources.files(__package__).joinpath(READER_ROLE_SQL).read_text(encoding="utf-8")


def create_reader_role(conn: Any, password: str, owner: str | None = None) -> None:
    """Creates or updates ``grafana_reader`` (read-only transactions, a 10 s statement
    timeout, SELECT on the ``serve`` views now and to come, CONNECT to this database, nothing
    else): ``reader_role.sql`` run on ``conn``, a SQLAlchemy connection to the warehouse
    database as a role that may create roles and grant for ``owner`` (a superuser, or a DBA
    member of the owner role; the warehouse owner itself may not create roles).

    ``owner`` is the role that owns the warehouse schemas (default: the database's owner).
    Idempotent. The password is sent as a SCRAM-SHA-256 verifier computed here by libpq, so
    it appears in no statement, server log or error; the caller's transaction is used if one
    is open, else one is committed here."""
    if not password:
        raise ValueError("the reader role needs a non-empty password")
    if conn.in_transaction():
        _create_reader_role(conn, password, owner)
    else:
        with conn.begin():
            _create_reader_role(conn, password, owner)


def _create_reader_role(conn: Any, password: str, owner: str | None) -> None:
    from psycopg import sql as psql

    driver = conn.connection.driver_connection
    if owner is None:
        owner = conn.execute(text(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
        )).scalar_one()
    verifier = driver.pgconn.encrypt_password(
        password.encode(), READER_ROLE.encode(), b"scram-sha-256").decode()
    values = {"reader_password": psql.Literal(verifier), "owner": psql.Identifier(owner)}

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        kind = psql.Literal if match.group(1) else psql.Identifier
        value = values.get(name)
        if not isinstance(value, kind):
            raise ValueError(f"{READER_ROLE_SQL}: unexpected psql variable {match.group(0)}")
        return value.as_string(driver)

    # On the driver's cursor, without parameters: the SQL's '%' are not placeholders, and an
    # error names the statement's problem without echoing the statement.
    driver.cursor().execute(_PSQL_VARIABLE.sub(substitute, reader_role_sql()))


class connect:
    """``engine.connect()`` that turns "cannot connect" into WarehouseUnavailable."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.conn: Any = None

    def __enter__(self) -> Any:
        try:
            self.conn = self.engine.connect()
        except OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise WarehouseUnavailable(
                f"warehouse {self.engine.url.render_as_string(hide_password=True)} "
                f"is unreachable: {reason}"
            ) from None
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()
