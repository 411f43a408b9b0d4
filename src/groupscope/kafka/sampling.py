"""Exact time lag: the timestamp of the record at each lagging committed offset, read with one
small fetch per partition.

Cost is bounded three ways: only partitions with lag (committed offset inside the log, below the
high watermark) are sampled, at most ``max_partitions`` of them per snapshot (the most lagged
first), and each fetch is capped at ``max.partition.fetch.bytes``. Groups committed at the same
offset of a partition share one sample. A partition that yields no record in time is reported,
never guessed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupscope.contract.model import RecordTimestamp, TopicPartition

_TIMESTAMP_TYPES = {1: "create_time", 2: "log_append_time"}


@dataclass(frozen=True)
class SampleRequest:
    tp: TopicPartition
    offset: int
    lag: int


def plan_samples(requests: Sequence[SampleRequest], max_partitions: int) -> list[SampleRequest]:
    """One request per partition and offset, most lagged first, at most ``max_partitions``
    partitions (a partition committed at several offsets keeps its most lagged one)."""
    best: dict[TopicPartition, SampleRequest] = {}
    for r in requests:
        if r.lag > 0 and (r.tp not in best or r.lag > best[r.tp].lag):
            best[r.tp] = r
    return sorted(best.values(), key=lambda r: (-r.lag, r.tp))[:max_partitions]


class RecordSampler:
    """Reads one record at each requested offset with an assign()-only consumer (it never joins
    a group or commits)."""

    def __init__(self, client_config: Mapping[str, Any], max_partitions: int = 1000,
                 timeout_s: float = 10.0, max_fetch_bytes: int = 65536) -> None:
        self.client_config = dict(client_config)
        self.max_partitions = max_partitions
        self.timeout_s = timeout_s
        self.max_fetch_bytes = max_fetch_bytes

    def __call__(self, requests: Sequence[SampleRequest]
                 ) -> tuple[list[RecordTimestamp], list[tuple[SampleRequest, str]]]:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        wanted = plan_samples(requests, self.max_partitions)
        if not wanted:
            return [], []
        consumer = Consumer({
            **self.client_config,
            "group.id": "groupscope-record-sampler",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
            "max.partition.fetch.bytes": self.max_fetch_bytes,
            "fetch.max.bytes": max(self.max_fetch_bytes * 16, 1_048_576),
            "queued.max.messages.kbytes": 4096,
        })
        by_tp = {r.tp: r for r in wanted}
        found: dict[TopicPartition, RecordTimestamp] = {}
        failed: dict[TopicPartition, str] = {}
        try:
            consumer.assign([KafkaTopicPartition(r.tp.topic, r.tp.partition, r.offset)
                             for r in wanted])
            deadline = time.monotonic() + self.timeout_s
            while len(found) + len(failed) < len(wanted) and time.monotonic() < deadline:
                done_now = []
                for msg in consumer.consume(num_messages=500, timeout=0.2):
                    tp = TopicPartition(str(msg.topic()), int(msg.partition() or 0))
                    request = by_tp.get(tp)
                    if request is None or tp in found or tp in failed:
                        continue
                    error, offset = msg.error(), msg.offset()
                    if error is not None or offset is None:
                        failed[tp] = error.str() if error is not None else "no offset"
                    else:
                        kind, ts = msg.timestamp()
                        found[tp] = RecordTimestamp(tp.topic, tp.partition, request.offset,
                                                    offset, ts,
                                                    _TIMESTAMP_TYPES.get(kind, "unknown"))
                    done_now.append(KafkaTopicPartition(tp.topic, tp.partition))
                if done_now:
                    consumer.pause(done_now)  # one record each: stop fetching the rest
                self._past_the_end(consumer, by_tp, found, failed)
        finally:
            consumer.close()
        missing = [(r, failed.get(r.tp, f"no record within {self.timeout_s:.0f}s"))
                   for r in wanted if r.tp not in found]
        return sorted(found.values(), key=lambda t: (t.topic, t.partition)), missing

    @staticmethod
    def _past_the_end(consumer: Any, by_tp: Mapping[TopicPartition, SampleRequest],
                      found: Mapping[TopicPartition, RecordTimestamp],
                      failed: dict[TopicPartition, str]) -> None:
        """A consumer never returns transaction markers (nor, read_committed, aborted records),
        but its position moves past them: a partition whose position reached the high watermark
        it was sampled under, with no record returned, has none to read (a committed offset on
        the marker a transaction leaves: the lag of 1). Without this it would wait out the
        timeout at every snapshot."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        waiting = [KafkaTopicPartition(tp.topic, tp.partition) for tp in by_tp
                   if tp not in found and tp not in failed]
        if not waiting:
            return
        for position in consumer.position(waiting):
            tp = TopicPartition(str(position.topic), int(position.partition))
            request = by_tp[tp]
            if position.offset >= request.offset + request.lag:  # offsets < 0: not fetched yet
                failed[tp] = ("no record between the committed offset and the high watermark "
                              "(transaction markers or aborted records only)")
