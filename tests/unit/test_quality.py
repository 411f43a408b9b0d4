"""The data-quality suites on tiny inline frames (GE runs for real; no services needed)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from groupscope import quality
from groupscope.contract.model import GroupType
from groupscope.land.snapshots import LandedSnapshot

MANIFEST = {"cluster": "c1", "group_count": 1, "partition_count": 2, "error_count": 0}
TS = pd.Timestamp("2026-11-21T10:00:00Z")


def _landed_frames() -> dict[str, pd.DataFrame]:
    head = {"cluster": "c1", "snapshot_ts": TS}
    empty = {t: pd.DataFrame(columns=list(s.names)) for t, s in quality.SCHEMAS.items()}
    return {
        **empty,
        "snapshots": pd.DataFrame([{**head, "snapshot_id": "c1-x", "complete": True,
                                    "group_count": 1, "partition_count": 2, "error_count": 0,
                                    "offsets_topic_partitions": 50}]),
        "consumer_groups": pd.DataFrame([{**head, "group_id": "g", "group_type": "classic",
                                          "state": "Stable", "member_count": 1}]),
        "partition_offsets": pd.DataFrame([
            {**head, "topic": "t", "partition": 0, "log_start_offset": 0, "high_watermark": 9,
             "last_stable_offset": 9},
            {**head, "topic": "t", "partition": 1, "log_start_offset": None,
             "high_watermark": None, "last_stable_offset": None}]),
        "committed_offsets": pd.DataFrame([
            {**head, "group_id": "g", "topic": "t", "partition": 0, "committed_offset": 12}]),
    }


def test_a_sound_landed_snapshot_passes_every_expectation() -> None:
    # 12 > high watermark 9: allowed in landed data (a manual commit); the marts flag it.
    count, failures = quality.validate("t1", _landed_frames(), quality.landed_checks(MANIFEST))
    assert failures == []
    assert count == sum(len(c) for c in quality.landed_checks(MANIFEST).values())


def test_each_landed_defect_is_named_with_its_table_and_expectation() -> None:
    frames = _landed_frames()
    # 1. a duplicated key; 2. a high watermark below the log start; 3. a row of another
    # cluster; 4. one group fewer than the manifest counts.
    frames["committed_offsets"] = pd.concat([frames["committed_offsets"]] * 2)
    frames["partition_offsets"].loc[0, "log_start_offset"] = 20
    frames["partition_offsets"].loc[1, "cluster"] = "other"
    frames["consumer_groups"] = frames["consumer_groups"].iloc[0:0]
    _, failures = quality.validate("t2", frames, quality.landed_checks(MANIFEST))
    named = {(f.table, f.expectation, f.arguments.get("column", f.arguments.get("column_A")))
             for f in failures}
    assert named == {
        ("committed_offsets", "ExpectCompoundColumnsToBeUnique", None),
        ("partition_offsets", "ExpectColumnPairValuesAToBeGreaterThanB", "high_watermark"),
        ("partition_offsets", "ExpectColumnPairValuesAToBeGreaterThanB", "last_stable_offset"),
        ("partition_offsets", "ExpectColumnValuesToBeInSet", "cluster"),
        ("consumer_groups", "ExpectTableRowCountToEqual", None),
    }
    assert any("observed 0" in f.observed for f in failures)


def test_group_types_are_the_models() -> None:
    checks = dict(quality.landed_checks(MANIFEST)["consumer_groups"][-2:-1])
    assert checks["ExpectColumnValuesToBeInSet"]["value_set"] == [t.value for t in GroupType]


def _partition_lag(**changes: object) -> pd.DataFrame:
    row = {"committed_offset": 5, "log_start_offset": 0, "high_watermark": 9, "lag": 4,
           "lag_beyond_retention": False, "negative_lag": False,
           "high_watermark_minus_committed": 4, "time_lag_kind": "interpolated",
           "catch_up_s": 3.0}
    return pd.DataFrame([row, {**row, **changes}])


def _mart_frames(partition_lag: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {"partition_lag": partition_lag,
            "partition_status": pd.DataFrame({"status": ["OK", "STALL"]}),
            "group_status": pd.DataFrame({"status": ["WARN"]}),
            "rebalance_hourly": pd.DataFrame({"rebalances": [0, 3]}),
            "group_skew": pd.DataFrame({"max_minus_min": [1], "members": [2]}),
            "lag_coverage": pd.DataFrame({"snapshot_ts": [TS], "raw_partitions": [2],
                                          "mart_rows": [2]})}


def test_flagged_rows_may_lie_outside_the_log() -> None:
    # Below the log start, flagged beyond retention; beyond the high watermark, negative lag.
    frames = _mart_frames(pd.concat([
        _partition_lag(committed_offset=-1, lag=10, high_watermark_minus_committed=10,
                       lag_beyond_retention=True),
        _partition_lag(committed_offset=12, lag=-3, high_watermark_minus_committed=-3,
                       negative_lag=True, time_lag_kind="caught_up", catch_up_s=0.0)]))
    assert quality.validate("m1", frames, quality.mart_checks())[1] == []


def test_unflagged_out_of_range_rows_and_gaps_fail_the_marts() -> None:
    frames = _mart_frames(_partition_lag(committed_offset=12, lag=-3,
                                         high_watermark_minus_committed=-3))
    frames["lag_coverage"] = pd.DataFrame({"snapshot_ts": [TS], "raw_partitions": [3],
                                           "mart_rows": [2]})
    frames["group_status"] = pd.DataFrame({"status": ["STALL"]})  # a partition status
    failures = quality.validate("m2", frames, quality.mart_checks())[1]
    assert {(f.table, f.expectation) for f in failures} == {
        ("partition_lag", "ExpectColumnPairValuesAToBeGreaterThanB"),
        ("lag_coverage", "ExpectColumnPairValuesToBeEqual"),
        ("group_status", "ExpectColumnValuesToBeInSet"),
    }


def test_an_unreadable_landed_snapshot_fails_with_the_reason(tmp_path: Path) -> None:
    landed = LandedSnapshot(tmp_path, "c1", datetime(2026, 11, 21, 10, tzinfo=UTC), "c1-x")
    landed.path("snapshots").parent.mkdir(parents=True)
    landed.path("snapshots").write_bytes(b"not parquet")
    result = quality.check_landed(landed)
    assert not result.success
    assert result.failures[0].expectation == "readable"
    assert "Parquet" in result.failures[0].observed or "parquet" in result.failures[0].observed


def test_rejected_snapshots_are_marked_with_the_reason(tmp_path: Path) -> None:
    landed = LandedSnapshot(tmp_path, "c1", datetime(2026, 11, 21, 10, tzinfo=UTC), "c1-x")
    result = quality.SuiteResult("landed_snapshot", "c1", "c1-x", 3, (
        quality.Failure("topics", "ExpectTableRowCountToEqual", {"value": 1}, "observed 0"),))
    assert quality.rejected_ids(tmp_path, "c1") == set()
    quality.reject(landed, result)
    assert quality.rejected_ids(tmp_path, "c1") == {"c1-x"}
    assert "2/3 expectations passed" in result.summary()


def _arrow(frames: dict[str, pd.DataFrame]) -> dict[str, Any]:
    # The landed tables' schemas, the columns the frames leave out as nulls.
    def schema(name: str) -> pa.Schema:
        return pa.schema([f.with_nullable(True) for f in quality.SCHEMAS[name]])

    return {name: pa.Table.from_pandas(frame.reindex(columns=quality.SCHEMAS[name].names),
                                       schema=schema(name), preserve_index=False)
            for name, frame in frames.items()}


def _verdicts(failures: list[quality.Failure]) -> set[tuple[str, str, str, str]]:
    """Each failure's table, expectation, column and how many rows (or what it observed)."""
    return {(f.table, f.expectation,
             str(f.arguments.get("column", f.arguments.get("column_A"))),
             f.observed.split(", e.g.")[0]) for f in failures}


