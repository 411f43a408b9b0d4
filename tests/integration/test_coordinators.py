"""Group coordinators on a real 3-broker cluster: the hashing formula agrees with the brokers,
and after the coordinator's broker stops, the snapshot names the new one, and the
Coordinators and brokers dashboard's move panels show the move (read as grafana_reader from
the two snapshots loaded into a warehouse)."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import unique
from kafkautil import admin, commit_offsets, create_topic, take_snapshot, wait_until

from groupscope import pipeline, warehouse
from groupscope.contract.model import Snapshot
from groupscope.kafka.coordinator import java_string_hashcode, offsets_partition_for
from groupscope.serve.grafana import READER_ROLE
from groupscope.serve.grafana.dashboards import build_all
from groupscope.serve.grafana.macros import expand
from groupscope_dev.kafka import KafkaCluster, require_java
from groupscope_dev.postgres import READER_PASSWORD, LocalPostgres

pytestmark = pytest.mark.integration

NAMES = ["", "a", "my-group", "polygenelubricants", "グループ", "😀-emoji", "quote'\"\\",
         "x" * 249] + [f"group-{i}-{'ü' * (i % 4)}" for i in range(40)]


def test_hashcode_matches_the_jvm(tmp_path: Path) -> None:
    """Java's own String.hashCode, for names a test can think of and some it cannot."""
    source = tmp_path / "Hashes.java"
    source.write_text(textwrap.dedent("""
        import java.nio.charset.StandardCharsets;
        import java.nio.file.*;
        public class Hashes {
          public static void main(String[] args) throws Exception {
            for (String line : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8))
              System.out.println(line.hashCode());
          }
        }
    """))
    names = [n for n in NAMES if "\\n" not in n]
    listing = tmp_path / "names.txt"
    listing.write_text("\n".join(names) + "\n", encoding="utf-8")
    out = subprocess.run([require_java(), "-Dfile.encoding=UTF-8", str(source), str(listing)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert [int(h) for h in out] == [java_string_hashcode(n) for n in names]


@pytest.mark.cluster3
def test_formula_matches_described_coordinators(kafka3: KafkaCluster) -> None:
    topic = unique("coord")
    create_topic(kafka3.bootstrap, topic, 1, replication=3)
    groups = [f"{unique('c')}-{name}"[:249] for name in NAMES]
    for g in groups:
        commit_offsets(kafka3.bootstrap, g, {(topic, 0): 0})
    # A new cluster rebalances partition leadership for a while (preferred-leader election),
    # so a snapshot can catch a coordinator mid-move: that shows as a mismatch, which is the
    # point of recording it. A wrong formula would never stop mismatching.
    snapshot = wait_until(
        lambda: (s := take_snapshot(kafka3.bootstrap, cluster="three"))
        and not any(g.coordinator_mismatch for g in s.groups) and s,
        60, "a snapshot without coordinator moves in flight",
    )
    assert snapshot.complete, snapshot.errors
    assert snapshot.offsets_topic_partitions == 50
    described = {g.group_id: g for g in snapshot.groups}
    leaders = {p: part.leader for p, part in
               admin(kafka3.bootstrap).list_topics(timeout=10)
               .topics["__consumer_offsets"].partitions.items()}
    used = set()
    for g in groups:
        group = described[g]
        partition = offsets_partition_for(g, 50)
        assert group.coordinator_id == group.expected_coordinator_id == leaders[partition], g
        used.add(group.coordinator_id)
    assert used == {1, 2, 3}  # the groups really are spread over all three brokers


@pytest.mark.cluster3
def test_coordinator_moves_when_its_broker_stops(kafka3: KafkaCluster, postgres: LocalPostgres,
                                                tmp_path: Path) -> None:
    topic = unique("move")
    create_topic(kafka3.bootstrap, topic, 3, replication=3)
    group = unique("moving")
    commit_offsets(kafka3.bootstrap, group, {(topic, 0): 0, (topic, 2): 0})
    first = take_snapshot(kafka3.bootstrap)
    before = next(g for g in first.groups if g.group_id == group)
    old = before.coordinator_id
    assert old is not None and old == before.expected_coordinator_id

    kafka3.stop_node(old)
    try:
        survivors = ",".join(f"127.0.0.1:{kafka3.broker_port(n)}" for n in kafka3.node_ids()
                             if n != old)
        partition = offsets_partition_for(group, 50)
        client = admin(survivors)
        wait_until(
            lambda: client.list_topics(timeout=5).topics["__consumer_offsets"]
            .partitions[partition].leader not in (old, -1),
            60, "the offsets partition to elect a new leader",
        )
        after = wait_until(
            lambda: (s := take_snapshot(survivors, attempts=5))
            and (g := next(x for x in s.groups if x.group_id == group)).coordinator_id
            not in (None, old) and (s, g),
            60, "a snapshot naming the new coordinator",
        )
        snapshot, moved = after
        assert moved.coordinator_id == moved.expected_coordinator_id != old
        # the group and its commits survived the move; any error met on the way is recorded,
        # with its subject, never dropped
        assert {(o.partition, o.offset) for o in moved.offsets} == {(0, 0), (2, 0)}
        for error in snapshot.errors:
            assert error.code and error.stage
    finally:
        kafka3.start_node(old)
        kafka3.wait_ready()
    moves = _move_panels(postgres, tmp_path, [first, snapshot])
    assert moves["Coordinator moves per hour"], moves
    assert (group, old, moved.coordinator_id) in {
        (r["group_id"], r["from_coordinator"], r["to_coordinator"])
        for r in moves["Coordinator moves"]}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def _move_panels(postgres: LocalPostgres, tmp_path: Path,
                 snapshots: list[Snapshot]) -> dict[str, list[dict[str, Any]]]:
    """The rows of the dashboard's coordinator-move panels over a warehouse holding only
    ``snapshots``, read as grafana_reader (the one-broker warehouse of test_grafana_queries
    cannot have a move)."""
    database = unique("moves").replace("-", "_")
    url = postgres.create_database(database)
    engine = warehouse.engine_for(url)
    try:
        warehouse.migrate(engine)
        for snapshot in snapshots:
            warehouse.load_landed(engine, pipeline.land_snapshot(snapshot, tmp_path))
    finally:
        engine.dispose()
    dashboard = build_all()["groupscope-coordinators"]
    rows: dict[str, list[dict[str, Any]]] = {}
    with psycopg.connect(postgres.database_url(database, READER_ROLE, READER_PASSWORD)) as conn:
        for panel in _panels(dashboard["panels"]):
            if panel.get("title") not in ("Coordinator moves per hour", "Coordinator moves"):
                continue
            sql = expand(panel["targets"][0]["rawSql"],
                         time_from=snapshots[0].snapshot_ts - timedelta(hours=1),
                         time_to=datetime.now(UTC) + timedelta(minutes=1),
                         variables={"cluster": snapshots[0].cluster})
            cursor = conn.execute(sql)
            names = [c.name for c in cursor.description or []]
            rows[panel["title"]] = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    postgres.drop_database(database)
    return rows
