"""The Airflow DAGs against the real things: every DAG parses and follows the policy;
``dag.test()`` runs snapshot -> offsets ingest -> analytics (Spark local) -> quality against a
real Kafka and PostgreSQL; a corrupt landed snapshot stops the load with an alert; a cluster
that is down fails alone; and ``airflow standalone``'s scheduler runs the snapshot DAG on its
schedule and the live DAG (marts and alert check, on Spark Connect) on the snapshots Asset,
while the analytics DAG is triggered through the REST API v2 (its jobs on Spark Connect too).

Airflow reads its configuration once per process, so each Airflow here runs in processes of
its own (tests/airflow_harness.py for parsing and ``dag.test()``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafkautil import commit_offsets, create_topic, produce_counts, wait_until
from sqlalchemy import text

from groupscope.collect.collector import take_snapshot
from groupscope.contract.cluster import ClusterConfig
from groupscope.pipeline import land_snapshot as land
from groupscope.serve.alerting.alerts import read_log
from groupscope_dev.airflow import (
    LocalAirflow,
    connection_env,
    kafka_connection,
    spark_connect_connection,
    spark_connection,
    warehouse_connection,
)
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.ports import free_ports
from groupscope_dev.postgres import LocalPostgres
from groupscope_dev.spark_connect import SparkConnectServer
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration
HARNESS = Path(__file__).resolve().parents[1] / "airflow_harness.py"


@dataclass
class Deployment:
    airflow: LocalAirflow
    cluster: str
    down: str
    down_address: str
    topic: str
    group: str
    landing: Path
    alert_log: Path
    webhook_received: list[dict[str, Any]] = field(default_factory=list)

    def harness(self, *args: str, **env: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, str(HARNESS), *args],
                              env={**self.airflow.environment(), **env}, capture_output=True,
                              text=True,
                              timeout=900, check=False)
        lines = done.stdout.strip().splitlines()
        assert done.returncode == 0 and lines, (
            f"harness {args} exited {done.returncode}:\n{done.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(lines[-1])
        result["log"] = done.stdout + done.stderr
        return result


def _deployment(home: Path, kafka: KafkaCluster, postgres: LocalPostgres,
                with_down_cluster: bool, webhook: WebhookCatcher | None = None,
                migrate: bool = True, **settings: str) -> Deployment:
    tag = uuid.uuid4().hex[:8]
    cluster, down = f"af{tag}", f"down{tag}"
    down_address = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    landing, alert_log = home / "landing", home / "alerts.jsonl"
    env = dict([kafka_connection(cluster, {"bootstrap.servers": kafka.bootstrap}),
                warehouse_connection(postgres.url), spark_connection("local[2]")])
    if with_down_cluster:
        env.update([kafka_connection(down, {"bootstrap.servers": down_address})])
    if webhook:
        # A secret in the URL's path: it must never reach a log or the alert log.
        env.update([connection_env("groupscope_alerts", "http",
                                   password=f"{webhook.url}/S3CRET-T0KEN")])
    env.update({"GROUPSCOPE_LANDING": str(landing), "GROUPSCOPE_ALERT_LOG": str(alert_log),
                "GROUPSCOPE_RETRY_DELAY_S": "1", "GROUPSCOPE_KAFKA_TIMEOUT_S": "5",
                **settings})
    api_port, worker_logs, trigger_logs = free_ports(3)
    airflow = LocalAirflow(home / "airflow", api_port, (worker_logs, trigger_logs), env)
    if migrate:  # (airflow standalone migrates when it starts)
        airflow.migrate()
    topic, group = f"orders-{tag}", f"billing-{tag}"
    create_topic(kafka.bootstrap, topic, 2)
    produce_counts(kafka.bootstrap, topic, [30, 20])
    commit_offsets(kafka.bootstrap, group, {(topic, 0): 10, (topic, 1): 20})
    return Deployment(airflow, cluster, down, down_address, topic, group, landing, alert_log,
                      webhook.bodies if webhook else [])


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, kafka: KafkaCluster,
               postgres: LocalPostgres, warehouse_engine: Any) -> Iterator[Deployment]:
    webhook = WebhookCatcher()
    webhook.start()
    yield _deployment(tmp_path_factory.mktemp("airflow-dagtest"), kafka, postgres,
                      with_down_cluster=True, webhook=webhook)
    webhook.stop()


def _snapshot_count(engine: Any, cluster: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM raw.snapshots WHERE cluster = :c"),
                                {"c": cluster}).scalar_one())


def test_every_dag_parses_and_follows_the_policy(deployment: Deployment) -> None:
    parsed = deployment.harness("parse")
    assert parsed["import_errors"] == {}
    dags = parsed["dags"]
    for cluster in (deployment.cluster, deployment.down):
        assert {f"groupscope_{kind}_{cluster}"
                for kind in ("snapshot", "offsets", "analytics", "live", "alerts")} <= set(dags)
    assert len(dags) == 10
    for dag_id, dag in dags.items():
        assert "groupscope" in dag["tags"] and len(dag["tags"]) >= 3, dag_id
        assert len(dag["doc_md"]) > 200, dag_id
        assert dag["max_active_runs"] == 1 and dag["catchup"] is False, dag_id
        for task_id, t in dag["tasks"].items():
            where = f"{dag_id}.{task_id}"
            assert t["owner"] == "groupscope", where
            # A task on a cadence is not retried: its next run is the retry (a retry of
            # live_marts would only hold up the next snapshot's marts, and an evaluation
            # retried late judges stale data).
            on_cadence = task_id == "live_marts" or dag_id.startswith("groupscope_alerts_")
            assert t["retries"] == 0 if on_cadence else t["retries"] >= 2, where
            assert t["execution_timeout_s"] and t["execution_timeout_s"] <= 3600, where
            # Every task's outcome is the task_failed condition's evidence.
            assert t["on_failure_callback"] and t["on_success_callback"], where
    snapshot = dags[f"groupscope_snapshot_{deployment.cluster}"]["tasks"]
    # The gate and the load are one task (one task process fewer per snapshot).
    assert set(snapshot) == {"collect", "load"}
    assert snapshot["load"]["upstream"] == ["collect"]
    analytics = dags[f"groupscope_analytics_{deployment.cluster}"]["tasks"]
    assert {analytics[j]["operator"] for j in ("lag_job", "rebalance_job", "skew_job")} == \
        {"AnalyticsJobOperator"}
    assert analytics["check_marts"]["upstream"] == ["skew_job"]
    assert dags[f"groupscope_analytics_{deployment.cluster}"]["timetable"] == \
        "CronDataIntervalTimetable"
    assert dags[f"groupscope_snapshot_{deployment.cluster}"]["timetable"] == \
        "DeltaTriggerTimetable"
    live = dags[f"groupscope_live_{deployment.cluster}"]
    assert live["timetable"] == "AssetTriggeredTimetable" and "live" in live["tags"]
    assert live["tasks"]["live_marts"]["operator"] == "LiveMartsOperator"
    # A hung Spark job gives up within a few snapshot intervals (90 s floor), not 3 x 10 m.
    assert live["tasks"]["live_marts"]["execution_timeout_s"] == 180  # 3 x 60 s snapshots
    assert live["tasks"]["evaluate_alerts"]["upstream"] == ["live_marts"]
    # The rules' own cadence, which no Spark work can hold up.
    alerts = dags[f"groupscope_alerts_{deployment.cluster}"]
    assert alerts["timetable"] == "DeltaTriggerTimetable"
    assert list(alerts["tasks"]) == ["evaluate_alerts"]
    assert alerts["tasks"]["evaluate_alerts"]["upstream"] == []

    # Analytics triggered by landed snapshots (Assets) instead of a schedule.
    by_assets = deployment.harness("parse", GROUPSCOPE_ANALYTICS_SCHEDULE="assets")
    assert by_assets["import_errors"] == {}
    assert by_assets["dags"][f"groupscope_analytics_{deployment.cluster}"]["timetable"] == \
        "AssetTriggeredTimetable"


def test_dag_test_runs_snapshot_analytics_quality_chain(
        deployment: Deployment, warehouse_engine: Any, spark_connect: SparkConnectServer) -> None:
    d = deployment
    for _ in range(2):
        run = d.harness("test", f"groupscope_snapshot_{d.cluster}")
        assert run["state"] == "success", run["log"][-3000:]
        assert run["tasks"] == {"collect": "success", "load": "success"}
    ingest = d.harness("test", f"groupscope_offsets_{d.cluster}")
    assert ingest["state"] == "success", ingest["log"][-3000:]
    assert ingest["tasks"] == {"ingest": "success", "load_generations": "success"}
    assert (d.landing / "offsets_topic" / f"cluster={d.cluster}").is_dir()
    with warehouse_engine.connect() as conn:
        # The ingest's summary reached load_generations: the feed's run is recorded
        # (offsets_feed_stale counts from it).
        fed = conn.execute(text("SELECT complete_at, checked_at FROM ops.offsets_feed"
                                " WHERE cluster = :c"), {"c": d.cluster}).one()
    assert fed.complete_at == fed.checked_at is not None

    with warehouse_engine.connect() as conn:
        stamps = [r[0] for r in conn.execute(text(
            "SELECT snapshot_ts FROM raw.snapshots WHERE cluster = :c ORDER BY 1"),
            {"c": d.cluster})]
    assert len(stamps) == 2
    # The hour of the last snapshot: a run whose data interval is that hour.
    end = stamps[-1].replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    # On the session's Spark Connect server, as under ./run: the operators' spark-submit
    # path is test_live_analytics.py's (the live DAG without the connection) and
    # test_analytics_jobs.py's (a job's entry point), so this test pays no JVM start per job.
    run = d.harness("test", f"groupscope_analytics_{d.cluster}", end.isoformat(),
                    end.isoformat(), **dict([spark_connect_connection(spark_connect.url)]))
    assert run["state"] == "success", run["log"][-5000:]
    assert set(run["tasks"].values()) == {"success"}
    assert run["log"].count("on Spark Connect (connection") >= 3, run["log"][-5000:]
    start = end - timedelta(hours=1)
    in_interval = [s for s in stamps if start <= s < end]

    with warehouse_engine.connect() as conn:
        lag = conn.execute(text(
            "SELECT snapshot_ts, partition, committed_offset, high_watermark, lag"
            " FROM mart.partition_lag WHERE cluster = :c AND group_id = :g"
            " ORDER BY snapshot_ts, partition"), {"c": d.cluster, "g": d.group}).fetchall()
        group_lag = conn.execute(text(
            "SELECT lag FROM mart.group_lag WHERE cluster = :c AND group_id = :g"),
            {"c": d.cluster, "g": d.group}).scalars().all()
        status = conn.execute(text(
            "SELECT count(*) FROM mart.group_status WHERE cluster = :c AND group_id = :g"),
            {"c": d.cluster, "g": d.group}).scalar_one()
        checks = conn.execute(text(
            "SELECT suite, subject, success, expectations FROM ops.quality_results"
            " WHERE cluster = :c"), {"c": d.cluster}).fetchall()
    assert [(r.snapshot_ts, r.partition, r.committed_offset, r.high_watermark, r.lag)
            for r in lag] == [(s, p, c, hw, hw - c) for s in in_interval
                              for p, c, hw in ((0, 10, 30), (1, 20, 20))]
    assert group_lag == [20] * len(in_interval)
    assert status == len(in_interval)
    landed_checks = [c for c in checks if c.suite == "landed_snapshot"]
    assert len(landed_checks) == 2 and all(c.success and c.expectations > 50
                                           for c in landed_checks)
    marts = [c for c in checks if c.suite == "marts"]
    assert [(c.subject, c.success) for c in marts] == [
        (f"{start.isoformat()}/{end.isoformat()}", True)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "mTLS"])
def test_the_snapshot_dag_over_a_secured_listener_lands_what_plaintext_reads(
        deployment: Deployment, kafka_secure: KafkaCluster, warehouse_engine: Any,
        mechanism: str) -> None:
    """The snapshot DAG through a ``kafka`` connection whose extra carries SCRAM over TLS, or
    a client certificate (the deployment's Airflow, one connection more): its snapshot,
    loaded, names the groups a plaintext read of the same cluster does, and the secret (the
    password, a line of the client key) is in no task log and no XCom."""
    d = deployment
    cluster = f"sec{mechanism[-3:].lower()}{uuid.uuid4().hex[:8]}"
    topic, group = f"sec-af-{cluster}", f"sec-af-g-{cluster}"
    create_topic(kafka_secure.bootstrap, topic, 2)
    commit_offsets(kafka_secure.bootstrap, group, {(topic, 0): 0, (topic, 1): 0})
    secured = kafka_secure.secure_client(mechanism)
    secret = secured.get("sasl.password") or Path(
        secured["ssl.key.location"]).read_text().splitlines()[1]
    run = d.harness("test", f"groupscope_snapshot_{cluster}",
                    **dict([kafka_connection(cluster, secured)]))
    assert run["state"] == "success", run["log"][-3000:]
    assert run["tasks"] == {"collect": "success", "load": "success"}
    assert run["xcoms"], "the tasks pushed nothing: the XCom check would look at nothing"
    assert secret not in run["log"] and secret not in json.dumps(run["xcoms"])
    plaintext = take_snapshot(
        ClusterConfig(cluster, {"bootstrap.servers": kafka_secure.bootstrap}), 20,
        datetime.now(UTC))
    with warehouse_engine.connect() as conn:
        landed = set(conn.execute(text(
            "SELECT group_id FROM raw.consumer_groups WHERE cluster = :c"),
            {"c": cluster}).scalars())
    # (No other test of this worker runs between the two reads: the session's secured broker
    # has no group changing under them.)
    assert group in landed and landed == {g.group_id for g in plaintext.groups}


def _corrupt(landed: Any) -> None:
    """A landed snapshot gone bad: a high watermark below its log start, a duplicated key."""
    offsets = landed.path("partition_offsets")
    table = pq.read_table(offsets).to_pylist()
    table[0]["log_start_offset"] = (table[0]["high_watermark"] or 0) + 5
    pq.write_table(pa.Table.from_pylist(table, schema=pq.read_schema(offsets)), offsets)
    committed = landed.path("committed_offsets")
    rows = pq.read_table(committed).to_pylist()
    pq.write_table(pa.Table.from_pylist(rows + rows[:1], schema=pq.read_schema(committed)),
                   committed)


def test_corrupt_landed_snapshot_stops_the_load_and_alerts(deployment: Deployment,
                                                           warehouse_engine: Any,
                                                           kafka: KafkaCluster) -> None:
    d = deployment
    bad = land(take_snapshot(ClusterConfig(d.cluster, {"bootstrap.servers": kafka.bootstrap}),
                             10.0, datetime.now(UTC)), d.landing)
    _corrupt(bad)
    loaded_before = _snapshot_count(warehouse_engine, d.cluster)
    alerts_before = len(read_log(d.alert_log))

    run = d.harness("test", f"groupscope_snapshot_{d.cluster}")
    assert run["state"] == "failed"
    assert run["tasks"] == {"collect": "success", "load": "failed"}
    # The corrupt snapshot is rejected alone: this run's good one loads, then the task fails
    # (issue 41: a gate failure no longer holds up the snapshots that passed).
    assert _snapshot_count(warehouse_engine, d.cluster) == loaded_before + 1

    alerts = read_log(d.alert_log)[alerts_before:]
    assert len(alerts) == 1, alerts
    alert = alerts[0]
    assert alert["title"] == f"groupscope_snapshot_{d.cluster}: task load failed"
    assert bad.snapshot_id in alert["text"]
    assert "ExpectCompoundColumnsToBeUnique" in alert["text"]
    assert "ExpectColumnPairValuesAToBeGreaterThanB" in alert["text"]
    assert alert["labels"]["cluster"] == d.cluster
    # The failure is an incident like any other: the alerts DAG's next evaluation sends it
    # through the channels (here the webhook of the groupscope_alerts connection, whose URL
    # is a secret).
    evaluated = d.harness("test", f"groupscope_alerts_{d.cluster}")
    assert evaluated["state"] == "success", evaluated["log"][-3000:]
    posted = [b for b in d.webhook_received if "load FAILED" in b.get("text", "")]
    assert len(posted) == 1, [b.get("text") for b in d.webhook_received]
    text_ = posted[0]["text"]
    assert text_.startswith(f"[FIRING] cluster {d.cluster}")
    assert f"task groupscope_snapshot_{d.cluster}.load FAILED" in text_
    assert f"Task load of DAG groupscope_snapshot_{d.cluster} failed" in text_
    assert bad.snapshot_id in text_
    assert "S3CRET-T0KEN" not in d.alert_log.read_text()
    assert "S3CRET-T0KEN" not in evaluated["log"]

    with warehouse_engine.connect() as conn:
        kept = conn.execute(text(
            "SELECT success, failed, failures FROM ops.quality_results"
            " WHERE cluster = :c AND subject = :s"), {"c": d.cluster, "s": bad.snapshot_id}
        ).fetchall()
    assert len(kept) == 1 and not kept[0].success
    assert kept[0].failed >= 2  # the duplicate key; log start above the high watermark
    assert {f["table"] for f in kept[0].failures} == {"partition_offsets", "committed_offsets"}
    mark = d.landing / "_quality" / "rejected" / f"cluster={d.cluster}" / \
        f"{bad.snapshot_id}.json"
    assert bad.snapshot_id in mark.read_text()

    # The rejected snapshot stays out; the next run loads the good ones.
    run = d.harness("test", f"groupscope_snapshot_{d.cluster}")
    assert run["state"] == "success", run["log"][-3000:]
    assert _snapshot_count(warehouse_engine, d.cluster) == loaded_before + 2
    with warehouse_engine.connect() as conn:
        assert conn.execute(text(
            "SELECT count(*) FROM raw.snapshots WHERE cluster = :c AND snapshot_ts = :t"),
            {"c": d.cluster, "t": bad.snapshot_ts}).scalar_one() == 0


def test_a_cluster_that_is_down_fails_alone(deployment: Deployment,
                                            warehouse_engine: Any) -> None:
    d = deployment
    alerts_before = len(read_log(d.alert_log))
    down = d.harness("test", f"groupscope_snapshot_{d.down}")
    assert down["state"] == "failed"
    assert down["tasks"]["collect"] == "failed"
    assert "up_for_retry" not in down["tasks"].values()
    alerts = read_log(d.alert_log)[alerts_before:]
    assert [a["title"] for a in alerts] == [
        f"groupscope_snapshot_{d.down}: task collect failed"]
    reason = alerts[0]["text"]
    assert f"snapshot of cluster '{d.down}' failed" in reason
    assert d.down_address in reason and "unavailable" in reason
    assert _snapshot_count(warehouse_engine, d.down) == 0

    before = _snapshot_count(warehouse_engine, d.cluster)
    up = d.harness("test", f"groupscope_snapshot_{d.cluster}")
    assert up["state"] == "success", up["log"][-3000:]
    assert _snapshot_count(warehouse_engine, d.cluster) == before + 1


@pytest.fixture
def standalone(tmp_path: Path, kafka: KafkaCluster, postgres: LocalPostgres,
               spark_connect: SparkConnectServer, warehouse_engine: Any) -> Iterator[Deployment]:
    webhook = WebhookCatcher()
    webhook.start()
    # As deployed: the live DAG on the Spark Connect server (without it, a spark-submit per
    # snapshot would compete with the analytics DAG's for the two cores).
    # The analytics DAG's schedule is not due before 2028 (Feb 29, with catchup off): only the
    # REST-triggered run runs, instead of queueing behind the latest hour's scheduled run.
    d = _deployment(tmp_path, kafka, postgres, with_down_cluster=False, migrate=False,
                    webhook=webhook, GROUPSCOPE_SNAPSHOT_EVERY_S="10",
                    GROUPSCOPE_ANALYTICS_SCHEDULE="0 0 29 2 *",
                    **dict([spark_connect_connection(spark_connect.url)]))
    d.airflow.start()
    try:
        d.airflow.wait_ready()
        yield d
    finally:
        d.airflow.stop()
        webhook.stop()


def test_scheduler_runs_snapshots_and_rest_triggers_analytics(
        standalone: Deployment, warehouse_engine: Any, spark_connect: SparkConnectServer) -> None:
    d, airflow = standalone, standalone.airflow
    t0 = time.monotonic()
    snapshot_dag = f"groupscope_snapshot_{d.cluster}"
    analytics_dag = f"groupscope_analytics_{d.cluster}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if {snapshot_dag, analytics_dag} <= set(airflow.dag_ids()):
            break
        time.sleep(3)
    assert {snapshot_dag, analytics_dag} <= set(airflow.dag_ids())
    print(f"[{time.monotonic() - t0:5.0f} s] the DAGs are parsed", flush=True)

    def scheduled_successes() -> list[dict[str, Any]]:
        return [r for r in airflow.dag_runs(snapshot_dag)
                if r["run_type"] == "scheduled" and r["state"] == "success"]

    live_dag = f"groupscope_live_{d.cluster}"

    def live_successes() -> list[dict[str, Any]]:  # triggered by the snapshots Asset
        return [r for r in airflow.dag_runs(live_dag)
                if r["run_type"] == "asset_triggered" and r["state"] == "success"]

    deadline = time.monotonic() + 300
    while (len(scheduled_successes()) < 2 or not live_successes()) \
            and time.monotonic() < deadline:
        time.sleep(3)
    assert len(scheduled_successes()) >= 2, airflow.dag_runs(snapshot_dag)
    assert live_successes(), airflow.dag_runs(live_dag)
    print(f"[{time.monotonic() - t0:5.0f} s] 2 scheduled snapshots and a live run", flush=True)

    run_id = airflow.trigger(analytics_dag)
    assert airflow.wait_for_run(analytics_dag, run_id, 600) == "success"
    print(f"[{time.monotonic() - t0:5.0f} s] the triggered analytics run", flush=True)
    # Its jobs ran on the Connect server.
    logs = airflow.home / "logs" / f"dag_id={analytics_dag}" / f"run_id={run_id}"
    for job in ("lag_job", "rebalance_job", "skew_job"):
        log = "".join(f.read_text() for f in (logs / f"task_id={job}").glob("attempt=*.log"))
        assert "on Spark Connect (connection" in log, (job, log[-2000:])

    with warehouse_engine.connect() as conn:
        loaded = conn.execute(text(
            "SELECT count(*) FROM raw.snapshots WHERE cluster = :c"), {"c": d.cluster}
        ).scalar_one()
        lag = conn.execute(text(
            "SELECT DISTINCT lag FROM mart.group_lag WHERE cluster = :c AND group_id = :g"),
            {"c": d.cluster, "g": d.group}).scalars().all()
        marts_checked = conn.execute(text(
            "SELECT bool_and(success) FROM ops.quality_results"
            " WHERE cluster = :c AND suite = 'marts'"), {"c": d.cluster}).scalar_one()
    assert loaded >= 2
    assert lag == [20]
    assert marts_checked is True

    # The Spark Connect server frozen (as a hung JVM is: its port accepts, nothing answers).
    # The alerts DAG, on its own cadence, still evaluates, and the channels hear that the
    # analytics are stale within 3 minutes; live_marts gives up after its timeout (90 s with
    # 10 s snapshots) instead of 3 x 10 minutes.
    alerts_dag = f"groupscope_alerts_{d.cluster}"
    assert any(r["state"] == "success" for r in airflow.dag_runs(alerts_dag))
    # No false alarm before the fault: the live runs were late behind the analytics run's
    # jobs on the same server, not hung.
    assert not [b for b in d.webhook_received if "analytics STALE" in str(b.get("text"))]
    frozen = time.monotonic()
    spark_connect.send_signal(signal.SIGSTOP)
    try:
        stale = wait_until(lambda: [b for b in d.webhook_received
                                    if "analytics STALE" in str(b.get("text"))], 180,
                           "the analytics_stale notice while Spark Connect is frozen")
        told = time.monotonic() - frozen
        timed_out = wait_until(lambda: [r for r in airflow.dag_runs(live_dag)
                                        if r["state"] == "failed"], 150,
                               "the hung live run to give up")
        gave_up = time.monotonic() - frozen
    finally:
        spark_connect.send_signal(signal.SIGCONT)
    print(f"[{time.monotonic() - t0:5.0f} s] frozen Spark: told after {told:.0f} s, the live "
          f"run gave up after {gave_up:.0f} s", flush=True)
    # Alone, or in one message with live_marts' task_failed when both fire at once.
    assert stale[0]["text"].startswith(f"[FIRING] cluster {d.cluster}")
    assert "analytics_stale" in {i["rule"] for i in stale[0]["incidents"]} and timed_out
    # Back: the live path computes again.
    before = {r["dag_run_id"] for r in live_successes()}
    wait_until(lambda: {r["dag_run_id"] for r in live_successes()} - before, 240,
               "a live run after the thaw")


def test_a_warehouse_that_is_down_loses_nothing(deployment: Deployment,
                                                warehouse_engine: Any,
                                                postgres: LocalPostgres) -> None:
    d = deployment
    before = _snapshot_count(warehouse_engine, d.cluster)
    alerts_before = len(read_log(d.alert_log))
    closed = f"postgresql://groupscope:pw-not-to-leak@127.0.0.1:{free_ports(1)[0]}/groupscope"
    down = d.harness("test", f"groupscope_snapshot_{d.cluster}",
                     **dict([warehouse_connection(closed)]))
    assert down["state"] == "failed"
    assert down["tasks"] == {"collect": "success", "load": "failed"}
    alerts = read_log(d.alert_log)[alerts_before:]
    assert len(alerts) == 1
    assert "is unreachable" in alerts[0]["text"] and "kept" in alerts[0]["text"]
    assert "pw-not-to-leak" not in d.alert_log.read_text()
    assert "pw-not-to-leak" not in down["log"]

    # Back up: the snapshot landed while it was down loads with the next run's own.
    up = d.harness("test", f"groupscope_snapshot_{d.cluster}")
    assert up["state"] == "success", up["log"][-3000:]
    assert _snapshot_count(warehouse_engine, d.cluster) == before + 2
