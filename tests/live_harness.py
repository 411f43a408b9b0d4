"""Runs ``groupscope.pipeline.live_analytics`` on a Spark Connect server, in a process of its
own: a process whose pyspark took a remote session stays in Connect mode, and the test
process holds a local session. Prints the summary as JSON on the last line of stdout.

    python tests/live_harness.py sc://HOST:PORT WAREHOUSE_URL LANDING CLUSTER
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from groupscope import pipeline
from groupscope.analyze.io import session


def main(argv: list[str]) -> int:
    remote, warehouse_url, landing, cluster = argv
    spark = session("groupscope-live-test", remote=remote)
    try:
        summary = pipeline.live_analytics(spark, warehouse_url, Path(landing), cluster,
                                          datetime.now(UTC))
    finally:
        spark.stop()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
