"""Airflow glue for groupscope: where the watched clusters, the warehouse and the alert webhook
come from (Airflow connections), the settings the DAGs read, the failure notifier and the
Spark job operator. The work itself is in the ``groupscope`` library (``groupscope.pipeline``);
this module only adapts it to Airflow, and Airflow imports it in every process, so it stays
small and imports nothing heavy at the top.

Connections:

- one per watched Kafka cluster, of type ``kafka`` (the Kafka provider's), whose extra is the
  librdkafka client config (``bootstrap.servers``, SASL settings, ...). The cluster is named
  after the connection id without its ``kafka_`` prefix (``kafka_prod_eu`` watches
  ``prod_eu``). By default every ``AIRFLOW_CONN_*`` environment connection of type kafka is
  watched; ``GROUPSCOPE_KAFKA_CONNECTIONS`` (comma-separated ids) names them instead, e.g. for
  connections kept in the metadata database or a secrets backend.
- ``groupscope_warehouse`` (postgres): the warehouse.
- ``groupscope_alerts`` (optional, any type): the alert webhook URL in its password.
- ``spark_default`` (spark): ``local[2]`` locally, a cluster's master URL in production.
- ``spark_connect_default`` (spark_connect, optional; ``GROUPSCOPE_SPARK_CONNECT_CONN_ID``
  names another): the long-lived Spark Connect server the live and the hourly analytics run
  on (no JVM start per job); without it they spark-submit the jobs through ``spark_default``.

Settings (``GROUPSCOPE_*``) come from ``groupscope.settings``, validated when this module is
imported: a bad one, or a landing folder that cannot be written, fails the import with its
one-line message, so every DAG file shows it as its import error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook, BaseNotifier

from groupscope.settings import load_settings

WAREHOUSE_CONN_ID = "groupscope_warehouse"
_log = logging.getLogger(__name__)
_KAFKA_PREFIX = "kafka_"


# Read and checked once per process, at import (see the module doc).
SETTINGS = load_settings()
SETTINGS.writable_landing()


def kafka_connection_ids() -> list[str]:
    """The connections of the watched clusters (see the module doc)."""
    if SETTINGS.kafka_connection_ids:
        return list(SETTINGS.kafka_connection_ids)
    return sorted(key[len("AIRFLOW_CONN_"):].lower() for key, value in os.environ.items()
                  if key.startswith("AIRFLOW_CONN_") and _is_kafka(value))


def _is_kafka(value: str) -> bool:
    if value.startswith("kafka://"):
        return True
    try:
        return bool(json.loads(value).get("conn_type") == "kafka")
    except (ValueError, AttributeError):
        return False


def cluster_name(conn_id: str) -> str:
    return conn_id[len(_KAFKA_PREFIX):] if conn_id.startswith(_KAFKA_PREFIX) else conn_id


class KafkaClusterHook(KafkaBaseHook):
    """A watched cluster, from a ``kafka`` connection through the Kafka provider's hook."""

    def cluster(self) -> Any:
        from groupscope.pipeline import cluster_config

        extra = self.get_connection(self.kafka_config_id).extra_dejson
        return cluster_config(cluster_name(self.kafka_config_id), extra)


def warehouse_url(conn_id: str = WAREHOUSE_CONN_ID) -> str:
    """The warehouse's SQLAlchemy URL from its postgres connection (password included: pass
    it on, never log it; Airflow masks connection passwords in task logs)."""
    from sqlalchemy.engine import URL

    conn = BaseHook.get_connection(conn_id)
    return URL.create("postgresql", username=conn.login, password=conn.password,
                      host=conn.host, port=conn.port,
                      database=conn.schema or None).render_as_string(hide_password=False)


