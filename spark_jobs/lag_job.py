"""Spark job: the lag marts of one data interval, replaced in the warehouse.

    spark-submit spark_jobs/lag_job.py --landing DIR --cluster NAME \
        --start 2026-11-21T10:00:00Z --end 2026-11-21T11:00:00Z [--warehouse URL]

Definitions: groupscope/analytics/. Prints the rows written per mart as JSON.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    from groupscope.analytics import jobs
    from groupscope.analytics.io import session

    job = jobs.parse_args("lag_job", argv)
    spark = session("groupscope-lag")
    try:
        written = jobs.write(job, jobs.lag_frames(spark, job), "snapshot_ts")
    finally:
        spark.stop()
    print(json.dumps({"cluster": job.cluster, "start": job.interval.start.isoformat(),
                      "end": job.interval.end.isoformat(), "rows": written}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
