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

Each send has a total deadline, the channel's ``timeout_s`` (``DEFAULT_TIMEOUT_S``, 10 s, for
Slack and the webhook; ``EMAIL_TIMEOUT_S``, 20 s, for e-mail; the rules' channel ``timeout``
when given). The providers' own bounds are not one: the SMTP hook waits its connection's
``timeout`` (30 s) per socket wait and retries ``retry_limit`` (5) more times, about 180 s
against a server that never greets, and a socket timeout never cuts a server that answers a
byte at a time. So the e-mail channel opens the hook's sockets through the deadline
(``groupscope.serve.alerting.deadline``), caps its wait to the time left and its retries to
``SMTP_RETRY_LIMIT``; the Slack channel gives the Slack client the deadline as its timeout,
no retries of its own (the delivery's backoff retries) and a TLS context whose sockets the
deadline cuts (Slack is https).

A channel whose connection does not exist is not built; ``build_channels`` says why. One whose
connection cannot be read now is ``unavailable``: its notifications are owed and retried.
"""

from __future__ import annotations

import html
import logging
import math
import smtplib
import ssl
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from groupscope.serve.alerting.channels import (
    DEFAULT_TIMEOUT_S,
    Channel,
    ChannelError,
    Message,
    WebhookChannel,
    first_line,
    one_line,
    scrub,
    slack_text,
)
from groupscope.serve.alerting.deadline import Deadline
from groupscope.serve.alerting.rules import Channel as ChannelSpec
from groupscope.serve.alerting.rules import RuleSet
from groupscope.serve.alerting.safe_text import cut_text

# Below the delivery's deadline (30 s by default), so that the SMTP hook's one retry can finish.
EMAIL_TIMEOUT_S = 20.0
# The SMTP hook's retries within one send (it makes 5 by default): one more try is enough
# against a connection dropped once; the delivery's backoff retries the rest.
SMTP_RETRY_LIMIT = 1
# An e-mail body's text, at most (a long one is cut, with a line that says so).
EMAIL_TEXT_LIMIT = 200_000


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
    timeout_s: float = DEFAULT_TIMEOUT_S

    def send(self, message: Message) -> None:
        from airflow.providers.slack.hooks.slack_webhook import SlackWebhookHook
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        secrets = _connection_secrets(_connection(self.conn_id))
        # Channels send in threads of their own (notify.send_apart): the logger's one filter
        # holds the secrets of every send under way, never removed while another logs.
        _SCRUBBING.add(secrets)
        try:
            with Deadline(self.timeout_s) as deadline:
                try:
                    # notify(), not the notifier's __call__: the text is not a Jinja template
                    # (a group may be called "{{ x }}").
                    notifier = SlackWebhookNotifier(slack_webhook_conn_id=self.conn_id,
                                                    text=slack_text(message.text))
                    # The hook would hand its own logger to slack_sdk's client, which logs the
                    # URL at debug and quotes it in errors; the notifier logs it at debug after
                    # sending (with %-style arguments only, which a stdlib logger takes too).
                    notifier.hook = SlackWebhookHook(
                        slack_webhook_conn_id=self.conn_id, logger=_SLACK_LOG,
                        timeout=max(1, math.ceil(self.timeout_s)), retry_handlers=[],
                        ssl=deadline.tls(ssl.create_default_context()))
                    notifier._log = _SLACK_LOG  # type: ignore[assignment]
                    notifier.notify({})  # type: ignore[no-untyped-call]
                except Exception as exc:
                    if deadline.passed:
                        raise ChannelError(f"channel {self.name}: Slack webhook did not answer "
                                           f"within {self.timeout_s:g} s") from None
                    raise ChannelError(f"channel {self.name}: Slack webhook failed: "
                                       f"{_safe_reason(exc, secrets)}") from None
        finally:
            _SCRUBBING.remove(secrets)


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
    """Takes the secrets of every Slack send under way out of each record (added and removed
    per send, under a lock: sends run in threads of their own)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._sends: list[list[str]] = []

    def add(self, secrets: list[str]) -> None:
        with self._lock:
            self._sends.append(secrets)

    def remove(self, secrets: list[str]) -> None:
        with self._lock:
            self._sends.remove(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            secrets = [s for send in self._sends for s in send]
        record.msg, record.args = scrub(record.getMessage(), secrets), None
        if record.exc_info:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info),
                                    secrets)
            record.exc_info = None
        return True


_SCRUBBING = _Scrubbing()
_SLACK_LOG.addFilter(_SCRUBBING)


