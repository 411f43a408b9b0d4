"""How an evaluation reads the ``__consumer_offsets`` partitions without a leader, and the
groups they hide, from a real warehouse: the run of snapshots that saw each partition so, the
last snapshot at which it had a leader, and which groups are ERR (COORDINATOR DOWN) or
unknown. The same path on a real 3-broker cluster: test_alert_unknown.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import unique
from sqlalchemy import text

from groupscope.kafka.coordinator import offsets_partition_for
from groupscope.serve.alerting.causes import coordinator_outages
from groupscope.serve.alerting.conditions import _without_coordinator
from groupscope.warehouse.partitions import create_partitions

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 26, 22, 0, tzinfo=UTC)
EVERY = timedelta(seconds=15)
PARTITIONS = 3


def ts(i: int) -> datetime:
    return T0 + i * EVERY


def _named(partition: int, prefix: str) -> str:
    """A group id of ``prefix`` that hashes to ``partition`` of the offsets topic."""
    while True:
        name = unique(prefix)
        if offsets_partition_for(name, PARTITIONS) == partition:
            return name


def _seed(conn: Any, cluster: str, leaderless: dict[int, list[int]],
          listed: dict[str, tuple[list[int], int]]) -> None:
    """Snapshots 0-11; ``leaderless``: offsets partition -> the snapshots that saw it without a
    leader; ``listed``: group -> (the snapshots that listed it, its member count)."""
    create_partitions(conn, [ts(0)])
    for i in range(12):
        errors = [p for p, seen in leaderless.items() if i in seen]
        conn.execute(text(
            "INSERT INTO raw.snapshots VALUES (:c, :t, :id, :complete, 0, 0, :n, :p)"),
            {"c": cluster, "t": ts(i), "id": f"{cluster}-{i}", "complete": not errors,
             "n": len(errors), "p": PARTITIONS})
        for seq, partition in enumerate(errors):
            conn.execute(text(
                "INSERT INTO raw.collection_errors VALUES (:c, :t, :seq, 'list_groups',"
                " 'COORDINATOR_NOT_AVAILABLE', :m, NULL, '__consumer_offsets', :p, true, 1)"),
                {"c": cluster, "t": ts(i), "seq": seq, "p": partition,
                 "m": f"__consumer_offsets partition {partition} has no leader (its replica: "
                      "broker 2, none in sync and up): the groups it coordinates cannot be "
                      "listed, described or committed to"})
    for group, (snapshots, members) in listed.items():
        for i in snapshots:
            conn.execute(text(
                "INSERT INTO raw.consumer_groups (cluster, snapshot_ts, group_id, group_type,"
                " state, coordinator_id, coordinator_mismatch, described, member_count)"
                " VALUES (:c, :t, :g, 'classic', :s, 2, false, true, :m)"),
                {"c": cluster, "t": ts(i), "g": group, "s": "Stable" if members else "Empty",
                 "m": members})


def test_an_outage_is_read_as_its_run_and_hides_the_groups_listed_before_it(
        warehouse_engine: Any) -> None:
    cluster = unique("outages")
    busy, idle = _named(0, "busy"), _named(0, "idle")
    flapped, firing, elsewhere = _named(1, "flapped"), _named(1, "firing"), _named(2, "other")
    with warehouse_engine.begin() as conn:
        # Partition 0 lost its leader at snapshot 6. Partition 1 lost it at 2, had one back at
        # 5 (listing nothing: the coordinator loading), and lost it again at 6.
        _seed(conn, cluster, {0: list(range(6, 12)), 1: [2, 3, 4, *range(6, 12)]},
              {busy: (list(range(6)), 2), idle: (list(range(6)), 0), flapped: ([0, 1], 1),
               elsewhere: (list(range(12)), 1)})
    with warehouse_engine.connect() as conn:
        outages = coordinator_outages(conn, cluster, ts(11))
        assert outages.partitions == PARTITIONS
        assert {p: (o.since, o.led_until) for p, o in outages.by_partition.items()} == {
            0: (ts(6), ts(5)), 1: (ts(6), ts(5))}
        wanted = {"group_status_err", "lag_seconds"}
        hidden = _without_coordinator(conn, cluster, wanted, ts(11), EVERY, outages,
                                      open_groups={firing})
    values = {g: {o.condition: (o.value if o.unknown is None else o.unknown) for o in obs}
              for g, obs in hidden.items()}
    # The group consuming before the outage: ERR; its other values unknown.
    assert values[busy]["group_status_err"] == 1.0
    assert str(values[busy]["lag_seconds"]).startswith("its coordinator is down")
    # An idle group: unknown, no page.
    assert str(values[idle]["group_status_err"]).endswith("it had no member at its last listing")
    # Listed within 5 intervals of the flap's last led snapshot; and a group with an open
    # incident, not listed there: both hidden, both ERR.
    assert values[flapped]["group_status_err"] == 1.0
    assert values[firing]["group_status_err"] == 1.0
    assert elsewhere not in hidden  # its partition has a leader
    [busy_err] = [o for o in hidden[busy] if o.condition == "group_status_err"]
    assert busy_err.details["last_listed"] == ts(5).isoformat()
    assert busy_err.details["member_count"] == 2

    with warehouse_engine.connect() as conn:
        # The first snapshot of the outage: unknown, not yet ERR (a broker's start-up).
        first = coordinator_outages(conn, cluster, ts(6))
        at_first = _without_coordinator(conn, cluster, wanted, ts(6), EVERY, first, set())
        # A run longer than the horizon read: no start, said so.
        short = coordinator_outages(conn, cluster, ts(11), horizon=timedelta(seconds=60))
        healthy = coordinator_outages(conn, cluster, ts(5))
    assert all(o.unknown is not None and o.unknown.endswith("one snapshot so far")
               for o in at_first[busy])
    assert short.by_partition[0].led_until is None
    assert short.by_partition[0].since_text().startswith(f"since before {ts(7):%H:%M:%S}Z")
    assert healthy.by_partition == {}
