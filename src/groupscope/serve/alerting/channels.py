"""Where alert notifications go. A channel takes one ``Message`` and delivers it, or raises
``ChannelError`` with a reason that holds no secret. The webhook channel is here; the Slack
and e-mail channels go through Airflow's notifiers (``groupscope.serve.alerting.airflow_channels``).

Safety, for every channel:

- A webhook URL is a secret, and so is each part of it (a Slack webhook's secret is its
  path). Every reason taken from an exception goes through ``scrub``, which takes out the
  URL, its parts and any other URL, so no error, log line or XCom holds one.
- Slack reads ``&``, ``<`` and ``>`` as markup (``<!channel>`` pings everyone), so text bound
  for Slack is escaped with ``slack_escape``. The webhook's JSON is documented as
  Slack-compatible ``{"text": ...}``, so its ``text`` is escaped the same way, and a receiver
  that shows it as is reads ``&amp;`` for ``&``; the structured fields (``incidents``, and a
  single incident's fields at the top level) stay raw, for receivers that read the data.
- The webhook POST follows only 307 and 308 redirects (at most ``MAX_REDIRECTS``), which keep
  the POST and its body; urllib would turn a 301, 302 or 303 into a GET without the body and
  count it as sent, so those are refused and the channel needs the final URL. A redirect to
  another origin (scheme, host or port) is refused too: the body would go somewhere the
  connection does not name.
- TLS certificates are always verified.
- Each send has a total deadline, its ``timeout_s`` (``groupscope.serve.alerting.deadline``):
  a receiver that answers slowly is cut, so one channel cannot hold the evaluation. Of the
  webhook's answer at most ``MAX_RESPONSE_BYTES`` are read.
- Each text is cut to what its channel accepts (``SLACK_TEXT_LIMIT``, ``SUBJECT_LIMIT``), and
  each string of the webhook's structured fields to ``FIELD_LIMIT``: a long name must not make
  a receiver refuse the message, which would hold the channel in backoff. (The names in the
  texts are escaped and cut where they enter them: ``groupscope.serve.alerting.notify``.)
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol
from urllib.parse import quote, unquote, urlsplit

from groupscope.serve.alerting.deadline import Deadline
from groupscope.serve.alerting.safe_text import cut, cut_strings, cut_text

MAX_REDIRECTS = 3
# What a webhook or Slack send waits at most, all told, unless the channel says otherwise.
DEFAULT_TIMEOUT_S = 10.0
# Of a webhook's answer, only its status matters; the body is read this far, then dropped.
MAX_RESPONSE_BYTES = 64 * 1024
# Slack cuts a message's text past 40,000 characters (api.slack.com/changelog/
# 2018-04-truncating-really-long-messages); the webhook's text is Slack's.
SLACK_TEXT_LIMIT = 40_000
# A subject is one line (an e-mail header, the webhook's "subject").
SUBJECT_LIMIT = 250
# Each string of the webhook's structured fields (names stay raw there, but not unbounded).
FIELD_LIMIT = 4096
REDACTED = "<redacted>"
# Shorter pieces ("/", "api", a port) are too common to take out of a text, and too short to
# be a secret's worth on their own.
MIN_SECRET_PART = 4
_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
# Where a secret's text splits into pieces that an error may quote on their own: the
# separators of the netloc (user, password, host, port), of the path and the query, quotes,
# and whitespace or control characters (an error may quote a path with its control character
# escaped by repr(): the pieces either side are found all the same).
_SEPARATORS = re.compile(r"[:@/?&=#;,'\"\\\s\x00-\x1f\x7f]+")


class ChannelError(RuntimeError):
    """A delivery failed; the message is safe to record and show (no URL, no password)."""


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` without any of the secrets, any of their parts of ``MIN_SECRET_PART`` or more
    characters (for a URL: its netloc, host, port, user, password, path, path segments,
    query, query values and fragment; each also percent-encoded and decoded), and without any
    URL at all. Case-insensitive: hosts are case-insensitive."""
    parts = sorted({p for s in secrets if s for p in _secret_parts(s)}, key=len, reverse=True)
    if parts:  # the longest first, so a URL goes whole before its parts are looked for
        text = re.sub("|".join(map(re.escape, parts)), REDACTED, text, flags=re.IGNORECASE)
    return _URL.sub("<url>", text)


def _secret_parts(secret: str) -> set[str]:
    try:
        split = urlsplit(secret)
    except ValueError:  # e.g. an unbalanced "[" in the host
        split = None
    if split is not None and split.scheme and split.netloc:  # not the scheme: "https" is no secret
        fields = [split.netloc, split.path, split.query, split.fragment]
    else:
        fields = [secret]
    pieces = {secret}
    for value in fields:
        pieces.add(value)
        pieces.update(_SEPARATORS.split(value))
    variants = set(pieces)
    for piece in pieces:
        variants.update((unquote(piece), quote(piece, safe="/:@")))
    return {v for v in variants if len(v) >= MIN_SECRET_PART}


def first_line(error: BaseException | str, secrets: Iterable[str] = ()) -> str:
    """The first line of an error, scrubbed of the secrets and any URL, at most 300
    characters."""
    # Scrubbed before it is cut: a cut secret would no longer be found.
    lines = scrub(str(error), secrets).strip().splitlines()
    return lines[0][:300] if lines else ""


