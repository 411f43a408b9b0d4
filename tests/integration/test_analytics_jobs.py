"""The Spark analytics jobs end to end: snapshots taken by the real collector from a real
cluster (with a producer at a known rate, a slow consumer group and a stuck one), landed, the
offsets topic ingested, the jobs run on Spark local against a real PostgreSQL. Reruns change
nothing, a backfill equals the intervals run one by one, and the estimated time lag is
compared with the exact one."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import unique
from kafkautil import commit_offsets, create_topic
from sqlalchemy import text

from groupscope import pipeline
from groupscope.analyze import jobs
from groupscope.analyze import submit as sparksubmit
from groupscope.analyze.io import Interval
from groupscope.collect.collector import take_snapshot
from groupscope.contract.cluster import ClusterConfig
from groupscope.land.snapshots import landed_snapshots
from groupscope.offsets.ingest import ingest_cluster
from groupscope.pipeline import land_snapshot as land
from groupscope_dev.kafka import KafkaCluster

pytestmark = pytest.mark.integration
RATE = 100  # records/s produced
SNAPSHOT_EVERY_S = 2.0
SYNTHETIC_START = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


class Workload:
    """A producer at RATE records/s with real timestamps and a consumer group that reads and
    commits at half that rate."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        sent, started = 0, time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * RATE)
            while sent < due:
                producer.produce(self.topic, b"x", partition=sent % 2)
                sent += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(10)

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "partition.assignment.strategy": "range"})
        consumer.subscribe([self.topic])
        last_commit = time.monotonic()
        while not self.stop.is_set():
            consumer.poll(1.0 / (RATE / 2))  # about RATE/2 records a second
            if time.monotonic() - last_commit >= 1.0:
                with contextlib.suppress(Exception):  # nothing consumed yet
                    consumer.commit(asynchronous=False)
                last_commit = time.monotonic()
        consumer.close()


