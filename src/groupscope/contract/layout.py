"""The folder layout of the landing zone, spelled here only. Every stage that writes or reads
the landing zone (land, offsets, analyze, quality, the Airflow assets) builds its paths with
these functions, so a reader always looks where a writer wrote::

    <root>/snapshots/<table>/cluster=<c>/date=YYYY-MM-DD/hour=HH/<snapshot_id>.parquet
    <root>/whatif/<table>/cluster=<c>/date=YYYY-MM-DD/hour=HH/<snapshot_id>.parquet
    <root>/offsets_topic/cluster=<c>/partition=<NNN>/batch=<first:020d>-<next:020d>/
    <root>/_quality/rejected/cluster=<c>/<snapshot_id>.json
    <root>/_quarantine/cluster=<c>/<snapshot_id>/<kind>/<table>.parquet, reason.json

``snapshots/snapshots/`` holds the manifests: a snapshot is landed once its manifest is, so
the manifests are what readers list. The hour folders are in UTC (the snapshot time's own
zone, which is UTC everywhere in groupscope). These are on-disk paths of data already landed:
changing one orphans what is there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, NamedTuple

Kind = Literal["snapshots", "whatif"]
SNAPSHOTS: Kind = "snapshots"  # the snapshot tables, as collected
WHATIF: Kind = "whatif"  # the what-if mart tables computed from a snapshot, landed beside it
MANIFEST_TABLE = "snapshots"  # written last: its presence means the whole snapshot is there

OFFSETS_TOPIC = "offsets_topic"
QUALITY = "_quality"
QUARANTINE = "_quarantine"

_HOUR_GLOB = "*/*"  # date=YYYY-MM-DD/hour=HH
_BATCH = re.compile(r"^batch=(\d{20})-(\d{20})$")


# --- snapshots and their what-if ------------------------------------------------------------

def _hour(ts: datetime) -> str:
    return f"date={ts:%Y-%m-%d}/hour={ts:%H}"


def snapshot_cluster_dir(root: Path, table: str, cluster: str, kind: Kind = SNAPSHOTS) -> Path:
    return root / kind / table / f"cluster={cluster}"


def snapshot_partition_dir(root: Path, table: str, cluster: str, ts: datetime,
                           kind: Kind = SNAPSHOTS) -> Path:
    """The hour folder that holds ``table`` of the snapshots of ``cluster`` taken in ts's hour."""
    return snapshot_cluster_dir(root, table, cluster, kind) / _hour(ts)


def snapshot_file(root: Path, table: str, cluster: str, ts: datetime, snapshot_id: str,
                  kind: Kind = SNAPSHOTS) -> Path:
    return snapshot_partition_dir(root, table, cluster, ts, kind) / f"{snapshot_id}.parquet"


def snapshot_hour_dirs(root: Path, table: str, cluster: str, start: datetime,
                       end: datetime) -> list[Path]:
    """Every hour folder that can hold ``table`` of snapshots taken in [start, end), whether
    it exists or not, oldest first."""
    out, cursor = [], start.replace(minute=0, second=0, microsecond=0)
    while cursor < end:
        out.append(snapshot_partition_dir(root, table, cluster, cursor))
        cursor += timedelta(hours=1)
    return out


def manifest_paths(root: Path, cluster: str | None = None,
                   since: datetime | None = None) -> Iterator[Path]:
    """The landed manifests (of one cluster, or all), in no particular order; with ``since``,
    only those of its hour and later, found from the folder names alone."""
    base = root / SNAPSHOTS / MANIFEST_TABLE
    pattern = f"cluster={cluster or '*'}/{_HOUR_GLOB}/*.parquet"
    manifests = base.glob(pattern)
    if since is None:
        return manifests
    # The names sort as the hours do: zero-padded, largest unit first.
    first = _hour(since)
    return (m for m in manifests if f"{m.parent.parent.name}/{m.parent.name}" >= first)


def manifest_hours(root: Path, cluster: str) -> list[Path]:
    """The hour folders that hold manifests of ``cluster``, newest first."""
    base = root / SNAPSHOTS / MANIFEST_TABLE / f"cluster={cluster}"
    # The names sort as the hours do: zero-padded, largest unit first.
    return sorted(base.glob(_HOUR_GLOB), reverse=True)


