"""Offsets-topic ingest DAGs: one per watched Kafka cluster. Every run lands the records of
`__consumer_offsets` written since the last run (exact commit and rebalance history)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import Asset, dag, task
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

from groupscope.contract.layout import offsets_asset_uri

DOC = """
### groupscope offsets-topic ingest: `{cluster}`
Every {every}: reads `__consumer_offsets` of cluster `{cluster}` (connection `{conn_id}`) from
where the last run stopped to its end at the start of the run (`read_committed`), decodes
every record (commits, classic generations, consumer-protocol epochs and assignments,
deletions; unknown or undecodable records are kept with their bytes) and lands them as
Parquet batches under `{landing}/offsets_topic/`. A killed or repeated run neither loses nor
duplicates an event. Needs read access to `__consumer_offsets` (Describe/Read on the topic).
Then `load_generations` loads the rebalances landed (classic generations, consumer-group epochs)
into `raw.group_generations`, which the rebalance-storm alert counts over its sliding window; a
warehouse that is down is caught up by the next run. It records how far the feed has come
(`ops.offsets_feed`): a paused DAG, or an ingest that stays incomplete, fires
`offsets_feed_stale`.
"""


def offsets_dag(conn_id: str) -> None:
    cluster = cluster_name(conn_id)
    landed = Asset(name=f"groupscope_offsets_{cluster}",
                   uri=offsets_asset_uri(SETTINGS.landing, cluster))

    @dag(dag_id=f"groupscope_offsets_{cluster}", schedule=SETTINGS.ingest_every,
         start_date=START, catchup=False, max_active_runs=1,
         tags=[*TAGS, "offsets-topic", cluster], params={"cluster": cluster},
         default_args=default_args(timeout=timedelta(minutes=20)),
         dagrun_timeout=timedelta(minutes=60),
         doc_md=DOC.format(cluster=cluster, conn_id=conn_id, landing=SETTINGS.landing,
                           every=SETTINGS.ingest_every))
    def offsets() -> None:
        from groupscope import pipeline

        @task(outlets=[landed])
        def ingest() -> dict[str, object]:
            return pipeline.ingest(KafkaClusterHook(conn_id).cluster(), SETTINGS.landing,
                                   datetime.now(UTC), SETTINGS.kafka_timeout_s,
                                   run_timeout_s=15 * 60)

        @task
        def load_generations(ingested: dict[str, object]) -> dict[str, int]:
            return pipeline.load_generations(warehouse_url(), SETTINGS.landing, cluster,
                                             datetime.now(UTC), ingested)

        load_generations(ingest())

    offsets()


for _conn_id in kafka_connection_ids():
    offsets_dag(_conn_id)
