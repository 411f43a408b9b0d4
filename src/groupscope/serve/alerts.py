"""Alert notifications: one ``Alert`` shape, written to a local alert log (JSON lines, always)
and posted to a webhook when one is configured (Slack-compatible ``{"text": ...}`` plus the
structured fields). The webhook URL is a secret: it comes from the caller (an Airflow
connection, or ``GROUPSCOPE_ALERT_WEBHOOK_URL`` through ``groupscope.settings``) and is never
logged or written anywhere. Where the log is, is the caller's too (``GROUPSCOPE_ALERT_LOG``):
this module reads no environment, as the settings sit above it.

Sending never raises: an alert that could not be delivered is still in the log, marked
``delivered: false`` with the reason, because it is called from failure callbacks."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from groupscope.serve.channels import ChannelError, post_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alert:
    severity: str  # critical | warning
    title: str
    text: str
    at: datetime
    labels: dict[str, str] = field(default_factory=dict)

    def message(self) -> str:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return f"[groupscope {self.severity}] {self.title}\n{self.text}" + (
            f"\n({labels})" if labels else "")


def send(alert: Alert, webhook_url: str | None, log_path: Path,
         timeout_s: float = 10.0) -> dict[str, Any]:
    """Logs the alert and posts it to the webhook, if any; returns the log entry."""
    entry: dict[str, Any] = {**asdict(alert), "at": alert.at.isoformat()}
    if webhook_url:
        try:
            post_json("webhook", webhook_url,
                      {**entry, "detail": alert.text, "text": alert.message()}, timeout_s)
            entry["delivered"] = True
        except ChannelError as exc:  # its text never holds the URL (a secret)
            entry["delivered"] = False
            entry["delivery_error"] = str(exc).removeprefix("channel webhook: ")
            log.warning("alert %r not delivered: %s", alert.title, entry["delivery_error"])
    else:
        entry["delivered"] = None  # no webhook configured: the log is the only sink
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    log.error("%s", alert.message())
    return entry


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
