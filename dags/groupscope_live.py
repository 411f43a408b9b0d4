"""Live analytics DAGs: one per watched Kafka cluster. Each load of snapshots into the warehouse
(the snapshots Asset of the snapshot DAG's `load` task) triggers a run that computes the lag
and status marts of the new snapshots only, on a long-lived Spark Connect server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, dag
from groupscope_airflow import (
    SETTINGS,
    START,
    TAGS,
    LiveMartsOperator,
    cluster_name,
    default_args,
    kafka_connection_ids,
    live_marts_timeout,
)
from groupscope_alerting import evaluate_alerts

from groupscope.contract.layout import snapshots_asset_uri

DOC = """
### groupscope live analytics: `{cluster}`
When snapshots of cluster `{cluster}` are loaded (Asset `groupscope_snapshots_{cluster}`),
`live_marts` computes `mart.partition_lag`, its member / topic / group / cluster roll-ups,
`mart.partition_status` and `mart.group_status` for the snapshots loaded since its last run,
and nothing else:

- the interval runs from the first loaded snapshot at or after the watermark
  (`ops.live_analytics.computed_through`) to just after the newest loaded one; after downtime
  it starts at most an hour before the newest (older snapshots are the hourly lag job's);
- the job reads only the trailing history its windows need (time-lag history, status
  windows: `groupscope.analyze.jobs.lag_read_span`, about 70 minutes) and replaces only its
  interval's rows;
- the transforms are the hourly lag job's (`groupscope.analyze.jobs.lag_frames`), with the
  same windows, so a snapshot's rows are the same whichever of the two computed it.
- the watermark then moves only over the snapshots whose rows are in the marts: a run that
  read none of them (a worker that cannot see the landing zone) fails and leaves it, so
  `analytics_stale` fires rather than reading fresh.

It runs on the Spark Connect server of the `{connect}` connection (type `spark_connect`): no
JVM starts per run. Without that connection it spark-submits the lag job over the same
interval through the `{spark}` connection (a JVM start per run: tens of seconds).
One run at a time; a run that finds nothing new writes nothing. `live_marts` returns (XCom)
the cluster, the interval, the number of snapshots and the rows written per mart.

`live_marts` may take at most {timeout} (a few snapshot intervals) and is not retried: the
next snapshot's run is its retry, and the watermark makes it compute what this one missed.

`evaluate_alerts` then checks the alert rules (`GROUPSCOPE_ALERT_RULES` on top of the built-in
ones) against the new marts and sends what the incidents owe (docs/alerts.md), so an alert
goes out as soon as its snapshot's status is computed. When `live_marts` fails or hangs, the
alerts DAG (`groupscope_alerts_{cluster}`, every snapshot interval) still evaluates: the
collector rules, and `analytics_stale` about the marts themselves.
"""


def after_live_marts(cluster: str) -> list[Any]:
    """The tasks that run once the live marts are written (each gets ``live_marts`` as its
    upstream): a downstream task is one line here."""
    return [evaluate_alerts(cluster)]


def live_dag(conn_id: str) -> None:
    cluster = cluster_name(conn_id)
    loaded = Asset(name=f"groupscope_snapshots_{cluster}",
                   uri=snapshots_asset_uri(SETTINGS.landing, cluster))

    @dag(dag_id=f"groupscope_live_{cluster}",
         schedule=[loaded],
         start_date=START,
         catchup=False, max_active_runs=1, tags=[*TAGS, "live", cluster],
         params={"cluster": cluster},
         default_args=default_args(timeout=timedelta(minutes=2)),
         dagrun_timeout=live_marts_timeout() + timedelta(minutes=3),
         doc_md=DOC.format(cluster=cluster, timeout=f"{live_marts_timeout().total_seconds():g} s",
                           connect=SETTINGS.spark_connect_conn_id,
                           spark=SETTINGS.spark_conn_id))
    def live() -> None:
        marts = LiveMartsOperator(task_id="live_marts", cluster=cluster,
                                  landing=SETTINGS.landing,
                                  connect_conn_id=SETTINGS.spark_connect_conn_id,
                                  conn_id=SETTINGS.spark_conn_id,
                                  execution_timeout=live_marts_timeout(), retries=0)
        downstream = after_live_marts(cluster)
        if downstream:
            marts >> downstream

    live()


for _conn_id in kafka_connection_ids():
    live_dag(_conn_id)
