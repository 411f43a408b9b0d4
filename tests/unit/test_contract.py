"""The shared contract: the landing layout is the one already on disk (landed data must stay
findable); the status and time-lag-kind names are the same in the contract, the warehouse
migrations, the quality suite and the Spark transforms, and the roll-up is the same in
Python and Spark."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from groupscope import quality, warehouse
from groupscope.contract import layout
from groupscope.contract.status import (
    ROLL_UP,
    RULES,
    GroupStatus,
    PartitionStatus,
    Rule,
    TimeLagKind,
    count_column,
    group_status,
    severity,
)

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


# --- status names: one set everywhere --------------------------------------------------------

def _statements(table: str) -> list[list[str]]:
    """Per migration, in order, its statements that touch ``mart.<table>``."""
    pattern = re.compile(rf"\bmart\.{table}\b")
    return [[st for st in m.sql.split(";") if pattern.search(st)]
            for m in warehouse.migrations()]


def _names_in_sql(table: str, column: str) -> set[str]:
    """The values the migrations allow in ``mart.<table>.<column>``: from a CHECK (column IN
    (...)), a COMMENT ON COLUMN, or a ``-- A | B`` comment on the column's line. A later
    migration that names them replaces what an earlier one said."""
    found: set[str] = set()
    for statements in _statements(table):
        named: set[str] = set()
        for st in statements:
            for listed in re.findall(rf"CHECK\s*\(\s*{column}\s+IN\s*\(([^)]*)\)", st, re.I):
                named |= set(re.findall(r"'([^']*)'", listed))
            for text in re.findall(rf"COMMENT\s+ON\s+COLUMN\s+mart\.{table}\.{column}\s+IS"
                                   r"\s+'([^']*)'", st, re.I):
                named |= {n.strip() for n in text.split("|")}
            for line in re.findall(rf"^\s*{column}\s+text\b.*--(.*)$", st, re.M):
                tokens = [n.strip() for n in line.split("|")]
                if len(tokens) > 1 and all(re.fullmatch(r"\w+", n) for n in tokens):
                    named |= set(tokens)
        if named:
            found = named
    return found


def _value_set(checks: dict[str, list[Any]], table: str, column: str) -> set[str]:
    (values,) = [args["value_set"] for name, args in checks[table]
                 if name == "ExpectColumnValuesToBeInSet" and args["column"] == column]
    return set(values)


ADD_A_MIGRATION = ("a migration can no longer be edited: a new one must name the set again "
                   "(a CHECK constraint or COMMENT ON COLUMN) when the contract's set changes")


def test_the_migrations_name_the_contracts_statuses_and_time_lag_kinds() -> None:
    assert _names_in_sql("partition_status", "status") == set(PartitionStatus), ADD_A_MIGRATION
    assert _names_in_sql("group_status", "status") == set(GroupStatus), ADD_A_MIGRATION
    assert _names_in_sql("partition_lag", "time_lag_kind") == set(TimeLagKind), ADD_A_MIGRATION


def test_the_group_status_mart_counts_every_partition_status() -> None:
    # Only the statements that define the table: views over it (serve) name other counts.
    defining = re.compile(r"\b(CREATE|ALTER)\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?mart\.group_status\b",
                          re.I)
    columns = {c for statements in _statements("group_status") for st in statements
               if defining.search(st) for c in re.findall(r"\b(\w+_partitions)\b", st)}
    assert columns == {count_column(s) for s in PartitionStatus}


def test_the_quality_suite_checks_the_contracts_sets() -> None:
    checks = quality.mart_checks()
    assert _value_set(checks, "partition_status", "status") == set(PartitionStatus)
    assert _value_set(checks, "group_status", "status") == set(GroupStatus)
    assert _value_set(checks, "partition_lag", "time_lag_kind") == set(TimeLagKind)


def test_the_sql_parser_sees_a_status_added_in_a_later_migration(
        monkeypatch: pytest.MonkeyPatch) -> None:
    later = warehouse.Migration(99, "0099_more", "ALTER TABLE mart.group_status ADD CONSTRAINT"
                                " s CHECK (status IN ('OK', 'WARN', 'ERR', 'DEAD'));")
    own = warehouse.migrations()
    monkeypatch.setattr(warehouse, "migrations", lambda: [*own, later])
    assert _names_in_sql("group_status", "status") == {"OK", "WARN", "ERR", "DEAD"}


# --- status rules and roll-up ------------------------------------------------------------------

def test_every_rule_gives_a_status_once_and_the_last_rule_catches_all() -> None:
    assert [rule for rule, _ in RULES] == list(Rule)
    assert RULES[-1] == (Rule.CONSUMING, PartitionStatus.OK)


def test_the_numbered_rule_table_documents_the_contracts_rules() -> None:
    pytest.importorskip("pyspark")
    from groupscope.analyze import status as spark_status

    documented = re.findall(r"^\d+\. ``(\w+)``\s+(\w+)", spark_status.__doc__ or "", re.M)
    assert documented == [(rule.value, status.value) for rule, status in RULES]


def test_the_roll_up_order() -> None:
    assert [severity(g) for g in (GroupStatus.OK, GroupStatus.WARN, GroupStatus.ERR)] == \
        [0, 1, 2]
    assert set(ROLL_UP) == set(PartitionStatus)
    assert {p: group_status([p]) for p in PartitionStatus} == {
        PartitionStatus.OK: GroupStatus.OK, PartitionStatus.WARN: GroupStatus.WARN,
        PartitionStatus.REWIND: GroupStatus.WARN, PartitionStatus.STALL: GroupStatus.ERR,
        PartitionStatus.STOP: GroupStatus.ERR}
    # The worst partition decides.
    assert group_status([PartitionStatus.OK, PartitionStatus.REWIND]) is GroupStatus.WARN
    assert group_status([PartitionStatus.WARN, PartitionStatus.STALL,
                         PartitionStatus.OK]) is GroupStatus.ERR
    assert group_status([]) is GroupStatus.OK


def test_spark_rolls_up_as_the_contract_does(spark: Any) -> None:
    pytest.importorskip("pyspark")
    from groupscope.analyze.status import group_status as spark_group_status

    ts = datetime(2026, 1, 1, tzinfo=UTC)
    # One group per non-empty combination of partition statuses.
    combos = [c for n in range(1, len(PartitionStatus) + 1)
              for c in itertools.combinations(PartitionStatus, n)]
    rows = [("c", ts, f"g{i}", "t", p, status.value, 10 * p, "why")
            for i, combo in enumerate(combos) for p, status in enumerate(combo)]
    frame = spark.createDataFrame(rows, "cluster string, snapshot_ts timestamp, group_id string,"
                                  " topic string, partition int, status string, lag long,"
                                  " reason string")
    got = {r["group_id"]: r for r in spark_group_status(frame).collect()}
    for i, combo in enumerate(combos):
        row = got[f"g{i}"]
        assert row["status"] == group_status(combo), combo
        assert {s: row[count_column(s)] for s in PartitionStatus} == \
            {s: int(s in combo) for s in PartitionStatus}
