"""Snapshot DAGs: one per watched Kafka cluster (see plugins/groupscope_airflow.py for where
the clusters come from). Every run: snapshot the cluster and land it (`collect`); then check
every landed snapshot not yet loaded and load those that passed into the warehouse (`load`,
one task: one task process fewer between a snapshot and its marts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import Asset, dag, task
from airflow.sdk.exceptions import AirflowFailException
from groupscope_airflow import (
    SETTINGS,
    START,
    TAGS,
    KafkaClusterHook,
    cluster_name,
    default_args,
    kafka_connection_ids,
    warehouse_url,
)

from groupscope.contract.layout import snapshots_asset_uri

DOC = """
### groupscope snapshot: `{cluster}`
Every {every}: a snapshot of the consumer groups of Kafka cluster `{cluster}` (connection
`{conn_id}`) through the coordinator APIs (groups, members, assignments, committed offsets,
log start / high watermark / last stable offsets, record timestamps at lagging offsets),
landed as Parquet under `{landing}`.

Then `load`, in one task: the data-quality gate (`landed_snapshot` suite, results in
`ops.quality_results`), then the load. A landed snapshot that fails the gate is rejected
(marked under `_quality/rejected/`, never loaded) and the task fails with an alert; nothing of
that run is loaded. The snapshots that pass are loaded into the warehouse (`raw.*`,
`mart.assignment_whatif`, `mart.assignment_advice`).
A warehouse outage loses nothing: a later run loads every landed snapshot not yet loaded
(up to 24 hours back).

A partial snapshot (a group or topic deleted mid-snapshot, a coordinator that moved) is
landed with its errors (`raw.collection_errors`); an unreachable cluster fails the `collect`
task with the reason, and only this cluster's DAG.
"""


def snapshot_dag(conn_id: str) -> None:
    cluster = cluster_name(conn_id)
    landed = Asset(name=f"groupscope_snapshots_{cluster}",
                   uri=snapshots_asset_uri(SETTINGS.landing, cluster))

    @dag(dag_id=f"groupscope_snapshot_{cluster}", schedule=SETTINGS.snapshot_every,
         start_date=START, catchup=False, max_active_runs=1, tags=[*TAGS, "snapshot", cluster],
         default_args=default_args(timeout=timedelta(minutes=5)),
         dagrun_timeout=timedelta(minutes=30), params={"cluster": cluster},
         doc_md=DOC.format(cluster=cluster, conn_id=conn_id, landing=SETTINGS.landing,
                           every=SETTINGS.snapshot_every))
    def snapshot() -> None:
        from groupscope import pipeline

        @task
        def collect() -> dict[str, object]:
            return pipeline.collect(KafkaClusterHook(conn_id).cluster(), SETTINGS.landing,
                                    datetime.now(UTC), SETTINGS.kafka_timeout_s,
                                    SETTINGS.offset_fetch_connections,
                                    SETTINGS.group_kinds, SETTINGS.kafka_java_classpath)

        @task(outlets=[landed])
        def load() -> int:
            from groupscope.quality import QualityGateFailed

            try:
                return len(pipeline.check_and_load(warehouse_url(), SETTINGS.landing, cluster,
                                                   datetime.now(UTC)))
            except QualityGateFailed as exc:  # bad data does not get better on a retry
                raise AirflowFailException(str(exc)) from None

        collect() >> load()

    snapshot()


for _conn_id in kafka_connection_ids():
    snapshot_dag(_conn_id)
