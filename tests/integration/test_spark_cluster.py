"""The analytics on a Spark standalone cluster, as ``dev/stack up --spark-cluster`` runs it: a
master and one worker of the pyspark wheel, and the Spark Connect server running its executor
on them. The lag job, spark-submitted by the analytics DAG's operator through a
``spark_default`` connection that points at ``spark://host:port``, runs on the cluster while
the Connect server holds its core there, and writes the same rows as the same job in local
mode on the same input. ``dev/stack status`` shows the cluster; ``dev/stack down`` stops it.

The stack here is its Spark part alone: the data comes from the session's Kafka and goes to
the session's PostgreSQL (the stack's own Kafka and PostgreSQL are tested in
test_devstack.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kafkautil import commit_offsets, create_topic, produce_counts
from sqlalchemy import text

from groupscope import pipeline
from groupscope.analyze.io import Interval
from groupscope.analyze.jobs import JobArgs
from groupscope.collect.collector import take_snapshot
from groupscope.contract.cluster import ClusterConfig
from groupscope.pipeline import LAG_MARTS
from groupscope.pipeline import land_snapshot as land
from groupscope_dev import StackError
from groupscope_dev.__main__ import Stack
from groupscope_dev.airflow import LocalAirflow, spark_connection, warehouse_connection
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION, KafkaCluster
from groupscope_dev.ports import LOOPBACK, free_port_block, free_ports, port_is_free
from groupscope_dev.postgres import LocalPostgres
from groupscope_dev.spark_cluster import SparkCluster

pytestmark = pytest.mark.integration
PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
START = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
MINUTES = [0, 1, 2, 3, 5, 8, 9, 10]  # when the snapshots are stamped

# What the analytics DAG's lag task does when there is no Spark Connect connection: the
# operator spark-submits the job through the spark_default connection.
SUBMIT_THROUGH_THE_OPERATOR = """
import sys
from datetime import datetime
from pathlib import Path

from groupscope_airflow import AnalyticsJobOperator

landing, cluster, start, end = sys.argv[1:5]
operator = AnalyticsJobOperator(task_id="lag_job", job="lag", cluster=cluster,
                                landing=Path(landing), hourly=False)
operator.submit_interval({}, datetime.fromisoformat(start), datetime.fromisoformat(end))
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack laid out as ``dev/stack up --spark-cluster`` lays it out, with only its Spark
    part started (the Kafka and PostgreSQL ports of its layout are never used)."""
    root = tmp_path_factory.mktemp("spark-stack")
    stack = Stack(root / ".stack", root / ".stack.env")
    kafka_port, pg_port, connect_port, master_port = free_ports(4)
    layout = {"brokers": 1, "kafka_version": DEFAULT_KAFKA_VERSION, "kafka_port": kafka_port,
              "pg_port": pg_port, "spark_connect_port": connect_port,
              "spark_cluster": [master_port, free_port_block(2)]}
    stack.state_dir.mkdir(parents=True)
    stack.manifest.write_text(json.dumps(layout))
    try:
        env = stack.up_spark(layout)
        assert env["SPARK_MASTER_URL"] == f"spark://127.0.0.1:{master_port}"
        yield stack
    finally:
        stack.down()  # idempotent: the last test has already done it


@pytest.fixture(scope="module")
def landed(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Real snapshots of a topic written to between them, a group committing a little behind
    and one that committed once, stamped at chosen times (time is passed in)."""
    root = tmp_path_factory.mktemp("cluster-landing")
    cluster = f"sc{uuid.uuid4().hex[:8]}"
    topic, moving, stuck = f"sc-{cluster}", f"moving-{cluster}", f"stuck-{cluster}"
    create_topic(kafka.bootstrap, topic, 2)
    config = ClusterConfig(cluster, {"bootstrap.servers": kafka.bootstrap})
    stamps, ends = [START + timedelta(minutes=m) for m in MINUTES], [0, 0]
    for i, ts in enumerate(stamps):
        counts = produce_counts(kafka.bootstrap, topic, [20 + 3 * i, 7])
        ends = [e + c for e, c in zip(ends, counts, strict=True)]
        commit_offsets(kafka.bootstrap, moving, {(topic, p): max(0, e - 5 - i)
                                                 for p, e in enumerate(ends)})
        if i == 2:
            commit_offsets(kafka.bootstrap, stuck, {(topic, 0): ends[0]})
        land(take_snapshot(config, 15.0, ts), root)
    return {"root": root, "cluster": cluster, "stamps": stamps}


