"""The live analytics against the real things: snapshots taken by the real collector from a real
Kafka, stamped at chosen times, landed and loaded into a real PostgreSQL; the live path runs on
a real Spark Connect server (one per test session) and computes the lag and status marts of
the new snapshots only; a run with nothing new writes nothing; its rows equal the hourly lag
job's; and the live DAG runs through ``dag.test()``, on Spark Connect and, without a Connect
connection, through spark-submit."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kafkautil import commit_offsets, create_topic, produce_counts
from sqlalchemy import text

from groupscope import pipeline, warehouse
from groupscope.analyze.io import Interval
from groupscope.analyze.jobs import JobArgs
from groupscope.collect.collector import take_snapshot
from groupscope.contract.cluster import ClusterConfig
from groupscope.land.snapshots import LandedSnapshot
from groupscope.pipeline import LAG_MARTS
from groupscope.pipeline import land_snapshot as land
from groupscope_dev.airflow import (
    LocalAirflow,
    kafka_connection,
    spark_connect_connection,
    spark_connection,
    warehouse_connection,
)
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.ports import free_ports
from groupscope_dev.postgres import LocalPostgres
from groupscope_dev.spark_connect import SparkConnectServer

pytestmark = pytest.mark.integration
TESTS = Path(__file__).resolve().parents[1]
# When the snapshots are stamped, in minutes: three far apart, then one a minute. The span
# (79 min) is longer than the live path reads (its windows, about 70 min) and than it
# computes after downtime (an hour): the live and the hourly job read different histories.
MINUTES = [0, 25, 50, 75, 76, 77, 78, 79]


def _snapshots(kafka: KafkaCluster, root: Path, cluster: str,
               stamps: list[datetime]) -> list[LandedSnapshot]:
    """One landed snapshot per stamp of a topic written to between snapshots, a group that
    keeps committing a little behind and one that committed once."""
    topic, moving, stuck = f"lv-{cluster}", f"moving-{cluster}", f"stuck-{cluster}"
    create_topic(kafka.bootstrap, topic, 2)
    config = ClusterConfig(cluster, {"bootstrap.servers": kafka.bootstrap})
    landed, ends = [], [0, 0]
    for i, ts in enumerate(stamps):
        counts = produce_counts(kafka.bootstrap, topic, [5 + i, 3])
        ends = [e + c for e, c in zip(ends, counts, strict=True)]
        commit_offsets(kafka.bootstrap, moving, {(topic, p): max(0, e - 4 + (i % 3))
                                                 for p, e in enumerate(ends)})
        if i == 1:
            commit_offsets(kafka.bootstrap, stuck, {(topic, 0): ends[0]})
        landed.append(land(take_snapshot(config, 15.0, ts), root))
    return landed


def _load(engine: Any, snapshots: list[LandedSnapshot]) -> None:
    for s in snapshots:
        warehouse.load_landed(engine, s)


def _marts(engine: Any, cluster: str) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        return {t: sorted(tuple(r) for r in conn.execute(
            text(f"SELECT * FROM mart.{t} WHERE cluster = :c"), {"c": cluster}))
            for t in LAG_MARTS}


def _snapshot_times(engine: Any, table: str, cluster: str) -> list[datetime]:
    with engine.connect() as conn:
        return list(conn.execute(text(
            f"SELECT DISTINCT snapshot_ts FROM mart.{table} WHERE cluster = :c ORDER BY 1"),
            {"c": cluster}).scalars())


def _live(server: SparkConnectServer, url: str, root: Path, cluster: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(TESTS / "live_harness.py"), server.url, url,
                           str(root), cluster], capture_output=True, text=True, timeout=600,
                          check=False)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


@pytest.fixture(scope="module")
def live(kafka: KafkaCluster, spark_connect: SparkConnectServer, postgres: LocalPostgres,
         warehouse_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Six snapshots loaded, a live run; two more, a live run; then a run with nothing new."""
    cluster = f"live{uuid.uuid4().hex[:8]}"
    root = tmp_path_factory.mktemp("live-landing")
    base = datetime(2026, 11, 21, 8, 40, 1, 123456, tzinfo=UTC)
    stamps = [base + timedelta(minutes=m) for m in MINUTES]
    snapshots = _snapshots(kafka, root, cluster, stamps)
    _load(warehouse_engine, snapshots[:6])
    first = _live(spark_connect, postgres.url, root, cluster)
    after_first = _marts(warehouse_engine, cluster)
    _load(warehouse_engine, snapshots[6:])
    second = _live(spark_connect, postgres.url, root, cluster)
    after_second = _marts(warehouse_engine, cluster)
    nothing_new = _live(spark_connect, postgres.url, root, cluster)
    return {"cluster": cluster, "root": root, "stamps": stamps, "runs": [first, second,
            nothing_new], "after": [after_first, after_second, _marts(warehouse_engine,
                                                                       cluster)]}


