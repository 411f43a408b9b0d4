"""Live pass benchmark: what one live run of the lag marts costs on Spark ``local[2]``, warm,
the work of each pass of the scenario tests (``tests/pipeline_loop.py``): the lag and status
marts of the newest snapshot (``analyze.jobs.compute(..., "lag", small=True)``, what
``pipeline.live_analytics`` runs), their rows brought to the driver as Arrow, as
``pipeline.analytics`` does before writing them (the warehouse write is not measured).

Data: GROUPS groups x PARTITIONS partitions, each group reading its own topic, SNAPSHOTS
landed snapshots STEP_S apart (the real landing layout, manifests included) with every table
the lag job reads: committed offsets trailing growing high watermarks, one member per group
assigned its partitions, the topics' retention settings, and a sampled record timestamp for
each committed offset; one group stops consuming (and loses its member) for a while, one
deletes by size (its log start moves).

Each run is timed in three parts: ``plan_s`` builds the lag and status DataFrames (py4j
calls, analysis), ``lag_rows_s`` and ``status_rows_s`` compute them as local relations, and
``marts_s`` collects the seven marts; ``cpu_s`` is the CPU time the pass took in this process
and the Spark JVM (less sensitive than the wall time to other work on the machine). The
median of RUNS runs after WARMUP unmeasured ones.

    .venv/bin/python bench/live_pass_bench.py [--groups 10] [--partitions 3] [--snapshots 60]
        [--runs 7] [--baseline SRC] [--connect]

``--baseline SRC`` (another checkout's ``src``, e.g. of main) times that version's lag and
status transforms too, in the same session, its passes alternated with this version's (the
machine's load falls on both alike), and compares the seven marts of the two with EXCEPT ALL
both ways (``differing_rows``: zero when the two compute the same rows).

``--connect`` runs the passes on a Spark Connect server instead, as the live path does
(``./run``, ``dev/stack``: ``groupscope_dev.spark_connect``, ``local[2]``, the confs of
``spark_conf()`` and the stack's 1 GiB heap), started for the run with this checkout's
interpreter; ``cpu_s`` then counts the server's JVM and Python workers. A baseline's
transforms are built in this client and run on the same server (its Python workers import
this checkout's modules, so a baseline's Arrow functions must be this checkout's too:
``transforms`` takes them from here when the file is the same). A version whose modules do not
load beside this checkout's (one from before issue 27) runs on its own with ``--src SRC``;
``--dump DIR`` writes the last pass's marts, to compare two such runs afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
CLUSTER = "bench"


def _table(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    from groupscope.contract.tables import SCHEMAS

    schema = SCHEMAS[name]
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema=schema)


def generate(root: Path, groups: int, partitions: int, snapshots: int, step_s: float,
             seed: int = 5) -> datetime:
    """Lands the snapshots; returns the newest one's time."""
    from groupscope.contract import layout

    rng = random.Random(seed)
    rates = [[rng.uniform(1.0, 30.0) for _ in range(partitions)] for _ in range(groups)]
    hw = [[rng.randrange(1_000, 10_000) for _ in range(partitions)] for _ in range(groups)]
    start = [[h - 2_000 for h in row] for row in hw]
    committed = [[h - rng.randrange(0, 300) for h in row] for row in hw]
    stop = (snapshots // 2, snapshots // 2 + snapshots // 4)  # group 1 stops in this range
    ts = START
    for n in range(snapshots):
        ts = START + timedelta(seconds=n * step_s)
        sid = f"bench-{ts:%Y%m%dT%H%M%S%f}Z"
        tables: dict[str, list[dict[str, Any]]] = {k: [] for k in (
            "committed_offsets", "partition_offsets", "consumer_groups", "member_assignments",
            "topics", "record_timestamps", "group_members")}
        head = {"cluster": CLUSTER, "snapshot_ts": ts}
        for g in range(groups):
            group, topic = f"group-{g:02d}", f"topic-{g:02d}"
            consuming = not (g == 1 and stop[0] <= n < stop[1])
            member = f"member-{g:02d}-{n // 20}"  # a new member id every 20 snapshots
            for p in range(partitions):
                hw[g][p] += max(0, int(rates[g][p] * step_s + rng.gauss(0, 5)))
                if g == 2:  # deletes by size: its log start follows production
                    start[g][p] = hw[g][p] - 2_000
                if consuming and rng.random() < 0.9:
                    committed[g][p] += int((hw[g][p] - committed[g][p]) * rng.uniform(0.5, 1))
                tables["committed_offsets"].append({**head, "group_id": group, "topic": topic,
                                                    "partition": p,
                                                    "committed_offset": committed[g][p]})
                tables["partition_offsets"].append({
                    **head, "topic": topic, "partition": p, "log_start_offset": start[g][p],
                    "high_watermark": hw[g][p], "last_stable_offset": hw[g][p], "leader": 1})
                if consuming:
                    tables["member_assignments"].append({
                        **head, "group_id": group, "member_id": member, "kind": "current",
                        "topic": topic, "partition": p})
                if committed[g][p] < hw[g][p]:
                    tables["record_timestamps"].append({
                        **head, "topic": topic, "partition": p,
                        "committed_offset": committed[g][p], "record_offset": committed[g][p],
                        "record_ts": ts - timedelta(seconds=rng.uniform(1, 60)),
                        "timestamp_type": "CreateTime"})
            tables["consumer_groups"].append({
                **head, "group_id": group, "group_type": "classic",
                "state": "Stable" if consuming else "Empty", "protocol_type": "consumer",
                "assignor": "range", "coordinator_id": 1, "expected_coordinator_id": 1,
                "coordinator_mismatch": False, "described": True,
                "member_count": 1 if consuming else 0})
            if consuming:
                tables["group_members"].append({**head, "group_id": group, "member_id": member,
                                                "client_id": "c", "host": "/127.0.0.1"})
            tables["topics"].append({
                **head, "topic": topic, "partition_count": partitions,
                "retention_ms": -1 if g == 2 else 604_800_000,
                "retention_bytes": 1_000_000 if g == 2 else -1, "segment_bytes": 1 << 30,
                "cleanup_policy": "delete"})
        tables["snapshots"] = [{**head, "snapshot_id": sid, "complete": True,
                                "group_count": groups, "partition_count": groups * partitions,
                                "error_count": 0, "offsets_topic_partitions": 50}]
        for name, rows in tables.items():  # the manifest ("snapshots") last, as landing does
            folder = layout.snapshot_partition_dir(root, name, CLUSTER, ts)
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(_table(name, rows), folder / f"{sid}.parquet")
    return ts


def transforms(src: Path | None) -> tuple[Any, Any]:
    """The lag and status modules: this checkout's, or those of the checkout at ``src``."""
    from groupscope.analyze import lag, status

    if src is None:
        return lag, status
    loaded = []
    for name, own in (("lag", lag), ("status", status)):
        path = src / "groupscope" / "analyze" / f"{name}.py"
        # A module loaded from a file is not importable in Spark's Python workers, which
        # unpickle the Arrow functions by module name: the same source is this checkout's.
        if own.__file__ and path.read_bytes() == Path(own.__file__).read_bytes():
            loaded.append(own)
            continue
        spec = importlib.util.spec_from_file_location(f"baseline_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # (a dataclass looks its module up there)
        spec.loader.exec_module(module)
        loaded.append(module)
    return loaded[0], loaded[1]


SERVER_PIDS: list[int] = []  # a Spark Connect server's process group, with --connect


def cpu_seconds() -> float:
    """CPU time used so far by this process and its children (the Spark JVM), and by the Spark
    Connect server's processes when the passes run there."""
    import psutil

    roots = [psutil.Process(), *(psutil.Process(pid) for pid in SERVER_PIDS)]
    total = 0.0
    for root in roots:
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):  # a worker that just exited
                times = process.cpu_times()
                total += times.user + times.system
    return total


def one_pass(spark: Any, job: Any, lag_module: Any, status_module: Any,
             ) -> tuple[dict[str, float], dict[str, Any]]:
    """The live run's computation (``analyze.jobs.lag_frames`` with ``small``), in parts."""
    from groupscope.analyze import io, jobs

    lag_mart, rollups, within = lag_module.lag_mart, lag_module.rollups, lag_module.within
    partition_status, group_status = status_module.partition_status, status_module.group_status
    settings = status_module.StatusSettings()
    # The steps of jobs.lag_frames, split to time them (asserted equal to it in main()).
    cpu = cpu_seconds()
    t0 = time.perf_counter()
    start, end = job.interval.start - jobs.lag_read_span(), job.interval.end
    read = {name: io.read_snapshot_table(spark, job.landing, name, job.cluster, start, end)
            for name in ("committed_offsets", "partition_offsets", "member_assignments",
                         "record_timestamps", "topics", "consumer_groups",
                         "share_partition_offsets", "streams_subtopology_topics",
                         "streams_member_tasks")}
    # A baseline from before the share and streams groups (issue 27) takes neither input.
    share = ({"share_offsets": read["share_partition_offsets"]}
             if "share_offsets" in inspect.signature(lag_mart).parameters else {})
    lag = lag_mart(read["committed_offsets"], read["partition_offsets"],
                   read["member_assignments"], read["record_timestamps"],
                   rate_window_s=int(jobs.RATE_WINDOW.total_seconds()),
                   history_s=jobs.TIME_LAG_HISTORY.total_seconds(),
                   topics=read["topics"], **share).cache()
    in_interval = within(lag, job.interval.start, job.interval.end)
    streams = ((status_module.streams_task_owners(read["streams_subtopology_topics"],
                                                  read["streams_member_tasks"]),)
               if hasattr(status_module, "streams_task_owners") else ())
    statuses = within(partition_status(lag, read["consumer_groups"], settings, *streams),
                      job.interval.start, job.interval.end)
    t1 = time.perf_counter()
    in_interval = io.local_relation(in_interval)
    t2 = time.perf_counter()
    statuses = io.local_relation(statuses)
    t3 = time.perf_counter()
    frames = [("partition_lag", in_interval.select(*(
        c for c in jobs.PARTITION_LAG_COLUMNS if share or c != "share_lag")))]
    frames += list(rollups(in_interval).items())
    frames += [("partition_status", statuses), ("group_status", group_status(statuses))]
    tables = {name: frame.toArrow() for name, frame in frames}
    t4 = time.perf_counter()
    spark.catalog.clearCache()  # as pipeline.live_analytics does after each run
    return ({"plan_s": t1 - t0, "lag_rows_s": t2 - t1, "status_rows_s": t3 - t2,
             "marts_s": t4 - t3, "pass_s": t4 - t0, "cpu_s": cpu_seconds() - cpu}, tables)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--snapshots", type=int, default=60)
    parser.add_argument("--step-s", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout's src to compare with")
    parser.add_argument("--connect", action="store_true",
                        help="run the passes on a Spark Connect server, as the live path does")
    parser.add_argument("--src", type=Path, default=HERE.parent / "src",
                        help="the checkout's src to run entirely (jobs, io, transforms, the "
                             "server's confs): a version whose modules do not load beside "
                             "this one's, compared afterwards through --dump")
    parser.add_argument("--dump", type=Path, help="write the marts of the last pass here")
    args = parser.parse_args()
    sys.path[:0] = [str(args.src.resolve()), str(HERE.parent / "dev")]
    from groupscope.analyze import jobs
    from groupscope.analyze.io import Interval, session

    with tempfile.TemporaryDirectory(prefix="live-pass-bench-") as tmp, \
            contextlib.ExitStack() as stack:
        root = Path(tmp) / "landing"
        newest = generate(root, args.groups, args.partitions, args.snapshots, args.step_s)
        if args.connect:
            from groupscope_dev.ports import free_ports
            from groupscope_dev.spark_connect import SparkConnectServer

            server = SparkConnectServer(Path(tmp) / "spark-connect", port=free_ports(1)[0])
            server.start()
            stack.callback(server.stop)
            assert server.process is not None
            SERVER_PIDS.append(server.process.pid)
            spark = session("live-pass-bench", remote=server.url)
        else:
            spark = session("live-pass-bench", master="local[2]")
            spark.sparkContext.setLogLevel("ERROR")
        job = jobs.JobArgs(root, CLUSTER, Interval(newest, newest + timedelta(microseconds=1)),
                           None, timedelta(0))
        expected = {name: frame.toArrow() for name, frame in jobs.lag_frames(spark, job, True)}
        spark.catalog.clearCache()
        variants = {"this": transforms(None)}
        if args.baseline:
            variants["baseline"] = transforms(args.baseline.resolve())
        timings: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        marts: dict[str, dict[str, Any]] = {}
        for run in range(args.warmup + args.runs):
            for name, (lag_module, status_module) in variants.items():
                parts, marts[name] = one_pass(spark, job, lag_module, status_module)
                if run >= args.warmup:
                    timings[name].append(parts)
        if any(marts["this"][name].num_rows != t.num_rows for name, t in expected.items()):
            raise SystemExit("the timed steps computed other rows than jobs.lag_frames")
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            for name, table in marts["this"].items():
                pq.write_table(table, args.dump / f"{name}.parquet")
        differing = None
        if args.baseline:
            differing = {}
            for name, table in marts["this"].items():
                # Over the columns both write (a baseline before issue 27 has no share_lag).
                common = [c for c in table.column_names
                          if c in marts["baseline"][name].column_names]
                this = spark.createDataFrame(table.select(common))
                baseline = spark.createDataFrame(marts["baseline"][name].select(common))
                differing[name] = (this.exceptAll(baseline).count(),
                                   baseline.exceptAll(this).count())
        spark.stop()
    print(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average": os.getloadavg()},
        "spark": "connect" if args.connect else "local[2]",
        "data": {"groups": args.groups, "partitions": args.partitions,
                 "snapshots": args.snapshots, "step_s": args.step_s},
        "rows": {name: t.num_rows for name, t in marts["this"].items()},
        "runs": args.runs,
        "median_s": {variant: {k: round(statistics.median(t[k] for t in runs), 3)
                               for k in runs[0]} for variant, runs in timings.items()},
        "pass_s": {variant: [round(t["pass_s"], 2) for t in runs]
                   for variant, runs in timings.items()},
        "differing_rows": differing,
    }, indent=1))


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback

        traceback.print_exc()
        # A Spark Connect client's threads keep the interpreter from exiting after an error.
        os._exit(1)
