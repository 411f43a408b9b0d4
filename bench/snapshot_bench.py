"""Snapshot benchmark: groupscope's collector against Kafka's own
``kafka-consumer-groups --describe --all-groups`` on the same cluster, in the same run.

Setup: a fresh single-broker Kafka on loopback, GROUPS consumer groups each with commits on
PARTITIONS partitions (group i commits to topic i % TOPICS). Each tool runs RUNS times; the
median wall time is reported. groupscope runs in a child process so that its peak RSS is its
own. Results are printed as Markdown and saved under bench/results/.

    .venv/bin/python bench/snapshot_bench.py [--groups 2000] [--partitions 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

# The dev stack (Kafka from Maven Central) is dev-only: it lives in dev/, not in the wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dev"))

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION, KafkaCluster, classpath, kafka_libs
from groupscope_dev.ports import free_port_block

CHILD = r"""
import json, resource, sys, time
from datetime import UTC, datetime
from confluent_kafka.admin import AdminClient
from groupscope.collect.collector import Collector, CollectorSettings
bootstrap, concurrency = sys.argv[1], int(sys.argv[2])
admin = AdminClient({"bootstrap.servers": bootstrap})
collector = Collector(admin, "bench", CollectorSettings(offsets_concurrency=concurrency))
started = time.perf_counter()
snapshot = collector.snapshot(datetime.now(UTC))
elapsed = time.perf_counter() - started
print(json.dumps({
    "seconds": elapsed,
    "groups": len(snapshot.groups),
    "offsets": sum(len(g.offsets) for g in snapshot.groups),
    "complete": snapshot.complete,
    "errors": len(snapshot.errors),
    "requests": dict(collector.requests),
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def setup(bootstrap: str, groups: int, partitions: int, topics: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    names = [f"bench.topic-{t}" for t in range(topics)]
    for start in range(0, len(names), 50):
        batch = [NewTopic(n, partitions, 1) for n in names[start : start + 50]]
        for future in admin.create_topics(batch, operation_timeout=60).values():
            future.result()
    wanted = [
        ConsumerGroupTopicPartitions(
            f"bench-group-{g:05d}",
            [TopicPartition(names[g % topics], p, 1) for p in range(partitions)])
        for g in range(groups)
    ]
    # The first commit creates and loads __consumer_offsets; commits fail until it is ready,
    # so wait for one to succeed before sending the rest.
    deadline = time.monotonic() + 120
    while True:
        try:
            next(iter(admin.alter_consumer_group_offsets([wanted[0]], request_timeout=10)
                      .values())).result()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    pending = wanted[1:]
    for round_ in range(10):
        failed = []
        for start in range(0, len(pending), 64):
            chunk = pending[start : start + 64]
            futures = [admin.alter_consumer_group_offsets([r], request_timeout=60)
                       for r in chunk]
            for request, future in zip(chunk, futures, strict=True):
                try:
                    next(iter(future.values())).result()
                except Exception:
                    failed.append(request)
        print(f"  committed {len(pending) - len(failed)} of {len(pending)} groups",
              file=sys.stderr)
        if not failed:
            return
        pending = failed
        time.sleep(2 * (round_ + 1))
    raise RuntimeError(f"{len(pending)} groups could not commit their offsets")


def run_groupscope(bootstrap: str, concurrency: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, bootstrap, str(concurrency)],
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run_groupscope_cli(bootstrap: str) -> dict[str, object]:
    """The CLI end to end, as an operator runs it: interpreter start, imports, snapshot and
    JSON output, the same things the Kafka tool's time includes (JVM start, printing)."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "groupscope.cli", "snapshot", "--bootstrap",
                          bootstrap, "--format", "json"], capture_output=True, text=True,
                         check=True)
    elapsed = time.perf_counter() - started
    offsets = sum(len(g["offsets"]) for g in json.loads(out.stdout)["groups"])
    return {"seconds": elapsed, "offsets": offsets, "peak_rss_mib": 0.0}


def run_kafka_tool(bootstrap: str, version: str) -> dict[str, object]:
    command = ["java", "-Xmx1g", "-cp", classpath(kafka_libs(version)),
               "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
               "--bootstrap-server", bootstrap, "--describe", "--all-groups"]
    # A wrapper process whose only child is the JVM, so RUSAGE_CHILDREN is the JVM's own.
    wrapper = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
               "p = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True); "
               "sys.stdout.write(p.stdout); print('ELAPSED', time.perf_counter() - t, "
               "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", wrapper, *command], capture_output=True,
                         text=True, check=True)
    lines = out.stdout.splitlines()
    _, elapsed, peak_kib = lines[-1].split()
    rows = [line for line in lines if line.startswith("bench-group-")]
    return {"seconds": float(elapsed), "rows": len(rows), "peak_rss_mib": int(peak_kib) / 1024}


def machine() -> dict[str, object]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": round(mem_kib / 2**20, 1),
            "python": platform.python_version(), "kernel": platform.release()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds to let the broker settle after the setup")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gs-bench-") as tmp:
        cluster = KafkaCluster(Path(tmp) / "kafka", version=args.kafka_version,
                               base_port=free_port_block(1),
                               controller_base_port=free_port_block(1), heap="1g")
        cluster.start()
        try:
            print(f"setting up {args.groups} groups x {args.partitions} partitions ...",
                  file=sys.stderr)
            setup(cluster.bootstrap, args.groups, args.partitions, args.topics)
            # Let the broker finish loading and settling before anything is timed, then
            # interleave the tools so both meet the same machine, run after run.
            time.sleep(args.settle)
            ours, cli, theirs = [], [], []
            for _ in range(args.runs):
                ours.append(run_groupscope(cluster.bootstrap, args.concurrency))
                cli.append(run_groupscope_cli(cluster.bootstrap))
                theirs.append(run_kafka_tool(cluster.bootstrap, args.kafka_version))
        finally:
            cluster.destroy()

    our_s = statistics.median(float(str(r["seconds"])) for r in ours)
    their_s = statistics.median(float(str(r["seconds"])) for r in theirs)
    cli_s = statistics.median(float(str(r["seconds"])) for r in cli)
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "kafka_version": args.kafka_version,
        "setup": {"groups": args.groups, "partitions_per_group": args.partitions,
                  "topics": args.topics},
        "groupscope": ours,
        "groupscope_cli": cli,
        "kafka_consumer_groups": theirs,
        "median_seconds": {"groupscope": our_s, "groupscope_cli": cli_s,
                           "kafka_consumer_groups": their_s},
        "speedup": their_s / our_s,
        "speedup_cli": their_s / cli_s,
    }
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "snapshot.json").write_text(json.dumps(result, indent=2))
    first = ours[0]

    def row(name: str, median: float, runs: list[dict[str, object]]) -> str:
        times = ", ".join(f"{float(str(r['seconds'])):.2f}" for r in runs)
        peak = max(float(str(r["peak_rss_mib"])) for r in runs)
        return f"| {name} | {median:.2f} | {times} | {peak:.0f} |"

    print(f"| tool | median wall (s) of {args.runs} | runs (s) | peak RSS (MiB) |")
    print("|---|---|---|---|")
    print(row("groupscope snapshot", our_s, ours))
    print(row("groupscope snapshot CLI, end to end (JSON to a pipe)", cli_s, cli))
    print(row("kafka-consumer-groups --describe --all-groups", their_s, theirs))
    print(f"\nspeedup: {result['speedup']:.1f}x in process, {result['speedup_cli']:.1f}x "
          f"CLI to CLI; groups {first['groups']}, offsets "
          f"{first['offsets']}, complete {first['complete']}, admin requests "
          f"{first['requests']}; Kafka tool rows {theirs[0]['rows']}")
    print(json.dumps(result["machine"]))


if __name__ == "__main__":
    main()
