"""Retention benchmark: the retention task (``warehouse.partitions.apply_retention``, what the
analytics DAG's ``retention`` task runs) over a warehouse holding the analytics benchmark's day
of one-minute snapshots, filled as ``panel_queries_bench.fill`` fills it (raw tables through
``warehouse.load_landed``, the marts by the real jobs on Spark ``local[2]``).

``--fill copied`` (the default) fills the first hour that way and copies its rows to the other
hours of the day in SQL, every table's time column moved by whole hours, so a day is in place
in minutes (filling all of it through the jobs took over 110 minutes here); ``--fill jobs``
fills every minute through the jobs. Retention drops whole partitions, so what it costs
depends on how many partitions and how large, not on the values in the rows.

Three runs, each timed: nothing expired (the hourly run's usual case: the days ahead exist);
the day expired in every family (a time 400 days after the end of the day's month, so the raw,
mart and hourly partitions all go); and the same again (idempotent: nothing left to drop).
A PostgreSQL of its own (the dev stack's, in a temporary folder) is started and destroyed.

    .venv/bin/python bench/retention_bench.py [--groups 100] [--partitions 5] [--minutes 1440]
        [--fill copied|jobs]
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


def _copy_first_hour(engine: Any, day: datetime, hours: int) -> dict[str, int]:
    """Copies the rows of every partitioned table's first hour of ``day`` to its next
    ``hours - 1`` hours, the table's time column moved by whole hours (the partitions of the
    day exist: the first hour's writers made them). Identity and defaulted-sequence columns
    take new values. Returns the rows each table holds after."""
    counts: dict[str, int] = {}
    with engine.begin() as conn:
        tables = conn.exec_driver_sql(
            "SELECT schema_name, table_name, time_column FROM groupscope_meta.partitioned_tables"
            " ORDER BY 1, 2").all()
        for schema, table, column in tables:
            names = [name for (name,) in conn.exec_driver_sql(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
                " AND table_name = %s AND is_generated = 'NEVER' AND is_identity = 'NO'"
                " AND coalesce(column_default, '') NOT LIKE 'nextval(%%'"
                " ORDER BY ordinal_position", (schema, table))]
            columns = ", ".join(f'"{n}"' for n in names)
            moved = ", ".join(f"\"{n}\" + k * interval '1 hour'" if n == column else f'"{n}"'
                              for n in names)
            conn.exec_driver_sql(
                f'INSERT INTO "{schema}"."{table}" ({columns}) SELECT {moved}'
                f' FROM "{schema}"."{table}" CROSS JOIN generate_series(1, %s) AS k'
                f' WHERE "{column}" >= %s AND "{column}" < %s ON CONFLICT DO NOTHING',
                (hours - 1, day, day + timedelta(hours=1)))
            counts[f"{schema}.{table}"] = conn.exec_driver_sql(
                f'SELECT count(*) FROM "{schema}"."{table}"').scalar_one()
        conn.exec_driver_sql("ANALYZE")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=5)
    parser.add_argument("--minutes", type=int, default=1440)
    parser.add_argument("--fill", choices=("copied", "jobs"), default="copied")
    args = parser.parse_args()
    if args.fill == "copied" and args.minutes % 60:
        parser.error("--fill copied copies whole hours: --minutes must be a multiple of 60")

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
        filled_minutes = 60 if args.fill == "copied" else args.minutes
        rows = generate(work / "landing", args.groups, args.partitions, filled_minutes)
        server.start()
        url = server.create_database("bench")
        took = fill(url, work / "landing")
        engine = warehouse.engine_for(url)
        table_rows: dict[str, int] = {}
        if args.fill == "copied":
            started = time.perf_counter()
            table_rows = _copy_first_hour(engine, DAY, args.minutes // 60)
            took["copy_hours_s"] = time.perf_counter() - started
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
    print(json.dumps({"machine": _machine(), "fill": args.fill,
                      "partition_rows_filled_by_jobs": rows, "groups": args.groups,
                      "partitions": args.partitions, "minutes": args.minutes,
                      "table_rows": table_rows,
                      **{k: round(v, 1) for k, v in took.items()}, "before": before,
                      "after": after, "runs": runs,
                      "at": datetime.now(UTC).isoformat(timespec="seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
