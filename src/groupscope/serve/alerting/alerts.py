"""The local alert log: one JSON line per groupscope task that failed for good, always
written, even when the warehouse and every channel are down (the last trace an operator can
read). The notification itself is not sent from here: a failed task is the ``task_failed``
condition (``ops.task_runs``), and its incident goes through the same rules, routes and
channels as every other alert (``groupscope.serve.alerting.notify``). Where the log is, is the
caller's (``GROUPSCOPE_ALERT_LOG``): this module reads no environment, as the settings sit
above it.

Writing never raises past an unwritable log (it is called from failure callbacks)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

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


def send(alert: Alert, log_path: Path) -> dict[str, Any]:
    """Writes the alert to the log (and the task's log); returns the entry."""
    entry: dict[str, Any] = {**asdict(alert), "at": alert.at.isoformat()}
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    except OSError as exc:
        log.warning("the alert log %s cannot be written: %s", log_path, exc.strerror)
    log.error("%s", alert.message())
    return entry


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
