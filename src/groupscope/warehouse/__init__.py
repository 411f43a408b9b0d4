"""The PostgreSQL warehouse: versioned migrations (``migrations/*.sql``, shipped in the package and
found with ``importlib.resources``) and idempotent loads.

Migrating is a deployment step (``migrate``: ``groupscope warehouse migrate``, the compose
one-shot, the dev stack's start), never a task's: the stages call ``check_migrated``, which
fails at once, naming the command, on a warehouse not (or half) migrated. Every lock wait of
the migration, and of a load's partition creation, is bounded (``LockTimeout`` names who
holds the warehouse's locks).

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
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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

log = logging.getLogger(__name__)


class WarehouseUnavailable(RuntimeError):
    """The warehouse could not be reached. Landed data is kept; load it again later."""


class DataRefused(RuntimeError):
    """The warehouse refused rows for their data (a data exception or an integrity violation:
    SQLSTATE classes 22 and 23, e.g. a NUL byte in a name, a value out of range, invalid text,
    a duplicate key); nothing was written. Loading the same rows again fails the same way,
    unlike a warehouse that is unreachable, read-only or busy (those stay other errors)."""


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


MIGRATE_COMMAND = "groupscope warehouse migrate"
# How long the migration waits for a lock (the migrators' advisory lock, a table a task is
# writing) before it gives up and names who holds it: a deployment step that fails clearly
# instead of queueing every task behind it.
MIGRATION_LOCK_TIMEOUT_S = 30.0
# How long a task's transaction that takes a table's exclusive lock (a new partition) waits.
TASK_LOCK_TIMEOUT_S = 30.0
# The checksums of applied migrations rewritten since without a change to the schema they
# leave (0010 became resumable in steps): accepted as applied.
_SUPERSEDED = {10: frozenset({"196dac065eb230a901a8076c6ce242e42015186688f7947ea40fa55405cae919"})}
# Migrations that copy every row of the ordinary (not yet partitioned) tables of these
# schemas: what the plan's estimate counts.
_REWRITES = {10: ("raw", "mart")}
# The copy rate the estimate assumes: the slower, loaded-machine rate of 0010's copies on 2
# shared cores (test_retention's old warehouse, docs/benchmarks.md; about 70 MiB/s unloaded):
# rows moved, keys and indexes rebuilt.
COPY_BYTES_PER_S = 20 * 2**20
_META_TABLES = (
    "CREATE SCHEMA IF NOT EXISTS groupscope_meta",
    "CREATE TABLE IF NOT EXISTS groupscope_meta.schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())",
    # The steps of a migration applied in several transactions, listed by its SQL; a step
    # is done once done_at is set. Rows are deleted when the migration is recorded applied.
    "CREATE TABLE IF NOT EXISTS groupscope_meta.migration_steps ("
    " version integer NOT NULL, step integer NOT NULL, statement text NOT NULL,"
    " done_at timestamptz, PRIMARY KEY (version, step))",
)


class WarehouseNotMigrated(RuntimeError):
    """The warehouse's schema is not the one this code needs; the message says what to run."""


class LockTimeout(RuntimeError):
    """A lock was not granted in time; the message names who holds the warehouse's locks."""