def _landed_defects() -> dict[str, pd.DataFrame]:
    frames = _landed_frames()
    frames["committed_offsets"] = pd.concat([frames["committed_offsets"]] * 2)
    frames["partition_offsets"].loc[0, "log_start_offset"] = 20
    frames["partition_offsets"].loc[1, "cluster"] = "other"
    frames["partition_offsets"].loc[1, "partition"] = -1
    frames["consumer_groups"].loc[0, "group_type"] = "mystery"
    frames["consumer_groups"].loc[0, "member_count"] = -2
    frames["snapshots"] = pd.concat([frames["snapshots"]] * 2)
    return frames


@pytest.mark.parametrize("frames", [_landed_frames, _landed_defects], ids=["sound", "defects"])
def test_the_arrow_validator_gives_great_expectations_verdicts_on_landed_snapshots(
        frames: Any) -> None:
    checks = quality.landed_checks(MANIFEST)
    ge_count, ge_failures = quality.validate("parity", frames(), checks)
    count, failures = quality.validate_arrow(_arrow(frames()), checks)
    assert count == ge_count
    assert _verdicts(failures) == _verdicts(ge_failures)
    assert bool(failures) == (frames is _landed_defects)


def test_the_arrow_validator_gives_great_expectations_verdicts_on_the_marts() -> None:
    frames = _mart_frames(pd.concat([
        _partition_lag(committed_offset=-1, lag=10, high_watermark_minus_committed=10,
                       lag_beyond_retention=True),
        _partition_lag(committed_offset=12, lag=-3, high_watermark_minus_committed=-3),
        _partition_lag(lag=7, time_lag_kind="guessed", catch_up_s=-1.0)]))
    frames["lag_coverage"] = pd.DataFrame({"snapshot_ts": [TS], "raw_partitions": [3],
                                           "mart_rows": [2]})
    ge_count, ge_failures = quality.validate("parity-marts", frames, quality.mart_checks())
    count, failures = quality.validate_arrow(
        {n: pa.Table.from_pandas(f, preserve_index=False) for n, f in frames.items()},
        quality.mart_checks())
    assert count == ge_count and len(failures) >= 4
    assert _verdicts(failures) == _verdicts(ge_failures)