@pytest.fixture(scope="module")
def landed(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    bootstrap = kafka.bootstrap
    topic, slow, stuck = unique("an-orders"), unique("an-slow"), unique("an-stuck")
    create_topic(bootstrap, topic, 2)
    root = tmp_path_factory.mktemp("analytics-landing")
    # The same real snapshots, also stamped 12 minutes apart from SYNTHETIC_START (time is
    # passed in), so that hourly jobs have several hours to backfill.
    stamped_root = tmp_path_factory.mktemp("analytics-stamped")
    cluster = ClusterConfig.from_cli(bootstrap, name=unique("an"))
    workload = Workload(bootstrap, topic, slow)
    workload.start()
    stamps: list[datetime] = []
    stuck_at: dict[int, int] = {}
    try:
        for i in range(22):
            if i == 6:
                # The stuck group commits the current end of partition 0 once, mid-window: its
                # record's append time lies inside the history, so it can be interpolated.
                consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
                consumer.close()
                stuck_at[0] = high
                commit_offsets(bootstrap, stuck, {(topic, 0): high})
            ts = datetime.now(UTC)
            snapshot = take_snapshot(cluster, 15.0, ts)
            land(snapshot, root)
            stamps.append(ts)
            land(dataclasses.replace(snapshot,
                                     snapshot_ts=SYNTHETIC_START + timedelta(minutes=12 * i)),
                 stamped_root)
            time.sleep(SNAPSHOT_EVERY_S)
    finally:
        workload.close()
    ingest_cluster(cluster, root, datetime.now(UTC), 15.0, 120.0)
    return {"root": root, "stamped_root": stamped_root,
            "cluster": cluster.name, "stamps": stamps, "topic": topic,
            "slow": slow, "stuck": stuck, "stuck_at": stuck_at}


def _job(data: dict[str, Any], start: datetime, end: datetime, url: str) -> jobs.JobArgs:
    return jobs.JobArgs(data["root"], data["cluster"], Interval(start, end), url,
                        timedelta(hours=1))


def _mart(engine: Any, table: str, cluster: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT * FROM mart.{table} WHERE cluster = :c"),
                            {"c": cluster}).all()
    return sorted(tuple(r) for r in rows)


def _same(got: dict[str, list[tuple[Any, ...]]], want: dict[str, list[tuple[Any, ...]]]) -> None:
    for table in want:
        for g, w in zip(got[table], want[table], strict=True):
            assert g == w, f"{table}: {g} != {w}"


LAG_MARTS = ["partition_lag", "member_lag", "topic_lag", "group_lag", "cluster_lag",
             "partition_status", "group_status"]


def test_lag_job_rerun_and_backfill(landed: dict[str, Any], spark: Any, postgres: Any,
                                    warehouse_engine: Any) -> None:
    stamps = landed["stamps"]
    start = stamps[0]
    end = stamps[-1] + timedelta(seconds=1)
    job = _job(landed, start, end, postgres.url)
    written = pipeline.analytics(spark, job, "lag")
    # Two groups x two partitions (the stuck group only one) x 22 snapshots, less the
    # snapshots before the slow group's first commit or assignment.
    assert written["partition_lag"] >= 22 * 2
    assert written["group_lag"] == len({(r[1], r[2]) for r in _mart(
        warehouse_engine, "partition_lag", landed["cluster"])})
    first = {t: _mart(warehouse_engine, t, landed["cluster"]) for t in LAG_MARTS}

    pipeline.analytics(spark, job, "lag")  # a rerun
    _same({t: _mart(warehouse_engine, t, landed["cluster"]) for t in LAG_MARTS}, first)

    # A backfill of the same span, two intervals one after the other, gives the same rows
    # (the second interval's rows look back across the cut into the first's).
    with warehouse_engine.begin() as conn:
        for t in LAG_MARTS:
            conn.execute(text(f"DELETE FROM mart.{t} WHERE cluster = :c"),
                         {"c": landed["cluster"]})
    cuts = [start + (end - start) * k / 2 for k in range(3)]
    for a, b in itertools.pairwise(cuts):
        piece = _job(landed, a, b, postgres.url)
        pipeline.analytics(spark, piece, "lag")
    _same({t: _mart(warehouse_engine, t, landed["cluster"]) for t in LAG_MARTS}, first)

    statuses = {r[2]: r[3] for r in _mart(warehouse_engine, "group_status", landed["cluster"])}
    assert set(statuses) >= {landed["slow"], landed["stuck"]}

    # The newest snapshot not landed yet when a job lists the landing zone (its collect still
    # writing at the hour's turn): the rows the live run wrote for it stay.
    newest = landed_snapshots(landed["root"], landed["cluster"])[-1].path("snapshots")
    hidden = newest.with_name(".not-yet-" + newest.name)
    newest.rename(hidden)
    try:
        pipeline.analytics(spark, job, "lag")
    finally:
        hidden.rename(newest)
    _same({t: _mart(warehouse_engine, t, landed["cluster"]) for t in LAG_MARTS}, first)


def test_estimated_time_lag_against_the_exact_record_timestamp(
        landed: dict[str, Any], spark: Any, postgres: Any, warehouse_engine: Any) -> None:
    stamps = landed["stamps"]
    job = _job(landed, stamps[0], stamps[-1] + timedelta(seconds=1), postgres.url)
    pipeline.analytics(spark, job, "lag")
    with warehouse_engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT snapshot_ts, time_lag_estimated_s, time_lag_exact_s, time_lag_kind "
            "FROM mart.partition_lag WHERE cluster = :c AND group_id = :g AND partition = 0 "
            "ORDER BY snapshot_ts"), {"c": landed["cluster"], "g": landed["stuck"]}).all()
    compared = [(r.time_lag_estimated_s, r.time_lag_exact_s) for r in rows
                if r.time_lag_exact_s is not None and r.time_lag_kind == "interpolated"]
    assert len(compared) >= 10
    errors = [abs(est - exact) for est, exact in compared]
    print(f"time lag: {len(compared)} points, estimated - exact: max {max(errors):.2f} s, "
          f"mean {sum(errors) / len(errors):.2f} s, at lags up to "
          f"{max(e for _, e in compared):.1f} s (snapshots every {SNAPSHOT_EVERY_S} s)")
    # Linear interpolation between snapshots taken SNAPSHOT_EVERY_S apart, at a steady rate:
    # the estimate can be off by at most about one snapshot interval.
    assert max(errors) <= SNAPSHOT_EVERY_S + 1.0
    # The stuck group's lag in seconds grows with the wall clock.
    assert compared[-1][1] > compared[0][1]