def _marts(engine: Any, cluster: str) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        return {t: sorted(tuple(r) for r in conn.execute(
            text(f"SELECT * FROM mart.{t} WHERE cluster = :c"), {"c": cluster}))
            for t in LAG_MARTS}


def _clear(engine: Any, cluster: str) -> None:
    with engine.begin() as conn:
        for t in LAG_MARTS:
            conn.execute(text(f"DELETE FROM mart.{t} WHERE cluster = :c"), {"c": cluster})


def test_the_lag_job_on_the_cluster_equals_local_mode(
        stack: Stack, landed: dict[str, Any], spark: Any, postgres: LocalPostgres,
        warehouse_engine: Any, tmp_path: Path) -> None:
    layout = stack.layout()
    assert layout is not None
    cluster = stack.spark_cluster(layout)
    assert cluster is not None
    stamps, name = landed["stamps"], landed["cluster"]
    interval = Interval(stamps[0], stamps[-1] + timedelta(seconds=1))

    # Local mode (the session's local[2]), the reference.
    pipeline.analytics(spark, JobArgs(landed["root"], name, interval, postgres.url,
                                      timedelta(hours=1)), "lag")
    local = _marts(warehouse_engine, name)
    assert len(local["partition_lag"]) >= 2 * len(stamps)  # the moving group's two partitions
    _clear(warehouse_engine, name)

    # The Spark Connect server holds two of the worker's cores, for as long as it runs.
    before = {app["id"] for app in cluster.applications()}
    [connect_app] = (cluster.state() or {})["activeapps"]
    assert connect_app["cores"] == 2

    airflow = LocalAirflow(tmp_path / "airflow", 0, (0, 0), dict([
        spark_connection(cluster.master_url), warehouse_connection(postgres.url)])
        | {"GROUPSCOPE_LANDING": str(landed["root"])})
    env = airflow.environment()
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(PLUGINS), env.get("PYTHONPATH")] if p)
    done = subprocess.run([sys.executable, "-c", SUBMIT_THROUGH_THE_OPERATOR,
                           str(landed["root"]), name, interval.start.isoformat(),
                           interval.end.isoformat()],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert f"--master {cluster.master_url}" in log  # the connection's master

    # It ran on the cluster: the master lists it as finished, and its executor ran on the
    # worker (the worker keeps a folder per application it ran executors for).
    [app] = [a for a in cluster.applications() if a["id"] not in before]
    assert app["name"].startswith("groupscope-lag") and app["state"] == "FINISHED", app
    assert app["cores"] == 2  # the other two, beside the Connect server's
    assert (cluster.state_dir / "work" / app["id"]).is_dir()
    assert _marts(warehouse_engine, name) == local


def test_stack_status_shows_the_cluster_and_down_stops_it(stack: Stack) -> None:
    layout = stack.layout()
    assert layout is not None
    cluster = stack.spark_cluster(layout)
    assert cluster is not None
    status = stack.status()
    assert (f"Spark master {cluster.master_url} (UI {cluster.webui_url}): up, 1 live worker(s)"
            in status), status
    assert "Spark worker (4 core(s), 2g): up" in status, status
    assert f": up (on {cluster.master_url})" in status, status  # Spark Connect, on the cluster

    stack.down()
    assert not cluster.running("master") and not cluster.running("worker")
    assert all(port_is_free(p) for p in (cluster.master_port, cluster.webui_port,
                                         cluster.worker_webui_port))
    assert not cluster.state_dir.exists()
    assert stack.status() == "no stack is set up"


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        webui = free_port_block(2)
        cluster = SparkCluster(tmp_path / "cluster", port, webui, webui + 1)
        with pytest.raises(StackError, match=f"port {port} on 127.0.0.1 is already in use"):
            cluster.start()
    assert not cluster.running("master") and not cluster.running("worker")
