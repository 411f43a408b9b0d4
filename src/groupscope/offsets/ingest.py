"""Ingest of ``__consumer_offsets``: from the last landed position of every partition to the
end, decoded into event tables and landed batch by batch (``groupscope.offsets.store``).

The consumer reads with ``isolation.level=read_committed``, so offsets committed inside an
aborted transaction (``sendOffsetsToTransaction`` then abort) never land, transaction markers
are skipped, and a partition with an open transaction is read up to its last stable offset; the
rest lands on a later run. The end of each partition is fixed when the run starts, so a busy
topic cannot keep a run going forever.

This plain-Python path suits the CLI and small to medium clusters. The same decoder and event
builder run inside a Spark job for large ones (``spark_jobs/offsets_ingest.py``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from groupscope.contract.cluster import ClusterConfig
from groupscope.kafka.admin import ClusterUnavailable, reachable
from groupscope.offsets import store
from groupscope.offsets.events import EventBuilder, record_kind_counts

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


class IngestUnavailable(RuntimeError):
    """The cluster cannot be read at all (unreachable, not authorised)."""


@dataclass(frozen=True)
class IngestSettings:
    batch_records: int = 50_000
    timeout_s: float = 600.0  # the whole run; unfinished partitions are reported, not lost
    request_timeout_s: float = 15.0


@dataclass
class PartitionProgress:
    partition: int
    start: int
    end: int  # the high watermark when the run started
    next_offset: int
    records: int = 0
    batches: int = 0
    done: bool = False
    gap: tuple[int, int] | None = None  # offsets deleted from the log before we read them
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition, "start": self.start, "end": self.end,
            "next_offset": self.next_offset, "records": self.records, "batches": self.batches,
            "done": self.done, "gap": list(self.gap) if self.gap else None, "error": self.error,
        }


@dataclass
class IngestResult:
    cluster: str
    partitions: list[PartitionProgress] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    abandoned_removed: int = 0
    note: str | None = None

    @property
    def complete(self) -> bool:
        return all(p.done and p.error is None for p in self.partitions)

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "complete": self.complete, "records": self.records,
            "counts": dict(sorted(self.counts.items())),
            "partitions_read": sum(1 for p in self.partitions if p.records or p.batches),
            "incomplete": [p.as_dict() for p in self.partitions if not p.done or p.error],
            "gaps": [p.as_dict() for p in self.partitions if p.gap],
            "abandoned_batches_removed": self.abandoned_removed, "note": self.note,
        }


TopicResolver = Callable[[set[str]], Mapping[str, str]]


def ingest(consumer: Any, cluster: str, root: Path, ingest_ts: datetime,
           settings: IngestSettings = IngestSettings(),
           resolve_topic_ids: TopicResolver | None = None,
           partitions: Iterable[int] | None = None,
           clock: Callable[[], float] = time.monotonic) -> IngestResult:
    """Reads every (or the given) partition of the offsets topic from its landed position to
    its current end with ``consumer`` (a confluent_kafka.Consumer made by ``consumer_config``)
    and lands the events under ``root``."""
    from confluent_kafka import KafkaException, TopicPartition

    result = IngestResult(cluster, abandoned_removed=store.remove_abandoned(root, cluster))
    timeout = settings.request_timeout_s
    try:
        metadata = consumer.list_topics(OFFSETS_TOPIC, timeout=timeout)
    except KafkaException as exc:
        raise IngestUnavailable(f"cannot read cluster metadata: {exc.args[0].str()}") from None
    topic = metadata.topics.get(OFFSETS_TOPIC)
    if topic is None or topic.error is not None or not topic.partitions:
        result.note = "the cluster has no __consumer_offsets topic yet (no group has committed)"
        return result
    wanted = sorted(topic.partitions) if partitions is None else sorted(partitions)
    landed = store.positions(root, cluster)

    progress: dict[int, PartitionProgress] = {}
    for p in wanted:
        state: PartitionProgress
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(OFFSETS_TOPIC, p), timeout=timeout)
        except KafkaException as exc:
            result.partitions.append(PartitionProgress(
                p, landed.get(p, 0), -1, landed.get(p, 0),
                error=f"watermarks unavailable: {exc.args[0].str()}"))
            continue
        stored = landed.get(p, 0)
        start = max(stored, low)
        state = PartitionProgress(p, start, high, start, done=start >= high,
                                  gap=(stored, low) if stored < low else None)
        result.partitions.append(state)
        if not state.done:
            progress[p] = state
    result.partitions.sort(key=lambda s: s.partition)
    if not progress:
        return result

    names: dict[str, str] = {}

    def resolve(ids: set[str]) -> Mapping[str, str]:
        if ids - names.keys() and resolve_topic_ids is not None:
            names.update(resolve_topic_ids(ids))
        return names

    landers = {p: BatchLander(root, cluster, p, s.start, ingest_ts, settings.batch_records,
                              resolve, s.gap) for p, s in progress.items()}

    def flush(state: PartitionProgress, next_offset: int) -> None:
        lander = landers[state.partition]
        lander.flush(next_offset)
        state.next_offset, state.batches = lander.next_offset, lander.batches

    consumer.assign([TopicPartition(OFFSETS_TOPIC, p, s.start) for p, s in progress.items()])
    deadline = clock() + settings.timeout_s
    open_partitions = set(progress)
    try:
        while open_partitions and clock() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                if (error := msg.error()) is not None and \
                        error.code() == error.TOPIC_AUTHORIZATION_FAILED:  # no retry cures it
                    raise IngestUnavailable(
                        f"cluster {cluster!r}: not authorized to read {OFFSETS_TOPIC}: grant "
                        f"the principal Read on topic {OFFSETS_TOPIC}")
                p = msg.partition()
                if p not in progress or progress[p].done:
                    continue
                state, lander = progress[p], landers[p]
                error = msg.error()
                if error is not None:
                    if error.code() == error._PARTITION_EOF:
                        _finish(consumer, state, lander, open_partitions, flush)
                    else:
                        state.error = error.str()
                    continue
                offset = msg.offset()
                lander.add(offset, msg.timestamp()[1], msg.key(), msg.value())
                state.records += 1
                state.next_offset, state.batches = lander.next_offset, lander.batches
                if offset + 1 >= state.end:
                    _finish(consumer, state, lander, open_partitions, flush)
    finally:
        for p in open_partitions:
            state, lander = progress[p], landers[p]
            if lander.last_seen is not None:
                flush(state, lander.last_seen + 1)
            if state.error is None:
                state.error = (f"timed out after {settings.timeout_s:.0f}s at offset "
                               f"{state.next_offset} of {state.end}")
        for lander in landers.values():
            result.counts.update(lander.counts)
    return result


class BatchLander:
    """Decodes the records of one offsets-topic partition, in offset order, and lands them in
    batches of ``batch_records``. Shared by the plain ingest and the Spark job."""

    def __init__(self, root: Path, cluster: str, partition: int, start: int,
                 ingest_ts: datetime, batch_records: int,
                 resolve_topic_ids: TopicResolver | None = None,
                 gap: tuple[int, int] | None = None) -> None:
        self.root, self.cluster, self.partition = root, cluster, partition
        self.ingest_ts, self.batch_records = ingest_ts, batch_records
        self.resolve_topic_ids, self.gap = resolve_topic_ids, gap
        self.next_offset = start
        self.batches = 0
        self.last_seen: int | None = None
        self.counts: Counter[str] = Counter()
        self._builder = EventBuilder(cluster)

    def add(self, offset: int, timestamp_ms: int, key: bytes | None,
            value: bytes | None) -> None:
        self._builder.add_raw(self.partition, offset, timestamp_ms, key, value)
        self.last_seen = offset
        if len(self._builder) >= self.batch_records:
            self.flush(offset + 1)

    def flush(self, next_offset: int) -> None:
        """Lands what was added as the batch [next_offset of the last batch, next_offset)."""
        builder = self._builder
        if next_offset <= self.next_offset and not len(builder):
            return
        names: Mapping[str, str] = {}
        unresolved = builder.unresolved_topic_ids()
        if unresolved and self.resolve_topic_ids is not None:
            names = self.resolve_topic_ids(unresolved)
        tables = builder.tables(names)
        store.land_batch(self.root, self.cluster, self.partition, self.next_offset, next_offset,
                         tables, {
                             "ingest_ts": self.ingest_ts.isoformat(),
                             "counts": dict(builder.counts),
                             "rows": record_kind_counts(tables),
                             "gap": list(self.gap) if self.gap and not self.batches else None,
                         })
        self.counts.update(builder.counts)
        self.batches += 1
        self.next_offset = next_offset
        self._builder = EventBuilder(self.cluster, topic_names=builder.topic_names)


def _finish(consumer: Any, state: PartitionProgress, lander: BatchLander,
            open_partitions: set[int],
            flush: Callable[[PartitionProgress, int], None]) -> None:
    from confluent_kafka import TopicPartition

    # The consumer's position is past trailing transaction markers and aborted records, which
    # the last delivered offset is not; landing it means the next run does not re-read them.
    (position,) = consumer.position([TopicPartition(OFFSETS_TOPIC, state.partition)])
    candidates = [state.next_offset, -1 if lander.last_seen is None else lander.last_seen + 1]
    if position.offset >= 0:
        candidates.append(position.offset)
    flush(state, max(candidates))
    state.done = True
    open_partitions.discard(state.partition)


def consumer_config(client_config: Mapping[str, str]) -> dict[str, Any]:
    """The reading consumer: assign()-only (it never joins or commits for its group id)."""
    return {
        **client_config,
        "group.id": "groupscope-offsets-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 52_428_800,
    }


def topic_resolver(admin: Any, timeout_s: float) -> TopicResolver:
    """Resolves topic ids to names through the Admin API (describe every topic, once)."""
    cache: dict[str, str] = {}

    def resolve(ids: set[str]) -> Mapping[str, str]:
        if not ids - cache.keys():
            return cache
        from confluent_kafka import TopicCollection

        topics = list(admin.list_topics(timeout=timeout_s).topics)
        for name, future in admin.describe_topics(TopicCollection(topics),
                                                  request_timeout=timeout_s).items():
            try:
                # librdkafka prints ids in standard base64; Kafka's records use the URL-safe
                # alphabet (Uuid.toString), as the decoder does.
                topic_id = str(future.result().topic_id)
                cache[topic_id.replace("+", "-").replace("/", "_").rstrip("=")] = name
            except Exception as exc:  # a topic deleted meanwhile: its id stays unresolved
                log.debug("describe %s failed: %s", name, exc)
        return cache

    return resolve


def read_watermarks(client_config: Mapping[str, str], timeout_s: float,
                    ) -> tuple[dict[int, tuple[int, int]], dict[str, str]]:
    """The offsets topic's (log start, end) per partition and every topic's id -> name, for
    a job that plans its reads up front (the Spark path)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    consumer = Consumer(consumer_config(client_config))
    try:
        try:
            topic = consumer.list_topics(OFFSETS_TOPIC, timeout=timeout_s).topics.get(
                OFFSETS_TOPIC)
        except KafkaException as exc:
            raise IngestUnavailable(f"cannot read cluster metadata: {exc.args[0].str()}") \
                from None
        if topic is None or topic.error is not None:
            return {}, {}
        watermarks = {
            p: consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), timeout=timeout_s)
            for p in sorted(topic.partitions)
        }
    finally:
        consumer.close()
    names = topic_resolver(AdminClient(dict(client_config)), timeout_s)({"*"})
    return watermarks, dict(names)


def ingest_cluster(cluster: ClusterConfig, landing: Path, ingest_ts: datetime,
                   timeout_s: float, run_timeout_s: float, batch_records: int = 50_000,
                   partitions: list[int] | None = None) -> IngestResult:
    """Lands ``__consumer_offsets`` of ``cluster`` from where the last run stopped. Raises
    ConfigError (bad client settings) or ClusterUnavailable, with librdkafka's reason."""
    from confluent_kafka import Consumer

    connection = reachable(cluster, timeout_s)
    consumer = Consumer(consumer_config(cluster.client))
    try:
        return ingest(consumer, cluster.name, landing, ingest_ts,
                      IngestSettings(batch_records, run_timeout_s, timeout_s),
                      topic_resolver(connection.admin, timeout_s), partitions)
    except IngestUnavailable as exc:
        diagnosis = connection.diagnosis()
        raise ClusterUnavailable(f"{exc} ({diagnosis})" if diagnosis else str(exc)) from None
    finally:
        consumer.close()
