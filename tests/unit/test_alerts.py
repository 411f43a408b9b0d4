"""The local alert log of failed tasks: always written, never raising (it runs in failure
callbacks), and the place of last resort when the warehouse and the channels are down. The
notification of a failed task goes through the incidents (tests/integration/test_airflow.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from groupscope.serve.alerting.alerts import Alert, read_log, send

ALERT = Alert("critical", "groupscope_snapshot_prod: task collect failed",
              "snapshot of cluster 'prod' failed: unavailable", datetime(2026, 11, 21, tzinfo=UTC),
              {"cluster": "prod", "dag_id": "groupscope_snapshot_prod"})


def test_alert_is_logged_with_its_labels(tmp_path: Path) -> None:
    log = tmp_path / "nested" / "alerts.jsonl"
    entry = send(ALERT, log)
    send(ALERT, log)
    assert read_log(log) == [entry, entry]
    assert entry["labels"] == ALERT.labels and entry["at"] == "2026-11-21T00:00:00+00:00"
    assert "cluster=prod" in ALERT.message()


def test_an_unwritable_log_does_not_raise(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    entry = send(ALERT, blocker / "alerts.jsonl")
    assert entry["title"] == ALERT.title
    assert any("cannot be written" in r.getMessage() for r in caplog.records)
