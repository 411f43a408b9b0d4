"""Landed ``__consumer_offsets`` events, append-only, with the read positions stored in the
same place as the data they describe.

One directory per batch of one offsets-topic partition (its path:
``groupscope.contract.layout.offsets_batch_dir``), holding::

    <table>.parquet ...   (the event tables of groupscope.offsets.events, non-empty ones)
    _batch.json           (the range, counts, and any gap found before it)

A batch directory is written under a temporary name and renamed into place in one step, so a
batch is landed entirely or not at all. The stored position of a partition is the largest
``next`` among its batches: a crash (or kill) at any moment loses no event and a rerun lands
none twice, because the next run starts exactly where the landed batches end.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from groupscope.contract import layout
from groupscope.offsets.events import EVENT_SCHEMAS

MANIFEST = "_batch.json"


@dataclass(frozen=True)
class Batch:
    path: Path
    partition: int
    first_offset: int
    next_offset: int

    def read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        path = self.path / f"{table}.parquet"
        if not path.exists():
            return EVENT_SCHEMAS[table].empty_table().select(
                columns or EVENT_SCHEMAS[table].names)
        return pq.read_table(path, columns=columns, schema=EVENT_SCHEMAS[table])


def batches(root: Path, cluster: str, partition: int | None = None) -> list[Batch]:
    """Landed batches, in offset order per partition."""
    found = [Batch(*batch) for batch in layout.offsets_batch_dirs(root, cluster, partition)
             if (batch.path / MANIFEST).exists()]
    return sorted(found, key=lambda b: (b.partition, b.first_offset))


def positions(root: Path, cluster: str) -> dict[int, int]:
    """The next offset to read per offsets-topic partition, from the landed batches."""
    out: dict[int, int] = {}
    for b in batches(root, cluster):
        out[b.partition] = max(out.get(b.partition, 0), b.next_offset)
    return out


def land_batch(root: Path, cluster: str, partition: int, first_offset: int, next_offset: int,
               tables: Mapping[str, pa.Table], manifest: Mapping[str, Any]) -> Batch:
    """Lands one batch atomically. A batch overlapping one already landed is refused: that
    would be an event landed twice."""
    landed = positions(root, cluster).get(partition, 0)
    if first_offset < landed:
        raise ValueError(
            f"partition {partition}: batch {first_offset}-{next_offset} overlaps landed events "
            f"up to {landed}"
        )
    final = layout.offsets_batch_dir(root, cluster, partition, first_offset, next_offset)
    parent = final.parent
    layout.make_dirs_durably(parent)
    temporary = parent / f".tmp-{uuid.uuid4().hex}"
    temporary.mkdir()
    try:
        for name, table in tables.items():
            if table.num_rows:
                pq.write_table(table, temporary / f"{name}.parquet", compression="zstd")
        (temporary / MANIFEST).write_text(json.dumps(
            {"cluster": cluster, "partition": partition, "first_offset": first_offset,
             "next_offset": next_offset, **manifest}, sort_keys=True, indent=1))
        layout.replace_durably(temporary, final)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return Batch(final, partition, first_offset, next_offset)


def remove_abandoned(root: Path, cluster: str) -> int:
    """Removes temporary batch directories a killed run left behind; returns how many."""
    removed = 0
    for partition in layout.offsets_partition_dirs(root, cluster):
        for path in partition.glob(".tmp-*"):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def read_events(root: Path, cluster: str, table: str, partition: int | None = None) -> pa.Table:
    """One event table over every landed batch (of one offsets-topic partition, if given)."""
    parts = [b.read(table) for b in batches(root, cluster, partition)]
    if not parts:
        return EVENT_SCHEMAS[table].empty_table()
    return pa.concat_tables(parts)
