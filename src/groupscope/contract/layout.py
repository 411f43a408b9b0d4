"""The folder layout of the landing zone, spelled here only. Every stage that writes or reads
the landing zone (land, offsets, analyze, quality, the Airflow assets) builds its paths with
these functions, so a reader always looks where a writer wrote::

    <root>/snapshots/<table>/cluster=<c>/date=YYYY-MM-DD/hour=HH/<snapshot_id>.parquet
    <root>/whatif/<table>/cluster=<c>/date=YYYY-MM-DD/hour=HH/<snapshot_id>.parquet
    <root>/offsets_topic/cluster=<c>/partition=<NNN>/batch=<first:020d>-<next:020d>/
    <root>/_quality/rejected/cluster=<c>/<snapshot_id>.json

``snapshots/snapshots/`` holds the manifests: a snapshot is landed once its manifest is, so
the manifests are what readers list. The hour folders are in UTC (the snapshot time's own
zone, which is UTC everywhere in groupscope). These are on-disk paths of data already landed:
changing one orphans what is there.
"""

from __future__ import annotations

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


# --- Airflow assets ---------------------------------------------------------------------------

# An asset's URI is its identity in Airflow's database: it must stay the same string for a
# given landing root and cluster, or the DAGs scheduled on it lose their history.

def snapshots_asset_uri(root: Path | str, cluster: str) -> str:
    """The asset a cluster's landed snapshots are: its manifests folder."""
    return f"file://{snapshot_cluster_dir(Path(root), MANIFEST_TABLE, cluster)}"


def offsets_asset_uri(root: Path | str, cluster: str) -> str:
    """The asset a cluster's landed offsets-topic history is."""
    return f"file://{offsets_cluster_dir(Path(root), cluster)}"
