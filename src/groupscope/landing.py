"""The landing zone: raw snapshots as Parquet, append-only, never rewritten.

Layout, one file per table and snapshot::

    <root>/snapshots/<table>/cluster=<c>/date=YYYY-MM-DD/hour=HH/<snapshot_id>.parquet

The ``snapshots`` table is the manifest and is written last, each file through a temporary
name and an atomic rename: a reader that finds a manifest finds all of that snapshot's tables.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from groupscope.model import Snapshot
from groupscope.tables import LOAD_ORDER, SCHEMAS, snapshot_id, to_tables


@dataclass(frozen=True)
class LandedSnapshot:
    root: Path
    cluster: str
    snapshot_ts: datetime
    snapshot_id: str

    def path(self, table: str) -> Path:
        return partition_dir(self.root, table, self.cluster, self.snapshot_ts) / (
            f"{self.snapshot_id}.parquet"
        )

    def read(self) -> dict[str, pa.Table]:
        # A table added to the landing zone later is empty in snapshots landed before it.
        return {t: pq.read_table(self.path(t), schema=SCHEMAS[t]) if self.path(t).exists()
                else SCHEMAS[t].empty_table() for t in SCHEMAS}


def partition_dir(root: Path, table: str, cluster: str, ts: datetime) -> Path:
    return (
        root / "snapshots" / table / f"cluster={cluster}" / f"date={ts:%Y-%m-%d}"
        / f"hour={ts:%H}"
    )


def land(snapshot: Snapshot, root: Path) -> LandedSnapshot:
    """Writes the snapshot. Landing one that is already landed (same cluster and time) is a
    no-op: the landing zone is append-only."""
    landed = LandedSnapshot(root, snapshot.cluster, snapshot.snapshot_ts, snapshot_id(snapshot))
    if landed.path("snapshots").exists():
        return landed
    for table_name, table in _ordered(to_tables(snapshot)):
        target = landed.path(table_name)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        pq.write_table(table, temporary, compression="zstd")
        os.replace(temporary, target)
    return landed


def _ordered(tables: dict[str, pa.Table]) -> Iterator[tuple[str, pa.Table]]:
    for name in LOAD_ORDER:
        yield name, tables[name]


def landed_snapshots(root: Path, cluster: str | None = None) -> list[LandedSnapshot]:
    """Every snapshot whose manifest is in the landing zone, oldest first."""
    base = root / "snapshots" / "snapshots"
    pattern = f"cluster={cluster}/*/*/*.parquet" if cluster else "cluster=*/*/*/*.parquet"
    found = []
    for manifest in base.glob(pattern):
        row = pq.read_table(manifest, columns=["cluster", "snapshot_ts", "snapshot_id"])
        record = row.to_pylist()[0]
        found.append(
            LandedSnapshot(root, record["cluster"], record["snapshot_ts"], record["snapshot_id"])
        )
    return sorted(found, key=lambda s: (s.snapshot_ts, s.cluster))
