"""Spark job: the lag marts of one data interval, replaced in the warehouse.

    spark-submit spark_jobs/lag_job.py --landing DIR --cluster NAME \
        --start 2026-11-21T10:00:00Z --end 2026-11-21T11:00:00Z [--warehouse URL]

Definitions: groupscope.analyze. Prints the rows written per mart as JSON.
"""

import sys

from groupscope.pipeline import analytics_job

if __name__ == "__main__":
    sys.exit(analytics_job("lag", sys.argv[1:]))