@dataclass(frozen=True)
class MigrationPlan:
    """What ``migrate`` would do: the migrations pending, and for those that copy tables,
    how much they copy."""

    pending: list[str]
    resumed: dict[str, tuple[int, int]]  # name: (steps done, steps)
    rewrite_rows: int
    rewrite_bytes: int
    largest_bytes: int

    def describe(self) -> list[str]:
        if not self.pending:
            return ["the warehouse is migrated: nothing to apply"]
        lines = [f"{len(self.pending)} migration(s) to apply: {', '.join(self.pending)}"]
        lines += [f"{name}: resuming after step {done} of {total}"
                  for name, (done, total) in self.resumed.items()]
        if self.rewrite_bytes:
            seconds = self.rewrite_bytes / COPY_BYTES_PER_S
            lines.append(
                f"copies about {self.rewrite_rows:,} rows ({_size(self.rewrite_bytes)}), one "
                f"table per transaction: about {max(1, round(seconds)):,} s at "
                f"{_size(COPY_BYTES_PER_S)}/s; needs about {_size(2 * self.largest_bytes)} "
                f"free on the database's disk (the largest table, {_size(self.largest_bytes)}, "
                "and its WAL); it can be stopped and run again, it continues")
        return lines


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def migration_plan(engine: Engine, directory: Path | None = None) -> MigrationPlan:
    """What ``migrate`` would apply, read without changing anything."""
    with connect(engine) as conn:
        applied, steps = _migration_state(conn)
        pending = [m for m in migrations(directory) if m.version not in applied]
        schemas = sorted({s for m in pending for s in _REWRITES.get(m.version, ())})
        sizes = conn.execute(text(
            "SELECT greatest(c.reltuples, 0)::bigint AS row_count,"
            " pg_total_relation_size(c.oid) AS size"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'r' AND NOT c.relispartition AND n.nspname = ANY(:schemas)"),
            {"schemas": schemas}).all()
    return MigrationPlan(
        pending=[m.name for m in pending],
        resumed={m.name: steps[m.version] for m in pending if m.version in steps},
        rewrite_rows=sum(r.row_count for r in sizes),
        rewrite_bytes=sum(r.size for r in sizes),
        largest_bytes=max((r.size for r in sizes), default=0))


def _migration_state(conn: Any) -> tuple[dict[int, str], dict[int, tuple[int, int]]]:
    """The applied migrations' checksums by version, and the (done, total) steps of those
    begun and not finished."""
    if conn.execute(text("SELECT to_regclass('groupscope_meta.schema_migrations')"))\
            .scalar_one() is None:
        return {}, {}
    applied = {r.version: r.checksum for r in conn.execute(
        text("SELECT version, checksum FROM groupscope_meta.schema_migrations"))}
    steps: dict[int, tuple[int, int]] = {}
    if conn.execute(text("SELECT to_regclass('groupscope_meta.migration_steps')"))\
            .scalar_one() is not None:
        steps = {r.version: (r.done, r.total) for r in conn.execute(text(
            "SELECT version, count(done_at) AS done, count(*) AS total"
            " FROM groupscope_meta.migration_steps GROUP BY version"))}
    return applied, steps


def migrate(engine: Engine, directory: Path | None = None, now: datetime | None = None,
            lock_timeout_s: float = MIGRATION_LOCK_TIMEOUT_S,
            progress: Callable[[str], None] | None = None) -> list[str]:
    """Applies the migrations not yet applied, in order; returns their names. An applied
    migration whose file changed since is an error, not something to silently skip. Then
    creates the partitions of the day of ``now`` (default: the clock) and of the
    ``partitions.DAYS_AHEAD`` days after, where missing.

    The only place the schema changes (``groupscope warehouse migrate``, the compose one-shot,
    the dev stack's start); the tasks only check it (``check_migrated``). Concurrent migrators
    are serialised by a session advisory lock. Every lock wait is bounded by
    ``lock_timeout_s``: past it, ``LockTimeout`` names the sessions holding the warehouse's
    locks. A migration whose SQL lists steps (``groupscope_meta.migration_steps``) runs each
    step in a transaction of its own, and a rerun continues after the last one done; any
    other migration is one transaction. ``progress`` is told each step as it starts."""
    from groupscope.warehouse import partitions

    say = progress or (lambda _line: None)
    applied_now: list[str] = []
    with connect(engine) as conn:
        conn.exec_driver_sql(f"SET lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        conn.commit()
        try:
            with _lock_errors(engine, "the migration", pid):
                conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _LOCK_ID})
                conn.commit()
        except BaseException:
            _release_migration_lock(conn, locked=False)  # not granted: the timeout only
            raise
        try:
            with _lock_errors(engine, "the migration", pid):
                _apply(conn, migrations(directory), applied_now, say)
                with conn.begin():
                    if conn.execute(text(
                            "SELECT to_regclass('groupscope_meta.partitioned_tables')"))\
                            .scalar_one() is not None:
                        partitions.create_partitions(
                            conn, partitions.days_ahead(now or datetime.now(UTC)))
        finally:
            _release_migration_lock(conn, locked=True)
    return applied_now


def _release_migration_lock(conn: Any, locked: bool) -> None:
    """The migration's session state undone before its connection goes back to the pool: its
    advisory lock (``locked``) and its lock_timeout. On a connection that died meanwhile (the
    session and its lock are gone with it) the cleanup's own error is logged, never raised
    over the error that ended the migration."""
    try:
        if conn.in_transaction():
            conn.rollback()
        if locked:
            conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _LOCK_ID})
        conn.exec_driver_sql("RESET lock_timeout")
        conn.commit()
    except Exception as exc:  # the connection is unusable: the pool discards it
        log.warning("the migration's connection could not be reset (%s); it is discarded",
                    type(exc).__name__)
        conn.invalidate()


