"""Offsets-topic ingest as a Spark batch job over Spark's Kafka source, for clusters whose
``__consumer_offsets`` is too large for one Python process.

The connection's librdkafka settings reach the Kafka source mapped to the Java client's
(``java_admin.spark_kafka_options``, the mapping the Java Admin client uses too).

The driver plans (stored positions, start offsets, gaps, topic names); each task reads one
offsets-topic partition's range through the Kafka source and lands it with the same decoder and
``BatchLander`` as the plain path, so both paths write identical batches and share positions.
The landing root must be a file system every executor sees (local in ``local[*]``; a shared
mount on a cluster).

Spark's Admin-based offset reader does not see internal topics, so the job switches to the
consumer-based one (``spark.sql.streaming.kafka.useDeprecatedOffsetFetching``), which joins a
throwaway consumer group per run (named ``groupscope-spark-offsets-reader-*``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from groupscope.kafka.java_admin import spark_kafka_options
from groupscope.offsets import store
from groupscope.offsets.ingest import OFFSETS_TOPIC, BatchLander

EARLIEST = -2  # the Kafka source's code for "earliest" in startingOffsets


@dataclass(frozen=True)
class Plan:
    cluster: str
    root: str
    ingest_ts: datetime
    batch_records: int
    starts: dict[int, int]  # the first offset to land per partition
    gaps: dict[int, tuple[int, int]]
    topic_names: dict[str, str]

    def starting_offsets(self) -> str:
        return json.dumps({OFFSETS_TOPIC: {str(p): s for p, s in self.starts.items()}})


def plan(cluster: str, root: Path, ingest_ts: datetime, batch_records: int,
         watermarks: Mapping[int, tuple[int, int]], topic_names: Mapping[str, str]) -> Plan:
    """Where each partition starts: its landed position, or the log start if that is later
    (records deleted before they were read are recorded as a gap)."""
    landed = store.positions(root, cluster)
    starts, gaps = {}, {}
    for p, (low, high) in sorted(watermarks.items()):
        stored = landed.get(p, 0)
        start = max(stored, low)
        if start >= high:
            continue
        starts[p] = start
        if stored < low:
            gaps[p] = (stored, low)
    return Plan(cluster, str(root), ingest_ts, batch_records, starts, gaps, dict(topic_names))


def land_partition(the_plan: Plan, rows: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """Runs in a Spark task: lands the rows (partition, offset, timestamp_ms, key, value) of
    the offsets-topic partitions this task reads, in offset order."""
    landers: dict[int, BatchLander] = {}
    for row in rows:
        p = int(row["partition"])
        lander = landers.get(p)
        if lander is None:
            lander = landers[p] = BatchLander(
                Path(the_plan.root), the_plan.cluster, p, the_plan.starts[p],
                the_plan.ingest_ts, the_plan.batch_records,
                lambda ids: the_plan.topic_names, the_plan.gaps.get(p))
        key, value = row["key"], row["value"]  # bytearray from Spark
        lander.add(int(row["offset"]), int(row["timestamp_ms"]),
                   None if key is None else bytes(key), None if value is None else bytes(value))
    for p, lander in landers.items():
        if lander.last_seen is not None:
            lander.flush(lander.last_seen + 1)
        yield {"partition": p, "next_offset": lander.next_offset, "batches": lander.batches,
               "counts": dict(lander.counts)}


def run(spark: Any, client: Mapping[str, str], the_plan: Plan) -> list[dict[str, Any]]:
    """Reads every planned range through the Kafka source (connected with ``client``, the
    librdkafka settings) and lands it."""
    if not the_plan.starts:
        return []
    from pyspark.sql import functions as F

    frame = (
        spark.read.format("kafka")
        .options(**spark_kafka_options(client))
        .option("assign", json.dumps({OFFSETS_TOPIC: sorted(the_plan.starts)}))
        .option("startingOffsets", the_plan.starting_offsets())
        .option("endingOffsets", "latest")
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "false")  # gaps are found and recorded by the plan
        # The consumer-based offset reader joins a throwaway group on the driver: name it so
        # an operator (and groupscope's own snapshot) can tell what it is.
        .option("groupIdPrefix", "groupscope-spark-offsets-reader")
        .load()
        .select("partition", "offset", F.unix_millis("timestamp").alias("timestamp_ms"),
                "key", "value")
        .sortWithinPartitions("partition", "offset")
    )
    return list(frame.rdd.mapPartitions(lambda rows: land_partition(the_plan, rows)).collect())
