"""Panel query benchmark: every panel and variable query of every dashboard, Grafana's macros
expanded (groupscope.serve.grafana.macros), run as ``grafana_reader`` over the analytics
benchmark's day of one-minute snapshots, for the last 6 h and the last 24 h of that day and a
real group; median and p95 per query.

Data: ``bench/analytics_bench.generate`` (GROUPS x PARTITIONS group-partitions x MINUTES
snapshots, the real landing layout), loaded into a fresh warehouse the way the pipeline loads
it (``warehouse.load_landed`` per snapshot: raw tables and what-if mart), then the marts
computed by the real jobs on Spark ``local[2]`` (``pipeline.analytics``: lag and status one
hour at a time, as the hourly DAG runs them; rebalance and skew over the day's hours), then
``ANALYZE``. A PostgreSQL of its own (the dev stack's, in a temporary folder) is started
and destroyed.

    .venv/bin/python bench/panel_queries_bench.py [--groups 100] [--partitions 50]
        [--minutes 1440] [--runs 7] [--explain-over 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "dev")]


def _machine() -> dict[str, Any]:
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text()
                   .splitlines() if line.startswith("MemTotal:"))
    return {"nproc": os.cpu_count(), "ram_gib": round(mem_kib / 2**20, 1),
            "cpu": platform.processor() or platform.machine()}


def _panels(panels: list[dict[str, Any]]) -> Any:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title or 'variable NAME', SQL) of every query."""
    from groupscope.serve.grafana.dashboards import build_all

    found = []
    for uid, dashboard in build_all().items():
        for panel in _panels(dashboard["panels"]):
            found.extend((uid, panel["title"], t["rawSql"]) for t in panel.get("targets") or []
                         if t.get("rawSql"))
        for variable in dashboard["templating"]["list"]:
            if variable.get("type") == "query":
                q = variable["query"]
                sql = q if isinstance(q, str) else (q.get("rawSql") or q.get("query"))
                found.append((uid, f"variable {variable['name']}", sql))
    return found


def fill(url: str, landing: Path) -> dict[str, float]:
    """Loads the landed snapshots and computes the marts; returns the seconds of each step."""
    from groupscope import pipeline, warehouse
    from groupscope.analyze.io import Interval, session
    from groupscope.analyze.jobs import JobArgs
    from groupscope.land.snapshots import landed_snapshots

    took: dict[str, float] = {}
    engine = warehouse.engine_for(url)
    warehouse.migrate(engine)
    started = time.monotonic()
    snapshots = landed_snapshots(landing, "bench")
    for snapshot in snapshots:
        warehouse.load_landed(engine, snapshot)
    took["load_raw_s"] = time.monotonic() - started
    first, last = snapshots[0].snapshot_ts, snapshots[-1].snapshot_ts
    spark = session("panel-queries-bench", master="local[2]")
    try:
        started = time.monotonic()
        end = last + timedelta(microseconds=1)
        # Hour by hour, as the hourly analytics DAG runs it: one job over the whole day
        # collects 7.2M rows on the driver and runs out of a default 1 GB heap (at the full
        # 5,000 partitions, one hour's broadcast join does too: docs/benchmarks.md).
        hour = first.replace(minute=0, second=0, microsecond=0)
        while hour < end:
            interval = Interval(max(hour, first), min(hour + timedelta(hours=1), end))
            pipeline.analytics(spark, JobArgs(landing, "bench", interval, url,
                                              timedelta(hours=1)), "lag")
            hour += timedelta(hours=1)
        took["lag_job_and_load_s"] = time.monotonic() - started
        started = time.monotonic()
        hours = Interval(*pipeline.analytics_interval(first, end, hourly=True))
        for kind in ("rebalance", "skew"):
            pipeline.analytics(spark, JobArgs(landing, "bench", hours, url, timedelta(hours=1)),
                               kind)
        took["rebalance_skew_jobs_s"] = time.monotonic() - started
    finally:
        spark.stop()
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    engine.dispose()
    return took


def measure(reader_url: str, runs: int, explain_over: float, end: Any) -> list[dict[str, Any]]:
    import psycopg

    from groupscope.serve.grafana.macros import expand

    results = []
    with psycopg.connect(reader_url, autocommit=True) as conn:
        group = "group-003"  # stops for a while and has its topic re-created mid-day
        topics = [r[0] for r in conn.execute(
            "SELECT topic FROM serve.group_topics WHERE cluster = 'bench' AND group_id = %s",
            (group,))]
        variables = {"cluster": "bench", "group": group, "topic": topics}
        for hours in (6, 24):
            start = end - timedelta(hours=hours)
            for uid, title, sql in queries():
                text = expand(sql, time_from=start, time_to=end,
                              variables={k: v for k, v in variables.items() if k in sql})
                times, rows = [], 0
                for _ in range(runs):
                    t0 = time.perf_counter()
                    rows = len(conn.execute(text.encode()).fetchall())
                    times.append(time.perf_counter() - t0)
                times.sort()
                entry = {"range_h": hours, "dashboard": uid, "panel": title, "rows": rows,
                         "median_ms": round(statistics.median(times) * 1000, 2),
                         "p95_ms": round(times[min(len(times) - 1,
                                                   round(0.95 * (len(times) - 1)))] * 1000, 2)}
                if statistics.median(times) > explain_over:
                    entry["plan"] = [r[0] for r in conn.execute(
                        b"EXPLAIN (ANALYZE, BUFFERS) " + text.encode())]
                results.append(entry)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--minutes", type=int, default=1440)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--explain-over", type=float, default=1.0, help="seconds")
    args = parser.parse_args()

    from analytics_bench import DAY, generate

    from groupscope_dev.ports import free_ports
    from groupscope_dev.postgres import READER_PASSWORD, READER_ROLE, LocalPostgres

    work = Path(tempfile.mkdtemp(prefix="panel-bench-"))
    os.chmod(work, 0o755)  # the PostgreSQL service user (as root) reaches its folder
    server = LocalPostgres(work / "postgres", port=free_ports(1)[0])
    try:
        started = time.monotonic()
        rows = generate(work / "landing", args.groups, args.partitions, args.minutes)
        generated_s = time.monotonic() - started
        server.start()
        url = server.create_database("bench")
        took = fill(url, work / "landing")
        end = DAY + timedelta(minutes=args.minutes)
        results = measure(server.database_url("bench", READER_ROLE, READER_PASSWORD),
                          args.runs, args.explain_over, end)
    finally:
        server.destroy()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    slow = [r for r in results if r["median_ms"] > 1000]
    print(json.dumps({"machine": _machine(), "partition_rows": rows,
                      "groups": args.groups, "partitions": args.partitions,
                      "minutes": args.minutes, "runs": args.runs,
                      "generate_s": round(generated_s, 1),
                      **{k: round(v, 1) for k, v in took.items()},
                      "slow": slow, "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
