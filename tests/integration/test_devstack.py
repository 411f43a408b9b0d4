"""The local runtime: dev/stack up/down on a clean folder, clear errors, and Kafka 3.9."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from conftest import unique
from kafkautil import (
    Member,
    commit_offsets,
    create_topic,
    produce_counts,
    take_snapshot,
    wait_until,
)

from groupscope.contract.model import GroupType
from groupscope_dev import StackError, importable_env
from groupscope_dev.__main__ import Stack
from groupscope_dev.kafka import KafkaCluster, kafka_libs, require_java
from groupscope_dev.ports import LOOPBACK, free_port_block, free_ports
from groupscope_dev.postgres import server_install

pytestmark = pytest.mark.integration


def test_stack_up_is_idempotent_and_down_removes_everything(tmp_path: Path) -> None:
    stack = Stack(tmp_path / ".stack", tmp_path / ".stack.env")
    kafka_port, (pg_port, connect_port) = free_port_block(1), free_ports(2)
    env = stack.up(1, "4.3.1", kafka_port, pg_port, connect_port)
    assert env["KAFKA_BOOTSTRAP"] == f"127.0.0.1:{kafka_port}"
    assert env["SPARK_CONNECT_URL"] == f"sc://127.0.0.1:{connect_port}"
    assert env["WAREHOUSE_URL"].startswith("postgresql://")
    assert f":{pg_port}/" in env["WAREHOUSE_URL"]
    written = dict(line.split("=", 1) for line in stack.env_file.read_text().splitlines())
    assert written["KAFKA_BOOTSTRAP"] == env["KAFKA_BOOTSTRAP"]
    assert written["WAREHOUSE_URL"] == env["WAREHOUSE_URL"]
    try:
        # again: nothing changes
        assert stack.up(1, "4.3.1", kafka_port, pg_port, connect_port) == env
        with pytest.raises(StackError, match="another layout"):
            stack.up(3, "4.3.1", kafka_port, pg_port, connect_port)
        from sqlalchemy import text

        from groupscope import warehouse

        engine = warehouse.engine_for(env["WAREHOUSE_URL"])
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM raw.snapshots")).scalar() == 0
        engine.dispose()
        assert "node 1 up" in stack.status()
        assert f"Spark Connect sc://127.0.0.1:{connect_port}: up" in stack.status()
    finally:
        stack.down()
    assert not stack.env_file.exists()
    assert not (tmp_path / ".stack" / "kafka").exists()
    assert not (tmp_path / ".stack" / "postgres").exists()
    assert not (tmp_path / ".stack" / "spark-connect").exists()
    assert "no stack" in stack.status()


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        cluster = KafkaCluster(tmp_path / "k", base_port=port,
                               controller_base_port=free_port_block(1))
        with pytest.raises(StackError, match=f"port {port} on 127.0.0.1 is already in use"):
            cluster.start()


def test_missing_java_and_maven_are_clear_errors(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither java nor mvn is found there
    monkeypatch.setenv("GROUPSCOPE_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached
    with pytest.raises(StackError, match="Java is not on PATH"):
        require_java()
    with pytest.raises(StackError, match=r"Maven \(mvn\) is not on PATH"):
        kafka_libs("4.3.1")
    with pytest.raises(StackError, match="not supported"):
        kafka_libs("2.8.0")


@pytest.mark.kafka39
def test_kafka_39_snapshots_like_4x(kafka39: KafkaCluster) -> None:
    topic = unique("old")
    create_topic(kafka39.bootstrap, topic, 3)
    produce_counts(kafka39.bootstrap, topic, [5, 6, 7])
    simple = unique("simple39")
    commit_offsets(kafka39.bootstrap, simple, {(topic, 1): 2})
    group = unique("rr39")
    member = Member({"bootstrap.servers": kafka39.bootstrap, "group.id": group,
                     "partition.assignment.strategy": "roundrobin"}, [topic],
                    {(topic, 0): 5, (topic, 2): 1})
    member.start()
    try:
        snapshot = wait_until(
            lambda: (s := take_snapshot(kafka39.bootstrap))
            and any(g.group_id == group and g.state == "Stable" and len(g.offsets) == 2
                    for g in s.groups) and s,
            60, "the group to be stable with its commits")
    finally:
        member.stop()
    assert snapshot.complete, snapshot.errors
    groups = {g.group_id: g for g in snapshot.groups}
    rr = groups[group]
    assert (rr.group_type, rr.assignor, len(rr.members)) == (GroupType.CLASSIC, "roundrobin", 1)
    assert len(rr.members[0].assignment) == 3
    hw = {p.partition: p.high_watermark for p in snapshot.partitions if p.topic == topic}
    assert {o.partition: hw[o.partition] - o.offset for o in rr.offsets} == {0: 0, 2: 6}
    assert groups[simple].is_simple and groups[simple].offsets[0].offset == 2
    assert rr.coordinator_id == rr.expected_coordinator_id == 1


def test_postgres_runs_for_a_normal_user() -> None:
    """The non-root path: binaries used in place from the user's cache (the server build)
    and the wheel (psql), data in the user's own folder. As root, the test runs it as a
    throwaway unprivileged user."""
    # Not pytest's tmp_path: its parents are private to root.
    home = Path(tempfile.mkdtemp(prefix="groupscope-user-"))
    try:
        env = {**importable_env(os.environ), "HOME": str(home)}
        env.pop("GROUPSCOPE_CACHE_DIR", None)
        # The server build as this run's cache holds it, not fetched again with Maven.
        server = server_install().parent
        shutil.copytree(server, home / ".cache" / "groupscope" / "postgres" / server.name,
                        symlinks=True, ignore=shutil.ignore_patterns("jar"))
        python, user = sys.executable, None
        if os.geteuid() == 0:
            user = "groupscope-test"
            if subprocess.run(["id", user], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                                "/usr/sbin/nologin", user], check=True)
            account = pwd.getpwnam(user)
            for path in [home, *home.rglob("*")]:
                os.lchown(path, account.pw_uid, account.pw_gid)
            if not _runs_as(user, [python, "-c", "pass"]):
                # The venv's interpreter lives where the user cannot go (/root/.pyenv, say):
                # the system's Python 3.11 with the venv's packages is the same code.
                python = "/usr/bin/python3.11"
                checkout = Path(__file__).resolve().parents[2]
                env["PYTHONPATH"] = os.pathsep.join([str(checkout / "src"), str(checkout / "dev"),
                                                     sysconfig.get_paths()["purelib"]])
                if not _runs_as(user, [python, "-c", "import psycopg, groupscope"], env):
                    pytest.skip("no Python 3.11 with this checkout's packages is usable by "
                                "an unprivileged user here")
        script = (
            "from pathlib import Path; from groupscope_dev.postgres import LocalPostgres;"
            "import psycopg;"
            f"pg = LocalPostgres(Path({str(home / 'pg')!r}), port={free_ports(1)[0]});"
            "assert not pg.as_root; pg.start();"
            "print(psycopg.connect(pg.url).execute('select current_user').fetchone()[0]);"
            "pg.destroy()"
        )
        result = subprocess.run([python, "-c", script], capture_output=True, text=True,
                                user=user, cwd="/", timeout=120, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "groupscope"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _runs_as(user: str, command: list[str], env: dict[str, str] | None = None) -> bool:
    try:
        return subprocess.run(command, user=user, cwd="/", env=env, capture_output=True,
                              check=False).returncode == 0
    except OSError:  # cannot even execute it
        return False
