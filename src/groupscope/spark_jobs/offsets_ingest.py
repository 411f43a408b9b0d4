"""Spark job: land every __consumer_offsets record since the last run (any landing position
written by either ingest path counts).

    spark-submit --jars <spark_kafka_libs> spark_jobs/offsets_ingest.py \
        --bootstrap HOST:PORT --cluster NAME --landing DIR [--client-file FILE]

FILE is a JSON object of librdkafka settings (the ``kafka`` connection's extra: security
protocol, SASL, TLS): secrets go there, readable by the job's user only, never on the command
line, where ``ps`` shows them. Prints one JSON line: what each offsets-topic partition landed.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="offsets_ingest")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--cluster", default="default")
    parser.add_argument("--landing", required=True)
    parser.add_argument("--client-file", metavar="FILE",
                        help="JSON object of librdkafka settings (secrets go here)")
    parser.add_argument("--batch-records", type=int, default=200_000)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from groupscope.contract.cluster import ClusterConfig
    from groupscope.kafka.java_admin import SPARK_REDACTION
    from groupscope.offsets.ingest import read_watermarks
    from groupscope.offsets.spark_ingest import plan, run

    settings = json.loads(Path(args.client_file).read_text()) if args.client_file else {}
    cluster = ClusterConfig(args.cluster, {**settings, "bootstrap.servers": args.bootstrap})
    watermarks, topic_names = read_watermarks(cluster.client, args.timeout)
    the_plan = plan(cluster.name, Path(args.landing), datetime.now(UTC), args.batch_records,
                    watermarks, topic_names)
    spark = (SparkSession.builder.appName("groupscope-offsets-ingest")
             .config("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
             .config(map=dict(SPARK_REDACTION))
             .getOrCreate())
    try:
        landed = run(spark, dict(cluster.client), the_plan)
    finally:
        spark.stop()
    print(json.dumps({"cluster": cluster.name, "partitions_planned": len(the_plan.starts),
                      "gaps": {str(p): list(g) for p, g in the_plan.gaps.items()},
                      "landed": sorted(landed, key=lambda r: r["partition"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
