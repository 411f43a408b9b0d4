"""The alert channels as Airflow connections: the one module of the library that imports
Airflow (import-linter allows it this alone), so the Airflow task, the CLI and the tests build
channels the same way.

- ``webhook``: any connection type; the URL in its password (as ``groupscope_alerts`` always
  had it), or in its host. ``GROUPSCOPE_ALERT_WEBHOOK_URL`` stands in when the connection does
  not exist.
- ``slack``: connection type ``slackwebhook``, sent with the Slack provider's
  ``SlackWebhookNotifier``.
- ``email``: connection type ``smtp``, sent with the SMTP provider's ``SmtpNotifier``; the
  recipients from the channel's ``to`` or the connection's extra ``to``.

A channel whose connection does not exist is not built; ``build_channels`` says why.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from groupscope.serve.channels import Channel, ChannelError, Message, WebhookChannel
from groupscope.serve.rules import RuleSet


def _connection(conn_id: str) -> Any | None:
    from airflow.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception:  # AirflowNotFoundException, or no secrets backend answered
        return None


@dataclass(frozen=True)
class SlackChannel:
    name: str
    conn_id: str

    def send(self, message: Message) -> None:
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        try:
            # notify(), not the notifier's __call__: the text is not a Jinja template (a group
            # may be called "{{ x }}").
            SlackWebhookNotifier(slack_webhook_conn_id=self.conn_id,
                                 text=message.text).notify({})  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise ChannelError(f"channel {self.name}: Slack webhook failed: "
                               f"{_safe_reason(exc)}") from None


@dataclass(frozen=True)
class EmailChannel:
    name: str
    conn_id: str
    to: tuple[str, ...]
    from_email: str | None = None

    def send(self, message: Message) -> None:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        if not self.to:
            raise ChannelError(f"channel {self.name}: no recipients (give the channel a `to`, "
                               f"or the connection {self.conn_id} an extra \"to\")")
        subject = " ".join(message.subject.split())  # no line breaks in a header
        body = (f"<pre style=\"font-family: monospace\">{html.escape(message.text)}</pre>")
        try:
            SmtpNotifier(to=list(self.to), from_email=self.from_email, subject=subject,
                         html_content=body, smtp_conn_id=self.conn_id).notify({})
        except Exception as exc:
            raise ChannelError(f"channel {self.name}: e-mail failed: {_safe_reason(exc)}") \
                from None


def _safe_reason(exc: BaseException) -> str:
    from groupscope.serve.notify import _first_line

    return f"{type(exc).__name__}: {_first_line(exc)}"


def build_channels(rules: RuleSet, fallback_webhook_url: str | None = None
                   ) -> tuple[dict[str, Channel], dict[str, str]]:
    """The rules' channels that have a connection, and why each other one was left out."""
    channels: dict[str, Channel] = {}
    skipped: dict[str, str] = {}
    for spec in rules.channels:
        conn = _connection(spec.connection)
        if spec.kind == "webhook":
            url = _webhook_url(conn) if conn is not None else None
            url = url or fallback_webhook_url
            if url:
                channels[spec.name] = WebhookChannel(spec.name, url)
            else:
                skipped[spec.name] = (f"no connection {spec.connection} with a URL, and "
                                      "GROUPSCOPE_ALERT_WEBHOOK_URL is not set")
            continue
        if conn is None:
            skipped[spec.name] = f"no connection {spec.connection}"
        elif spec.kind == "slack":
            channels[spec.name] = SlackChannel(spec.name, spec.connection)
        elif spec.kind == "email":
            extra: Mapping[str, Any] = conn.extra_dejson or {}
            to = list(spec.to) or _recipients(extra.get("to"))
            channels[spec.name] = EmailChannel(spec.name, spec.connection, tuple(to),
                                               spec.from_email or extra.get("from_email"))
    return channels, skipped


def _webhook_url(conn: Any) -> str | None:
    if conn.password and str(conn.password).startswith(("http://", "https://")):
        return str(conn.password)
    if conn.host and str(conn.host).startswith(("http://", "https://")):
        return str(conn.host)
    return str(conn.password) if conn.password else None


def _recipients(raw: Any) -> list[str]:
    if not raw:
        return []
    if isinstance(raw, str):
        return [a.strip() for a in raw.split(",") if a.strip()]
    return [str(a) for a in raw]