def _accepted(m: Migration, applied_checksum: str) -> bool:
    """An applied migration's recorded checksum is this code's, or one it superseded."""
    return applied_checksum in {m.checksum, *_SUPERSEDED.get(m.version, ())}


def _apply(conn: Any, wanted: list[Migration], applied_now: list[str],
           say: Callable[[str], None]) -> None:
    with conn.begin():
        for statement in _META_TABLES:
            conn.execute(text(statement))
    applied, steps = _migration_state(conn)
    conn.commit()
    for m in wanted:
        if m.version in applied:
            if not _accepted(m, applied[m.version]):
                raise RuntimeError(
                    f"migration {m.name} was applied with different contents; "
                    "add a new migration instead of editing an applied one")
            continue
        started = time.monotonic()
        if m.version not in steps:
            say(f"{m.name}: applying")
            with conn.begin():
                # On the driver's cursor, without parameters: a migration's '%'
                # (format('%I')) are SQL, not placeholders.
                conn.connection.driver_connection.cursor().execute(m.sql)
        todo = conn.execute(text(
            "SELECT step, statement FROM groupscope_meta.migration_steps"
            " WHERE version = :v AND done_at IS NULL ORDER BY step"), {"v": m.version}).all()
        total = conn.execute(text("SELECT count(*) FROM groupscope_meta.migration_steps"
                                  " WHERE version = :v"), {"v": m.version}).scalar_one()
        conn.commit()
        for step in todo:
            say(f"{m.name}: step {step.step} of {total}: {step.statement}")
            with conn.begin():
                conn.connection.driver_connection.cursor().execute(step.statement)
                conn.execute(text("UPDATE groupscope_meta.migration_steps SET done_at = now()"
                                  " WHERE version = :v AND step = :s"),
                             {"v": m.version, "s": step.step})
        with conn.begin():
            conn.execute(text("DELETE FROM groupscope_meta.migration_steps WHERE version = :v"),
                         {"v": m.version})
            conn.execute(
                text("INSERT INTO groupscope_meta.schema_migrations (version, name, checksum)"
                     " VALUES (:v, :n, :c)"),
                {"v": m.version, "n": m.name, "c": m.checksum})
        applied_now.append(m.name)
        if todo:
            say(f"{m.name}: done in {time.monotonic() - started:.1f} s")


# The warehouses this process found migrated, by URL without its password: a task checks once.
_checked: set[str] = set()


def check_migrated(engine: Engine, directory: Path | None = None) -> None:
    """Fails at once, with ``WarehouseNotMigrated`` and one line saying what to run, unless
    every migration of this code is applied (none half-applied, none applied with other
    contents). What the stages call; it never changes the schema (``migrate`` does). A
    warehouse found migrated is not checked again by this process."""
    key = engine.url.render_as_string(hide_password=True)
    if key in _checked:
        return
    with connect(engine) as conn:
        applied, steps = _migration_state(conn)
    where = f"warehouse {safe_url(str(key))}"
    for m in migrations(directory):
        if m.version in steps:
            done, total = steps[m.version]
            raise WarehouseNotMigrated(
                f"{where} is half-migrated ({m.name}: {done} of {total} steps done): "
                f"run `{MIGRATE_COMMAND}` to finish it")
        if m.version not in applied:
            pending = [x.name for x in migrations(directory) if x.version not in applied]
            raise WarehouseNotMigrated(
                f"{where} is not migrated ({len(pending)} migration(s) pending, from "
                f"{pending[0]}): run `{MIGRATE_COMMAND}` first")
        if not _accepted(m, applied[m.version]):
            raise WarehouseNotMigrated(
                f"{where} has {m.name} applied with other contents than this groupscope's: "
                "deploy the version that migrated it, or a newer one")
    _checked.add(key)


