"""Offsets-topic benchmark: decode throughput on one core for a realistic record mix, and
ingest throughput end to end (consume + decode + land Parquet) from a real broker.

Decode: RECORDS records built from real records captured from Kafka 4.3.1 and 3.9.2
(tests/vectors), re-keyed over GROUPS groups x PARTITIONS partitions: 96 % offset commits (two
thirds v4 with a topic id as Kafka 4.1+ writes them, one third v3 as 3.x writes them), 2 %
classic group metadata with 3-8 members and their subscriptions/assignments, 1.5 %
consumer-protocol records, 0.5 % tombstones. One Python thread (one core); median of RUNS.

Ingest: a fresh one-broker cluster; GROUPS_E groups each commit COMMITS requests of 100
partitions (100 records each); then one ``ingest`` run lands everything.

    .venv/bin/python bench/offsets_bench.py [--records 500000] [--runs 5] [--ingest-records 1000000]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import struct
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

# The dev stack (Kafka from Maven Central) is dev-only: it lives in dev/, not in the wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dev"))

HERE = Path(__file__).resolve().parent
VECTORS = HERE.parent / "tests" / "vectors"


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


Raw = tuple[bytes, bytes | None]


def record_mix(count: int, groups: int, partitions: int, seed: int = 7) -> list[Raw]:
    real: dict[str, list[tuple[bytes, bytes | None]]] = {"commit4": [], "commit3": [],
                                                         "group": [], "kip848": []}
    for path in sorted(VECTORS.glob("offsets-*.json")):
        for r in json.loads(path.read_text())["records"]:
            key = bytes.fromhex(r["key"])
            value = None if r["value"] is None else bytes.fromhex(r["value"])
            kind = struct.unpack(">h", key[:2])[0]
            if value is None:
                continue
            if kind == 1:
                real["commit4" if value[:2] == b"\x00\x04" else "commit3"].append((key, value))
            elif kind == 2 and len(value) > 200:
                real["group"].append((key, value))
            elif kind >= 3:
                real["kip848"].append((key, value))
    rng = random.Random(seed)
    out: list[tuple[bytes, bytes | None]] = []
    for _ in range(count):
        roll = rng.random()
        group = f"service-{rng.randrange(groups)}.consumer"
        if roll < 0.96:
            _, value = rng.choice(real["commit4"] if roll < 0.64 else real["commit3"])
            key = (struct.pack(">h", 1) + _string(group) + _string("orders.events")
                   + struct.pack(">i", rng.randrange(partitions)))
            out.append((key, value))
        elif roll < 0.98:
            out.append(rng.choice(real["group"]))
        elif roll < 0.995:
            out.append(rng.choice(real["kip848"]))
        else:
            key = (struct.pack(">h", 1) + _string(group) + _string("orders.events")
                   + struct.pack(">i", rng.randrange(partitions)))
            out.append((key, None))
    return out


def bench_decode(records: list[tuple[bytes, bytes | None]], runs: int) -> dict[str, float]:
    from groupscope.offsets.decoder import _KEY_CACHE, decode
    from groupscope.offsets.events import EventBuilder

    decode_rates, build_rates = [], []
    for _ in range(runs):
        _KEY_CACHE.clear()
        started = time.perf_counter()
        for key, value in records:
            decode(key, value)
        decode_rates.append(len(records) / (time.perf_counter() - started))
        _KEY_CACHE.clear()
        started = time.perf_counter()
        builder = EventBuilder("bench")
        for offset, (key, value) in enumerate(records):
            builder.add_raw(0, offset, 1_800_000_000_000, key, value)
        builder.tables()
        build_rates.append(len(records) / (time.perf_counter() - started))
    return {"decode_median": statistics.median(decode_rates), "decode_runs": decode_rates,
            "tables_median": statistics.median(build_rates), "tables_runs": build_rates}


def bench_ingest(total_records: int, version: str) -> dict[str, float]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from groupscope.offsets.ingest import IngestSettings, consumer_config, ingest
    from groupscope_dev.kafka import KafkaCluster
    from groupscope_dev.ports import free_port_block

    with tempfile.TemporaryDirectory(prefix="gs-offsets-bench-") as tmp:
        cluster = KafkaCluster(Path(tmp) / "kafka", version=version,
                               base_port=free_port_block(1),
                               controller_base_port=free_port_block(1))
        cluster.start()
        try:
            bootstrap = cluster.bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic("bench.events", 100, 1)]).values():
                f.result()
            groups = 20
            per_group = total_records // (groups * 100)
            started = time.perf_counter()
            for g in range(groups):
                committer = Consumer({"bootstrap.servers": bootstrap,
                                      "group.id": f"bench-{g}", "enable.auto.commit": False})
                for n in range(per_group):
                    committer.commit(offsets=[TopicPartition("bench.events", p, n + 1)
                                              for p in range(100)], asynchronous=True)
                    if n % 200 == 0:
                        committer.poll(0)
                committer.commit(offsets=[TopicPartition("bench.events", 0, per_group + 1)],
                                 asynchronous=False)
                committer.close()
            setup_s = time.perf_counter() - started
            consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}))
            started = time.perf_counter()
            result = ingest(consumer, "bench", Path(tmp) / "landing", datetime.now(UTC),
                            IngestSettings(timeout_s=1800))
            elapsed = time.perf_counter() - started
            consumer.close()
        finally:
            cluster.destroy()
    return {"records": result.records, "seconds": elapsed, "rate": result.records / elapsed,
            "complete": result.complete, "setup_seconds": setup_s,
            "batches": sum(p.batches for p in result.partitions)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ingest-records", type=int, default=1_000_000)
    parser.add_argument("--kafka-version", default="4.3.1")
    args = parser.parse_args()
    records = record_mix(args.records, args.groups, args.partitions)
    decode = bench_decode(records, args.runs)
    ingest_result = bench_ingest(args.ingest_records, args.kafka_version) \
        if args.ingest_records else None
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": len(__import__("os").sched_getaffinity(0)),
                    "python": platform.python_version(), "platform": platform.platform()},
        "decode": decode, "ingest": ingest_result,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"offsets-{report['when']}.json").write_text(json.dumps(report, indent=1))
    print(f"decode, one core: {decode['decode_median']:,.0f} records/s (median of {args.runs});"
          f" decode + event tables: {decode['tables_median']:,.0f} records/s")
    if ingest_result:
        print(f"ingest end to end: {ingest_result['records']:,} records in "
              f"{ingest_result['seconds']:.1f} s = {ingest_result['rate']:,.0f} records/s "
              f"({ingest_result['batches']} batches, complete={ingest_result['complete']})")
    print(f"peak RSS {report['peak_rss_mib']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