def manifest_hour(root: Path, manifest: Path) -> Path:
    """The folders of a landed manifest below its table's (``cluster=<c>/date=…/hour=HH``):
    where each table of its snapshot keeps its file, the manifest's name."""
    return manifest.parent.relative_to(root / SNAPSHOTS / MANIFEST_TABLE)


def manifest_cluster(manifest: Path) -> str:
    return manifest.parent.parent.parent.name.removeprefix("cluster=")


# --- the __consumer_offsets history ------------------------------------------------------------

def offsets_cluster_dir(root: Path, cluster: str) -> Path:
    return root / OFFSETS_TOPIC / f"cluster={cluster}"


def offsets_partition_dir(root: Path, cluster: str, partition: int) -> Path:
    return offsets_cluster_dir(root, cluster) / f"partition={partition:03d}"


def offsets_partition_dirs(root: Path, cluster: str) -> Iterator[Path]:
    """Every offsets-topic partition folder of ``cluster`` (in no particular order)."""
    return offsets_cluster_dir(root, cluster).glob("partition=*")


def offsets_batch_dir(root: Path, cluster: str, partition: int, first_offset: int,
                      next_offset: int) -> Path:
    return (offsets_partition_dir(root, cluster, partition)
            / f"batch={first_offset:020d}-{next_offset:020d}")


class BatchDir(NamedTuple):
    path: Path
    partition: int
    first_offset: int
    next_offset: int


def offsets_batch_dirs(root: Path, cluster: str,
                       partition: int | None = None) -> Iterator[BatchDir]:
    """The batch folders (complete or not: the caller checks) of one offsets-topic partition
    or all, with the range their names give, in no particular order. Other names (a
    temporary folder of a batch being written) are not batches."""
    partitions = f"partition={partition:03d}" if partition is not None else "partition=*"
    for path in offsets_cluster_dir(root, cluster).glob(f"{partitions}/batch=*"):
        match = _BATCH.match(path.name)
        if match:
            yield BatchDir(path, int(path.parent.name.split("=")[1]), int(match.group(1)),
                           int(match.group(2)))


# --- quality marks -----------------------------------------------------------------------------

def rejected_dir(root: Path, cluster: str) -> Path:
    """Where the marks of the landed snapshots the quality gate rejected are kept."""
    return root / QUALITY / "rejected" / f"cluster={cluster}"


def rejected_mark(root: Path, cluster: str, snapshot_id: str) -> Path:
    return rejected_dir(root, cluster) / f"{snapshot_id}.json"


def rejected_ids(root: Path, cluster: str) -> set[str]:
    """The ids of the snapshots of ``cluster`` the quality gate rejected (marked)."""
    return {p.stem for p in rejected_dir(root, cluster).glob("*.json")}


def quarantine_dir(root: Path, cluster: str, snapshot_id: str) -> Path:
    """Where the files of a landed snapshot that could not be read are moved, with the
    reason (``reason.json``): out of every reader's way, kept for an operator."""
    return root / QUARANTINE / f"cluster={cluster}" / snapshot_id


# --- durable writes ----------------------------------------------------------------------------

def replace_durably(temporary: Path, target: Path) -> None:
    """Renames a fully written ``temporary`` (a file or a folder of files) to ``target``,
    durably: its contents are fsync'd before the rename and the folder that holds it after,
    so after a host crash ``target`` is either absent or whole (a rename alone may reach the
    disk before the data it names). Every writer of the landing zone renames through here."""
    for path in [temporary, *(temporary.iterdir() if temporary.is_dir() else ())]:
        fsync_path(path)
    os.replace(temporary, target)
    fsync_path(target.parent)


def make_dirs_durably(folder: Path) -> None:
    """``folder`` and its missing parents, each new one's name fsync'd in its parent (else
    a crash may lose a new hour folder with every file renamed into it)."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync of a file or a folder (a folder's entries: names created, renamed, removed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- Airflow assets ---------------------------------------------------------------------------

# An asset's URI is its identity in Airflow's database: it must stay the same string for a
# given landing root and cluster, or the DAGs scheduled on it lose their history.

def snapshots_asset_uri(root: Path | str, cluster: str) -> str:
    """The asset a cluster's landed snapshots are: its manifests folder."""
    return f"file://{snapshot_cluster_dir(Path(root), MANIFEST_TABLE, cluster)}"


def offsets_asset_uri(root: Path | str, cluster: str) -> str:
    """The asset a cluster's landed offsets-topic history is."""
    return f"file://{offsets_cluster_dir(Path(root), cluster)}"
