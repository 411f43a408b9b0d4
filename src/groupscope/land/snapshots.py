"""The landing zone: raw snapshots as Parquet, append-only, never rewritten.

One file per table and snapshot, in the folders of ``groupscope.contract.layout`` (by
cluster, date and hour). The ``snapshots`` table is the manifest and is written last, each file
through a temporary name and an atomic rename: a reader that finds a manifest finds all of that
snapshot's tables. Each file's data and its folder are fsync'd around the rename
(``layout.replace_durably``), so a host crash leaves no renamed file without its bytes.

A snapshot whose manifest or a data file cannot be read (torn by a crash before this was
durable, or by a disk) is moved whole to ``_quarantine/`` with the reason (``quarantine``):
out of the way of the readers, so it never stops the others from loading.

The assignment what-if of a snapshot (``groupscope.simulate``) needs the whole snapshot object,
so it is computed before the snapshot lands and kept beside it, under ``whatif/`` instead of
``snapshots/``. Loading into the warehouse then needs nothing but the landing zone.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from groupscope.contract import layout
from groupscope.contract.model import Snapshot
from groupscope.contract.tables import LOAD_ORDER, SCHEMAS, WHATIF_SCHEMAS, snapshot_id, to_tables


@dataclass(frozen=True)
class LandedSnapshot:
    root: Path
    cluster: str
    snapshot_ts: datetime
    snapshot_id: str

    def path(self, table: str) -> Path:
        return layout.snapshot_file(self.root, table, self.cluster, self.snapshot_ts,
                                    self.snapshot_id)

    def read(self) -> dict[str, pa.Table]:
        # A table added to the landing zone later is empty in snapshots landed before it.
        return {t: pq.read_table(self.path(t), schema=SCHEMAS[t]) if self.path(t).exists()
                else SCHEMAS[t].empty_table() for t in SCHEMAS}

    def whatif_path(self, table: str) -> Path:
        return layout.snapshot_file(self.root, table, self.cluster, self.snapshot_ts,
                                    self.snapshot_id, layout.WHATIF)

    def read_whatif(self) -> list[tuple[str, pa.Table]]:
        """The what-if mart tables, in load order (empty for a snapshot landed before the
        what-if was kept in the landing zone)."""
        return [(t, pq.read_table(self.whatif_path(t), schema=schema)
                 if self.whatif_path(t).exists() else schema.empty_table())
                for t, schema in WHATIF_SCHEMAS.items()]


def land(snapshot: Snapshot, root: Path,
         whatif: Sequence[tuple[str, pa.Table]] = ()) -> LandedSnapshot:
    """Writes the snapshot, and its what-if mart tables (``simulate.whatif.mart_tables``) beside
    it. Landing one that is already landed (same cluster and time) is a no-op: the landing zone
    is append-only."""
    landed = LandedSnapshot(root, snapshot.cluster, snapshot.snapshot_ts, snapshot_id(snapshot))
    if landed.path(layout.MANIFEST_TABLE).exists():
        return landed
    for table_name, table in whatif:
        _write(table, landed.whatif_path(table_name))
    for table_name, table in _ordered(to_tables(snapshot)):
        _write(table, landed.path(table_name))
    return landed


def _write(table: pa.Table, target: Path) -> None:
    layout.make_dirs_durably(target.parent)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    pq.write_table(table, temporary, compression="zstd")
    layout.replace_durably(temporary, target)


def _ordered(tables: dict[str, pa.Table]) -> Iterator[tuple[str, pa.Table]]:
    for name in LOAD_ORDER:
        yield name, tables[name]


@dataclass(frozen=True)
class Unreadable:
    """A landed manifest that could not be read, and why."""

    manifest: Path
    reason: str

    @property
    def cluster(self) -> str:
        return layout.manifest_cluster(self.manifest)

    @property
    def snapshot_id(self) -> str:
        return self.manifest.stem


def landed_snapshots(root: Path, cluster: str | None = None,
                     since: datetime | None = None) -> list[LandedSnapshot]:
    """Every snapshot whose manifest is in the landing zone and can be read, oldest first;
    with ``since``, only those of its hour and later (reads only those hours' folders)."""
    return scan_landed(root, cluster, since)[0]


def scan_landed(root: Path, cluster: str | None = None, since: datetime | None = None,
                ) -> tuple[list[LandedSnapshot], list[Unreadable]]:
    """``landed_snapshots``, and the manifests found that could not be read."""
    found, unreadable = [], []
    for manifest in layout.manifest_paths(root, cluster, since):
        try:
            row = pq.read_table(manifest, columns=["cluster", "snapshot_ts", "snapshot_id"])
            record = row.to_pylist()[0]
        except READ_ERRORS as exc:
            if not is_torn(exc):
                raise
            unreadable.append(Unreadable(manifest, _reason(exc)))
            continue
        found.append(
            LandedSnapshot(root, record["cluster"], record["snapshot_ts"], record["snapshot_id"])
        )
    return sorted(found, key=lambda s: (s.snapshot_ts, s.cluster)), unreadable


def expected_groups(root: Path, cluster: str, before: datetime) -> frozenset[str]:
    """The groups the newest snapshot of ``cluster`` landed before ``before`` lists, or names
    in its collection errors: those the next snapshot expects to find (the collector probes
    the ones ListGroups no longer lists). Errors count because a group found hidden rather
    than gone is recorded as one, and must be probed again at the next snapshot. Cheap: the
    manifests of the newest hour folder that has one, and one column of two files."""
    for hour in layout.manifest_hours(root, cluster):
        found = [s for s in scan_landed(root, cluster, _hour_start(hour))[0]
                 if s.snapshot_ts < before]
        if found:
            newest = found[-1]
            ids: set[str] = set()
            for table in ("consumer_groups", "collection_errors"):
                if newest.path(table).exists():  # tables added later: absent from older ones
                    column = pq.read_table(newest.path(table), columns=["group_id"])
                    ids.update(g for g in column.column("group_id").to_pylist() if g)
            return frozenset(ids)
    return frozenset()


def _hour_start(hour: Path) -> datetime:
    """The start of a ``date=YYYY-MM-DD/hour=HH`` folder's hour."""
    day = hour.parent.name.removeprefix("date=")
    return datetime.fromisoformat(f"{day}T{hour.name.removeprefix('hour=')}:00:00+00:00")


# What reading a landed file raises: the storage's errors, Arrow's and Parquet's, a manifest
# without a row, and the text of a string column that decodes to no UTF-8 (broken bytes).
READ_ERRORS = (OSError, pa.ArrowException, IndexError, UnicodeDecodeError)
# Arrow's complaints about a value that does not fit the contract's type: a file read with a
# schema that changed since it was landed, whose bytes are sound.
_CAST_FAILED = re.compile(r"failed to parse|unsupported cast|not in range|was truncated|"
                          r"would lose", re.IGNORECASE)


def is_torn(exc: BaseException) -> bool:
    """Whether a read failure says the file's content is broken (quarantine it), rather than
    that the storage or the process failed, or that the code's contract no longer fits the
    file: those fail the task, so it is tried again (the storage back, memory freed) or
    fixed, and the snapshot loads then. Parquet's complaints about bytes are plain OSErrors
    without an errno ("Corrupt snappy compressed data") or ArrowInvalid; the storage's are
    OSError subclasses, carry an errno, or (wrapped by Arrow) name it in their text."""
    if isinstance(exc, MemoryError | pa.ArrowCancelled | pa.ArrowCapacityError
                  | NotImplementedError):
        return False  # out of memory, interrupted, or a cast this code cannot do
    if isinstance(exc, OSError):
        if type(exc) is not OSError or exc.errno is not None:
            return False
        return "[errno" not in str(exc).lower()
    if isinstance(exc, pa.ArrowInvalid | pa.ArrowTypeError) and _CAST_FAILED.search(str(exc)):
        return False
    return isinstance(exc, READ_ERRORS)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, IndexError):
        return "the manifest has no row"
    return f"{type(exc).__name__}: {exc}"


