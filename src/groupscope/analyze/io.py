"""The input edge of the Spark jobs: a session and the landed tables of a time range. Everything
after is pure DataFrame -> DataFrame; the pipeline writes the results to the warehouse."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from groupscope.contract import layout
from groupscope.contract.tables import SCHEMAS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Interval:
    """One data interval [start, end): a job computes and replaces exactly its rows."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("interval bounds must be timezone-aware (UTC)")
        if self.end <= self.start:
            raise ValueError(f"empty interval {self.start} .. {self.end}")


# Static confs: fixed when the JVM starts (spark-submit, a local session, the Connect server's
# command line); a Spark Connect client cannot change them.
STATIC_CONF = frozenset({"spark.ui.enabled", "spark.driver.memory",
                         "spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions",
                         "spark.sql.ui.retainedExecutions", "spark.ui.retainedJobs",
                         "spark.ui.retainedStages", "spark.ui.retainedTasks"})

# The throughput collector: the jobs are batches, whose total time counts, not a pause. With
# it the lag mart of a day (bench/analytics_bench.py's data, local[2]) took 119.7-122.9 s
# instead of 130.7-137.9 s with the JVM's default G1, the same runs alternated.
JVM_OPTIONS = "-XX:+UseParallelGC"

# What the driver's JVM must be started with: spark-submit takes them on its command line
# (``submit.command``, the Airflow operator); a session created in a running JVM cannot.
DRIVER_LAUNCH_CONF = {"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": JVM_OPTIONS}


