"""Retention benchmark: the retention task (``warehouse.partitions.apply_retention``, what the
analytics DAG's ``retention`` task runs) over a warehouse holding the analytics benchmark's day
of one-minute snapshots, filled as ``panel_queries_bench.fill`` fills it (raw tables through
``warehouse.load_landed``, the marts by the real jobs on Spark ``local[2]``).

Three runs, each timed: nothing expired (the hourly run's usual case: the days ahead exist);
the day expired in every family (a time 400 days after the end of the day's month, so the raw,
mart and hourly partitions all go); and the same again (idempotent: nothing left to drop).
A PostgreSQL of its own (the dev stack's, in a temporary folder) is started and destroyed.

    .venv/bin/python bench/retention_bench.py [--groups 100] [--partitions 5] [--minutes 1440]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "dev")]


def _sizes(engine: Any) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT count(*), coalesce(sum(pg_total_relation_size(to_regclass("
            "quote_ident(schema_name) || '.' || quote_ident(partition_name)))), 0)"
            " FROM groupscope_meta.partitions").one()
        rows = conn.exec_driver_sql(
            "SELECT (SELECT count(*) FROM raw.committed_offsets),"
            " (SELECT count(*) FROM mart.partition_lag)").one()
    return {"partitions": row[0], "bytes": int(row[1]), "raw_committed_offsets_rows": rows[0],
            "mart_partition_lag_rows": rows[1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=5)
    parser.add_argument("--minutes", type=int, default=1440)
    args = parser.parse_args()

    from analytics_bench import DAY, generate
    from panel_queries_bench import _machine, fill

    from groupscope import warehouse
    from groupscope.warehouse import partitions
    from groupscope_dev.ports import free_ports
    from groupscope_dev.postgres import LocalPostgres

    work = Path(tempfile.mkdtemp(prefix="retention-bench-"))
    os.chmod(work, 0o755)  # the PostgreSQL service user (as root) reaches its folder
    server = LocalPostgres(work / "postgres", port=free_ports(1)[0])
    runs: dict[str, Any] = {}
    try:
        rows = generate(work / "landing", args.groups, args.partitions, args.minutes)
        server.start()
        url = server.create_database("bench")
        took = fill(url, work / "landing")
        engine = warehouse.engine_for(url)
        before = _sizes(engine)
        day_end = DAY + timedelta(minutes=args.minutes)
        month_end = (day_end.replace(day=28) + timedelta(days=4)).replace(
            day=1, hour=0, minute=0, second=0, microsecond=0)
        for name, now in (("nothing_expired", day_end),
                          ("day_expired", month_end + timedelta(days=401)),
                          ("again", month_end + timedelta(days=401))):
            started = time.perf_counter()
            run = partitions.apply_retention(engine, partitions.DEFAULT_RETENTION,
                                             now.astimezone(UTC))
            runs[name] = {"seconds": round(time.perf_counter() - started, 3),
                          "created": run.created, "dropped": len(run.dropped)}
        after = _sizes(engine)
        engine.dispose()
    finally:
        server.destroy()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"machine": _machine(), "partition_rows": rows, "groups": args.groups,
                      "partitions": args.partitions, "minutes": args.minutes,
                      **{k: round(v, 1) for k, v in took.items()}, "before": before,
                      "after": after, "runs": runs,
                      "at": datetime.now(UTC).isoformat(timespec="seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
