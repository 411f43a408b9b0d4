"""Snapshot benchmark: groupscope's collector against Kafka's own
``kafka-consumer-groups --describe --all-groups`` on the same cluster, in the same run.

Setup: a fresh single-broker Kafka on loopback, TOPICS topics of PARTITIONS partitions, and
consumer groups each with a commit on every partition of one topic (group i commits to topic
i % TOPICS). ``--groups`` takes one count or an ascending list (the scaling curve): the groups
are added step by step to the same broker, and at each step every tool runs RUNS times,
interleaved; medians are reported.

- groupscope in a child process (its peak RSS its own): ``take_snapshot`` timed, then
  ``land_snapshot`` (the Parquet landing with the assignment what-if, as the snapshot DAG's
  collect task does) timed, then ``pipeline.collect`` (both again, as the collect task takes
  them: in a child process of their own) timed; once per ``--connections`` value
  (OffsetFetch connections);
- the ``groupscope snapshot --format json`` CLI end to end (interpreter start, imports,
  snapshot, JSON to a pipe);
- Kafka's ``ConsumerGroupCommand --describe --all-groups`` (JVM start included).

The share and streams groups (issue 27): ``--share-groups N`` and ``--streams-groups M``
add, after the last consumer-group step, N share groups (each with a start offset on every
partition of one topic, made by AlterShareGroupOffsets) and then M streams groups (Kafka
Streams applications on the streams protocol, started in this process through JPype, each
processing one record and committing, then closed): one step each, measured with the
collector's share and streams round (``--kinds auto``) and without it (``never``),
interleaved. ``--before SRC`` runs, in each run and interleaved with it, the collector of
another source tree (``git archive <commit> src``) on the same broker: P1 before and after a
change.

Results are printed as Markdown and saved under bench/results/.

    .venv/bin/python bench/snapshot_bench.py [--groups 500,2000,5000,20000] [--partitions 10]
        [--runs 3] [--connections 1,2,4] [--bootstrap HOST:PORT (an existing broker)]
        [--share-groups 1000] [--streams-groups 200] [--kinds auto,never] [--before SRC]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The dev stack (Kafka from Maven Central) is dev-only: it lives in dev/, not in the wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dev"))

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from groupscope_dev.kafka import (
    DEFAULT_KAFKA_VERSION,
    KafkaCluster,
    classpath,
    kafka_libs,
    streams_libs,
)
from groupscope_dev.ports import free_port_block

CHILD = r"""
import json, resource, sys, tempfile, time
from datetime import UTC, datetime
from pathlib import Path
from groupscope.collect.collector import CollectorSettings, take_snapshot
from groupscope.contract.cluster import ClusterConfig
from groupscope.contract.model import Snapshot
from groupscope.pipeline import collect, land_snapshot
bootstrap, concurrency, connections, kinds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
# The share and streams groups' round (Kafka's Java Admin client), when a classpath is given
# (a source tree from before it has no such settings: none are passed to it).
java = {"group_kinds": kinds, "java_classpath": sys.argv[5]} if kinds != "default" else {}
# What landing imports on first use (pyarrow's pandas among them) is a once-per-process
# cost, the same at every scale: paid here, reported apart, not in the landing's time.
started = time.perf_counter()
with tempfile.TemporaryDirectory(prefix="gs-bench-landing-") as landing:
    land_snapshot(Snapshot("warm-up", datetime.now(UTC), (), (), ()), Path(landing))
imports_s = time.perf_counter() - started
settings = CollectorSettings(**{k: int(v) for k, v in (("offsets_concurrency", concurrency),
                                ("offset_fetch_connections", connections)) if v != "default"},
                             **java)
cluster = ClusterConfig("bench", {"bootstrap.servers": bootstrap})
started = time.perf_counter()
snapshot = take_snapshot(cluster, settings.request_timeout_s, datetime.now(UTC),
                         settings=settings)
snapshot_s = time.perf_counter() - started
with tempfile.TemporaryDirectory(prefix="gs-bench-landing-") as landing:
    land_snapshot(snapshot, Path(landing))
total_s = time.perf_counter() - started
# The same snapshot and landing as the collect task takes them: pipeline.collect, both in a
# child process of its own (collect/isolated.py), only the summary coming back.
started = time.perf_counter()
with tempfile.TemporaryDirectory(prefix="gs-bench-landing-") as landing:
    isolated = collect(cluster, Path(landing), datetime.now(UTC), settings.request_timeout_s,
                       settings.offset_fetch_connections, **java)
