"""Analytics DAGs: one per watched Kafka cluster. The Spark jobs (lag, rebalance, skew) over
the run's data interval, then the data-quality gate over the marts they wrote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import Asset, CronDataIntervalTimetable, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException
from groupscope_airflow import (
    SETTINGS,
    START,
    TAGS,
    AnalyticsJobOperator,
    cluster_name,
    default_args,
    kafka_connection_ids,
    run_interval,
    warehouse_url,
)

from groupscope.contract.layout import snapshots_asset_uri

DOC = """
### groupscope analytics: `{cluster}`
{when}: three Spark jobs (`spark_jobs/`) over the run's data interval of cluster
`{cluster}`, on the Spark Connect server of the `{connect}` connection when it exists (no JVM
start per job), else submitted through the `{spark}` connection; each replaces exactly its
interval's rows (a rerun or a backfill leaves the same rows):

1. `lag`: `mart.partition_lag` (lag in offsets and seconds, rates, catch-up time), the
   member / topic / group / cluster roll-ups, and consumer status (`mart.partition_status`,
   `mart.group_status`);
2. `rebalance`: `mart.rebalance_events`, `mart.rebalance_hourly` (whole hours: the interval
   is widened to the hour);
3. `skew`: `mart.group_skew`, `mart.strategy_skew_hourly` (whole hours).

The lag job stays in this DAG although the live DAG (`groupscope_live_{cluster}`) computes the
same marts at every load: it fills what the live path leaves (snapshots loaded late, behind
the live watermark; the hours before the newest one after downtime longer than an hour;
backfills), and its rows equal the live rows (the same transforms and windows,
`groupscope.analyze.jobs.lag_frames`; tests/integration/test_live_analytics.py compares them),
so recomputing an hour only rewrites the same rows.

Then the `marts` quality suite (results in `ops.quality_results`): log start <= committed <=
high watermark unless flagged, lag consistency, closed status sets, and completeness (one lag
row per partition of every loaded snapshot). A failure fails the run with an alert.
Backfill with `airflow backfill create`; each run processes only its own interval.

Beside them, `retention` keeps the warehouse's size: it creates the partitions of today and
the next days, and drops the day (month) partitions older than the retention of their family:
raw tables {raw} days, marts {mart} days, hourly roll-ups {hourly} days
(`GROUPSCOPE_RETENTION_*_DAYS`). Every drop is logged and recorded in `ops.retention_drops`.
It also deletes resolved alert incidents (never open ones) after {incidents} days, quality
results after {quality} days and drop records after {drops} days.
The partitions hold every cluster's rows, so every cluster's DAG runs it; runs at the same
moment share the work without waiting for each other, and a second run in the same hour finds
nothing to drop.
"""


def analytics_dag(conn_id: str) -> None:
    cluster = cluster_name(conn_id)
    if SETTINGS.analytics_schedule == "assets":
        schedule: object = [
            Asset(name=f"groupscope_snapshots_{cluster}",
                  uri=snapshots_asset_uri(SETTINGS.landing, cluster))]
        when = f"When new snapshots land (Asset `groupscope_snapshots_{cluster}`)"
    else:
        schedule = CronDataIntervalTimetable(SETTINGS.analytics_schedule, timezone="UTC")
        when = f"On the schedule `{SETTINGS.analytics_schedule}` (UTC)"

    @dag(dag_id=f"groupscope_analytics_{cluster}", schedule=schedule, start_date=START,
         catchup=False, max_active_runs=1, tags=[*TAGS, "analytics", cluster],
         params={"cluster": cluster}, default_args=default_args(timeout=timedelta(minutes=45)),
         dagrun_timeout=timedelta(hours=3),
         doc_md=DOC.format(cluster=cluster, when=when, spark=SETTINGS.spark_conn_id,
                           connect=SETTINGS.spark_connect_conn_id,
                           raw=SETTINGS.retention_raw_days, mart=SETTINGS.retention_mart_days,
                           hourly=SETTINGS.retention_hourly_days,
                           incidents=SETTINGS.retention_incidents_days,
                           quality=SETTINGS.retention_quality_days,
                           drops=SETTINGS.retention_drops_days))
    def analytics() -> None:
        jobs = [
            AnalyticsJobOperator(task_id=f"{job}_job", job=job, cluster=cluster,
                                 landing=SETTINGS.landing, hourly=hourly,
                                 connect_conn_id=SETTINGS.spark_connect_conn_id,
                                 conn_id=SETTINGS.spark_conn_id)
            for job, hourly in (("lag", False), ("rebalance", True), ("skew", True))
        ]

        @task
        def check_marts() -> dict[str, object]:
            from groupscope import pipeline
            from groupscope.quality import QualityGateFailed

            start, end = run_interval(get_current_context())
            try:
                return pipeline.gate_marts(warehouse_url(), cluster, start, end,
                                           datetime.now(UTC))
            except QualityGateFailed as exc:
                raise AirflowFailException(str(exc)) from None

        @task
        def retention() -> dict[str, object]:
            from groupscope import pipeline

            return pipeline.retention(warehouse_url(), SETTINGS.retention,
                                      worker_clock=lambda: datetime.now(UTC))

        # One after another: each job uses the cores Spark is given.
        jobs[0] >> jobs[1] >> jobs[2] >> check_marts()
        retention()  # on its own: a failed job does not stop the housekeeping

    analytics()


for _conn_id in kafka_connection_ids():
    analytics_dag(_conn_id)