def test_live_on_spark_connect_computes_only_the_new_snapshots(
        live: dict[str, Any], warehouse_engine: Any) -> None:
    stamps, cluster = live["stamps"], live["cluster"]
    first, second, nothing_new = live["runs"]
    # The first run: at most an hour before the newest snapshot (the first is older).
    assert (first["snapshots"], first["start"], first["end"]) == (
        5, stamps[1].isoformat(), (stamps[5] + timedelta(microseconds=1)).isoformat())
    assert first["rows"]["partition_status"] > 0 and first["rows"]["group_status"] > 0
    assert set(first["rows"]) == set(LAG_MARTS)
    # The second: the two new snapshots only; the earlier rows are left as they were.
    assert (second["snapshots"], second["start"], second["end"]) == (
        2, stamps[6].isoformat(), (stamps[7] + timedelta(microseconds=1)).isoformat())
    after_first, after_second, after_nothing = live["after"]
    for table in LAG_MARTS:
        old = [r for r in after_second[table] if r[1] <= stamps[5]]
        assert old == after_first[table], table
    for table in ("partition_lag", "partition_status", "group_status", "group_lag"):
        assert _snapshot_times(warehouse_engine, table, cluster) == stamps[1:], table
    # Nothing new: nothing computed, nothing replaced.
    assert nothing_new == {"cluster": cluster, "start": None, "end": None, "snapshots": 0,
                           "rows": {}}
    assert after_nothing == after_second
    with warehouse_engine.connect() as conn:
        through = conn.execute(text("SELECT computed_through FROM ops.live_analytics"
                                    " WHERE cluster = :c"), {"c": cluster}).scalar_one()
    assert through == stamps[7] + timedelta(microseconds=1)
    # The groups' statuses were judged on their history (not all first observations).
    rules = {r[6] for r in after_second["partition_status"]}
    assert rules - {"too_little_history"}, rules


def test_live_rows_equal_the_hourly_lag_jobs(live: dict[str, Any], spark: Any,
                                             postgres: Any, warehouse_engine: Any) -> None:
    stamps, cluster = live["stamps"], live["cluster"]
    hour = stamps[0].replace(minute=0, second=0, microsecond=0)
    job = JobArgs(live["root"], cluster, Interval(hour, hour + timedelta(hours=2)),
                  postgres.url, timedelta(hours=6))
    pipeline.analytics(spark, job, "lag")  # the hourly job, replacing the live rows
    batch = _marts(warehouse_engine, cluster)
    live_rows = live["after"][1]
    for table in LAG_MARTS:
        # The batch also computed the first snapshot, which the live path left to it.
        assert [r for r in batch[table] if r[1] > stamps[0]] == live_rows[table], table
    assert _snapshot_times(warehouse_engine, "partition_status", cluster) == stamps


# --- the live DAG -------------------------------------------------------------------------


def _harness(airflow: LocalAirflow, *args: str, **env: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(TESTS / "airflow_harness.py"), *args],
                          env={**airflow.environment(), **env}, capture_output=True, text=True,
                          timeout=900, check=False)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"harness {args}:\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["log"] = done.stdout + done.stderr
    return result


