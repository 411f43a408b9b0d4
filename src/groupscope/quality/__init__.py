"""Data-quality gates between the stages, as Great Expectations 1.x suites over pandas frames.

Two suites:

- ``landed_snapshot``: one landed snapshot, before it is loaded into the warehouse. Keys are
  present and unique in every table (Parquet enforces neither), every row belongs to the
  manifest's cluster, the snapshot is complete against its own manifest (one manifest row;
  as many groups, partitions and collection errors as it counts), offsets are ordered as Kafka
  orders them (log start <= last stable <= high watermark) and partitions, offsets and
  enumerations are in range. A snapshot that fails is rejected: it stays in the landing zone,
  marked, and is never loaded until an operator removes the mark.
- ``marts``: one interval of the analytics marts, after the Spark jobs replaced it. The rule
  ``log start <= committed <= high watermark`` holds for every partition row unless the row is
  flagged (``lag_beyond_retention``, or a negative lag: committed beyond the high watermark);
  ``lag = high watermark - committed``; statuses are in their closed sets; counts are not
  negative; and every loaded snapshot of the interval has exactly one lag row per partition
  that a group committed or owned (the mart is complete). Keys are not checked there: the
  warehouse's primary keys enforce them.

A landed snapshot whose manifest or a data file cannot be read is not a verdict on its data
but a torn file: it is quarantined (``land.snapshots.quarantine``: moved out of the landing,
with the reason) and kept as a failed result of a third suite, ``landed_files`` (the
``quality_gate_failed`` condition reports it for a day), and the other snapshots go on. So is
one that passed the checks but whose rows the warehouse refuses (``refused``: a value
PostgreSQL cannot store, such as a NUL byte in a group id): loading it again would fail the
same way, and it would hold up every later load of its cluster.

Every run is kept in ``ops.quality_results`` (passed or not). The expectations themselves are
plain data (``landed_checks``, ``mart_checks``) so they can be read and tested without GE.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from groupscope.contract import layout
from groupscope.contract.model import GroupType, TaskRole
from groupscope.contract.status import GroupStatus, PartitionStatus, TimeLagKind
from groupscope.contract.tables import KEYS, SCHEMAS
from groupscope.land.snapshots import READ_ERRORS, LandedSnapshot, is_torn

LANDED_SUITE = "landed_snapshot"
MARTS_SUITE = "marts"
FILES_SUITE = "landed_files"
_READABLE = "readable"
_LOADABLE = "accepted_by_the_warehouse"

# (GE expectation class name, its arguments); a ``row_condition`` is (column, value): only
# the rows where the column equals the value are checked.
Check = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Failure:
    table: str
    expectation: str
    arguments: dict[str, Any]
    observed: str

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"{self.table}: {self.expectation}({args}) failed: {self.observed}"


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    cluster: str
    subject: str
    expectations: int
    failures: tuple[Failure, ...] = field(default=())

    @property
    def success(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        head = (f"{self.suite} {self.subject}: {self.expectations - len(self.failures)}/"
                f"{self.expectations} expectations passed")
        return "\n".join([head, *(f"  - {f.describe()}" for f in self.failures)])


class QualityGateFailed(RuntimeError):
    """A suite failed: what it checked must not flow downstream."""

    def __init__(self, results: list[SuiteResult], loaded: Sequence[str] = ()) -> None:
        failed = [r for r in results if not r.success]
        passed = (f" (the {len(loaded)} that passed were loaded)" if loaded else "")
        super().__init__(
            f"data quality gate failed for {len(failed)} of {len(results)} subject(s){passed}:"
            "\n" + "\n".join(r.summary() for r in failed))
        self.results = results
        self.loaded = list(loaded)  # the ids loaded in the same run (pipeline.check_and_load)


# --- the landed-snapshot suite ------------------------------------------------------------

def landed_checks(manifest: Mapping[str, Any]) -> dict[str, list[Check]]:
    """The expectations for one landed snapshot, whose manifest row is ``manifest``."""
    checks: dict[str, list[Check]] = {}
    for table, keys in KEYS.items():
        checks[table] = [
            *(("ExpectColumnValuesToNotBeNull", {"column": c}) for c in keys),
            ("ExpectCompoundColumnsToBeUnique", {"column_list": list(keys)}),
            ("ExpectColumnValuesToBeInSet", {"column": "cluster",
                                             "value_set": [manifest["cluster"]]}),
        ]
        if "partition" in SCHEMAS[table].names:
            checks[table].append(("ExpectColumnValuesToBeBetween",
                                  {"column": "partition", "min_value": 0}))
    checks["snapshots"].append(("ExpectTableRowCountToEqual", {"value": 1}))
    checks["consumer_groups"] += [
        ("ExpectTableRowCountToEqual", {"value": manifest["group_count"]}),
        ("ExpectColumnValuesToBeInSet", {"column": "group_type",
                                         "value_set": [t.value for t in GroupType]}),
        ("ExpectColumnValuesToBeBetween", {"column": "member_count", "min_value": 0}),
    ]
    checks["partition_offsets"] += [
        ("ExpectTableRowCountToEqual", {"value": manifest["partition_count"]}),
        *(("ExpectColumnPairValuesAToBeGreaterThanB",
           {"column_A": high, "column_B": low, "or_equal": True,
            "ignore_row_if": "either_value_is_missing"})
          for high, low in (("last_stable_offset", "log_start_offset"),
                            ("high_watermark", "last_stable_offset"),
                            ("high_watermark", "log_start_offset"))),
        ("ExpectColumnValuesToBeBetween", {"column": "log_start_offset", "min_value": 0}),
    ]
    checks["committed_offsets"].append(
        ("ExpectColumnValuesToBeBetween", {"column": "committed_offset", "min_value": 0}))
    checks["member_assignments"].append(
        ("ExpectColumnValuesToBeInSet", {"column": "kind", "value_set": ["current", "target"]}))
    checks["collection_errors"].append(
        ("ExpectTableRowCountToEqual", {"value": manifest["error_count"]}))
    checks["share_partition_offsets"] += [
        ("ExpectColumnValuesToBeBetween", {"column": column, "min_value": 0})
        for column in ("start_offset", "lag")]
    checks["streams_member_tasks"] += [
        ("ExpectColumnValuesToBeInSet", {"column": "kind", "value_set": ["current", "target"]}),
        ("ExpectColumnValuesToBeInSet", {"column": "role",
                                         "value_set": [r.value for r in TaskRole]}),
    ]
    return checks


def check_landed(landed: LandedSnapshot) -> SuiteResult:
    """Runs the landed-snapshot suite with the Arrow validator (``validate_arrow``: what
    Great Expectations would say, in milliseconds instead of seconds; it runs once per
    snapshot, on the path to the alerts). A snapshot whose files (its what-if's too) cannot
    even be read is ``unreadable``, with the reason."""
    subject = landed.snapshot_id
    try:
        tables = landed.read()
        manifest_rows = tables["snapshots"].to_pylist()
        landed.read_whatif()  # loaded with it: a torn what-if file would fail every load
    except READ_ERRORS as exc:
        if not is_torn(exc):
            raise
        return unreadable(landed.cluster, subject, f"{type(exc).__name__}: {exc}")
    if len(manifest_rows) != 1:
        return SuiteResult(LANDED_SUITE, landed.cluster, subject, 1, (
            Failure("snapshots", "ExpectTableRowCountToEqual", {"value": 1},
                    f"observed {len(manifest_rows)}"),))
    expectations, failures = validate_arrow(tables, landed_checks(manifest_rows[0]))
    return SuiteResult(LANDED_SUITE, landed.cluster, subject, expectations, tuple(failures))


def unreadable(cluster: str, snapshot_id: str, reason: str) -> SuiteResult:
    """The result of a landed snapshot whose files cannot be read (``FILES_SUITE``)."""
    return SuiteResult(FILES_SUITE, cluster, snapshot_id, 1,
                       (Failure("*", _READABLE, {}, reason),))


def refused(cluster: str, snapshot_id: str, reason: str) -> SuiteResult:
    """The result of a landed snapshot whose rows the warehouse refused (``FILES_SUITE``:
    quarantined like a torn one)."""
    return SuiteResult(FILES_SUITE, cluster, snapshot_id, 1,
                       (Failure("*", _LOADABLE, {}, reason),))


def is_unreadable(result: SuiteResult) -> bool:
    return result.suite == FILES_SUITE


# --- the marts suite -----------------------------------------------------------------------

def mart_checks() -> dict[str, list[Check]]:
    unless_flagged = "either_value_is_missing"
    return {
        "partition_lag": [
            ("ExpectColumnPairValuesAToBeGreaterThanB",
             {"column_A": "committed_offset", "column_B": "log_start_offset", "or_equal": True,
              "ignore_row_if": unless_flagged,
              "row_condition": ("lag_beyond_retention", False)}),
            ("ExpectColumnPairValuesAToBeGreaterThanB",
             {"column_A": "high_watermark", "column_B": "committed_offset", "or_equal": True,
              "ignore_row_if": unless_flagged,
              "row_condition": ("negative_lag", False)}),
            ("ExpectColumnPairValuesToBeEqual",
             {"column_A": "lag", "column_B": "high_watermark_minus_committed",
              "ignore_row_if": unless_flagged}),
            ("ExpectColumnValuesToBeInSet",
             {"column": "time_lag_kind", "value_set": [k.value for k in TimeLagKind]}),
            ("ExpectColumnValuesToBeBetween", {"column": "catch_up_s", "min_value": 0}),
        ],
        "partition_status": [
            ("ExpectColumnValuesToBeInSet",
             {"column": "status", "value_set": [s.value for s in PartitionStatus]}),
        ],
        "group_status": [
            ("ExpectColumnValuesToBeInSet",
             {"column": "status", "value_set": [s.value for s in GroupStatus]}),
        ],
        "rebalance_hourly": [
            ("ExpectColumnValuesToBeBetween", {"column": "rebalances", "min_value": 0}),
        ],
        "group_skew": [
            ("ExpectColumnValuesToBeBetween", {"column": "max_minus_min", "min_value": 0}),
            ("ExpectColumnValuesToBeBetween", {"column": "members", "min_value": 0}),
        ],
        "lag_coverage": [
            ("ExpectColumnPairValuesToBeEqual",
             {"column_A": "mart_rows", "column_B": "raw_partitions"}),
        ],
    }


_MART_QUERIES = {
    "partition_lag": """
        SELECT committed_offset, log_start_offset, high_watermark, lag, lag_beyond_retention,
               COALESCE(lag < 0, false) AS negative_lag,
               high_watermark - committed_offset AS high_watermark_minus_committed,
               time_lag_kind, catch_up_s
        FROM mart.partition_lag
        WHERE cluster = :cluster AND snapshot_ts >= :start AND snapshot_ts < :end""",
    "partition_status": """SELECT status FROM mart.partition_status
        WHERE cluster = :cluster AND snapshot_ts >= :start AND snapshot_ts < :end""",
    "group_status": """SELECT status FROM mart.group_status
        WHERE cluster = :cluster AND snapshot_ts >= :start AND snapshot_ts < :end""",
    "rebalance_hourly": """SELECT rebalances FROM mart.rebalance_hourly
        WHERE cluster = :cluster AND period_start >= :start AND period_start < :end""",
    "group_skew": """SELECT max_minus_min, members FROM mart.group_skew
        WHERE cluster = :cluster AND snapshot_ts >= :start AND snapshot_ts < :end""",
    # Per loaded snapshot: the partitions a group committed, owned or holds a share start
    # offset on (what the lag job must have a row for) against the rows it wrote. (Without
    # the share offsets, a share group with no member failed the gate: the ./run demo's
    # killed queue.)
    "lag_coverage": """
        WITH s AS (SELECT cluster, snapshot_ts FROM raw.snapshots
                   WHERE cluster = :cluster AND snapshot_ts >= :start AND snapshot_ts < :end),
        raw_rows AS (
            SELECT cluster, snapshot_ts, group_id, topic, partition FROM raw.committed_offsets
            JOIN s USING (cluster, snapshot_ts)
            UNION
            SELECT cluster, snapshot_ts, group_id, topic, partition
            FROM raw.share_partition_offsets JOIN s USING (cluster, snapshot_ts)
            UNION
            SELECT cluster, snapshot_ts, group_id, topic, partition FROM raw.member_assignments
            JOIN s USING (cluster, snapshot_ts) WHERE kind = 'current')
        SELECT s.snapshot_ts,
               (SELECT count(*) FROM raw_rows r WHERE r.snapshot_ts = s.snapshot_ts)
                   AS raw_partitions,
               (SELECT count(*) FROM mart.partition_lag m
                WHERE m.cluster = s.cluster AND m.snapshot_ts = s.snapshot_ts) AS mart_rows
        FROM s""",
}


def check_marts(engine: Any, cluster: str, start: datetime, end: datetime) -> SuiteResult:
    """Runs the marts suite over [start, end) of one cluster."""
    import pandas as pd  # type: ignore[import-untyped]
    from sqlalchemy import text

    from groupscope.warehouse import connect

    params = {"cluster": cluster, "start": start, "end": end}
    frames = {}
    with connect(engine) as conn:
        for name, sql in _MART_QUERIES.items():
            rows = conn.execute(text(sql), params)
            frames[name] = pd.DataFrame(rows.fetchall(), columns=list(rows.keys()))
    subject = f"{start.isoformat()}/{end.isoformat()}"
    expectations, failures = validate(f"{MARTS_SUITE}-{cluster}", frames, mart_checks())
    return SuiteResult(MARTS_SUITE, cluster, subject, expectations, tuple(failures))


# --- running suites and keeping their results ------------------------------------------------

def validate(name: str, frames: Mapping[str, Any],
             checks: Mapping[str, list[Check]]) -> tuple[int, list[Failure]]:
    """Runs ``checks`` (per table) over the pandas ``frames`` with Great Expectations; returns
    how many expectations ran and the failed ones."""
    # GE reports usage over the network by default; the only network here is Kafka's.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas(name)
    count, failures = 0, []
    for table, table_checks in checks.items():
        suite = context.suites.add(gx.ExpectationSuite(name=f"{name}-{table}"))
        for expectation, arguments in table_checks:
            suite.add_expectation(getattr(gxe, expectation)(**_ge_arguments(arguments)))
        definition = context.validation_definitions.add(gx.ValidationDefinition(
            name=f"{name}-{table}", suite=suite,
            data=source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("all")))
        result = definition.run(batch_parameters={"dataframe": frames[table]})
        # GE does not keep the order the expectations were added in: each result names its own.
        for item in result.results:
            count += 1
            if not item.success:
                config = item.expectation_config
                name = _class_name(config.type) if config else "unknown expectation"
                arguments = ({k: v for k, v in config.kwargs.items() if k != "batch_id"}
                             if config else {})
                failures.append(Failure(table, name, arguments, _observed(item)))
    return count, failures


def validate_arrow(tables: Mapping[str, pa.Table],
                   checks: Mapping[str, list[Check]]) -> tuple[int, list[Failure]]:
    """Runs ``checks`` over Arrow ``tables`` as Great Expectations would (``validate``: the
    same expectations, the same verdicts, nulls skipped the same way, failures named alike;
    tests/unit/test_quality.py holds the two to each other), without GE's import and context,
    which cost seconds per run. Only the expectation kinds the checks use are known; another
    is an error, not a pass."""
    count, failures = 0, []
    for table_name, table_checks in checks.items():
        table = tables[table_name]
        for expectation, arguments in table_checks:
            count += 1
            observed = _ARROW_CHECKS[expectation](table, **arguments)
            if observed is not None:
                failures.append(Failure(table_name, expectation, arguments, observed))
    return count, failures


def _unexpected(values: pa.Array | pa.ChunkedArray, bad: Any, total: int) -> str | None:
    """A map expectation's verdict: None when no row is unexpected."""
    import pyarrow.compute as pc

    bad = pc.fill_null(bad, False)
    unexpected = pc.sum(bad).as_py() or 0
    if not unexpected:
        return None
    sample = pc.filter(values, bad).slice(0, 5).to_pylist()
    return f"{unexpected} of {total} rows unexpected, e.g. {sample}"


def _not_null(table: pa.Table, column: str) -> str | None:
    import pyarrow.compute as pc

    values = table[column]
    return _unexpected(values, pc.is_null(values, nan_is_null=True), table.num_rows)


def _in_set(table: pa.Table, column: str, value_set: list[Any]) -> str | None:
    import pyarrow.compute as pc

    values = table[column]
    if pa.types.is_null(values.type):  # nothing but nulls: nothing to check, as in GE
        return None
    present = pc.drop_null(values)
    bad = pc.invert(pc.is_in(present, value_set=pa.array(value_set, values.type)))
    return _unexpected(present, bad, table.num_rows)


def _between(table: pa.Table, column: str, min_value: Any = None,
             max_value: Any = None) -> str | None:
    import pyarrow.compute as pc

    present = pc.drop_null(table[column])
    bad = pa.array([False] * len(present), pa.bool_())
    if min_value is not None:
        bad = pc.or_(bad, pc.less(present, min_value))
    if max_value is not None:
        bad = pc.or_(bad, pc.greater(present, max_value))
    return _unexpected(present, bad, table.num_rows)


def _row_count(table: pa.Table, value: int) -> str | None:
    return None if table.num_rows == value else f"observed {table.num_rows}"


def _compound_unique(table: pa.Table, column_list: list[str]) -> str | None:
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return None
    counts = table.select(column_list).group_by(column_list).aggregate(
        [([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1))
    if repeated.num_rows == 0:
        return None
    unexpected = pc.sum(repeated["count_all"]).as_py()
    sample = [dict(zip(column_list, row, strict=True)) for row in
              zip(*(repeated[c].to_pylist() for c in column_list), strict=True)][:5]
    return f"{unexpected} of {table.num_rows} rows unexpected, e.g. {sample}"


def _pair_verdict(table: pa.Table, column_A: str, column_B: str, ignore_row_if: str,
                  row_condition: tuple[str, Any] | None, unexpected: Any) -> str | None:
    """A column-pair expectation's verdict: ``unexpected(a, b)`` says which rows fail, over
    the rows ``row_condition`` selects that have both values (GE's either_value_is_missing)."""
    import pyarrow.compute as pc

    if ignore_row_if != "either_value_is_missing":
        raise ValueError(f"ignore_row_if={ignore_row_if!r} is not supported")
    total = table.num_rows
    if row_condition is not None:
        column, value = row_condition
        table = table.filter(pc.fill_null(pc.equal(table[column], value), False))
    table = table.filter(pc.and_(pc.is_valid(table[column_A]), pc.is_valid(table[column_B])))
    bad = table.filter(unexpected(table[column_A], table[column_B]))
    if bad.num_rows == 0:
        return None
    sample = list(zip(bad[column_A].to_pylist()[:5], bad[column_B].to_pylist()[:5],
                      strict=True))
    return f"{bad.num_rows} of {total} rows unexpected, e.g. {sample}"


def _a_greater_than_b(table: pa.Table, column_A: str, column_B: str, or_equal: bool = False,
                      ignore_row_if: str = "either_value_is_missing",
                      row_condition: tuple[str, Any] | None = None) -> str | None:
    import pyarrow.compute as pc

    return _pair_verdict(table, column_A, column_B, ignore_row_if, row_condition,
                         pc.less if or_equal else pc.less_equal)


def _pair_equal(table: pa.Table, column_A: str, column_B: str,
                ignore_row_if: str = "either_value_is_missing",
                row_condition: tuple[str, Any] | None = None) -> str | None:
    import pyarrow.compute as pc

    return _pair_verdict(table, column_A, column_B, ignore_row_if, row_condition,
                         pc.not_equal)


_ARROW_CHECKS: dict[str, Any] = {
    "ExpectColumnValuesToNotBeNull": _not_null,
    "ExpectColumnValuesToBeInSet": _in_set,
    "ExpectColumnValuesToBeBetween": _between,
    "ExpectTableRowCountToEqual": _row_count,
    "ExpectCompoundColumnsToBeUnique": _compound_unique,
    "ExpectColumnPairValuesAToBeGreaterThanB": _a_greater_than_b,
    "ExpectColumnPairValuesToBeEqual": _pair_equal,
}


def _ge_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    if "row_condition" not in arguments:
        return arguments
    from great_expectations.expectations.row_conditions import Column

    column, value = arguments["row_condition"]
    return {**arguments, "row_condition": Column(name=column) == value}


def _class_name(expectation_type: str) -> str:
    """``expect_column_values_to_not_be_null`` -> ``ExpectColumnValuesToNotBeNull``."""
    return "".join(word.capitalize() for word in expectation_type.split("_"))


def _observed(item: Any) -> str:
    if item.exception_info and item.exception_info.get("raised_exception"):
        return f"error: {item.exception_info.get('exception_message')}"
    result = item.result or {}
    if "unexpected_count" in result:
        sample = result.get("partial_unexpected_list") or []
        return (f"{result['unexpected_count']} of {result.get('element_count')} rows "
                f"unexpected, e.g. {[_plain(v) for v in sample[:5]]}")
    return f"observed {_plain(result.get('observed_value'))}"


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) else value


def record(engine: Any, results: list[SuiteResult], checked_at: datetime) -> None:
    """Keeps the results in ``ops.quality_results``."""
    from sqlalchemy import text

    from groupscope.warehouse import connect

    with connect(engine) as conn, conn.begin():
        for r in results:
            conn.execute(text(
                "INSERT INTO ops.quality_results (checked_at, cluster, suite, subject, success,"
                " expectations, failed, failures) VALUES (:at, :cluster, :suite, :subject,"
                " :success, :expectations, :failed, CAST(:failures AS jsonb))"
                " ON CONFLICT (cluster, suite, subject, checked_at) DO UPDATE SET"
                " success = EXCLUDED.success, expectations = EXCLUDED.expectations,"
                " failed = EXCLUDED.failed, failures = EXCLUDED.failures"),
                {"at": checked_at, "cluster": r.cluster, "suite": r.suite,
                 "subject": r.subject, "success": r.success, "expectations": r.expectations,
                 "failed": len(r.failures),
                 "failures": json.dumps([{"table": f.table, "expectation": f.expectation,
                                          "arguments": f.arguments, "observed": f.observed}
                                         for f in r.failures], default=str)})


def prune(conn: Any, checked_before: datetime) -> int:
    """Deletes the results of the checks made before ``checked_before``; returns how many.
    Nothing reads further back than a day (``quality_gate_failed``); the rejected snapshots'
    marks stay in the landing zone."""
    from sqlalchemy import text

    return int(conn.execute(text("DELETE FROM ops.quality_results WHERE checked_at < :before"),
                            {"before": checked_before}).rowcount or 0)


# --- rejected landed snapshots ---------------------------------------------------------------

def reject(landed: LandedSnapshot, result: SuiteResult) -> Path:
    """Marks a landed snapshot as rejected (it stays where it is; the mark says why). Removing
    the mark lets the next run check and load it again."""
    mark = layout.rejected_mark(landed.root, landed.cluster, landed.snapshot_id)
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(json.dumps({"snapshot_id": landed.snapshot_id,
                                "snapshot_ts": landed.snapshot_ts.isoformat(),
                                "failures": [f.describe() for f in result.failures]}, indent=2))
    return mark


rejected_ids = layout.rejected_ids
