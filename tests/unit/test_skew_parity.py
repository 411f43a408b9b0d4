"""Skew has one definition (groupscope.contract.skew) and two implementations: the what-if's
Python (simulate.whatif.skew, one assignment at a time) and the skew job's Spark column
expressions (analyze.skew.group_skew, every group of every snapshot). The same cases through
both give the same figures, and both give them under the contract's names, in its order."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from groupscope import warehouse
from groupscope.contract.model import TopicPartition
from groupscope.contract.skew import FIELDS, MemberLoad, skew
from groupscope.contract.tables import WHATIF_SCHEMA
from groupscope.simulate import whatif

TS = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
HIGH_WATERMARK = 1000

# (case, {member: partitions of topic "t" it currently owns}, {partition: lag, None: no
# commit}, the figures the contract gives, checked beside the parity).
Case = tuple[str, dict[str, list[int]], dict[int, int | None], dict[str, Any]]
CASES: list[Case] = [
    ("balanced, equal lag: the smallest member id is the most lagged",
     {"b": [0, 1], "a": [2, 3]}, {0: 5, 1: 5, 2: 5, 3: 5},
     {"max_minus_min": 0, "coefficient_of_variation": 0.0, "most_lagged_member": "a",
      "most_lagged_share": 0.5}),
    ("an idle member",
     {"x": [0, 1], "y": []}, {0: 30, 1: 10},
     {"idle_members": 1, "max_minus_min": 2, "coefficient_of_variation": 1.0,
      "most_lagged_member": "x", "most_lagged_share": 1.0}),
    ("no partitions at all: no mean, no variation",
     {"a": [], "b": []}, {},
     {"partitions": 0, "max_minus_min": 0, "coefficient_of_variation": None,
      "idle_members": 2, "most_lagged_member": None, "most_lagged_share": None}),
    ("no positive lag: caught up, beyond the high watermark, never committed",
     {"a": [0, 1], "b": [2]}, {0: 0, 1: -3, 2: None},
     {"most_lagged_member": None, "most_lagged_share": None}),
    ("negative lag does not offset positive lag",
     {"a": [0], "b": [1]}, {0: -50, 1: 20},
     {"most_lagged_member": "b", "most_lagged_share": 1.0}),
    ("a tie on lag among three, ids out of order and not ASCII",
     {"é": [0], "z": [1], "Z": [2], "m": [3]}, {0: 7, 1: 7, 2: 7, 3: 1},
     {"most_lagged_member": "Z", "most_lagged_share": 7 / 22}),
    # max_by(member_id, lag) keeps whichever of equals Spark meets first: here not the
    # smallest id.
    ("a tie among ten members, ids shuffled",
     {f"m{i:02d}": [i] for i in (17, 3, 11, 19, 5, 10, 8, 14, 2, 9)}, {i: 5 for i in range(20)},
     {"most_lagged_member": "m02", "most_lagged_share": 0.1}),
    ("a partition two members claim counts once, for the smallest id",
     {"b": [0, 1], "a": [0]}, {0: 10, 1: 1},
     {"partitions": 3, "most_lagged_member": "a", "most_lagged_share": 10 / 11}),
    ("a committed partition nobody owns is not the members' lag",
     {"a": [0], "b": [1]}, {0: 4, 1: 6, 2: 1000},
     {"most_lagged_member": "b", "most_lagged_share": 0.6}),
    ("one member",
     {"solo": [0, 1, 2]}, {0: 1, 1: 2, 2: 3},
     {"members": 1, "coefficient_of_variation": 0.0, "most_lagged_share": 1.0}),
    ("uneven: 3, 1, 0",
     {"m1": [0, 1, 2], "m2": [3], "m3": []}, {0: 10, 1: 20, 2: 0, 3: 70},
     {"max_minus_min": 3, "coefficient_of_variation": (14 / 9) ** 0.5 / (4 / 3),
      "idle_members": 1, "most_lagged_member": "m2", "most_lagged_share": 0.7}),
]


def _python(members: dict[str, list[int]], lags: dict[int, int | None]) -> dict[str, object]:
    assignment = {m: tuple(TopicPartition("t", p) for p in parts) for m, parts in members.items()}
    known = {TopicPartition("t", p): lag for p, lag in lags.items() if lag is not None}
    return whatif.skew(assignment, known).as_record()


def _same(a: object, b: object) -> bool:
    # Spark's population standard deviation accumulates differently from Python's two passes:
    # the last bits of a float may differ, nothing more.
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-15)
    return a == b and type(a) is type(b)


def test_the_cases_give_the_contracts_figures() -> None:
    for name, members, lags, expected in CASES:
        got = _python(members, lags)
        assert {k: got[k] for k in expected} == pytest.approx(expected), name


def test_spark_and_python_give_the_same_figures(spark: Any) -> None:
    pytest.importorskip("pyspark")
    from groupscope.analyze.io import spark_schema
    from groupscope.analyze.lag import partition_lag
    from groupscope.analyze.skew import SNAPSHOT_GROUP, group_skew

    def frame(table: str, rows: list[dict[str, Any]]) -> Any:
        schema = spark_schema(table)
        return spark.createDataFrame(
            [tuple({"cluster": "c", "snapshot_ts": TS, **r}.get(f.name) for f in schema.fields)
             for r in rows], schema)

    groups, members, assignments, committed = [], [], [], []
    for name, owners, lags, _ in CASES:
        groups.append({"group_id": name, "group_type": "classic", "state": "Stable",
                       "protocol_type": "consumer", "assignor": "range",
                       "coordinator_mismatch": False, "described": True,
                       "member_count": len(owners)})
        for member, parts in owners.items():
            members.append({"group_id": name, "member_id": member, "client_id": "c",
                            "host": "/h"})
            assignments += [{"group_id": name, "member_id": member, "kind": "current",
                             "topic": "t", "partition": p} for p in parts]
        committed += [{"group_id": name, "topic": "t", "partition": p,
                       "committed_offset": HIGH_WATERMARK - lag}
                      for p, lag in lags.items() if lag is not None]
    partitions = {p for _, _, lags, _ in CASES for p in lags} | \
        {p for _, owners, _, _ in CASES for parts in owners.values() for p in parts}
    logs = [{"topic": "t", "partition": p, "log_start_offset": 0,
             "high_watermark": HIGH_WATERMARK, "last_stable_offset": HIGH_WATERMARK}
            for p in sorted(partitions)]

    # As the skew job wires them (analyze.jobs.skew_frames).
    owned = frame("member_assignments", assignments)
    lag = partition_lag(frame("committed_offsets", committed), frame("partition_offsets", logs),
                        owned)
    result = group_skew(frame("group_members", members), owned,
                        frame("consumer_groups", groups), lag)
    assert result.columns == [*SNAPSHOT_GROUP, "group_type", "strategy", *FIELDS]
    rows = {r["group_id"]: r.asDict() for r in result.collect()}

    for name, owners, lags, _ in CASES:
        python, from_spark = _python(owners, lags), {f: rows[name][f] for f in FIELDS}
        assert all(_same(from_spark[f], python[f]) for f in FIELDS), \
            f"{name}: spark {from_spark} != python {python}"


def test_skew_of_an_empty_group() -> None:
    # The what-if only looks at groups with members, and the mart only has rows for them:
    # the contract still answers.
    assert skew({}).as_record() == {
        "members": 0, "partitions": 0, "max_minus_min": 0, "coefficient_of_variation": None,
        "idle_members": 0, "most_lagged_member": None, "most_lagged_share": None}
    assert skew({"a": MemberLoad(0, 0)}).idle_members == 1


def test_the_marts_have_the_contracts_figures_in_its_order() -> None:
    assert [n for n in WHATIF_SCHEMA.names if n in FIELDS] == list(FIELDS)
    sql = "\n".join(m.sql for m in warehouse.migrations())
    (group_skew,) = re.findall(r"CREATE TABLE mart\.group_skew \((.*?)\n\);", sql, re.S)
    columns = re.findall(r"(\w+) (?:integer|text|double precision|timestamptz)", group_skew)
    assert [c for c in columns if c in FIELDS] == list(FIELDS)