def spark_conf(cores: int = 2) -> dict[str, str]:
    """The confs every groupscope Spark application runs with: a local session, a
    spark-submitted job and the Spark Connect server (``dev/groupscope_dev/spark_connect.py``,
    the compose file) all take this one dict."""
    return {
        "spark.sql.session.timeZone": "UTC",
        # The landing zone holds one small file per snapshot and table: pack many into a task.
        "spark.sql.files.openCostInBytes": str(256 * 1024),
        # The reader names each snapshot's file (read_snapshot_table): listing a day's 1,440
        # in the driver takes milliseconds, a Spark job to list them (above the default 32
        # paths) took seconds per table.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        # The lag job partitions its inputs once by log partition (cluster, topic,
        # partition); every later window and join is keyed by a superset of those columns.
        # Letting a join reuse that partitioning saves a shuffle of every row per join.
        "spark.sql.requireAllClusterKeysForCoPartition": "false",
        "spark.sql.shuffle.partitions": str(max(4, cores * 2)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # What the UI shows of past queries, which Spark keeps with the UI off too: by default
        # 1,000 SQL executions (their plans, thousands of metrics each for these jobs), jobs and
        # stages, and 100,000 tasks. The tests' long-lived session filled its 1 GiB heap with
        # them and spent its time in full GCs; the live path's Connect server lives as long.
        "spark.sql.ui.retainedExecutions": "20",
        "spark.ui.retainedJobs": "50",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "10000",
        **DRIVER_LAUNCH_CONF,
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
    }


def session(app: str, master: str | None = None, cores: int = 2,
            driver_memory: str | None = None, remote: str | None = None) -> Any:
    """A Spark session: in this process (``master``, e.g. ``local[2]``; none: spark-submit's),
    or, with ``remote`` (``sc://host:port``), a session of a long-lived Spark Connect server:
    no JVM starts here. The server was started with ``spark_conf()``; the session sets the
    runtime ones again, so a server started otherwise computes the same.

    A process is in one mode: pyspark's column functions follow the first kind of session
    (they check ``SPARK_CONNECT_MODE_ENABLED``), so a process mixes no local and remote
    sessions."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    conf = spark_conf(cores)
    if remote:
        builder = builder.remote(remote)
        conf = {k: v for k, v in conf.items() if k not in STATIC_CONF}
    elif master:
        builder = builder.master(master)
        # The Python workers of Arrow functions (the estimated time lag's) run this
        # interpreter, as spark-submit's do (``submit.environment``): pyspark's default is
        # whichever ``python3`` is first on PATH, without this package or pyarrow.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if driver_memory and not remote:  # only takes effect when this call starts the JVM
        conf["spark.driver.memory"] = driver_memory
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def local_relation(frame: Any) -> Any:
    """``frame``'s rows, computed once and brought to the driver, as a new frame over them (a
    local relation): what reads it afterwards plans a few operators over those rows instead of
    ``frame``'s whole plan again. For small frames only (a live run's one snapshot): on Spark
    Connect every query is analyzed whole, and several queries over one deep plan cost more
    in planning than in computing."""
    from pyspark.sql.pandas.types import from_arrow_schema

    rows = frame.toArrow()
    # The schema from the Arrow table itself: an empty table's cannot be inferred.
    return frame.sparkSession.createDataFrame(rows, schema=from_arrow_schema(rows.schema))


def bounded(call: Callable[[], object], timeout_s: float, what: str) -> bool:
    """Runs ``call`` (a cleanup call to a Spark Connect server: clearCache, stop) for at most
    ``timeout_s``; False when it did not return in time, and it is left behind in a daemon
    thread. A server that hangs answers no call: after a task's timeout interrupted the work,
    an unbounded cleanup call would hold the task forever (seen: a live_marts timed out at
    60 s, then hung in its cleanup while the server was frozen)."""
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # reported below; never raised past the cleanup
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"spark-{what}", daemon=True).start()
    if not done.wait(timeout_s):
        log.warning("Spark %s did not return within %.0f s (the server does not answer); "
                    "left behind", what, timeout_s)
        return False
    if failure:
        log.warning("Spark %s failed: %s", what, type(failure[0]).__name__)
    return not failure


class HungSpark(TimeoutError):
    """Spark work that did not finish in its time; its process was killed."""


def in_child_process(work: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """``work()`` in a forked child process, killed when it runs past ``timeout_s``
    (``HungSpark``); its result (picklable) or its error comes back. A call into a Spark
    Connect server that hangs cannot be interrupted for good inside a process: the timeout's
    exception is followed by cleanup calls that hang too, and by the Connect client's exit
    handlers. Killing a child bounds the time for sure. ``work`` starts its own session (a
    Spark session does not survive a fork)."""
    import multiprocessing
    import traceback

    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(("ok", work()))
        except BaseException as exc:
            send.send(("error", f"{type(exc).__name__}: {exc}",
                       "".join(traceback.format_exception(exc))[-4000:]))
        finally:
            send.close()

    process = context.Process(target=child, name=what, daemon=True)
    process.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise HungSpark(f"{what} did not finish within {timeout_s:.0f} s and was stopped "
                            "(the Spark Connect server does not answer, or is too slow)")
        outcome = receive.recv()
    except EOFError:
        outcome = ("error", f"{what} died (exit code {process.exitcode})", "")
    finally:
        if process.is_alive():
            process.kill()
        process.join(10)
    if outcome[0] == "ok":
        return outcome[1]
    log.error("%s failed:\n%s", what, outcome[2])
    raise RuntimeError(outcome[1])


def landed_files(root: Path, table: str, cluster: str, start: datetime,
                 end: datetime) -> list[str]:
    """The files of ``table`` of the snapshots taken in the hours of [start, end) whose
    manifest is landed (a snapshot half-written by a crash is not read) and that the quality
    gate did not reject (``layout.rejected_ids``: rejected data never reaches a mart; a
    snapshot it quarantined is no longer there). Found from the
    folder listings alone: a snapshot's files are named after it in every table, so no
    manifest is opened (reading the manifests as a table, once per table read, cost
    seconds per read at a day of one-minute snapshots)."""
    files = []
    rejected = {f"{snapshot_id}.parquet" for snapshot_id in layout.rejected_ids(root, cluster)}
    for manifests, folder in zip(
            layout.snapshot_hour_dirs(root, layout.MANIFEST_TABLE, cluster, start, end),
            layout.snapshot_hour_dirs(root, table, cluster, start, end), strict=True):
        if not manifests.is_dir() or not folder.is_dir():
            continue
        landed = {path.name for path in manifests.iterdir()
                  if path.suffix == ".parquet"} - rejected
        files += sorted(str(path) for path in folder.iterdir() if path.name in landed)
    return files


def read_snapshot_table(spark: Any, root: Path, table: str, cluster: str, start: datetime,
                        end: datetime) -> Any:
    """One landed snapshot table, rows with snapshot_ts in [start, end), only of snapshots
    whose manifest is landed."""
    from pyspark.sql import functions as F

    schema = spark_schema(table)
    files = landed_files(root, table, cluster, start, end)
    if not files:
        return spark.createDataFrame([], schema)
    ts = F.col("snapshot_ts")
    return spark.read.schema(schema).parquet(*files).where((ts >= F.lit(start))
                                                            & (ts < F.lit(end)))


def spark_schema(table: str) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(SCHEMAS[table])
