"""Landed offsets-topic batches: positions come from what is landed, overlaps are refused,
a killed run's leftovers are cleaned, and records that do not decode are kept, not lost."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from groupscope.contract import layout
from groupscope.offsets import store
from groupscope.offsets.events import EventBuilder


def _commit(group: str, offset: int) -> tuple[bytes, bytes]:
    g = group.encode()
    key = struct.pack(">hh", 1, len(g)) + g + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
    value = struct.pack(">hqih", 3, offset, -1, 0) + struct.pack(">q", 1_800_000_000_000)
    return key, value


def _batch(root: Path, partition: int, first: int, next_offset: int) -> store.Batch:
    builder = EventBuilder("c")
    for offset in range(first, next_offset):
        builder.add_raw(partition, offset, 1_800_000_000_000, *_commit("g", offset))
    return store.land_batch(root, "c", partition, first, next_offset, builder.tables(),
                            {"counts": dict(builder.counts)})


def test_positions_are_the_end_of_the_landed_batches(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 0, 10)
    _batch(tmp_path, 0, 10, 25)
    _batch(tmp_path, 3, 0, 4)
    assert store.positions(tmp_path, "c") == {0: 25, 3: 4}
    commits = store.read_events(tmp_path, "c", "offset_commits")
    keys = zip(commits.column("source_partition").to_pylist(),
               commits.column("source_offset").to_pylist(), strict=True)
    assert sorted(keys) == [(0, o) for o in range(25)] + [(3, o) for o in range(4)]
    assert store.read_events(tmp_path, "c", "offset_commits", 3).num_rows == 4


def test_an_overlapping_batch_is_refused(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 0, 10)
    with pytest.raises(ValueError, match="overlaps landed events up to 10"):
        _batch(tmp_path, 0, 5, 12)
    assert store.positions(tmp_path, "c") == {0: 10}


def test_a_killed_runs_temporary_batch_is_invisible_and_removed(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 0, 10)
    leftover = layout.offsets_partition_dir(tmp_path, "c", 0) / ".tmp-deadbeef"
    leftover.mkdir()
    (leftover / "offset_commits.parquet").write_bytes(b"half a file")
    assert store.positions(tmp_path, "c") == {0: 10}
    assert store.remove_abandoned(tmp_path, "c") == 1
    assert not leftover.exists()


def test_records_that_do_not_decode_are_kept_with_the_reason(tmp_path: Path) -> None:
    builder = EventBuilder("c")
    key, value = _commit("g", 1)
    builder.add_raw(0, 0, 1_800_000_000_000, key, value[:7])
    builder.add_raw(0, 1, 1_800_000_000_000, struct.pack(">h", 12) + b"\x00\x01g", b"\x00\x00")
    builder.add_raw(0, 2, 1_800_000_000_000, key, value)
    tables = builder.tables()
    (bad,) = tables["undecodable_records"].to_pylist()
    assert bad["value_hex"] == value[:7].hex() and "truncated" in bad["error"]
    assert tables["unknown_records"].column("record_type").to_pylist() == [12]
    assert tables["offset_commits"].num_rows == 1
    assert dict(builder.counts) == {"undecodable": 1, "unknown": 1, "offset_commits": 1}


def test_every_landing_writer_fsyncs_the_data_and_its_folder_around_the_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename may reach the disk before the bytes it names: after a host crash the file
    would be there, torn. Each writer fsyncs the data before its rename and the folder after."""
    import os

    import pyarrow as pa

    from groupscope.land import snapshots

    calls: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def record_fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def record_replace(source: str | Path, target: str | Path) -> None:
        calls.append(("replace", f"{source} -> {target}"))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", record_fsync)
    monkeypatch.setattr(os, "replace", record_replace)
    table_file = tmp_path / "snapshots" / "t" / "x.parquet"
    snapshots._write(pa.table({"a": [1]}), table_file)
    batch = _batch(tmp_path, 0, 0, 3)

    renames = [path for kind, path in calls if kind == "replace"]
    assert [r.split(" -> ")[1] for r in renames] == [str(table_file), str(batch.path)]
    for rename, files in zip(renames, (["."], [".", "_batch.json", "offset_commits.parquet"]),
                             strict=True):
        source, target = rename.split(" -> ")
        at = calls.index(("replace", rename))
        before = [path for kind, path in calls[:at] if kind == "fsync"]
        assert {str(Path(source) / f) if f != "." else source for f in files} <= set(before)
        assert ("fsync", str(Path(target).parent)) in calls[at + 1:]
    # New folders are fsync'd in their parents too (an hour folder made for the file).
    assert ("fsync", str(tmp_path / "snapshots")) in calls
