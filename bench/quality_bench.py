"""Quality-gate benchmark: the ``landed_snapshot`` suite on one landed snapshot of a large
cluster, with Great Expectations 1.x over pandas and with the Arrow validator the gate runs
(``quality.validate_arrow``: the same expectations and verdicts). The gate runs once per
snapshot DAG run, on the path to the alerts.

    .venv/bin/python bench/quality_bench.py [--groups 2000] [--partitions 50]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import pandas as pd
import pyarrow as pa

from groupscope import quality


def landed_frames(groups: int, partitions: int) -> tuple[dict[str, pd.DataFrame], dict]:
    ts = pd.Timestamp("2026-11-21T10:00:00Z")
    head = {"cluster": "bench", "snapshot_ts": ts}
    topics = [f"topic-{g}" for g in range(groups)]
    frames = {t: pd.DataFrame(columns=list(s.names)) for t, s in quality.SCHEMAS.items()}
    n = groups * partitions
    frames["consumer_groups"] = pd.DataFrame({
        **{k: [v] * groups for k, v in head.items()},
        "group_id": [f"group-{g}" for g in range(groups)], "group_type": ["classic"] * groups,
        "state": ["Stable"] * groups, "member_count": [3] * groups})
    frames["partition_offsets"] = pd.DataFrame({
        **{k: [v] * n for k, v in head.items()},
        "topic": [t for t in topics for _ in range(partitions)],
        "partition": [p for _ in topics for p in range(partitions)],
        "log_start_offset": [1_000] * n, "high_watermark": [50_000] * n,
        "last_stable_offset": [50_000] * n})
    frames["committed_offsets"] = pd.DataFrame({
        **{k: [v] * n for k, v in head.items()},
        "group_id": [f"group-{g}" for g in range(groups) for _ in range(partitions)],
        "topic": frames["partition_offsets"]["topic"],
        "partition": frames["partition_offsets"]["partition"],
        "committed_offset": [40_000] * n})
    frames["member_assignments"] = frames["committed_offsets"][
        ["cluster", "snapshot_ts", "group_id", "topic", "partition"]].assign(
        member_id=[f"m-{i % 3}" for i in range(n)], kind="current")
    manifest = {"cluster": "bench", "group_count": groups, "partition_count": n,
                "error_count": 0}
    frames["snapshots"] = pd.DataFrame([{**head, "snapshot_id": "bench-1", "complete": True,
                                         **{k: v for k, v in manifest.items()
                                            if k != "cluster"},
                                         "offsets_topic_partitions": 50}])
    return frames, manifest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=50)
    args = parser.parse_args()
    started = time.perf_counter()
    quality.validate("warmup", *_small())
    warm = time.perf_counter() - started
    frames, manifest = landed_frames(args.groups, args.partitions)
    started = time.perf_counter()
    count, failures = quality.validate("landed", frames, quality.landed_checks(manifest))
    landed_s = time.perf_counter() - started
    assert not failures, failures
    # As landed: each table in its schema (the bench's frames leave some columns out).
    tables = {name: pa.Table.from_pandas(
        frame.reindex(columns=quality.SCHEMAS[name].names),
        schema=pa.schema([f.with_nullable(True) for f in quality.SCHEMAS[name]]),
        preserve_index=False) for name, frame in frames.items()}
    started = time.perf_counter()
    arrow_count, arrow_failures = quality.validate_arrow(tables, quality.landed_checks(manifest))
    arrow_s = time.perf_counter() - started
    assert (arrow_count, arrow_failures) == (count, [])
    rows = args.groups * args.partitions
    print(json.dumps({
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "first_run_with_import_s": round(warm, 2),
        "landed_snapshot": {"partition_rows": rows, "expectations": count,
                            "seconds": round(landed_s, 2),
                            "table_rows_per_s": round(rows * 3 / landed_s)},
        "landed_snapshot_arrow": {"seconds": round(arrow_s, 3),
                                  "table_rows_per_s": round(rows * 3 / arrow_s)},
    }, indent=2))


def _small() -> tuple[dict[str, pd.DataFrame], dict]:
    frames, manifest = landed_frames(2, 2)
    return frames, quality.landed_checks(manifest)


if __name__ == "__main__":
    main()