class _lock_errors:
    """Turns a lock wait that timed out (SQLSTATE 55P03) into ``LockTimeout`` naming the
    sessions that hold locks in the warehouse, found on a connection of its own."""

    def __init__(self, engine: Engine, what: str, own_pid: int | None = None) -> None:
        self.engine, self.what, self.own_pid = engine, what, own_pid

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        # Through SQLAlchemy the driver's error is the OperationalError's ``orig``; a
        # migration's SQL runs on the driver's cursor (its '%' are SQL), which raises it bare.
        driver_error = exc.orig if isinstance(exc, OperationalError) else exc
        if getattr(driver_error, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            raise LockTimeout(f"{self.what} gave up waiting for a lock: "
                              f"{lock_holders(self.engine, self.own_pid)}") from None


_LOCK_NOT_AVAILABLE = "55P03"


def lock_holders(engine: Engine, own_pid: int | None = None) -> str:
    """The other sessions (than ``own_pid``'s) holding locks on the warehouse's tables or
    advisory locks, oldest transaction first, in one line (what a lock_timeout message
    names)."""
    try:
        with connect(engine) as conn:
            rows = conn.execute(text(
                "SELECT a.pid, a.application_name, a.state, a.usename,"
                " round(extract(epoch FROM now() - a.xact_start)) AS seconds,"
                # The statement's first word only: its text may hold another application's
                # literals, and this message reaches task failures and the alert channels.
                " upper(substring(a.query FROM '^\\s*([A-Za-z]+)')) AS command"
                " FROM pg_stat_activity a WHERE a.pid <> pg_backend_pid()"
                " AND a.pid IS DISTINCT FROM :own AND a.datname = current_database()"
                " AND a.pid IN ("
                "  SELECT l.pid FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation"
                "  LEFT JOIN pg_namespace n ON n.oid = c.relnamespace"
                "  WHERE l.granted AND (l.locktype = 'advisory' OR n.nspname IN"
                "   ('raw', 'mart', 'ops', 'serve', 'groupscope_meta')))"
                " ORDER BY a.xact_start NULLS LAST LIMIT 3"), {"own": own_pid}).all()
    except WarehouseUnavailable as exc:
        return f"who holds it is unknown ({exc})"
    if not rows:
        return "no session holds one now (it was released): run it again"
    return "held by " + "; ".join(
        f"pid {r.pid} ({r.usename}, {r.application_name or 'no application name'}, "
        f"{r.state}, in a transaction for {r.seconds} s, last statement "
        f"{r.command or 'unknown'})" for r in rows)


@contextmanager
def bounded_transaction(engine: Engine, what: str,
                        lock_timeout_s: float = TASK_LOCK_TIMEOUT_S) -> Iterator[Any]:
    """A transaction whose lock waits are bounded by ``lock_timeout_s`` (``LockTimeout``
    past it, naming the holders): for a task's statements that take a table's exclusive lock,
    which would otherwise queue behind a migration or a long query without end."""
    with _lock_errors(engine, what), connect(engine) as conn, conn.begin():
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
        yield conn


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
        with bounded_transaction(engine, "creating the partitions of a load") as conn:
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
            with _refusals(f"{schema}.{name}"):
                _copy(conn, f"{schema}.{name}", table)


@contextmanager
def _refusals(qualified_name: str) -> Iterator[None]:
    """Turns the driver's refusal of a COPY's rows for their data into ``DataRefused`` naming
    the table. psycopg raises it bare (the COPY runs on its cursor), as ``DataError`` or
    ``IntegrityError``, whether the server refused a row or psycopg itself refused a value it
    cannot send (a NUL byte in text)."""
    import psycopg

    try:
        yield
    except (psycopg.DataError, psycopg.IntegrityError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        state = f" ({exc.sqlstate})" if exc.sqlstate else ""
        raise DataRefused(f"{qualified_name} refused the rows{state}: {reason}") from None


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


# libpq's words for a server certificate that sslmode=verify-ca/verify-full refuses, and
# what the one line tells the user to change.
_TLS_FIXES = (
    ("certificate verify failed",
     "sslrootcert in WAREHOUSE_URL must be the CA that signed the warehouse's certificate"),
    ("does not match host name",
     "the host in WAREHOUSE_URL must be a name the warehouse's certificate holds"),
)


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
            where = f"warehouse {self.engine.url.render_as_string(hide_password=True)}"
            fix = next((fix for symptom, fix in _TLS_FIXES if symptom in reason), None)
            if fix:
                raise WarehouseUnavailable(
                    f"{where} failed TLS verification: {reason}; {fix}") from None
            raise WarehouseUnavailable(f"{where} is unreachable: {reason}") from None
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()
