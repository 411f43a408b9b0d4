"""OffsetFetch spread over several connections reads what one connection reads, on a real
3-broker cluster (groups coordinated by every broker)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import unique
from kafkautil import admin, commit_offsets, create_topic

from groupscope.collect.collector import Collector, CollectorSettings
from groupscope.contract.model import Snapshot
from groupscope_dev.kafka import KafkaCluster

pytestmark = pytest.mark.integration


class CountingAdmin:
    """A real AdminClient that counts the OffsetFetch calls it is given."""

    def __init__(self, bootstrap: str) -> None:
        self.client = admin(bootstrap)
        self.offset_fetches = 0

    def list_consumer_group_offsets(self, *args: Any, **kwargs: Any) -> Any:
        self.offset_fetches += 1
        return self.client.list_consumer_group_offsets(*args, **kwargs)


def _offsets(snapshot: Snapshot, groups: list[str]) -> dict[str, Any]:
    return {g.group_id: g.offsets for g in snapshot.groups if g.group_id in groups}


def test_three_connections_read_the_same_offsets_as_one(kafka3: KafkaCluster) -> None:
    topic = unique("spread")
    create_topic(kafka3.bootstrap, topic, 3, replication=3)
    groups = [unique(f"spread-{i}") for i in range(9)]
    for i, group in enumerate(groups):
        commit_offsets(kafka3.bootstrap, group, {(topic, p): 10 * i + p for p in range(3)})
    settings = {"request_timeout_s": 15.0}
    one = Collector(admin(kafka3.bootstrap), "c3",
                    CollectorSettings(offset_fetch_connections=1, **settings))
    extra: list[CountingAdmin] = []

    def connect() -> CountingAdmin:
        extra.append(CountingAdmin(kafka3.bootstrap))
        return extra[-1]

    three = Collector(admin(kafka3.bootstrap), "c3",
                      CollectorSettings(offset_fetch_connections=3, **settings),
                      connect=connect)
    by_one = one.snapshot(datetime.now(UTC))
    by_three = three.snapshot(datetime.now(UTC))

    assert not [e for e in by_one.errors + by_three.errors if e.group_id in groups]
    assert _offsets(by_three, groups) == _offsets(by_one, groups)
    assert {g: [(o.partition, o.offset) for o in offsets]
            for g, offsets in _offsets(by_three, groups).items()} == {
        g: [(p, 10 * i + p) for p in range(3)] for i, g in enumerate(groups)}
    # the groups have coordinators on more than one broker, and every connection was used
    assert len({g.coordinator_id for g in by_three.groups if g.group_id in groups}) > 1
    fetched = three.requests["OffsetFetch"]
    assert len(extra) == 2 and all(a.offset_fetches >= fetched // 3 for a in extra)