def test_live_dag_on_spark_connect_and_through_spark_submit(
        kafka: KafkaCluster, spark_connect: SparkConnectServer, postgres: LocalPostgres,
        warehouse_engine: Any, tmp_path: Path) -> None:
    cluster = f"lvdag{uuid.uuid4().hex[:8]}"
    landing = tmp_path / "landing"
    env = dict([kafka_connection(cluster, {"bootstrap.servers": kafka.bootstrap}),
                warehouse_connection(postgres.url), spark_connection("local[2]")])
    env.update({"GROUPSCOPE_LANDING": str(landing), "GROUPSCOPE_ALERT_LOG":
                str(tmp_path / "alerts.jsonl"), "GROUPSCOPE_RETRY_DELAY_S": "1"})
    api_port, worker_logs, trigger_logs = free_ports(3)
    airflow = LocalAirflow(tmp_path / "airflow", api_port, (worker_logs, trigger_logs), env)
    airflow.migrate()
    now = datetime.now(UTC)
    stamps = [now - timedelta(seconds=90), now - timedelta(seconds=60),
              now - timedelta(seconds=30)]
    snapshots = _snapshots(kafka, landing, cluster, stamps)
    dag_id = f"groupscope_live_{cluster}"

    # (How the live DAG parses is asserted in test_airflow.py's parse test.)
    # On Spark Connect: the two loaded snapshots.
    _load(warehouse_engine, snapshots[:2])
    connect = dict([spark_connect_connection(spark_connect.url)])
    run = _harness(airflow, "test", dag_id, **connect)
    assert run["state"] == "success", run["log"][-5000:]
    assert run["tasks"] == {"live_marts": "success", "evaluate_alerts": "success"}
    assert "on Spark Connect" in run["log"]
    assert _snapshot_times(warehouse_engine, "partition_status", cluster) == stamps[:2]

    # No Connect connection: the lag job through spark-submit, over the new snapshot only.
    before = _marts(warehouse_engine, cluster)
    _load(warehouse_engine, snapshots[2:])
    run = _harness(airflow, "test", dag_id)
    assert run["state"] == "success", run["log"][-5000:]
    assert "through spark-submit" in run["log"]
    assert _snapshot_times(warehouse_engine, "partition_status", cluster) == stamps
    after = _marts(warehouse_engine, cluster)
    for table in LAG_MARTS:
        assert [r for r in after[table] if r[1] <= stamps[1]] == before[table], table
    with warehouse_engine.connect() as conn:
        through = conn.execute(text("SELECT computed_through FROM ops.live_analytics"
                                    " WHERE cluster = :c"), {"c": cluster}).scalar_one()
    assert through == stamps[2] + timedelta(microseconds=1)


def test_the_live_watermark_moves_only_over_the_snapshots_the_job_read(
        kafka: KafkaCluster, spark: Any, postgres: LocalPostgres, warehouse_engine: Any,
        tmp_path: Path) -> None:
    """A worker that cannot see the landing zone computes nothing: the watermark stays (so
    analytics_stale fires) and the run fails; one that sees all but the newest snapshot's
    files moves the watermark up to that snapshot, and the next run computes it."""
    cluster = f"blind{uuid.uuid4().hex[:8]}"
    root = tmp_path / "landing"
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    stamps = [base + timedelta(minutes=m) for m in (0, 1, 2)]
    snapshots = _snapshots(kafka, root, cluster, stamps)
    _load(warehouse_engine, snapshots)

    def watermark() -> datetime | None:
        with warehouse_engine.connect() as conn:
            return conn.execute(text("SELECT computed_through FROM ops.live_analytics"
                                     " WHERE cluster = :c"), {"c": cluster}).scalar_one_or_none()

    blind = tmp_path / "not-the-landing"
    blind.mkdir()
    with pytest.raises(pipeline.LiveReadNothing, match="hold none of the snapshots"):
        pipeline.live_analytics(spark, postgres.url, blind, cluster, datetime.now(UTC))
    assert watermark() is None

    newest = snapshots[-1].path("committed_offsets")
    aside = tmp_path / "aside.parquet"
    newest.rename(aside)  # the newest snapshot's offsets not visible to this run
    summary = pipeline.live_analytics(spark, postgres.url, root, cluster, datetime.now(UTC))
    assert summary["end"] == stamps[-1].isoformat()
    assert watermark() == stamps[-1]

    aside.rename(newest)
    summary = pipeline.live_analytics(spark, postgres.url, root, cluster, datetime.now(UTC))
    assert (summary["start"], summary["end"]) == (
        stamps[-1].isoformat(), (stamps[-1] + timedelta(microseconds=1)).isoformat())
    assert watermark() == stamps[-1] + timedelta(microseconds=1)
    assert _snapshot_times(warehouse_engine, "partition_lag", cluster) == stamps