class GroupscopeAlertNotifier(BaseNotifier):
    """A task that failed for good becomes the ``task_failed`` condition's evidence
    (``ops.task_runs``), so its incident goes through the same rules, routes and channels as
    every other alert (the next evaluation sends it); the alert log keeps a line too. When the
    warehouse cannot record it (down, read-only, full, ...), the failure goes straight to the
    channels instead, as the warehouse outage notice (once per outage: the alert task's
    evaluations, failing on the same warehouse, share its state)."""

    def notify(self, context: Any) -> None:
        from groupscope.serve.alerting.alerts import Alert, send

        ti = context["ti"]
        exception = context.get("exception")
        from groupscope.serve.alerting.channels import scrub

        # Sent to every channel: no URL in it (a connection's may hold a secret).
        reason = scrub(str(exception), []) if exception else "no exception was given"
        labels = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
                  "try": str(getattr(ti, "try_number", ""))}
        cluster = (context.get("params") or {}).get("cluster")
        if cluster:
            labels["cluster"] = str(cluster)
        now = datetime.now(UTC)
        send(Alert(severity="critical", title=f"{ti.dag_id}: task {ti.task_id} failed",
                   text=reason, at=now, labels=labels), log_path=SETTINGS.alert_log)
        _record_task_run(context, "failed", now, reason)


class GroupscopeTaskRecovered(BaseNotifier):
    """A task that succeeds after failing clears its ``task_failed`` incident (the evidence
    that it works again)."""

    def notify(self, context: Any) -> None:
        _record_task_run(context, "success", datetime.now(UTC))


def _record_task_run(context: Any, state: str, at: datetime, reason: str = "") -> None:
    from groupscope import pipeline

    ti = context["ti"]
    cluster = (context.get("params") or {}).get("cluster")
    if not cluster:
        return
    try:
        pipeline.record_task_run(warehouse_url(), str(cluster), ti.dag_id, ti.task_id, state,
                                 ti.run_id, getattr(ti, "try_number", None), at, reason)
    except Exception as exc:  # a callback never raises
        _log.warning("task %s.%s %s, not recorded in the warehouse (kept to record later): %s",
                     ti.dag_id, ti.task_id, state, type(exc).__name__)
        try:
            pipeline.spool_task_run(SETTINGS.alert_log.parent, str(cluster), {
                "cluster": str(cluster), "dag_id": ti.dag_id, "task_id": ti.task_id,
                "state": state, "run_id": ti.run_id,
                "try_number": getattr(ti, "try_number", None), "at": at, "reason": reason})
        except OSError as spool_error:
            _log.error("task %s.%s %s, and it cannot be kept either: %s", ti.dag_id,
                       ti.task_id, state, spool_error)
        if state == "failed":
            _tell_unrecorded_failure(str(cluster), f"{ti.dag_id}.{ti.task_id}", reason, exc, at)


def _tell_unrecorded_failure(cluster: str, task: str, reason: str, error: Exception,
                             at: datetime) -> None:
    """A task failure the warehouse could not keep, told straight to every channel as the
    warehouse outage (``pipeline.warehouse_outage``): nobody would hear it otherwise."""
    from groupscope import pipeline
    from groupscope.serve.alerting.airflow_channels import build_channels
    from groupscope.serve.alerting.channels import first_line
    from groupscope.settings import reveal

    kind = getattr(error, "kind", "failing")
    why = first_line(error) or type(error).__name__
    try:
        rules = pipeline.fallback_rules(SETTINGS.alert_rules)
        channels = build_channels(rules, reveal(SETTINGS.alert_webhook_url)).channels
        told = pipeline.warehouse_outage(
            channels, cluster, SETTINGS.alert_log.parent, at,
            f"{why}; task {task} failed and could not be recorded: {first_line(reason)}", kind)
        _log.error("task %s failed and the warehouse is %s; channels told: %s", task, kind,
                   told or "already, this outage")
    except Exception as exc:
        _log.error("task %s failed, and neither the warehouse nor the channels could be told: "
                   "%s", task, type(exc).__name__)


