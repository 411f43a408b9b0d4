"""The snapshot's child process (``groupscope.collect.isolated``): a child that dies by a signal
is tried again, then reported; an error of the collector's own reaches the caller as itself.
The child is a real process each time (the crash that made it necessary, librdkafka#5040,
happens on a coordinator moving: tests/integration/test_alert_unknown.py)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest

from groupscope.collect.isolated import CollectorCrashed, take_snapshot_isolated
from groupscope.contract.cluster import ClusterConfig
from groupscope.kafka.admin import ClusterUnavailable


def _crashing_python(tmp_path: Path) -> Path:
    """An interpreter stand-in that dies by SIGSEGV, counting its runs."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs'}\nkill -SEGV $$\n")
    script.chmod(0o755)
    return script


def test_a_child_killed_by_sigsegv_is_retried_then_reported(tmp_path: Path) -> None:
    cluster = ClusterConfig("c", {"bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(CollectorCrashed) as caught:
        take_snapshot_isolated(cluster, 1.0, datetime.now(UTC),
                               python=str(_crashing_python(tmp_path)))
    assert (tmp_path / "runs").read_text().count("run") == 2
    message = str(caught.value)
    assert "attempt 1: the collector process was killed by SIGSEGV" in message
    assert "attempt 2: the collector process was killed by SIGSEGV" in message
    assert "librdkafka#5040" in message
    assert isinstance(caught.value, ClusterUnavailable)  # a stage failure like any other


def test_an_unreachable_cluster_is_the_collectors_own_error_through_the_child() -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    cluster = ClusterConfig("c", {"bootstrap.servers": f"127.0.0.1:{port}"})
    with pytest.raises(ClusterUnavailable) as caught:
        take_snapshot_isolated(cluster, 2.0, datetime.now(UTC))
    assert not isinstance(caught.value, CollectorCrashed)
    assert str(caught.value).startswith("cluster 'c' is unavailable: no broker answered")
    assert f"127.0.0.1:{port} failed: Connection refused" in str(caught.value)
