"""The shared contract: the landing layout is the one already on disk (landed data must stay
findable), and every place that names it agrees with it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from groupscope.contract import layout

TS = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


# --- the landing layout --------------------------------------------------------------------
# Spelled out literally on purpose: these are the paths of data already landed.

def test_snapshot_and_whatif_files_are_where_landed_data_is() -> None:
    root = Path("/landing")
    assert layout.snapshot_file(root, "partition_offsets", "c1", TS, "c1-x") == Path(
        "/landing/snapshots/partition_offsets/cluster=c1/date=2026-01-02/hour=03/c1-x.parquet")
    assert layout.snapshot_file(root, "assignment_whatif", "c1", TS, "c1-x", layout.WHATIF) == \
        Path("/landing/whatif/assignment_whatif/cluster=c1/date=2026-01-02/hour=03/"
             "c1-x.parquet")


def test_hour_folders_of_a_range_cross_midnight_and_exclude_the_end() -> None:
    start, end = datetime(2026, 1, 1, 23, 30, tzinfo=UTC), datetime(2026, 1, 2, 1, tzinfo=UTC)
    assert layout.snapshot_hour_dirs(Path("/l"), "snapshots", "c", start, end) == [
        Path("/l/snapshots/snapshots/cluster=c/date=2026-01-01/hour=23"),
        Path("/l/snapshots/snapshots/cluster=c/date=2026-01-02/hour=00")]


def test_manifests_are_listed_per_cluster_and_from_an_hour(tmp_path: Path) -> None:
    for cluster, ts in (("a", TS), ("a", TS.replace(hour=1)), ("b", TS)):
        path = layout.snapshot_file(tmp_path, layout.MANIFEST_TABLE, cluster, ts,
                                    f"{cluster}-{ts:%H}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    # Another table's file is not a manifest.
    other = layout.snapshot_file(tmp_path, "consumer_groups", "a", TS, "a-x")
    other.parent.mkdir(parents=True)
    other.write_bytes(b"")
    names = {p.stem for p in layout.manifest_paths(tmp_path)}
    assert names == {"a-03", "a-01", "b-03"}
    assert {p.stem for p in layout.manifest_paths(tmp_path, "a")} == {"a-03", "a-01"}
    assert {p.stem for p in layout.manifest_paths(tmp_path, "a", since=TS)} == {"a-03"}


def test_offsets_topic_batches_are_where_landed_batches_are(tmp_path: Path) -> None:
    batch = layout.offsets_batch_dir(tmp_path, "c", 7, 0, 42)
    assert batch == tmp_path / ("offsets_topic/cluster=c/partition=007/"
                                "batch=00000000000000000000-00000000000000000042")
    batch.mkdir(parents=True)
    (batch.parent / ".tmp-0123").mkdir()  # a batch being written is not a batch
    assert list(layout.offsets_batch_dirs(tmp_path, "c")) == [layout.BatchDir(batch, 7, 0, 42)]
    assert list(layout.offsets_batch_dirs(tmp_path, "c", 8)) == []
    assert list(layout.offsets_partition_dirs(tmp_path, "c")) == [batch.parent]


def test_rejected_marks_and_asset_uris() -> None:
    assert layout.rejected_mark(Path("/l"), "c", "c-x") == Path(
        "/l/_quality/rejected/cluster=c/c-x.json")
    # Airflow knows an asset by its URI: these strings are what the DAGs always declared.
    assert layout.snapshots_asset_uri(Path("/l"), "c") == \
        "file:///l/snapshots/snapshots/cluster=c"
    assert layout.offsets_asset_uri(Path("/l"), "c") == "file:///l/offsets_topic/cluster=c"
