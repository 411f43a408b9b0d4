"""The alert channels as Airflow connections: the one module of the library that imports
Airflow (import-linter allows it this alone), so the Airflow task, the CLI and the tests build
channels the same way.

- ``webhook``: any connection type; the URL in its password (as ``groupscope_alerts`` always
  had it), or in its host. ``GROUPSCOPE_ALERT_WEBHOOK_URL`` stands in when the connection does
  not exist.
- ``slack``: connection type ``slackwebhook``, sent with the Slack provider's
  ``SlackWebhookNotifier``. The text is escaped for Slack (``slack_escape``: a group called
  ``<!channel>`` must not ping the channel). The connection's password, host, login and
  extra are secrets: they are scrubbed from the channel's errors and from the log lines of
  the Slack client, which quote the webhook URL (its errors, and its debug lines of every
  request). TLS is verified (slack_sdk's default); redirects are left to slack_sdk (urllib's
  defaults), not to ``post_json``'s rules.
- ``email``: connection type ``smtp``, sent with the SMTP provider's ``SmtpNotifier``; the
  recipients from the channel's ``to`` or the connection's extra ``to``.

A channel whose connection does not exist is not built; ``build_channels`` says why. One whose
connection cannot be read now is ``unavailable``: its notifications are owed and retried.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from groupscope.serve.alerting.channels import (
    Channel,
    ChannelError,
    Message,
    WebhookChannel,
    first_line,
    scrub,
    slack_escape,
)
from groupscope.serve.alerting.rules import RuleSet


class ConnectionUnreadable(RuntimeError):
    """A connection lookup failed for another reason than "not defined" (a secrets backend
    that denied or broke): the channel exists, and is retried."""


def _connection(conn_id: str) -> Any | None:
    """The connection, None when it is not defined. Airflow reports a secrets backend that
    fails as "not defined" too (it logs the error and tries the next backend), so a channel
    that delivered before and is "not defined" now is retried, not dropped
    (``groupscope.pipeline.evaluate_alerts``)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    except Exception as exc:
        raise ConnectionUnreadable(f"connection {conn_id} cannot be read now "
                                   f"({type(exc).__name__}); retried") from None


# The Slack client logs through this logger rather than the hook's own, so that its records
# pass through a scrubbing filter first.
_SLACK_LOG = logging.getLogger("groupscope.serve.slack")


@dataclass(frozen=True)
class SlackChannel:
    name: str
    conn_id: str

    def send(self, message: Message) -> None:
        from airflow.providers.slack.hooks.slack_webhook import SlackWebhookHook
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        secrets = _connection_secrets(_connection(self.conn_id))
        scrubbing = _Scrubbing(secrets)
        _SLACK_LOG.addFilter(scrubbing)
        try:
            # notify(), not the notifier's __call__: the text is not a Jinja template (a group
            # may be called "{{ x }}").
            notifier = SlackWebhookNotifier(slack_webhook_conn_id=self.conn_id,
                                            text=slack_escape(message.text))
            # The hook would hand its own logger to slack_sdk's client, which logs the URL
            # at debug and quotes it in errors; the notifier logs it at debug after sending
            # (with %-style arguments only, which a stdlib logger takes as well).
            notifier.hook = SlackWebhookHook(slack_webhook_conn_id=self.conn_id,
                                             logger=_SLACK_LOG)
            notifier._log = _SLACK_LOG  # type: ignore[assignment]
            notifier.notify({})  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise ChannelError(f"channel {self.name}: Slack webhook failed: "
                               f"{_safe_reason(exc, secrets)}") from None
        finally:
            _SLACK_LOG.removeFilter(scrubbing)


def _connection_secrets(conn: Any | None) -> list[str]:
    """What of a connection may be, or be in, a webhook URL: the Slack hook builds the URL
    from the password and the host, older connections keep a token in the extra, and a proxy
    URL there may hold a password."""
    if conn is None:
        return []
    extra = conn.extra_dejson
    values = [conn.password, conn.host, conn.login,
              *(extra.values() if isinstance(extra, dict) else ())]
    return [v for v in values if isinstance(v, str) and v]


class _Scrubbing(logging.Filter):
    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage(), self.secrets), None
        if record.exc_info:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info),
                                    self.secrets)
            record.exc_info = None
        return True


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


def _safe_reason(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    return f"{type(exc).__name__}: {first_line(exc, secrets)}"


@dataclass(frozen=True)
class BuiltChannels:
    """The rules' channels that have a connection (``channels``); those whose connection is not
    defined, and why (``skipped``); those whose connection cannot be read now (``unavailable``:
    their notifications stay owed and are retried)."""

    channels: dict[str, Channel]
    skipped: dict[str, str]
    unavailable: dict[str, str]


def build_channels(rules: RuleSet, fallback_webhook_url: str | None = None) -> BuiltChannels:
    """The channels of ``rules`` as their Airflow connections give them."""
    built = BuiltChannels({}, {}, {})
    for spec in rules.channels:
        try:
            conn = _connection(spec.connection)
        except ConnectionUnreadable as exc:
            built.unavailable[spec.name] = f"channel {spec.name}: {exc}"
            continue
        if spec.kind == "webhook":
            url = _webhook_url(conn) if conn is not None else None
            url = url or fallback_webhook_url
            if url:
                built.channels[spec.name] = WebhookChannel(spec.name, url)
            else:
                built.skipped[spec.name] = (f"no connection {spec.connection} with a URL, and "
                                            "GROUPSCOPE_ALERT_WEBHOOK_URL is not set")
            continue
        if conn is None:
            built.skipped[spec.name] = f"no connection {spec.connection}"
        elif spec.kind == "slack":
            built.channels[spec.name] = SlackChannel(spec.name, spec.connection)
        elif spec.kind == "email":
            extra: Mapping[str, Any] = conn.extra_dejson or {}
            to = list(spec.to) or _recipients(extra.get("to"))
            built.channels[spec.name] = EmailChannel(
                spec.name, spec.connection, tuple(to),
                spec.from_email or extra.get("from_email"))
    return built


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