isolated_s = time.perf_counter() - started
print(json.dumps({
    "seconds": snapshot_s,
    "landing_seconds": total_s - snapshot_s,
    "with_landing_seconds": total_s,
    "landing_imports_seconds": imports_s,
    "isolated_seconds": isolated_s,
    "isolated_groups": isolated["groups"],
    "groups": len(snapshot.groups),
    "offsets": sum(len(g.offsets) for g in snapshot.groups),
    "complete": snapshot.complete,
    "errors": len(snapshot.errors),
    "kinds": {kind: sum(1 for g in snapshot.groups if str(g.group_type.value) == kind)
              for kind in ("share", "streams")} if java else {},
    "settings": {"offsets_concurrency": settings.offsets_concurrency,
                 "offset_fetch_connections": settings.offset_fetch_connections,
                 **({"group_kinds": kinds} if java else {})},
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def group_name(index: int) -> str:
    return f"bench-group-{index:05d}"


def create_topics(bootstrap: str, partitions: int, topics: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    names = [f"bench.topic-{t}" for t in range(topics)]
    for start in range(0, len(names), 50):
        batch = [NewTopic(n, partitions, 1) for n in names[start : start + 50]]
        for future in admin.create_topics(batch, operation_timeout=60).values():
            future.result()


def _commit(admin: AdminClient, requests: list[ConsumerGroupTopicPartitions],
            in_flight: int) -> list[ConsumerGroupTopicPartitions]:
    """Sends every request, ``in_flight`` at a time; returns those that failed."""
    failed: list[ConsumerGroupTopicPartitions] = []
    slots = threading.Semaphore(in_flight)
    lock = threading.Lock()

    def done(request: ConsumerGroupTopicPartitions, future: Future[object]) -> None:
        if future.exception() is not None:
            with lock:
                failed.append(request)
        slots.release()

    for request in requests:
        slots.acquire()
        future = next(iter(admin.alter_consumer_group_offsets([request], request_timeout=60)
                           .values()))
        future.add_done_callback(functools.partial(done, request))
    for _ in range(in_flight):  # every answer is in
        slots.acquire()
    return failed


def add_groups(bootstrap: str, first: int, last: int, partitions: int, topics: int,
               in_flight: int = 512) -> None:
    """Groups ``first`` .. ``last - 1``, each with a commit on every partition of topic
    ``index % topics``: one AlterConsumerGroupOffsets per group, ``in_flight`` at once."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    wanted = [
        ConsumerGroupTopicPartitions(
            group_name(g),
            [TopicPartition(f"bench.topic-{g % topics}", p, 1) for p in range(partitions)])
        for g in range(first, last)
    ]
    if first == 0:
        # The first commit creates and loads __consumer_offsets; commits fail until it is
        # ready, so wait for one to succeed before sending the rest.
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
        wanted = wanted[1:]
    pending = wanted
    for round_ in range(10):
        failed = _commit(admin, pending, in_flight)
        print(f"  committed {len(pending) - len(failed)} of {len(pending)} groups",
              file=sys.stderr)
        if not failed:
            return
        pending = failed
        time.sleep(2 * (round_ + 1))
    raise RuntimeError(f"{len(pending)} groups could not commit their offsets")


def _start_jvm() -> Any:
    """JPype's JVM in this process, with Kafka Streams' jars (kafka-clients among them)."""
    import jpype

    if not jpype.isJVMStarted():
        jpype.startJVM("-Xmx1g", classpath=[str(p) for p in sorted(
            streams_libs(DEFAULT_KAFKA_VERSION).glob("*.jar"))])
    return jpype


def _java_properties(jpype: Any, values: dict[str, str]) -> Any:
    props = jpype.JClass("java.util.Properties")()
    for key, value in values.items():
        props.setProperty(key, value)
    return props


def add_share_groups(bootstrap: str, count: int, partitions: int, topics: int) -> None:
    """``count`` share groups, share group i with a start offset of 0 on every partition of
    topic ``i % topics`` (AlterShareGroupOffsets creates the group, without members)."""
    jpype = _start_jvm()
    admin = jpype.JClass("org.apache.kafka.clients.admin.Admin").create(
        _java_properties(jpype, {"bootstrap.servers": bootstrap}))
    tp, long_ = jpype.JClass("org.apache.kafka.common.TopicPartition"), jpype.JLong
    try:
        for start in range(0, count, 100):
            futures = []
            for g in range(start, min(start + 100, count)):
                offsets = jpype.JClass("java.util.HashMap")()
                for p in range(partitions):
                    offsets.put(tp(f"bench.topic-{g % topics}", p), long_(0))
                futures.append(admin.alterShareGroupOffsets(f"bench-share-{g:05d}", offsets))
            for future in futures:
                future.all().get()
    finally:
        admin.close()


STREAMS_INPUT, STREAMS_OUTPUT = "bench.streams-in", "bench.streams-out"


def add_streams_groups(bootstrap: str, count: int, partitions: int, batch: int = 20) -> None:
    """``count`` streams groups: Kafka Streams applications (a source topic of ``partitions``
    partitions piped to a sink, so one subtopology of ``partitions`` tasks) on the streams
    protocol, ``batch`` at a time in this process, each run until RUNNING and closed (a clean
    close commits what it processed): Empty groups, with their topology and offsets."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in (
            STREAMS_INPUT, STREAMS_OUTPUT)], operation_timeout=60).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        producer.produce(STREAMS_INPUT, value=b"x", partition=p)
    producer.flush(30)
    jpype = _start_jvm()
    streams_class = jpype.JClass("org.apache.kafka.streams.KafkaStreams")
    running = streams_class.State.RUNNING
    duration = jpype.JClass("java.time.Duration")
    with tempfile.TemporaryDirectory(prefix="gs-bench-streams-") as state:
        for start in range(0, count, batch):
            apps = []
            for g in range(start, min(start + batch, count)):
                builder = jpype.JClass("org.apache.kafka.streams.StreamsBuilder")()
                builder.stream(STREAMS_INPUT).to(STREAMS_OUTPUT)
                serde = "org.apache.kafka.common.serialization.Serdes$ByteArraySerde"
                app = streams_class(builder.build(), _java_properties(jpype, {
                    "bootstrap.servers": bootstrap, "application.id": f"bench-streams-{g:04d}",
                    "group.protocol": "streams", "state.dir": state,
                    "commit.interval.ms": "100", "default.key.serde": serde,
                    "default.value.serde": serde}))
                app.start()
                apps.append(app)
            deadline = time.monotonic() + 300
            while any(a.state() != running for a in apps):
                if time.monotonic() > deadline:
                    raise RuntimeError("streams applications not RUNNING after 300 s")
                time.sleep(0.5)
            for app in apps:
                app.close(duration.ofSeconds(30))
            print(f"  streams groups {start}..{start + len(apps) - 1}", file=sys.stderr)


def existing_groups(bootstrap: str) -> int:
    """How many bench groups the broker has (they are added in order, from 0)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    listed = admin.list_consumer_groups(request_timeout=60).result()
    return sum(1 for g in listed.valid if g.group_id.startswith("bench-group-"))


def run_groupscope(bootstrap: str, concurrency: str, connections: str, kinds: str = "default",
                   java_classpath: str = "", source: str | None = None) -> dict[str, object]:
    """One collector run in a child process; ``source``: another groupscope source tree's."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-c", CHILD, bootstrap, concurrency, connections,
                          kinds, java_classpath], capture_output=True, text=True, check=True,
                         env=env)
    result = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    if source is not None:
        settings = dict(result["settings"])  # type: ignore[call-overload]
        result["settings"] = {**settings, "source": source}
    return result


