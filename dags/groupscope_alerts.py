"""Alert DAGs: one per watched Kafka cluster. Every snapshot interval, the alert rules are
checked and what the incidents owe is sent, whatever the Spark work is doing: a hung or
crashed live_marts delays no alert by more than a snapshot interval (its staleness is an
alert of its own, analytics_stale)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from airflow.timetables.trigger import DeltaTriggerTimetable
from groupscope_airflow import (
    START,
    TAGS,
    alert_every,
    cluster_name,
    default_args,
    kafka_connection_ids,
)
from groupscope_alerting import evaluate_alerts

DOC = """
### groupscope alerts: `{cluster}`
Every {every}: `evaluate_alerts` checks the alert rules (`GROUPSCOPE_ALERT_RULES` on top of
the built-in ones) against cluster `{cluster}`'s newest marts and groupscope's own health, and
sends what the incidents owe through every channel that has its Airflow connection
(docs/alerts.md). The live DAG also evaluates right after each snapshot's marts; this DAG is
the cadence that does not depend on Spark:

- a live_marts that hangs or fails leaves the status rows behind the snapshots:
  `analytics_stale` fires, and every group's value is unknown (no incident fires or resolves
  on frozen marts);
- a groupscope task that failed for good (`ops.task_runs`) is a `task_failed` incident;
- a channel that keeps failing is a `channel_failing` incident, sent through the others;
- a bad rules file is a `rules_invalid` incident, and the last valid rules stay in use;
- the warehouse unreachable: every channel is told straight, once per outage;
- the optional heartbeat ("groupscope is alive") goes out from here.
"""


def alerts_dag(conn_id: str) -> None:
    cluster = cluster_name(conn_id)
    every = alert_every()

    @dag(dag_id=f"groupscope_alerts_{cluster}",
         schedule=DeltaTriggerTimetable(every),
         start_date=START, catchup=False, max_active_runs=1,
         tags=[*TAGS, "alerts", cluster], params={"cluster": cluster},
         # A run that misses its slot is worthless: the next one evaluates afresh.
         default_args={**default_args(timeout=timedelta(minutes=2)), "retries": 0},
         dagrun_timeout=timedelta(minutes=3),
         doc_md=DOC.format(cluster=cluster, every=f"{every.total_seconds():g} s"))
    def alerts() -> None:
        evaluate_alerts(cluster)

    alerts()


for _conn_id in kafka_connection_ids():
    alerts_dag(_conn_id)
