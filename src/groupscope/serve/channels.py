"""Where alert notifications go. A channel takes one ``Message`` and delivers it, or raises
``ChannelError`` with a reason that holds no secret. The webhook channel is here; the Slack
and e-mail channels go through Airflow's notifiers (``groupscope.serve.airflow_channels``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol


class ChannelError(RuntimeError):
    """A delivery failed; the message is safe to record and show (no URL, no password)."""


@dataclass(frozen=True)
class Message:
    """One notification: a subject line (e-mail), the text (every channel) and the
    structured incidents (the webhook's JSON)."""

    subject: str
    text: str
    incidents: list[dict[str, Any]] = field(default_factory=list)
    kind: str = "firing"  # firing | resolved | test

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": self.kind, "subject": self.subject, "text": self.text,
                                "incidents": self.incidents}
        if len(self.incidents) == 1:  # a single incident's fields at the top level too
            body.update({k: v for k, v in self.incidents[0].items() if k not in body})
        return body


class Channel(Protocol):
    @property
    def name(self) -> str: ...

    def send(self, message: Message) -> None: ...


@dataclass(frozen=True)
class WebhookChannel:
    """POSTs the message as JSON (``payload()``: the text, and the incidents with their id,
    state, rule, severity, cluster, group, value, threshold, since, dashboard and runbook)."""

    name: str
    url: str = field(repr=False)  # a secret
    timeout_s: float = 10.0

    def send(self, message: Message) -> None:
        post_json(self.name, self.url, message.payload(), self.timeout_s)


def post_json(channel: str, url: str, body: dict[str, Any], timeout_s: float = 10.0) -> None:
    """The one webhook POST of groupscope (incident notifications and task-failure alerts);
    raises ``ChannelError`` whose text never holds the URL."""
    if not url.startswith(("https://", "http://")):
        raise ChannelError(f"channel {channel}: the webhook URL must be http(s)")
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        url, data=json.dumps(body, ensure_ascii=False).encode(),
        method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            response.read()
    except urllib.error.HTTPError as exc:
        raise ChannelError(f"channel {channel}: webhook answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        raise ChannelError(f"channel {channel}: webhook post failed: {reason}") from None