def _timed(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of ``command``, run under a wrapper process
    whose only child it is, so RUSAGE_CHILDREN is the command's own."""
    wrapper = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
               "p = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True); "
               "sys.stdout.write(p.stdout); print('\\nELAPSED', time.perf_counter() - t, "
               "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", wrapper, *command], capture_output=True,
                         text=True, check=True)
    body, _, last = out.stdout.rpartition("\nELAPSED ")
    elapsed, peak_kib = last.split()
    return float(elapsed), int(peak_kib) / 1024, body


def run_groupscope_cli(bootstrap: str) -> dict[str, object]:
    """The CLI end to end, as an operator runs it: interpreter start, imports, snapshot and
    JSON output, the same things the Kafka tool's time includes (JVM start, printing)."""
    elapsed, peak, body = _timed([sys.executable, "-m", "groupscope.cli", "snapshot",
                                  "--bootstrap", bootstrap, "--format", "json"])
    offsets = sum(len(g["offsets"]) for g in json.loads(body)["groups"])
    return {"seconds": elapsed, "offsets": offsets, "peak_rss_mib": peak}


def run_kafka_tool(bootstrap: str, version: str) -> dict[str, object]:
    elapsed, peak, body = _timed(
        ["java", "-Xmx1g", "-cp", classpath(kafka_libs(version)),
         "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
         "--bootstrap-server", bootstrap, "--describe", "--all-groups"])
    rows = [line for line in body.splitlines() if line.startswith("bench-group-")]
    return {"seconds": elapsed, "rows": len(rows), "peak_rss_mib": peak}


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


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


