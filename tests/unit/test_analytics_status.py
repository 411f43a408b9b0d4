"""Consumer status rules: a numbered table of cases, each a partition's observations (seconds,
committed offset, high watermark, members) and the status and rule expected at the last one,
with the reason the answer is right."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from groupscope.analyze.status import StatusSettings, group_status, partition_status
from groupscope.contract.status import RULES

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
Obs = tuple[int, int, int, int]  # seconds, committed, high watermark, members


def minutes(*points: tuple[int, int, int]) -> list[Obs]:
    """One observation a minute: (committed, hw, members)."""
    return [(60 * i, c, hw, m) for i, (c, hw, m) in enumerate(points)]


def bursts(until_minute: int) -> list[Obs]:
    """A batch consumer: observed every minute, it advances its offset every 20 minutes (at
    minutes 1, 21 and 41), the log growing steadily."""
    return [(60 * m, 300 * ((m + 19) // 20) if m <= 41 else 900, 900 + 10 * m, 0)
            for m in range(until_minute + 1)]


CASES: list[tuple[int, str, list[Obs], str, str]] = [
    (1, "committing and keeping up: nothing to say",
     minutes(*[(100 * i, 100 * i + 5, 1) for i in range(10)]), "OK", "consuming"),
    (2, "caught up on an idle topic, commits long stopped: Burrow says STOP, it is fine",
     minutes(*[(500, 500, 0) for _ in range(30)]), "OK", "no_lag"),
    (3, "a lag of 1 that never goes away (a transaction marker): not an alarm",
     minutes(*[(499, 500, 1) for _ in range(30)]), "OK", "no_lag"),
    (4, "a single observation: no trend can be judged",
     [(0, 10, 500, 1)], "OK", "too_little_history"),
    (5, "behind, offset frozen for 10 minutes, no members: the consumer is gone",
     minutes(*[(100, 200 + 10 * i, 0) for i in range(11)]), "STOP", "stopped"),
    (6, "behind, offset frozen for 10 minutes, members present: stuck, not gone",
     minutes(*[(100, 200 + 10 * i, 2) for i in range(11)]), "STALL", "stalled"),
    (7, "committing, but lag grows at every observation of the window",
     minutes(*[(100 * i, 150 * i + 10, 1) for i in range(10)]), "WARN", "falling_behind"),
    (8, "the committed offset moved back (a reset to earliest)",
     minutes((900, 1000, 1), (950, 1000, 1), (10, 1000, 1)), "REWIND", "rewind"),
    (9, "bursts: commits every 20 minutes, now 25 minutes into a pause; its own rhythm says "
        "wait (threshold 2 x 20 min)", bursts(65), "OK", "consuming"),
    (10, "bursts, but now silent for 50 minutes: beyond twice its longest pause",
     bursts(90), "STOP", "stopped"),
    (11, "frozen for only 4 minutes (below the 5 minute floor): not yet STOP",
     minutes(*[(100, 200 + 10 * i, 0) for i in range(5)]), "OK", "consuming"),
    (12, "lag grew but the offset also fell back first: REWIND is the news",
     minutes((500, 600, 1), (200, 700, 1), (300, 800, 1)), "REWIND", "rewind"),
    (13, "lag grows but only two observations: a trend needs three",
     minutes((100, 150, 1), (150, 300, 1)), "OK", "consuming"),
]

SCHEMA = StructType([
    StructField("cluster", StringType(), False), StructField("snapshot_ts", TimestampType()),
    StructField("group_id", StringType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("committed_offset", LongType()),
    StructField("high_watermark", LongType()), StructField("lag", LongType()),
])
GROUPS = StructType([
    StructField("cluster", StringType(), False), StructField("snapshot_ts", TimestampType()),
    StructField("group_id", StringType()), StructField("member_count", IntegerType()),
])


def _evaluate(spark: SparkSession, settings: StatusSettings | None = None) -> dict[int, Any]:
    lag_rows, group_rows = [], []
    for number, _, observations, _, _ in CASES:
        for seconds, committed, hw, members in observations:
            ts = T0 + timedelta(seconds=seconds)
            lag_rows.append(("c", ts, f"case-{number}", "t", 0, committed, hw, hw - committed))
            group_rows.append(("c", ts, f"case-{number}", members))
    result = partition_status(spark.createDataFrame(lag_rows, SCHEMA),
                              spark.createDataFrame(group_rows, GROUPS),
                              settings or StatusSettings())
    last: dict[int, Any] = {}
    for row in result.collect():
        number = int(row["group_id"].split("-")[1])
        if number not in last or row["snapshot_ts"] > last[number]["snapshot_ts"]:
            last[number] = row
    return last


def test_status_rules_table(spark: SparkSession) -> None:
    last = _evaluate(spark)
    got = {n: (last[n]["status"], last[n]["rule"]) for n, *_ in CASES}
    want = {n: (status, rule) for n, _, _, status, rule in CASES}
    assert got == want
    assert {rule for *_, rule in CASES} == {name for name, _ in RULES}  # every rule exercised
    assert "unchanged for 600 s" in last[5]["reason"]


def test_group_status_rolls_up_the_worst_partition(spark: SparkSession) -> None:
    rows = [("c", T0, "g", "t", p, 100, 100 + lag, lag) for p, lag in ((0, 0), (1, 5))]
    rows += [("c", T0 + timedelta(minutes=m), "g", "t", 1, 100, 100 + 5 + m, 5 + m)
             for m in range(1, 12)]
    rows += [("c", T0 + timedelta(minutes=m), "g", "t", 0, 100 + m, 100 + m, 0)
             for m in range(1, 12)]
    groups = [("c", T0 + timedelta(minutes=m), "g", 0) for m in range(12)]
    partitions = partition_status(spark.createDataFrame(rows, SCHEMA),
                                  spark.createDataFrame(groups, GROUPS))
    latest = group_status(partitions).orderBy("snapshot_ts").collect()[-1]
    assert (latest["status"], latest["stop_partitions"], latest["ok_partitions"]) == ("ERR", 1, 1)
    assert (latest["worst_topic"], latest["worst_partition"]) == ("t", 1)