def test_the_arrow_validator_refuses_an_expectation_it_does_not_know() -> None:
    with pytest.raises(KeyError):
        quality.validate_arrow(_arrow(_landed_frames()),
                               {"snapshots": [("ExpectColumnToExist", {"column": "x"})]})


def test_only_broken_bytes_quarantine_a_snapshot_and_storage_failures_fail_the_task(
        tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from groupscope.land.snapshots import is_torn

    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"a": list(range(1000))}), good)
    data = good.read_bytes()
    broken = {"truncated": data[: len(data) // 2],  # no footer: ArrowInvalid
              "scrambled": data[:100] + b"x" * 200 + data[300:]}  # Parquet's plain OSError
    for name, content in broken.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises((OSError, pa.ArrowException)) as raised:
            pq.read_table(tmp_path / name).to_pylist()
        assert is_torn(raised.value), (name, raised.value)
    with pytest.raises(OSError) as missing:
        pq.read_table(tmp_path / "gone.parquet")
    assert not is_torn(missing.value)  # listed, then moved by another run: try again
    for storage in (PermissionError(13, "Permission denied"), OSError(5, "Input/output error"),
                    OSError("Failed to open local file 'x'. Detail: [errno 116] Stale file "
                            "handle")):
        assert not is_torn(storage), storage
    # The process, not the file: out of memory, interrupted. Tried again, never quarantined.
    for transient in (pa.ArrowMemoryError("malloc of size 1048576 failed"),
                      pa.ArrowCancelled("Operation cancelled"), MemoryError()):
        assert not is_torn(transient), transient
    # Sound bytes read with a contract whose type changed since: the code is to fix, the
    # snapshot to keep.
    typed = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"a": ["x"], "b": [2**40], "c": [1.5]}), typed)
    for column, contract in (("a", pa.int32()), ("b", pa.int32()), ("c", pa.int64()),
                             ("a", pa.list_(pa.int32()))):
        with pytest.raises(pa.ArrowException) as cast:
            pq.read_table(typed, schema=pa.schema([(column, contract)]))
        assert not is_torn(cast.value), cast.value
    # A string column whose bytes were damaged decodes to no UTF-8: torn.
    assert is_torn(UnicodeDecodeError("utf-8", b"\xc7x", 0, 1, "invalid continuation byte"))
