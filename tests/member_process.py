"""A real group member in its own process, driven line by line on stdin, for tests that need a
crash (SIGKILL: no LeaveGroup) or a static member's restart.

Prints ``ASSIGNED <n> <member_id> <topic:partition,...>`` on each assignment callback.
Commands: ``subscribe t1,t2`` (a subscription change), ``close`` (a graceful leave; a static
member's close sends no LeaveGroup, as KIP-345 says), ``block`` (stops polling for good, as a
handler that never returns: librdkafka keeps heartbeating until ``max.poll.interval.ms``; the
test kills the process). Settings of the member's own, among the others: ``per_record_s=S``
(S seconds of work per record read: a consumer slower than production) and
``commit_every_s=S`` (commits what it processed every S seconds itself, auto-commit off).

    python tests/member_process.py BOOTSTRAP GROUP TOPICS [KEY=VALUE ...]
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


def main() -> None:
    bootstrap, group, topics, *pairs = sys.argv[1:]
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                              "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    config.update(pair.split("=", 1) for pair in pairs)
    per_record_s = float(config.pop("per_record_s", 0))
    commit_every_s = float(config.pop("commit_every_s", 0))
    if commit_every_s:
        config["enable.auto.commit"] = False
    consumer = Consumer(config)
    processed: dict[tuple[str, int], int] = {}
    committed_at = time.monotonic()
    assigned = 0

    def on_assign(c: Any, partitions: list[TopicPartition]) -> None:
        nonlocal assigned
        assigned += 1
        parts = ",".join(f"{tp.topic}:{tp.partition}" for tp in partitions)
        print(f"ASSIGNED {assigned} {c.memberid()} {parts}", flush=True)

    def on_revoke(c: Any, partitions: list[TopicPartition]) -> None:
        # Offsets processed under an assignment are not this member's to commit after it.
        for tp in partitions:
            processed.pop((tp.topic, tp.partition), None)

    consumer.subscribe(topics.split(","), on_assign=on_assign, on_revoke=on_revoke)
    while True:
        message = consumer.poll(0.1 if not commit_every_s else 0.05)
        if message is not None and message.error() is None:
            processed[(message.topic(), message.partition())] = message.offset() + 1
            time.sleep(per_record_s)
        if commit_every_s and processed and time.monotonic() - committed_at >= commit_every_s:
            with contextlib.suppress(KafkaException):  # a rebalance: committed next time
                consumer.commit(offsets=[TopicPartition(t, p, o)
                                         for (t, p), o in processed.items()],
                                asynchronous=False)
            committed_at = time.monotonic()
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if not ready:
            continue
        line = sys.stdin.readline().strip()
        if line == "block":
            while True:
                select.select([], [], [], 3600)
        if line.startswith("subscribe "):
            consumer.subscribe(line.split(" ", 1)[1].split(","), on_assign=on_assign,
                               on_revoke=on_revoke)
        elif line in ("close", ""):
            consumer.close()
            print("CLOSED", flush=True)
            return


if __name__ == "__main__":
    main()