def test_rebalance_and_skew_jobs_rerun_identically(landed: dict[str, Any], spark: Any,
                                                   postgres: Any,
                                                   warehouse_engine: Any) -> None:
    first_hour = landed["stamps"][0].replace(minute=0, second=0, microsecond=0)
    end = landed["stamps"][-1].replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    job = _job(landed, first_hour, end, postgres.url)
    results = []
    for _ in range(2):
        pipeline.analytics(spark, job, "rebalance")
        pipeline.analytics(spark, job, "skew")
        results.append({t: _mart(warehouse_engine, t, landed["cluster"]) for t in (
            "rebalance_events", "rebalance_hourly", "group_skew", "strategy_skew_hourly")})
    assert results[0] == results[1]
    events = results[0]["rebalance_events"]
    slow_events = [e for e in events if e[2] == landed["slow"]]
    assert slow_events and all(e[4] == "offsets_topic" for e in slow_events)  # exact history
    skew_rows = [r for r in results[0]["group_skew"] if r[2] == landed["slow"]]
    assert skew_rows and all(r[5] == 1 and r[6] == 2 for r in skew_rows)  # 1 member, 2 parts
    hourly_rows = [r for r in results[0]["rebalance_hourly"] if r[1] == landed["slow"]]
    assert sum(r[3] for r in hourly_rows) == len(slow_events)
    assert sum(r[12] for r in hourly_rows) > 0  # seconds Stable


HOURLY_MARTS = ["rebalance_events", "rebalance_hourly", "group_skew", "strategy_skew_hourly"]


def test_hourly_jobs_backfill_equals_hour_by_hour(landed: dict[str, Any], spark: Any,
                                                  postgres: Any, warehouse_engine: Any) -> None:
    # 22 snapshots 12 minutes apart from 09:30: five hours, 09:00-14:00.
    start = SYNTHETIC_START.replace(minute=0)
    hours = [start + timedelta(hours=h) for h in range(6)]
    data = {**landed, "root": landed["stamped_root"]}

    def run(a: datetime, b: datetime) -> None:
        job = _job(data, a, b, postgres.url)
        pipeline.analytics(spark, job, "rebalance")
        pipeline.analytics(spark, job, "skew")

    def clear() -> None:
        with warehouse_engine.begin() as conn:
            for t in HOURLY_MARTS:
                conn.execute(text(f"DELETE FROM mart.{t} WHERE cluster = :c"),
                             {"c": landed["cluster"]})

    clear()
    run(hours[0], hours[-1])
    whole = {t: _mart(warehouse_engine, t, landed["cluster"]) for t in HOURLY_MARTS}
    assert len({r[1] for r in whole["strategy_skew_hourly"]}) == 5  # five hours
    clear()
    for a, b in itertools.pairwise(hours):
        run(a, b)
    _same({t: _mart(warehouse_engine, t, landed["cluster"]) for t in HOURLY_MARTS}, whole)


def test_a_job_runs_through_spark_submit(landed: dict[str, Any], postgres: Any) -> None:
    stamps = landed["stamps"]
    argv = sparksubmit.command("lag_job.py", [
        "--landing", str(landed["root"]), "--cluster", landed["cluster"],
        "--start", stamps[0].isoformat(), "--end", (stamps[-1] + timedelta(seconds=1)).isoformat(),
        "--warehouse", postgres.url])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                          env=sparksubmit.environment())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["rows"]["partition_lag"] >= 22 * 2
    # (The rebalance and skew entry points are spark-submitted by the analytics DAG's
    # dag.test() in test_airflow.py.)


def test_hourly_jobs_refuse_an_interval_off_the_hour(landed: dict[str, Any], spark: Any) -> None:
    start = landed["stamps"][0].replace(minute=7)
    with pytest.raises(ValueError, match="on the hour"):
        jobs.rebalance_frames(spark, _job(landed, start, start + timedelta(hours=1), None))


def test_nothing_landed_gives_empty_marts(spark: Any, tmp_path: Path) -> None:
    job = jobs.JobArgs(tmp_path, "nobody", Interval(datetime(2026, 1, 1, tzinfo=UTC),
                                                    datetime(2026, 1, 1, 1, tzinfo=UTC)),
                       None, timedelta(hours=1))
    frames = dict(jobs.lag_frames(spark, job))
    assert frames["partition_lag"].count() == 0