def quarantine(root: Path, manifest: Path, reason: str) -> Path:
    """Moves every file of the snapshot whose manifest is ``manifest`` (its tables and its
    what-if, found by its name in each table's folder of the same hour) to
    ``layout.quarantine_dir``, manifest last, beside a ``reason.json``; returns that folder.
    Idempotent: what was moved already is not looked for again."""
    hour = layout.manifest_hour(root, manifest)
    folder = layout.quarantine_dir(root, layout.manifest_cluster(manifest), manifest.stem)
    layout.make_dirs_durably(folder)
    note = folder / "reason.json"
    temporary = folder / f".reason.{uuid.uuid4().hex}.tmp"
    temporary.write_text(json.dumps({"manifest": str(manifest), "reason": reason}, indent=2))
    layout.replace_durably(temporary, note)
    for kind in (layout.WHATIF, layout.SNAPSHOTS):  # the manifest (snapshots/snapshots) last
        tables = sorted((root / kind).glob("*"), key=lambda p: p.name == layout.MANIFEST_TABLE)
        for table in tables:
            source = table / hour / manifest.name
            if source.exists():
                layout.make_dirs_durably(folder / kind)
                layout.replace_durably(source, folder / kind / f"{table.name}.parquet")
                layout.fsync_path(source.parent)
    return folder