def median(runs: list[dict[str, object]], key: str = "seconds") -> float:
    return statistics.median(float(str(r[key])) for r in runs)


def peak(runs: list[dict[str, object]]) -> float:
    return max(float(str(r["peak_rss_mib"])) for r in runs)


def variants(args: argparse.Namespace, with_kinds: bool) -> dict[str, dict[str, str]]:
    """The collector runs of a step, by label: one per connection setting (and, with share
    or streams groups, per ``--kinds``), and the ``--before`` tree's."""
    kinds = args.kinds if with_kinds else ["default"]
    runs = {f"{c} {k}": {"connections": c, "kinds": k} for c in args.connections for k in kinds}
    for source in args.before.split(",") if args.before else []:
        runs.update({f"{c} {source}": {"connections": c, "source": source}
                     for c in args.connections})
    return runs


def measure_step(bootstrap: str, groups: int | str, args: argparse.Namespace,
                 with_kinds: bool = False) -> dict[str, object]:
    """Every tool ``args.runs`` times, interleaved, so all meet the same machine."""
    load_before = load_average()
    chosen = variants(args, with_kinds)
    ours: dict[str, list[dict[str, object]]] = {label: [] for label in chosen}
    cli: list[dict[str, object]] = []
    theirs: list[dict[str, object]] = []
    for run in range(args.runs):
        # Every other run in the reverse order: no variant always follows another.
        for label, variant in (reversed(chosen.items()) if run % 2 else chosen.items()):
            ours[label].append(run_groupscope(
                bootstrap, args.concurrency, variant["connections"],
                variant.get("kinds", "default"), args.java_classpath, variant.get("source")))
        cli.append(run_groupscope_cli(bootstrap))
        if not args.skip_kafka_tool:
            theirs.append(run_kafka_tool(bootstrap, args.kafka_version))
    return {"groups": groups, "load_before": load_before, "load_after": load_average(),
            "groupscope": ours, "groupscope_cli": cli, "kafka_consumer_groups": theirs}


def report_step(step: dict[str, object], runs: int) -> None:
    ours = step["groupscope"]
    cli = step["groupscope_cli"]
    theirs = step["kafka_consumer_groups"]
    assert isinstance(ours, dict) and isinstance(cli, list) and isinstance(theirs, list)

    def row(name: str, results: list[dict[str, object]], key: str = "seconds") -> str:
        times = ", ".join(f"{float(str(r[key])):.2f}" for r in results)
        return f"| {name} | {median(results, key):.2f} | {times} | {peak(results):.0f} |"

    print(f"\n{step['groups']} groups (load average before {step['load_before']}, after "
          f"{step['load_after']})\n")
    print(f"| tool | median wall (s) of {runs} | runs (s) | peak RSS (MiB) |")
    print("|---|---|---|---|")
    for results in ours.values():
        first = results[0]
        label = f"{first['settings']}".replace("'", "")
        print(row(f"groupscope snapshot {label}", results))
        print(row(f"  + landing (Parquet, what-if) {label}", results, "with_landing_seconds"))
        print(row(f"  snapshot + landing in a child process (pipeline.collect) {label}",
                  results, "isolated_seconds"))
    print(row("groupscope snapshot CLI, end to end (JSON to a pipe)", cli))
    if theirs:
        print(row("kafka-consumer-groups --describe --all-groups", theirs))
    first = next(iter(ours.values()))[0]
    print(f"\ngroups {first['groups']}, offsets {first['offsets']}, complete "
          f"{first['complete']}, errors {first['errors']}; landing's one-time imports "
          f"{median(next(iter(ours.values())), 'landing_imports_seconds'):.2f} s (not in "
          "its time)"
          + (f"; Kafka tool rows {theirs[0]['rows']}" if theirs else ""))