@dataclass(frozen=True)
class EmailChannel:
    name: str
    conn_id: str
    to: tuple[str, ...]
    from_email: str | None = None
    timeout_s: float = EMAIL_TIMEOUT_S

    def send(self, message: Message) -> None:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        if not self.to:
            raise ChannelError(f"channel {self.name}: no recipients (give the channel a `to`, "
                               f"or the connection {self.conn_id} an extra \"to\")")
        subject = one_line(message.subject)  # no line breaks in a header
        text = cut_text(message.text, EMAIL_TEXT_LIMIT)
        body = f"<pre style=\"font-family: monospace\">{html.escape(text)}</pre>"
        with Deadline(self.timeout_s) as deadline:
            try:
                notifier = SmtpNotifier(to=list(self.to), from_email=self.from_email,
                                        subject=subject, html_content=body,
                                        smtp_conn_id=self.conn_id)
                notifier.hook = _bounded_smtp_hook(self.conn_id, notifier.auth_type, deadline)
                notifier.notify({})
            except Exception as exc:
                if deadline.passed:
                    raise ChannelError(f"channel {self.name}: the SMTP server did not answer "
                                       f"within {self.timeout_s:g} s") from None
                raise ChannelError(f"channel {self.name}: e-mail failed: "
                                   f"{_safe_reason(exc)}") from None


class _WatchedSMTP(smtplib.SMTP):
    """Opens its socket through the send's deadline."""

    def __init__(self, deadline: Deadline, **kwargs: Any) -> None:
        self.deadline = deadline  # before connecting, which the constructor does
        super().__init__(**kwargs)

    def _get_socket(self, host: str, port: int, timeout: float) -> Any:
        return self.deadline.connect((host, port), timeout, self.source_address)


class _WatchedSMTPSSL(smtplib.SMTP_SSL, _WatchedSMTP):
    """SMTP over TLS: smtplib's SMTP_SSL wraps the socket ``_WatchedSMTP`` opens, with the
    hook's context (whose sockets the deadline watches)."""

    def __init__(self, deadline: Deadline, **kwargs: Any) -> None:
        self.deadline = deadline
        smtplib.SMTP_SSL.__init__(self, **kwargs)  # which calls SMTP's, not ours


def _bounded_smtp_hook(conn_id: str, auth_type: str, deadline: Deadline) -> Any:
    """The SMTP provider's hook, bounded by ``deadline``: its sockets opened (and TLS-wrapped,
    for SMTPS and STARTTLS) through it, each wait at most the time left, and at most
    ``SMTP_RETRY_LIMIT`` retries."""
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    class BoundedSmtpHook(SmtpHook):
        @property
        def timeout(self) -> int:
            return max(1, min(int(super().timeout), math.ceil(deadline.left())))

        @property
        def smtp_retry_limit(self) -> int:
            return min(int(super().smtp_retry_limit), SMTP_RETRY_LIMIT)

        def _build_ssl_context(self) -> ssl.SSLContext:
            context = super()._build_ssl_context()
            if context is None:  # the connection's ssl_context "none": no verification
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            return deadline.tls(context)

        def _build_client(self) -> smtplib.SMTP:
            kind = _WatchedSMTPSSL if self.use_ssl else _WatchedSMTP
            return kind(deadline, **self._build_client_kwargs(is_async=False))

    return BoundedSmtpHook(smtp_conn_id=conn_id, auth_type=auth_type)


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


# The built-in webhook channel's connection, for which GROUPSCOPE_ALERT_WEBHOOK_URL stands in.
ALERTS_CONN_ID = "groupscope_alerts"


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
            # The variable stands in for the built-in channel's connection only: a dead man's
            # switch (or any other webhook) whose connection is missing must not post to the
            # incident webhook instead.
            fallback = fallback_webhook_url if spec.connection == ALERTS_CONN_ID else None
            url = url or fallback
            if url:
                built.channels[spec.name] = WebhookChannel(
                    spec.name, url, _timeout_s(spec, DEFAULT_TIMEOUT_S))
            elif spec.connection == ALERTS_CONN_ID:
                built.skipped[spec.name] = (f"no connection {spec.connection} with a URL, and "
                                            "GROUPSCOPE_ALERT_WEBHOOK_URL is not set")
            else:
                built.skipped[spec.name] = f"no connection {spec.connection} with a URL"
            continue
        if conn is None:
            built.skipped[spec.name] = f"no connection {spec.connection}"
        elif spec.kind == "slack":
            built.channels[spec.name] = SlackChannel(spec.name, spec.connection,
                                                     _timeout_s(spec, DEFAULT_TIMEOUT_S))
        elif spec.kind == "email":
            extra: Mapping[str, Any] = conn.extra_dejson or {}
            to = list(spec.to) or _recipients(extra.get("to"))
            built.channels[spec.name] = EmailChannel(
                spec.name, spec.connection, tuple(to),
                spec.from_email or extra.get("from_email"), _timeout_s(spec, EMAIL_TIMEOUT_S))
    return built


def _timeout_s(spec: ChannelSpec, default: float) -> float:
    """The channel's deadline: the rules' ``timeout``, else its kind's default."""
    return spec.timeout.total_seconds() if spec.timeout is not None else default


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
