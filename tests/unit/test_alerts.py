"""Alerts: always in the log; posted to a webhook (a real HTTP server on loopback) when one is
set; a webhook that fails is recorded, never raised, and its URL (a secret) is never written."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from groupscope.serve.alerts import Alert, read_log, send

ALERT = Alert("critical", "groupscope_snapshot_prod: task collect failed",
              "snapshot of cluster 'prod' failed: unavailable", datetime(2026, 11, 21, tzinfo=UTC),
              {"cluster": "prod", "dag_id": "groupscope_snapshot_prod"})


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200 if "/ok/" in self.path else 500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()


def test_alert_is_logged_and_posted(tmp_path: Path,
                                    webhook: tuple[str, list[dict[str, Any]]]) -> None:
    base, received = webhook
    log = tmp_path / "alerts.jsonl"
    entry = send(ALERT, f"{base}/ok/T0KEN", log)
    assert entry["delivered"] is True
    assert received[0]["text"].startswith("[groupscope critical] groupscope_snapshot_prod")
    assert "cluster=prod" in received[0]["text"]
    assert received[0]["labels"] == ALERT.labels
    assert read_log(log) == [entry]


def test_a_failing_webhook_is_recorded_without_its_url(
        tmp_path: Path, webhook: tuple[str, list[dict[str, Any]]]) -> None:
    base, _ = webhook
    log = tmp_path / "alerts.jsonl"
    entry = send(ALERT, f"{base}/fail/T0KEN", log)
    assert entry["delivered"] is False and entry["delivery_error"] == "webhook answered HTTP 500"
    assert "T0KEN" not in log.read_text()
    unreachable = send(ALERT, "http://127.0.0.1:9/x/T0KEN", log, timeout_s=2)
    assert unreachable["delivered"] is False
    assert unreachable["delivery_error"].startswith("webhook post failed: ")
    assert "T0KEN" not in log.read_text() and "127.0.0.1" not in log.read_text()
    assert "T0KEN" not in log.read_text()
    assert len(read_log(log)) == 2


def test_without_a_webhook_the_log_is_the_sink(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROUPSCOPE_ALERT_WEBHOOK_URL", raising=False)
    log = tmp_path / "alerts.jsonl"
    assert send(ALERT, None, log)["delivered"] is None
    assert read_log(log)[0]["title"] == ALERT.title