class AnalyticsJobOperator(SparkSubmitOperator):
    """One analytics job (``spark_jobs/<job>_job.py``) over the run's data interval: on the
    long-lived Spark Connect server of the ``spark_connect`` connection ``connect_conn_id``
    when it exists (no JVM starts), else through spark-submit with this environment's pyspark.
    The warehouse comes from its connection. The interval, and the environment that holds the
    warehouse password, are built when the task runs, so neither is a rendered template
    field."""

    def __init__(self, *, job: str, cluster: str, landing: Path, hourly: bool,
                 connect_conn_id: str | None = None,
                 warehouse_conn_id: str = WAREHOUSE_CONN_ID, **kwargs: Any) -> None:
        from groupscope.analyze.io import DRIVER_LAUNCH_CONF
        from groupscope.analyze.submit import job_path

        super().__init__(application=str(job_path(f"{job}_job.py")),
                         name=f"groupscope-{job}-{cluster}",
                         conf=dict(DRIVER_LAUNCH_CONF), **kwargs)
        self.job, self.cluster, self.landing, self.hourly = job, cluster, landing, hourly
        self.connect_conn_id = connect_conn_id
        self.warehouse_conn_id = warehouse_conn_id

    def execute(self, context: Any) -> None:
        from groupscope.pipeline import analytics_interval

        start, end = run_interval(context)
        start, end = analytics_interval(start, end, self.hourly)
        with self.connect_session(f"groupscope-{self.job}-{self.cluster}") as spark:
            if spark is None:
                self.submit_interval(context, start, end)
                return
            from groupscope import pipeline
            from groupscope.analyze.io import Interval
            from groupscope.analyze.jobs import DEFAULT_LOOKBACK, JobArgs

            self.log.info("%s job for cluster %s over [%s, %s)", self.job, self.cluster,
                          start.isoformat(), end.isoformat())
            job = JobArgs(self.landing, self.cluster, Interval(start, end),
                          warehouse_url(self.warehouse_conn_id), DEFAULT_LOOKBACK)
            self.log.info("rows written per mart: %s", pipeline.analytics(spark, job, self.job))

    @contextlib.contextmanager
    def connect_session(self, name: str) -> Iterator[Any]:
        """A session on the Spark Connect server of ``connect_conn_id``, stopped at the end
        (this session only: the server keeps running); None without that connection."""
        remote = spark_connect_url(self.connect_conn_id) if self.connect_conn_id else None
        if remote is None:
            yield None
            return
        from groupscope.analyze.io import bounded, session

        self.log.info("on Spark Connect (connection %s)", self.connect_conn_id)
        spark = session(name, remote=remote)
        try:
            yield spark
        finally:
            # What the job cached lives in the server's cache, shared by every session and
            # outliving this one: released here (as the live path does), or each hourly run
            # would leave its hour of rows behind. Bounded: after a timeout on a hung server,
            # clearCache() and stop() would hang the task forever.
            bounded(spark.catalog.clearCache, 30.0, "clearCache")
            bounded(spark.stop, 30.0, "session stop")

    def submit_interval(self, context: Any, start: datetime, end: datetime) -> None:
        """spark-submit of the job over [start, end)."""
        from groupscope.analyze.submit import environment

        self.log.info("%s job for cluster %s over [%s, %s)", self.job, self.cluster,
                      start.isoformat(), end.isoformat())
        self.application_args = ["--landing", str(self.landing), "--cluster", self.cluster,
                                 "--start", start.isoformat(), "--end", end.isoformat()]
        spark_env = environment()
        self.env_vars = {k: spark_env[k] for k in
                         ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PATH")}
        self.env_vars["WAREHOUSE_URL"] = warehouse_url(self.warehouse_conn_id)
        self.env_vars.update({k: v for k, v in os.environ.items() if k.startswith("JAVA")})
        super().execute(context)


class LiveMartsOperator(AnalyticsJobOperator):
    """The lag and status marts of the snapshots loaded since the last live run
    (``groupscope.pipeline.live_analytics``), on the long-lived Spark Connect server of the
    ``spark_connect`` connection ``connect_conn_id``: no JVM starts. Without that connection,
    the lag job over the same live interval through spark-submit (this operator's parent).
    Returns (XCom) cluster, start, end, snapshots and rows per mart."""

    def __init__(self, *, cluster: str, landing: Path, connect_conn_id: str,
                 **kwargs: Any) -> None:
        super().__init__(job="lag", cluster=cluster, landing=landing, hourly=False,
                         connect_conn_id=connect_conn_id, **kwargs)

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        from groupscope import pipeline

        now = datetime.now(UTC)
        warehouse = warehouse_url(self.warehouse_conn_id)
        remote = spark_connect_url(self.connect_conn_id) if self.connect_conn_id else None
        if remote is not None:
            summary = self.on_connect(remote, warehouse, now)
            self.log.info("live marts: %s", summary)
            return summary
        self.log.info("no %s connection: the lag job through spark-submit (connection %s)",
                      self.connect_conn_id, self._conn_id)
        summary = {"cluster": self.cluster, "start": None, "end": None, "snapshots": 0,
                   "rows": {}}
        found = pipeline.live_interval(warehouse, self.cluster)
        if found is not None:
            start, end, snapshots = found
            self.submit_interval(context, start, end)
            pipeline.record_live(warehouse, self.cluster, end, now)
            summary = {"cluster": self.cluster, "start": start.isoformat(),
                       "end": end.isoformat(), "snapshots": snapshots,
                       "rows": pipeline.live_rows(warehouse, self.cluster, start, end)}
        self.log.info("live marts: %s", summary)
        return summary

    def on_connect(self, remote: str, warehouse: str, now: datetime) -> dict[str, Any]:
        """The live marts on the Spark Connect server, in a child process that is killed when
        it runs past the task's timeout (less a margin): a hung server fails this task in
        time, and the next snapshot's run computes what this one missed."""
        from groupscope import pipeline
        from groupscope.analyze.io import in_child_process, session

        def work() -> dict[str, Any]:
            spark = session(f"groupscope-live-{self.cluster}", remote=remote)
            try:
                return pipeline.live_analytics(spark, warehouse, self.landing, self.cluster,
                                               now)
            finally:
                spark.stop()

        timeout = self.execution_timeout or timedelta(minutes=10)
        self.log.info("live marts of cluster %s on Spark Connect (connection %s)",
                      self.cluster, self.connect_conn_id)
        return dict(in_child_process(work, max(timeout.total_seconds() - 10, 10),
                                     f"the live marts of cluster {self.cluster}"))


def spark_connect_url(conn_id: str) -> str | None:
    """The ``sc://`` URL of a ``spark_connect`` connection (through the apache-spark
    provider's SparkConnectHook; a token in it is a secret: never log it), or None when the
    connection does not exist."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return SparkConnectHook(conn_id).get_connection_url()
    except AirflowNotFoundException:
        return None


def run_interval(context: Any) -> tuple[datetime, datetime]:
    """The run's data interval (see groupscope.pipeline.run_interval)."""
    from groupscope.pipeline import run_interval as interval

    return interval(context.get("data_interval_start"), context.get("data_interval_end"),
                    context["dag_run"].run_after)


START = datetime(2026, 1, 1, tzinfo=UTC)
TAGS = ["groupscope"]


def default_args(timeout: timedelta) -> dict[str, Any]:
    """Every task's: owner, retries with backoff, a timeout, the failure notifier."""
    return {
        "owner": "groupscope",
        "retries": SETTINGS.retries,
        "retry_delay": SETTINGS.retry_delay,
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
        "execution_timeout": timeout,
        "on_failure_callback": [GroupscopeAlertNotifier()],
        "on_success_callback": [GroupscopeTaskRecovered()],
    }


def alert_every() -> timedelta:
    """The alerts DAG's cadence: the snapshot interval (no alert waits longer than one for a
    stuck Spark job), but not below 15 s (each run is an Airflow task process)."""
    return max(SETTINGS.snapshot_every, timedelta(seconds=15))


def live_marts_timeout() -> timedelta:
    """live_marts takes seconds per snapshot; three snapshot intervals (90 s to 10 minutes)
    means it hangs, and the next snapshot's run takes over. The 90 s floor: under ./run on 2
    cores, the first live run on a cold Connect server, behind the first hourly jobs, ran past
    the 50 s a 60 s floor gives its child process: it was stopped, and the on-call heard a
    false 'live_marts FAILED' a minute after start-up."""
    return min(max(3 * SETTINGS.snapshot_every, timedelta(seconds=90)), timedelta(minutes=10))


class GroupscopePlugin(AirflowPlugin):
    name = "groupscope"