def slack_escape(text: str) -> str:
    """Slack's escaping of plain text: ``&``, ``<`` and ``>`` only (``&`` first)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(text: str) -> str:
    """A message's text as Slack (and the webhook) gets it: escaped, then cut to
    ``SLACK_TEXT_LIMIT`` (Slack counts the escaped text) without cutting an entity in two."""
    escaped = slack_escape(text)
    if len(escaped) <= SLACK_TEXT_LIMIT:
        return escaped
    kept = cut_text(escaped, SLACK_TEXT_LIMIT)
    head, sep, note = kept.rpartition("\n")
    return re.sub(r"&[a-z]{0,3}$", "", head) + sep + note


def one_line(subject: str) -> str:
    """A subject as one line of at most ``SUBJECT_LIMIT`` characters."""
    return cut(" ".join(subject.split()), SUBJECT_LIMIT)


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
    """POSTs the message as JSON (``payload()``: the text, escaped for Slack, and the
    incidents with their id, state, rule, severity, cluster, group, value, threshold, since,
    dashboard and runbook, raw)."""

    name: str
    url: str = field(repr=False)  # a secret
    timeout_s: float = DEFAULT_TIMEOUT_S

    def send(self, message: Message) -> None:
        body = cut_strings(message.payload(), FIELD_LIMIT)
        body["subject"] = one_line(message.subject)
        body["text"] = slack_text(message.text)
        post_json(self.name, self.url, body, self.timeout_s)


def post_json(channel: str, url: str, body: dict[str, Any],
              timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """The one webhook POST of groupscope (incident notifications and task-failure alerts),
    done within ``timeout_s`` all told (connect, TLS, write, every read, redirects); raises
    ``ChannelError`` whose text never holds the URL or a part of it."""
    if not url.startswith(("https://", "http://")):
        raise ChannelError(f"channel {channel}: the webhook URL must be http(s)")
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        # http.client would refuse it too, quoting the path: say so without quoting it.
        raise ChannelError(f"channel {channel}: the webhook URL is malformed (it contains a "
                           "space or a control character)")
    redirects = _PostRedirects()
    late = ChannelError(f"channel {channel}: webhook did not answer within {timeout_s:g} s")
    with Deadline(timeout_s) as deadline:
        opener = urllib.request.build_opener(
            _WatchedHTTPHandler(deadline), _WatchedHTTPSHandler(deadline), redirects)
        try:
            request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
                url, data=json.dumps(body, ensure_ascii=False).encode(),
                method="POST", headers={"Content-Type": "application/json"})
            with opener.open(request, timeout=timeout_s) as response:
                response.read(MAX_RESPONSE_BYTES)
        except urllib.error.HTTPError as exc:
            exc.close()
            if deadline.passed:
                raise late from None
            raise ChannelError(f"channel {channel}: webhook answered HTTP {exc.code}"
                               f"{redirects.refusal}") from None
        # UnicodeError and http.client's InvalidURL (a bad port) come from a malformed URL;
        # the others from the connection (a cut one too). Their texts may quote the URL, a
        # redirect's target or parts.
        except (urllib.error.URLError, http.client.HTTPException, UnicodeError, OSError,
                ValueError) as exc:
            if deadline.passed:
                raise late from None
            reason = first_line(_reason(exc), [url, *redirects.followed])
            raise ChannelError(f"channel {channel}: webhook post failed: {reason}") from None
        if deadline.passed:  # cut in an answer whose body ends with the connection
            raise late


def _watched(kind: type[http.client.HTTPConnection], deadline: Deadline) -> Any:
    """A connection class for urllib whose sockets are opened through ``deadline``."""
    def connection(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = kind(host, **kwargs)
        conn._create_connection = deadline.connect  # type: ignore[attr-defined]
        return conn

    return connection


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_watched(http.client.HTTPConnection, self._deadline), req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    """Verifies certificates (the default context), its sockets watched by ``deadline``."""

    def __init__(self, deadline: Deadline) -> None:
        super().__init__(context=deadline.tls(ssl.create_default_context()))
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_watched(http.client.HTTPSConnection, self._deadline), req,
                            context=self._context)  # type: ignore[attr-defined]


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of ``url``; None when it has no valid port or host."""
    try:
        split = urlsplit(url)
        port = split.port or {"http": 80, "https": 443}.get(split.scheme.lower(), 0)
    except ValueError:
        return None
    return (split.scheme.lower(), (split.hostname or "").lower(), port) if split.hostname \
        else None


def _reason(exc: BaseException) -> str:
    cause: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed: {cause.verify_message}"
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return str(cause) or type(exc).__name__


class _PostRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a 307 or 308 with the same POST, body and headers (urllib's own handler does
    not), to the same origin only; refuses a 301, 302 or 303, which it would follow as a GET
    without the body, and a redirect to another scheme, host or port. A refused redirect
    ends as the HTTPError of its code, and ``refusal`` says why, never quoting where it
    pointed (the Location may hold a secret too)."""

    def __init__(self) -> None:
        self.followed: list[str] = []
        self.refusal = ""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                         msg: str, headers: http.client.HTTPMessage, newurl: str
                         ) -> urllib.request.Request | None:
        if code not in (307, 308):
            self.refusal = (" (a redirect that would drop the POST body); give the channel "
                            "the final URL")
        elif len(self.followed) >= MAX_REDIRECTS:
            self.refusal = f" (more than {MAX_REDIRECTS} redirects); give the channel the final URL"
        elif not newurl.startswith(("https://", "http://")) or (
                req.full_url.startswith("https://") and newurl.startswith("http://")):
            self.refusal = " (a redirect away from https, or to a URL that is not http(s))"
        elif _origin(newurl) is None or _origin(newurl) != _origin(req.full_url):
            self.refusal = (" (a redirect to another host); give the channel the final URL")
        else:
            self.followed.append(newurl)
            fp.close()  # its body unread: urllib would read all of it before following
            return urllib.request.Request(  # noqa: S310 - the scheme is checked above
                newurl, data=req.data, headers=dict(req.headers), method=req.get_method(),
                origin_req_host=req.origin_req_host, unverifiable=True)
        return None
