"""A real group member in its own process, driven line by line on stdin, for tests that need a
crash (SIGKILL: no LeaveGroup) or a static member's restart.

Prints ``ASSIGNED <n> <member_id> <topic:partition,...>`` on each assignment callback.
Commands: ``subscribe t1,t2`` (a subscription change), ``close`` (a graceful leave; a static
member's close sends no LeaveGroup, as KIP-345 says). ``per_record_s=S`` among the settings is
the member's own: S seconds of work per record read (a consumer slower than production).

    python tests/member_process.py BOOTSTRAP GROUP TOPICS [KEY=VALUE ...]
"""

from __future__ import annotations

import select
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    bootstrap, group, topics, *pairs = sys.argv[1:]
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                              "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    config.update(pair.split("=", 1) for pair in pairs)
    per_record_s = float(config.pop("per_record_s", 0))
    consumer = Consumer(config)
    assigned = 0

    def on_assign(c: Any, partitions: list[TopicPartition]) -> None:
        nonlocal assigned
        assigned += 1
        parts = ",".join(f"{tp.topic}:{tp.partition}" for tp in partitions)
        print(f"ASSIGNED {assigned} {c.memberid()} {parts}", flush=True)

    consumer.subscribe(topics.split(","), on_assign=on_assign)
    while True:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None and per_record_s:
            time.sleep(per_record_s)
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if not ready:
            continue
        line = sys.stdin.readline().strip()
        if line.startswith("subscribe "):
            consumer.subscribe(line.split(" ", 1)[1].split(","), on_assign=on_assign)
        elif line in ("close", ""):
            consumer.close()
            print("CLOSED", flush=True)
            return


if __name__ == "__main__":
    main()
