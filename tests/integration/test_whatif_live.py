"""The what-if step on a real group: the simulate CLI (live and from a file) and the mart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import unique
from kafkautil import Member, create_topic, take_snapshot, wait_until
from sqlalchemy import Engine, text

from groupscope import warehouse
from groupscope_dev.kafka import KafkaCluster

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "groupscope.cli", "simulate"]


def _range_skewed_group(kafka: KafkaCluster):  # type: ignore[no-untyped-def]
    """Two range members on four one-partition topics: the first takes all four."""
    tag = unique("skew")
    topics = [f"{tag}.{name}" for name in "abcd"]
    for topic in topics:
        create_topic(kafka.bootstrap, topic, 1)
    group_id = f"{tag}-group"
    members = [Member({"bootstrap.servers": kafka.bootstrap, "group.id": group_id,
                       "partition.assignment.strategy": "range"}, topics) for _ in range(2)]
    for m in members:
        m.start()

    def settled():  # type: ignore[no-untyped-def]
        snapshot = take_snapshot(kafka.bootstrap, cluster=tag)
        g = next((x for x in snapshot.groups if x.group_id == group_id), None)
        ok = (g is not None and g.state == "Stable" and len(g.members) == 2
              and all(m.subscription for m in g.members)
              and sum(len(m.assignment) for m in g.members) == 4)
        return snapshot if ok else None

    return group_id, members, wait_until(settled, 60, "the skewed group")


def test_simulate_a_live_group_and_load_the_mart(
    kafka: KafkaCluster, warehouse_engine: Engine
) -> None:
    group_id, members, snapshot = _range_skewed_group(kafka)
    try:
        out = subprocess.run([*CLI, "--bootstrap", kafka.bootstrap, "--group", group_id,
                              "--strategy", "roundrobin"], capture_output=True, text=True)
    finally:
        for m in members:
            m.stop()
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["group_id"], doc["strategy"], doc["current_strategy"]) == (
        group_id, "roundrobin", "range")
    assert doc["current"]["skew"]["max_minus_min"] == 4
    assert doc["skew"]["max_minus_min"] == 0
    assert sorted(len(p) for p in doc["assignment"].values()) == [2, 2]
    assert set(doc["assignment"]) == set(doc["current"]["assignment"])  # the real member ids
    reasons = " ".join(r["reason"] for r in doc["recommendations"])
    assert "range gives member" in reasons and "4 extra partitions across 4 topics" in reasons

    for _ in range(2):  # loading twice leaves the same rows
        warehouse.load_whatif(warehouse_engine, snapshot)
    with warehouse_engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT strategy, max_minus_min, idle_members FROM mart.assignment_whatif"
            " WHERE cluster = :c AND group_id = :g ORDER BY strategy"),
            {"c": snapshot.cluster, "g": group_id}).all()
        advice = conn.execute(text(
            "SELECT count(*) FROM mart.assignment_advice WHERE cluster = :c AND group_id = :g"),
            {"c": snapshot.cluster, "g": group_id}).scalar()
    assert [tuple(r) for r in rows] == [("cooperative-sticky", 0, 0), ("current", 4, 1),
                                        ("range", 4, 1), ("roundrobin", 0, 0)]
    assert advice and advice >= 2


def test_simulate_from_a_file_and_bad_input(tmp_path: Path) -> None:
    spec = {
        "members": [{"member_id": "c0", "topics": ["t0", "t1"]},
                    {"member_id": "c1", "topics": ["t0", "t1"]}],
        "topics": {"t0": 3, "t1": 3},
        "previous": {"c0": [{"topic": "t0", "partition": 0}]},
    }
    good = tmp_path / "group.json"
    good.write_text(json.dumps(spec))
    out = subprocess.run([*CLI, "--group", "g", "--strategy", "range", "--input", str(good)],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["assignment"]["c0"] == [{"topic": "t0", "partition": 0},
                                       {"topic": "t0", "partition": 1},
                                       {"topic": "t1", "partition": 0},
                                       {"topic": "t1", "partition": 1}]
    assert doc["skew"]["max_minus_min"] == 2
    assert doc["moved_from_previous"] == 5  # c0 keeps t0-0; everything else is new

    bad = tmp_path / "bad.json"
    bad.write_text('{"members": [{"topics": []}]}')
    for args, expected in [
        (["--input", str(bad), "--strategy", "range"], "not a simulation input"),
        (["--input", str(tmp_path / "missing.json"), "--strategy", "range"], "cannot read"),
        (["--input", str(good), "--strategy", "fastest"], "unknown strategy"),
        (["--strategy", "range"], "--bootstrap"),
    ]:
        result = subprocess.run([*CLI, "--group", "g", *args], capture_output=True, text=True)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], result.stderr
