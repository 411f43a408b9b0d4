"""Analytics benchmark: the lag, time-lag and status job over 24 hours of one-minute snapshots
for 5,000 group-partitions (7.2 million partition rows) on Spark ``local[2]``, against the
same computation written as DuckDB SQL over the same Parquet files, in the same run.

Data: GROUPS groups x PARTITIONS partitions, each group reading its own topic; 1,440 landed
snapshots (the real landing layout, manifests included), high watermarks growing at a
per-partition rate with noise, committed offsets trailing with varying lag (some groups stop
for a while, one topic is re-created mid-day). Both engines read the landed Parquet and write
their results to Parquet (the warehouse load is not part of the measure).

The DuckDB status is the rule set of issue 4 (a fixed 300 s floor under 2 x the longest
pause), not issue 13's (``group_empty``, the floor only while the commit rhythm is unknown,
pauses measured from the snapshot before the previous advance; its ``falling_behind`` has
issue 16's in-flight guard): it is there to weigh the
work of the same windows, and ``status_rows_differing`` counts where the two rule sets part.

    .venv/bin/python bench/analytics_bench.py [--groups 100] [--partitions 50] [--minutes 1440]
        [--baseline SRC] [--landing DIR]

``--baseline SRC`` (another checkout's ``src``, e.g. of the commit before a change) runs that
version's Spark job too, on the same data, each Spark run in a process of its own (a JVM of its
own), and compares the four outputs of the two with EXCEPT ALL both ways (``differing_rows``:
zero when both compute the same rows). ``--landing DIR`` reuses (or, when empty, keeps) the
generated data.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
DAY = datetime(2026, 11, 1, tzinfo=UTC)


def generate(root: Path, groups: int, partitions: int, minutes: int, seed: int = 3) -> int:
    from groupscope.contract.tables import SCHEMAS

    rng = random.Random(seed)
    rates = [[rng.uniform(0.5, 20.0) for _ in range(partitions)] for _ in range(groups)]
    hw = [[rng.randrange(0, 10_000) for _ in range(partitions)] for _ in range(groups)]
    committed = [[h - rng.randrange(0, 500) for h in row] for row in hw]
    stopped = {g: (rng.randrange(minutes), rng.randrange(10, 120)) for g in range(0, groups, 7)}
    rows = 0
    for minute in range(minutes):
        ts = DAY + timedelta(minutes=minute)
        sid = f"bench-{ts:%Y%m%dT%H%M%S}000000Z"
        committed_rows: dict[str, list[Any]] = {k: [] for k in SCHEMAS["committed_offsets"].names}
        log_rows: dict[str, list[Any]] = {k: [] for k in SCHEMAS["partition_offsets"].names}
        group_rows: dict[str, list[Any]] = {k: [] for k in SCHEMAS["consumer_groups"].names}
        for g in range(groups):
            start, length = stopped.get(g, (-1, 0))
            consuming = not start <= minute < start + length
            for p in range(partitions):
                if g == 3 and minute == minutes // 2:  # topic re-created
                    hw[g][p], committed[g][p] = rng.randrange(0, 50), 0
                hw[g][p] += max(0, int(rates[g][p] * 60 + rng.gauss(0, 20)))
                if consuming:
                    behind = hw[g][p] - committed[g][p]
                    committed[g][p] += int(behind * rng.uniform(0.6, 1.0))
                for k, v in (("cluster", "bench"), ("snapshot_ts", ts),
                             ("group_id", f"group-{g:03d}"), ("topic", f"topic-{g:03d}"),
                             ("partition", p), ("committed_offset", committed[g][p]),
                             ("leader_epoch", None), ("commit_metadata", "")):
                    committed_rows[k].append(v)
                for k, v in (("cluster", "bench"), ("snapshot_ts", ts),
                             ("topic", f"topic-{g:03d}"), ("partition", p),
                             ("log_start_offset", 0), ("high_watermark", hw[g][p]),
                             ("last_stable_offset", hw[g][p]), ("leader", 1)):
                    log_rows[k].append(v)
                rows += 1
            for k, v in (("cluster", "bench"), ("snapshot_ts", ts),
                         ("group_id", f"group-{g:03d}"), ("group_type", "classic"),
                         ("state", "Stable" if consuming else "Empty"),
                         ("protocol_type", "consumer"), ("assignor", "range"),
                         ("coordinator_id", 1), ("expected_coordinator_id", 1),
                         ("coordinator_mismatch", False), ("described", True),
                         ("member_count", 1 if consuming else 0)):
                group_rows[k].append(v)
        tables = {
            "committed_offsets": pa.table(committed_rows, schema=SCHEMAS["committed_offsets"]),
            "partition_offsets": pa.table(log_rows, schema=SCHEMAS["partition_offsets"]),
            "consumer_groups": pa.table(group_rows, schema=SCHEMAS["consumer_groups"]),
            "snapshots": pa.table({
                "cluster": ["bench"], "snapshot_ts": [ts], "snapshot_id": [sid],
                "complete": [True], "group_count": [groups],
                "partition_count": [groups * partitions], "error_count": [0],
                "offsets_topic_partitions": [50]}, schema=SCHEMAS["snapshots"]),
        }
        for name in ("member_assignments", "record_timestamps", "group_members"):
            tables[name] = SCHEMAS[name].empty_table()
        for name, table in tables.items():
            folder = (root / "snapshots" / name / "cluster=bench" / f"date={ts:%Y-%m-%d}"
                      / f"hour={ts:%H}")
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, folder / f"{sid}.parquet")
    return rows


class PeakRss:
    """Peak resident memory of this process and its children (the Spark JVM), sampled; also
    the peaks of the JVM alone and of the JVM's Python workers alone (the Arrow passes run in
    them), each over the run (they need not peak at the same moment)."""

    def __init__(self) -> None:
        import psutil

        self.process = psutil.Process()
        self.peak = 0
        self.peak_jvm = 0
        self.peak_workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = jvm = workers = 0
            for p in [self.process, *self.process.children(recursive=True)]:
                with contextlib.suppress(Exception):  # a child that just exited
                    rss = p.memory_info().rss
                    total += rss
                    if p.name() == "java":
                        jvm += rss
                        workers += sum(c.memory_info().rss for c in p.children(recursive=True))
            self.peak = max(self.peak, total)
            self.peak_jvm = max(self.peak_jvm, jvm)
            self.peak_workers = max(self.peak_workers, workers)
            time.sleep(0.2)

    def figures(self) -> dict[str, float]:
        return {"peak_rss_mib": self.peak / 2**20, "peak_jvm_rss_mib": self.peak_jvm / 2**20,
                "peak_python_workers_rss_mib": self.peak_workers / 2**20}

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_spark(root: Path, out: Path, driver_memory: str = "6g") -> dict[str, Any]:
    from groupscope.analyze import jobs
    from groupscope.analyze.io import Interval, session

    spark = session("bench", master="local[2]", driver_memory=driver_memory)
    job = jobs.JobArgs(root, "bench", Interval(DAY, DAY + timedelta(days=1)), None,
                       timedelta(hours=1))
    started = time.perf_counter()
    frames = dict(jobs.lag_frames(spark, job))
    counts, stages = {}, {}
    for name in OUTPUTS:  # each written after the one it reads (cached): the job's stages
        stage_started = time.perf_counter()
        frames[name].write.mode("overwrite").parquet(str(out / "spark" / name))
        counts[name] = spark.read.parquet(str(out / "spark" / name)).count()
        stages[name] = round(time.perf_counter() - stage_started, 1)
    elapsed = time.perf_counter() - started
    spark.stop()
    return {"seconds": elapsed, "rows": counts, "stage_seconds": stages}


OUTPUTS = ("partition_lag", "partition_status", "group_status", "group_lag")


def run_spark_in(src: Path, root: Path, out: Path, driver_memory: str) -> dict[str, Any]:
    """``run_spark`` with the code of the checkout at ``src``, in a process of its own."""
    code = ("import json, sys; from pathlib import Path; "
            "sys.path[:0] = [sys.argv[1], sys.argv[2]]; import analytics_bench as b; "
            "print(json.dumps(b.run_spark(Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5])))")
    done = subprocess.run([sys.executable, "-c", code, str(src), str(HERE), str(root), str(out),
                           driver_memory], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the Spark run of {src} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def differing_rows(one: Path, other: Path) -> dict[str, Any]:
    """Per output, the rows of one not in the other and the other way round (EXCEPT ALL), over
    the columns both have; a column only one version writes (a later change's) is named under
    ``only_in``, with how many of its values are not null."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET enable_progress_bar = false")
    counts: dict[str, Any] = {}
    for name in OUTPUTS:
        tables = [f"read_parquet('{side}/{name}/*.parquet')" for side in (one, other)]
        columns = [[r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {t}").fetchall()]
                   for t in tables]
        common = ", ".join(f'"{c}"' for c in columns[0] if c in columns[1])
        a, b = (f"(SELECT {common} FROM {t})" for t in tables)
        counts[name] = [con.execute(f"SELECT count(*) FROM ({x} EXCEPT ALL {y})").fetchone()[0]
                        for x, y in ((a, b), (b, a))]
        for t, own, theirs in ((tables[0], *columns), (tables[1], *reversed(columns))):
            for column in (c for c in own if c not in theirs):
                counts.setdefault("only_in", {})[f"{name}.{column}"] = con.execute(
                    f'SELECT count("{column}") FROM {t}').fetchone()[0]
    con.close()
    return counts


FILES = "{root}/snapshots/{table}/*/*/*/*.parquet"
DUCKDB_SQL = """
CREATE VIEW committed AS SELECT * FROM read_parquet('{committed}');
CREATE VIEW logs AS SELECT * FROM read_parquet('{logs}');
CREATE VIEW groups AS SELECT * FROM read_parquet('{groups}');
CREATE TABLE lag AS
  SELECT c.cluster, c.snapshot_ts, c.group_id, c.topic, c.partition, c.committed_offset,
         l.log_start_offset, l.high_watermark, l.high_watermark - c.committed_offset AS lag,
         coalesce(c.committed_offset < l.log_start_offset, false) AS lag_beyond_retention,
         epoch_us(c.snapshot_ts) / 1e6 AS t
  FROM committed c LEFT JOIN logs l USING (cluster, snapshot_ts, topic, partition);
CREATE TABLE seg AS
  SELECT *, sum(CASE WHEN high_watermark < prev_hw THEN 1 ELSE 0 END)
              OVER (PARTITION BY cluster, group_id, topic, partition ORDER BY t) AS segment
  FROM (SELECT *, lag(high_watermark) OVER (PARTITION BY cluster, group_id, topic, partition
                                            ORDER BY t) AS prev_hw FROM lag);
CREATE TABLE rated AS
  SELECT *,
    CASE WHEN t > first_t THEN (high_watermark - first_hw) / (t - first_t) END AS production_rate,
    CASE WHEN t > first_t AND committed_offset >= first_c
         THEN (committed_offset - first_c) / (t - first_t) END AS consumption_rate
  FROM (SELECT *,
          first(t) OVER w AS first_t, first(high_watermark) OVER w AS first_hw,
          first(committed_offset) OVER w AS first_c
        FROM seg WINDOW w AS (PARTITION BY cluster, group_id, topic, partition, segment
                              ORDER BY t RANGE BETWEEN 300 PRECEDING AND CURRENT ROW));
-- time lag: the last point below v = committed + 1 and the first at or above it, in the
-- same segment and within the hour before the snapshot (ASOF joins)
CREATE TABLE hist AS SELECT cluster, group_id, topic, partition, segment, t, high_watermark AS hw
  FROM seg;
CREATE TABLE asks AS SELECT cluster, group_id, topic, partition, segment, snapshot_ts, t,
  committed_offset + 1 AS v FROM rated WHERE lag > 0;
CREATE TABLE before_pt AS SELECT a.*, h.hw AS b_hw, h.t AS b_t FROM asks a
  ASOF LEFT JOIN hist h ON a.cluster = h.cluster AND a.group_id = h.group_id
    AND a.topic = h.topic AND a.partition = h.partition AND a.segment = h.segment
    AND a.v > h.hw;
CREATE TABLE around AS SELECT b.*, h.hw AS a_hw, h.t AS a_t FROM before_pt b
  ASOF LEFT JOIN (SELECT *, -hw AS neg FROM hist) h ON b.cluster = h.cluster
    AND b.group_id = h.group_id AND b.topic = h.topic AND b.partition = h.partition
    AND b.segment = h.segment AND -b.v >= h.neg;
CREATE TABLE first_pt AS SELECT a.*, h.hw AS f_hw, h.t AS f_t FROM around a
  ASOF LEFT JOIN (SELECT *, -t AS neg_t FROM hist) h ON a.cluster = h.cluster
    AND a.group_id = h.group_id AND a.topic = h.topic AND a.partition = h.partition
    AND a.segment = h.segment AND -(a.t - 3600) >= h.neg_t;
CREATE TABLE time_lag AS SELECT cluster, group_id, topic, partition, snapshot_ts,
  CASE WHEN b_t IS NOT NULL AND b_t >= t - 3600 AND a_t IS NOT NULL
         THEN greatest(t - (b_t + (v - b_hw) * (a_t - b_t) / (a_hw - b_hw)), 0)
       WHEN t > f_t AND (hw_now - f_hw) > 0
         THEN greatest(t - (f_t - (f_hw - v) / ((hw_now - f_hw) / (t - f_t))), 0)
       ELSE t - f_t END AS time_lag_estimated_s
  FROM (SELECT f.*, r.high_watermark AS hw_now FROM first_pt f JOIN rated r
        USING (cluster, group_id, topic, partition, snapshot_ts));
CREATE TABLE partition_lag AS SELECT r.*, tl.time_lag_estimated_s FROM rated r
  LEFT JOIN time_lag tl USING (cluster, group_id, topic, partition, snapshot_ts);
-- status: the same windows (10 minutes of observations, pauses within the hour); the rules
-- of issue 4, see the module docstring
CREATE TABLE obs AS SELECT p.*, g.member_count,
    committed_offset - lag(committed_offset) OVER h AS d_c, lag - lag(lag) OVER h AS d_lag
  FROM partition_lag p LEFT JOIN groups g USING (cluster, snapshot_ts, group_id)
  WINDOW h AS (PARTITION BY cluster, group_id, topic, partition ORDER BY t);
CREATE TABLE obs2 AS SELECT *, CASE WHEN d_c IS NOT NULL AND d_c <> 0 THEN t END AS adv_t FROM obs;
CREATE TABLE obs3 AS SELECT *,
    coalesce(max(adv_t) OVER r, min(t) OVER r) AS last_adv,
    max(adv_t) OVER rb AS prev_adv,
    count(*) OVER w AS n, min(d_c) OVER w < 0 AS rewound, first(lag) OVER w AS lag_first,
    first(committed_offset) OVER w AS c_first, min(d_lag) OVER w >= 0 AS never_fell,
    first(high_watermark) OVER w AS hw_first
  FROM obs2
  WINDOW r AS (PARTITION BY cluster, group_id, topic, partition ORDER BY t
               RANGE BETWEEN 3600 PRECEDING AND CURRENT ROW),
         rb AS (PARTITION BY cluster, group_id, topic, partition ORDER BY t
                RANGE BETWEEN 3600 PRECEDING AND 0.000001 PRECEDING),
         w AS (PARTITION BY cluster, group_id, topic, partition ORDER BY t
               RANGE BETWEEN 600 PRECEDING AND CURRENT ROW);
CREATE TABLE obs4 AS SELECT *, max(CASE WHEN adv_t IS NOT NULL THEN t - prev_adv END) OVER rb
    AS longest_pause FROM obs3
  WINDOW rb AS (PARTITION BY cluster, group_id, topic, partition ORDER BY t
                RANGE BETWEEN 3600 PRECEDING AND 0.000001 PRECEDING);
CREATE TABLE partition_status AS SELECT cluster, snapshot_ts, group_id, topic, partition,
  CASE WHEN coalesce(rewound, false) THEN 'REWIND'
       WHEN NOT coalesce(lag > 1, true) THEN 'OK'
       WHEN n < 2 THEN 'OK'
       WHEN t - last_adv >= greatest(300, coalesce(longest_pause, 0) * 2)
            AND coalesce(member_count, 0) = 0 THEN 'STOP'
       WHEN t - last_adv >= greatest(300, coalesce(longest_pause, 0) * 2) THEN 'STALL'
       WHEN n >= 3 AND committed_offset > c_first AND coalesce(never_fell, false)
            AND (lag - lag_first) * (n - 1) > 2 * (high_watermark - hw_first) THEN 'WARN'
       ELSE 'OK' END AS status, lag
  FROM obs4;
CREATE TABLE group_status AS SELECT cluster, snapshot_ts, group_id,
  CASE WHEN max(CASE WHEN status IN ('STOP', 'STALL') THEN 2
                     WHEN status IN ('WARN', 'REWIND') THEN 1 ELSE 0 END) = 2 THEN 'ERR'
       WHEN max(CASE WHEN status IN ('WARN', 'REWIND') THEN 1 ELSE 0 END) = 1 THEN 'WARN'
       ELSE 'OK' END AS status
  FROM partition_status GROUP BY ALL;
CREATE TABLE group_lag AS SELECT cluster, snapshot_ts, group_id, count(*) AS partitions,
  coalesce(sum(CASE WHEN lag > 0 THEN lag END), 0) AS lag, max(time_lag_estimated_s) AS max_tl
  FROM partition_lag GROUP BY ALL;
"""


def run_duckdb(root: Path, out: Path) -> dict[str, Any]:
    import duckdb

    started = time.perf_counter()
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute(f"SET temp_directory = '{out / 'duckdb-tmp'}'")
    con.execute(DUCKDB_SQL.format(
        committed=FILES.format(root=root, table="committed_offsets"),
        logs=FILES.format(root=root, table="partition_offsets"),
        groups=FILES.format(root=root, table="consumer_groups")))
    counts = {}
    (out / "duckdb").mkdir(parents=True, exist_ok=True)
    for name in ("partition_lag", "partition_status", "group_status", "group_lag"):
        con.execute(f"COPY {name} TO '{out / 'duckdb' / name}.parquet' (FORMAT parquet)")
        counts[name] = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    elapsed = time.perf_counter() - started
    con.close()
    return {"seconds": elapsed, "rows": counts}


def agreement(out: Path) -> dict[str, Any]:
    """How far the two engines' answers are apart (they implement the same definitions)."""
    import duckdb

    con = duckdb.connect()
    spark_lag = f"read_parquet('{out}/spark/partition_lag/*.parquet')"
    duck_lag = f"read_parquet('{out}/duckdb/partition_lag.parquet')"
    lag_diff = con.execute(f"""
        SELECT count(*) FILTER (WHERE s.lag IS DISTINCT FROM d.lag),
               max(abs(s.time_lag_estimated_s - d.time_lag_estimated_s)),
               count(*) FILTER (WHERE abs(s.time_lag_estimated_s - d.time_lag_estimated_s) > 1)
        FROM {spark_lag} s JOIN {duck_lag} d
        USING (cluster, snapshot_ts, group_id, topic, partition)""").fetchone()
    status_diff = con.execute(f"""
        SELECT count(*) FILTER (WHERE s.status <> d.status), count(*)
        FROM read_parquet('{out}/spark/partition_status/*.parquet') s
        JOIN read_parquet('{out}/duckdb/partition_status.parquet') d
        USING (cluster, snapshot_ts, group_id, topic, partition)""").fetchone()
    return {"lag_rows_differing": lag_diff[0], "time_lag_max_abs_diff_s": lag_diff[1],
            "time_lag_rows_off_by_over_1s": lag_diff[2], "status_rows_differing": status_diff[0],
            "status_rows_compared": status_diff[1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--minutes", type=int, default=1440)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--driver-memory", default="6g",
                        help="the Spark driver's heap (local mode: the whole JVM's)")
    parser.add_argument("--baseline", type=Path, help="another checkout's src to compare with")
    parser.add_argument("--landing", type=Path, help="generated data to reuse (or keep)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gs-analytics-bench-"))
    landing = args.landing or work / "landing"
    try:
        started = time.perf_counter()
        if args.landing and (landing / "snapshots").exists():
            rows = args.groups * args.partitions * args.minutes
            print(f"reusing {landing} ({rows:,} partition rows as generated with these sizes)")
        else:
            rows = generate(landing, args.groups, args.partitions, args.minutes)
            print(f"generated {rows:,} partition rows in {time.perf_counter() - started:.0f} s",
                  flush=True)
        baseline = None
        if args.baseline:
            load_before = os.getloadavg()
            with PeakRss() as baseline_mem:
                baseline = run_spark_in(args.baseline.resolve(), landing, work / "baseline",
                                        args.driver_memory)
            baseline.update(baseline_mem.figures(), load_average_before=load_before,
                            load_average=os.getloadavg())
            print(f"spark, baseline: {baseline['seconds']:.1f} s, {baseline_mem.figures()}",
                  flush=True)
        load_before = os.getloadavg()
        with PeakRss() as spark_mem:
            spark = run_spark_in(HERE.parent / "src", landing, work / "out",
                                 args.driver_memory)
        spark.update(load_average_before=load_before, load_average=os.getloadavg())
        print(f"spark: {spark['seconds']:.1f} s, {spark_mem.figures()}", flush=True)
        load_before = os.getloadavg()
        with PeakRss() as duck_mem:
            duck = run_duckdb(landing, work / "out")
        duck.update(load_average_before=load_before, load_average=os.getloadavg())
        print(f"duckdb: {duck['seconds']:.1f} s, peak RSS {duck_mem.peak / 2**20:.0f} MiB",
              flush=True)
        report = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(),
                        "platform": platform.platform()},
            "input_rows": rows,
            "spark": {**spark, "driver_memory": args.driver_memory, **spark_mem.figures(),
                      "rows_per_s": rows / spark["seconds"]},
            "duckdb": {**duck, "peak_rss_mib": duck_mem.peak / 2**20,
                       "rows_per_s": rows / duck["seconds"]},
            "ratio": spark["seconds"] / duck["seconds"], "agreement": agreement(work / "out"),
        }
        if baseline is not None:
            report["baseline"] = {**baseline, "src": str(args.baseline),
                                  "ratio": baseline["seconds"] / duck["seconds"],
                                  "differing_rows": differing_rows(work / "baseline" / "spark",
                                                                   work / "out" / "spark")}
        results = HERE / "results"
        results.mkdir(exist_ok=True)
        (results / f"analytics-{report['when']}.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