def report_curve(steps: list[dict[str, object]]) -> None:
    print("\n| groups | groupscope snapshot (s) | + landing (s) | peak RSS (MiB) | groupscope "
          "CLI (s) | peak RSS (MiB) | kafka-consumer-groups (s) | peak RSS (MiB) | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for step in steps:
        ours = step["groupscope"]
        cli = step["groupscope_cli"]
        theirs = step["kafka_consumer_groups"]
        assert isinstance(ours, dict) and isinstance(cli, list) and isinstance(theirs, list)
        # The fastest connection setting of the step stands for groupscope (this tree's, with
        # its share and streams round when the step has them).
        best = min((runs for runs in ours.values()
                    if "source" not in dict(runs[0]["settings"])  # type: ignore[call-overload]
                    and dict(runs[0]["settings"]).get(  # type: ignore[call-overload]
                        "group_kinds", "auto") == "auto"), key=median)
        their = f"{median(theirs):.2f} | {peak(theirs):.0f} | " \
                f"{median(theirs) / median(best):.1f}x" if theirs else "- | - | -"
        groups = step["groups"]
        print(f"| {groups:,} | {median(best):.2f} | " if isinstance(groups, int) else
              f"| {groups} | {median(best):.2f} | "
              f"{median(best, 'with_landing_seconds'):.2f} | {peak(best):.0f} | "
              f"{median(cli):.2f} | {peak(cli):.0f} | {their} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", default="2000",
                        help="a count, or ascending counts for the curve: 500,2000,5000,20000")
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", default="default",
                        help="OffsetFetch requests in flight (default: the collector's)")
    parser.add_argument("--connections", default="default",
                        help="OffsetFetch connections, one or a list to compare: 1,2,4 "
                             "(default: the collector's)")
    parser.add_argument("--skip-kafka-tool", action="store_true")
    parser.add_argument("--share-groups", type=int, default=0,
                        help="share groups added after the last step, then measured")
    parser.add_argument("--streams-groups", type=int, default=0,
                        help="streams groups added after those, then measured")
    parser.add_argument("--kinds", default="auto,never",
                        help="the collector's group_kinds to compare once share or streams "
                             "groups are there")
    parser.add_argument("--before", help="other groupscope source trees (their src folders, "
                        "comma-separated), whose collectors run interleaved with this one")
    parser.add_argument("--bootstrap", help="use this running broker (its bench groups are "
                        "kept and topped up) instead of a fresh one")
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds to let the broker settle after adding groups")
    args = parser.parse_args()
    counts = [int(g) for g in args.groups.split(",")]
    if counts != sorted(counts):
        parser.error("--groups must be ascending")
    args.connections = args.connections.split(",")
    args.kinds = args.kinds.split(",")
    args.java_classpath = classpath(kafka_libs(args.kafka_version))

    steps: list[dict[str, object]] = []
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="gs-bench-"))
            cluster = KafkaCluster(Path(tmp) / "kafka", version=args.kafka_version,
                                   base_port=free_port_block(1),
                                   controller_base_port=free_port_block(1), heap="1g")
            cluster.start()
            stack.callback(cluster.destroy)
            bootstrap = cluster.bootstrap
            create_topics(bootstrap, args.partitions, args.topics)
        have = existing_groups(bootstrap)
        for count in counts:
            if count > have:
                started = time.monotonic()
                print(f"adding groups {have}..{count - 1} ({args.partitions} partitions each)",
                      file=sys.stderr)
                add_groups(bootstrap, have, count, args.partitions, args.topics)
                print(f"  in {time.monotonic() - started:.1f} s", file=sys.stderr)
                have = count
                # Let the broker finish loading and settling before anything is timed.
                time.sleep(args.settle)
            step = measure_step(bootstrap, count, args)
            steps.append(step)
            report_step(step, args.runs)
        label = f"{counts[-1]:,}"
        for kind, count, add in (
                ("share", args.share_groups,
                 lambda n: add_share_groups(bootstrap, n, args.partitions, args.topics)),
                ("streams", args.streams_groups,
                 lambda n: add_streams_groups(bootstrap, n, args.partitions))):
            if count:
                started = time.monotonic()
                add(count)
                print(f"  {count} {kind} groups added in {time.monotonic() - started:.1f} s",
                      file=sys.stderr)
                time.sleep(args.settle)
                label += f" + {count:,} {kind}"
                step = measure_step(bootstrap, label, args, with_kinds=True)
                steps.append(step)
                report_step(step, args.runs)

    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "kafka_version": args.kafka_version,
        "setup": {"partitions_per_group": args.partitions, "topics": args.topics,
                  "share_groups": args.share_groups, "streams_groups": args.streams_groups,
                  "before": args.before},
        "steps": steps,
    }
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "snapshot.json").write_text(json.dumps(result, indent=2))
    report_curve(steps)
    print(json.dumps(result["machine"]))


if __name__ == "__main__":
    main()
