"""The status stage alone: ``status.partition_status`` over a written day of lag rows, this
checkout's against another's, alternated in one Spark session, with the window operators of
each plan counted and the two outputs compared with EXCEPT ALL both ways.

The data is the analytics bench's (``analytics_bench.generate``: GROUPS groups x PARTITIONS
partitions, one-minute snapshots), generated into LANDING when it is empty; the lag rows are
the lag mart of that day (``jobs.lag_frames``' ``partition_lag``), written once beside it and
reused. Each timed run forces the statuses with a ``noop`` write.

    .venv/bin/python bench/status_bench.py --landing DIR [--groups 20] [--baseline SRC]
        [--runs 3] [--driver-memory 3g]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from analytics_bench import DAY, generate  # noqa: E402


def status_module(src: Path | None) -> Any:
    """This checkout's status module, or that of the checkout at ``src``."""
    if src is None:
        from groupscope.analyze import status

        return status
    spec = importlib.util.spec_from_file_location(
        "baseline_status", src / "groupscope" / "analyze" / "status.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (a dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


def window_operators(frame: Any) -> dict[str, int]:
    """Spark's window operators in the frame's physical plan, by their partitioning."""
    plan = frame._jdf.queryExecution().executedPlan().toString()
    found: dict[str, int] = {}
    for line in plan.splitlines():
        if not re.search(r"\bWindow \[", line):
            continue
        # The partitioning is the last bracketed list, or the one before an ordering.
        lists = re.findall(r"\[([^\[\]]*)\]", line)
        spec = lists[-2] if re.search(r"\b(ASC|DESC)\b", lists[-1]) else lists[-1]
        keys = ", ".join(re.sub(r"#\d+L?", "", k).strip() for k in spec.split(","))
        found[keys] = found.get(keys, 0) + 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landing", type=Path, required=True)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--minutes", type=int, default=1440)
    parser.add_argument("--baseline", type=Path, help="another checkout's src")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--driver-memory", default="3g")
    args = parser.parse_args()

    from groupscope.analyze import jobs
    from groupscope.analyze.io import Interval, session

    if not (args.landing / "snapshots").exists():
        generate(args.landing, args.groups, args.partitions, args.minutes)
    spark = session("status-bench", master="local[2]", driver_memory=args.driver_memory)
    job = jobs.JobArgs(args.landing, "bench", Interval(DAY, DAY + timedelta(days=1)), None,
                       timedelta(hours=1))
    lag_path = args.landing.parent / f"{args.landing.name}-partition_lag"
    if not lag_path.exists():
        started = time.perf_counter()
        dict(jobs.lag_frames(spark, job))["partition_lag"].write.parquet(str(lag_path))
        print(f"lag rows written in {time.perf_counter() - started:.1f} s", flush=True)
        spark.catalog.clearCache()
    lag = spark.read.parquet(str(lag_path))
    groups = jobs._table(spark, job, "consumer_groups", DAY, DAY + timedelta(days=1))
    versions = {"this": status_module(None)}
    if args.baseline:
        versions["baseline"] = status_module(args.baseline.resolve())
    frames = {name: module.partition_status(lag, groups, module.StatusSettings())
              for name, module in versions.items()}
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"), "rows": lag.count(),
        "window_operators": {name: window_operators(f) for name, f in frames.items()},
        "seconds": {name: [] for name in frames}, "load_average": []}
    print(json.dumps(report["window_operators"]), flush=True)
    for run in range(args.runs):
        for name, frame in (frames.items() if run % 2 == 0 else reversed(frames.items())):
            started = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            report["seconds"][name].append(round(time.perf_counter() - started, 1))
            report["load_average"].append(round(os.getloadavg()[0], 1))
            print(f"{name}: {report['seconds'][name][-1]} s, load {os.getloadavg()[0]:.1f}",
                  flush=True)
    report["median_s"] = {name: statistics.median(s) for name, s in report["seconds"].items()}
    if args.baseline:
        one, other = frames["baseline"], frames["this"]
        report["differing_rows"] = [one.exceptAll(other).count(), other.exceptAll(one).count()]
    spark.stop()
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / f"status-{report['when']}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
