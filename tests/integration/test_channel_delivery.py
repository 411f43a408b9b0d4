"""Channel delivery against real HTTP servers on loopback: redirects (a 307 or 308 keeps the
POST and its body; a 301, 302 or 303, which urllib would follow as a GET without the body, is
refused and nothing is delivered), TLS verification through the Slack provider, Slack escaping
through the real ``SlackChannel`` and Slack provider (``SlackWebhookNotifier``) against a local
stand-in for Slack, and failures whose URL has a secret path: the secret is in neither the
error nor any log record nor anything printed. A redirect to another origin is refused. Each
channel's send is bounded as a whole: an SMTP server (a plain socket) that never greets, or
greets a byte every 2 s, a Slack endpoint that never answers, or drips its answer over https.
Hostile names (a newline, a bidi override, a 10,000-character client id) reach the webhook,
Slack and a real mailbox (aiosmtpd) escaped and cut."""

from __future__ import annotations

import html
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Airflow configures logging when it is first imported; imported here, before a test's caplog
# puts its handler on the root logger, it does not take that handler away.
import airflow.providers.slack.notifications.slack_webhook  # noqa: F401
import pytest
from selfsigned import self_signed

from groupscope.serve.alerting.airflow_channels import EmailChannel, SlackChannel, build_channels
from groupscope.serve.alerting.channels import (
    SLACK_TEXT_LIMIT,
    SUBJECT_LIMIT,
    ChannelError,
    Message,
    WebhookChannel,
    post_json,
)
from groupscope.serve.alerting.incidents import Incident, Undelivered
from groupscope.serve.alerting.notify import single
from groupscope.serve.alerting.rules import load_rules_text
from groupscope_dev.mailcatcher import MailCatcher
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration

SECRET = "XyZsecretTok42"


@dataclass
class Seen:
    method: str
    path: str
    body: bytes
    content_type: str | None


@dataclass
class Endpoint:
    """``/redirect/CODE/HOPS``: answers CODE to the next hop, and after HOPS of them to
    ``/target/SECRET``, which answers 200 to anything (a GET too, as a real endpoint might);
    ``/elsewhere`` answers 307 to a URL with the secret as its port; ``/away/HOST/PORT``
    answers 307 to ``/target/SECRET`` at another origin; ``/status/CODE`` answers CODE with
    the request's path in the body."""

    port: int
    seen: list[Seen] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def at_target(self) -> list[Seen]:
        return [s for s in self.seen if s.path.startswith("/target/")]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    state = Endpoint(0)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            state.seen.append(Seen(self.command, self.path, self.rfile.read(length),
                                   self.headers.get("Content-Type")))
            parts = urlsplit(self.path).path.strip("/").split("/")
            if parts[0] == "redirect":
                code, hops = int(parts[1]), int(parts[2])
                self.send_response(code)
                self.send_header("Location", f"/redirect/{code}/{hops - 1}" if hops > 1
                                 else f"/target/{SECRET}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts[0] == "elsewhere":  # a Location with a port that is not a number
                self.send_response(307)
                self.send_header("Location", f"http://127.0.0.1:{SECRET}/hooks")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts[0] == "away":  # a 307 to /hooks at another host name or port
                self.send_response(307)
                self.send_header("Location", f"http://{parts[1]}:{parts[2]}/target/{SECRET}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts[0] == "status":
                body = f"no such hook {self.path}".encode()
                self.send_response(int(parts[1]))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        do_GET = do_POST = do_HEAD = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MESSAGE = Message("s", "[FIRING] group a & b", [{"group": "a & b"}])


@pytest.mark.parametrize("code", [301, 302, 303])
def test_a_redirect_that_drops_the_body_is_refused_and_nothing_is_delivered(
        endpoint: Endpoint, code: int) -> None:
    channel = WebhookChannel("hook", f"{endpoint.base}/redirect/{code}/1")
    with pytest.raises(ChannelError) as raised:
        channel.send(MESSAGE)
    assert str(raised.value) == (
        f"channel hook: webhook answered HTTP {code} (a redirect that would drop the POST "
        "body); give the channel the final URL")
    assert endpoint.at_target() == []  # not followed, as a GET without the body or otherwise
    assert [s.method for s in endpoint.seen] == ["POST"]


@pytest.mark.parametrize("code", [307, 308])
@pytest.mark.parametrize("hops", [1, 3])
def test_a_307_or_308_keeps_the_post_and_its_body(endpoint: Endpoint, code: int,
                                                  hops: int) -> None:
    WebhookChannel("hook", f"{endpoint.base}/redirect/{code}/{hops}").send(MESSAGE)
    [arrived] = endpoint.at_target()
    assert arrived.method == "POST" and arrived.content_type == "application/json"
    body = json.loads(arrived.body)
    assert body["text"] == "[FIRING] group a &amp; b" and body["group"] == "a & b"
    assert len(endpoint.seen) == hops + 1


def test_more_than_three_redirects_are_refused(endpoint: Endpoint) -> None:
    with pytest.raises(ChannelError) as raised:
        post_json("hook", f"{endpoint.base}/redirect/307/4", {"text": "x"}, timeout_s=5)
    assert "HTTP 307 (more than 3 redirects)" in str(raised.value)
    assert endpoint.at_target() == [] and len(endpoint.seen) == 4


def test_the_webhook_text_is_escaped_for_slack_and_its_fields_stay_raw() -> None:
    catcher = WebhookCatcher()
    catcher.start()
    try:
        WebhookChannel("hook", catcher.url).send(
            Message("s", "[FIRING] group <!channel>: STOPPED", [{"group": "<!channel>"}]))
    finally:
        catcher.stop()
    [body] = catcher.bodies
    assert body["text"] == "[FIRING] group &lt;!channel&gt;: STOPPED"
    assert body["group"] == "<!channel>" and body["incidents"] == [{"group": "<!channel>"}]


def _slack_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, host: str,
                      password: str) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "slackwebhook", "host": host, "password": password}))


def test_slack_receives_escaped_text_through_the_slack_provider(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slack = WebhookCatcher()
    slack.start()
    _slack_connection(monkeypatch, "delivery_slack_escape", f"http://127.0.0.1:{slack.port}",
                      f"/services/T000/B000/{SECRET}")
    try:
        SlackChannel("slack", "delivery_slack_escape").send(
            Message("s", "[FIRING] cluster prod, group <!channel>: STOPPED.\na & b <c>"))
    finally:
        slack.stop()
    assert slack.texts == ["[FIRING] cluster prod, group &lt;!channel&gt;: STOPPED.\n"
                           "a &amp; b &lt;c&gt;"]


def _leaks(secret: str, error: str, caplog: pytest.LogCaptureFixture,
           capfd: pytest.CaptureFixture[str]) -> list[str]:
    out, err = capfd.readouterr()
    records = [f"{r.name}: {r.getMessage()}" for r in caplog.records]
    return [t for t in (error, out, err, *records) if secret.lower() in t.lower()]


@pytest.mark.parametrize("case", ["refused", "answers 404", "space in the path"])
def test_a_slack_failure_says_nothing_of_the_secret_path(
        case: str, endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)  # slack_sdk writes the URL in its debug lines
    host, path = {
        "refused": (f"http://127.0.0.1:{_closed_port()}", f"/services/T000/B000/{SECRET}"),
        "answers 404": (endpoint.base, f"/status/404/T000/B000/{SECRET}"),
        "space in the path": (endpoint.base, f"/services/T000/B000/{SECRET} x"),
    }[case]
    _slack_connection(monkeypatch, "delivery_slack_fails", host, path)
    with pytest.raises(ChannelError) as raised:
        SlackChannel("slack", "delivery_slack_fails").send(Message("s", "text"))
    error = str(raised.value)
    assert error.startswith("channel slack: Slack webhook failed: ")
    assert any(r.name == "groupscope.serve.slack" for r in caplog.records)  # it did log
    assert _leaks(SECRET, error, caplog, capfd) == []
    assert _leaks("T000/B000", error, caplog, capfd) == []


@pytest.mark.parametrize("case", ["refused", "answers 500", "redirected", "bad location"])
def test_a_webhook_failure_says_nothing_of_the_secret_path(
        case: str, endpoint: Endpoint, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    url = {"refused": f"http://127.0.0.1:{_closed_port()}/hooks/{SECRET}",
           "answers 500": f"{endpoint.base}/status/500/{SECRET}",
           "redirected": f"{endpoint.base}/redirect/302/1?token={SECRET}",
           "bad location": f"{endpoint.base}/elsewhere"}[case]
    with pytest.raises(ChannelError) as raised:
        WebhookChannel("hook", url).send(MESSAGE)
    error = str(raised.value)
    logging.getLogger("groupscope.test").warning("delivery failed: %s", error)  # as the caller
    assert _leaks(SECRET, error, caplog, capfd) == []
    assert str(endpoint.port) not in error


def test_a_self_signed_slack_stand_in_and_webhook_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # the refused handshakes

    cert, key = self_signed(tmp_path)
    server = Server(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"https://localhost:{server.server_port}"
    try:
        _slack_connection(monkeypatch, "delivery_slack_tls", base, f"/services/T000/{SECRET}")
        with pytest.raises(ChannelError) as slack_error:
            SlackChannel("slack", "delivery_slack_tls").send(Message("s", "text"))
        with pytest.raises(ChannelError) as hook_error:
            WebhookChannel("hook", f"{base}/hooks/{SECRET}").send(MESSAGE)
        assert received == []
        assert "CERTIFICATE_VERIFY_FAILED" in str(slack_error.value)
        assert "TLS certificate verification failed" in str(hook_error.value)
        assert SECRET not in str(slack_error.value) + str(hook_error.value)
    finally:
        server.shutdown()
        server.server_close()


# --- redirects to another origin ---------------------------------------------------------


@pytest.mark.parametrize("where", ["another port", "another host name"])
def test_a_307_to_another_origin_is_refused_and_nothing_is_delivered(
        endpoint: Endpoint, where: str) -> None:
    elsewhere = WebhookCatcher()
    elsewhere.start()
    try:
        host, port = {"another port": ("127.0.0.1", elsewhere.port),
                      "another host name": ("localhost", endpoint.port)}[where]
        with pytest.raises(ChannelError) as raised:
            WebhookChannel("hook", f"{endpoint.base}/away/{host}/{port}").send(MESSAGE)
    finally:
        elsewhere.stop()
    assert str(raised.value) == ("channel hook: webhook answered HTTP 307 (a redirect to "
                                 "another host); give the channel the final URL")
    assert elsewhere.bodies == [] and endpoint.at_target() == []
    assert len(endpoint.seen) == 1


# --- a deadline for each channel's send --------------------------------------------------


@dataclass
class SlowServer:
    """A TCP server on loopback that accepts every connection and then, as ``mode`` says,
    never says a word, or sends ``greeting`` one byte every 2 s. ``accepted`` counts the
    connections (a client that retries opens more)."""

    mode: str
    greeting: bytes = b""
    tls: ssl.SSLContext | None = None
    accepted: int = 0
    listener: socket.socket = field(default_factory=socket.socket)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> int:
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()
        return int(self.listener.getsockname()[1])

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                conn.recv(65536)  # the request
            with conn:
                if self.mode == "silent":
                    self.stop.wait(300)
                for byte in self.greeting:
                    conn.sendall(bytes([byte]))
                    if self.stop.wait(2):
                        return
        except OSError:
            pass

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def _smtp_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, port: int) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "smtp", "host": "127.0.0.1", "port": port,
         "extra": {"disable_ssl": True, "disable_tls": True, "from_email": "g@localhost"}}))


@pytest.mark.parametrize("mode", ["silent", "drip"])
def test_an_smtp_server_that_never_greets_fails_within_the_channels_deadline(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The provider's hook would wait 30 s per try and retry 5 times (about 180 s); a greeting
    # sent a byte every 2 s resets every socket timeout, so it would never end.
    server = SlowServer(mode, greeting=b"220 mail.example ESMTP at your service\r\n" * 10)
    _smtp_connection(monkeypatch, "delivery_smtp_slow", server.start())
    channel = EmailChannel("email", "delivery_smtp_slow", ("oncall@example.com",),
                           timeout_s=4)
    try:
        started = time.monotonic()
        with pytest.raises(ChannelError) as raised:
            channel.send(Message("s", "text"))
        took = time.monotonic() - started
    finally:
        server.close()
    assert str(raised.value) == "channel email: the SMTP server did not answer within 4 s"
    assert took < 4 + 10, took  # the deadline, and a generous margin
    assert server.accepted == 1  # no retry once the time is up


def test_a_silent_slack_endpoint_fails_within_the_channels_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Without a timeout the Slack client waits 30 s per try, and retries a connection error.
    server = SlowServer("silent")
    port = server.start()
    _slack_connection(monkeypatch, "delivery_slack_silent", f"http://127.0.0.1:{port}",
                      f"/services/T000/B000/{SECRET}")
    try:
        started = time.monotonic()
        with pytest.raises(ChannelError) as raised:
            SlackChannel("slack", "delivery_slack_silent", timeout_s=3).send(Message("s", "x"))
        took = time.monotonic() - started
    finally:
        server.close()
    assert str(raised.value) == "channel slack: Slack webhook did not answer within 3 s"
    assert took < 3 + 10, took
    assert server.accepted == 1


def test_a_slack_endpoint_that_drips_over_https_is_cut_at_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each byte comes within the client's socket timeout: only the deadline cuts the answer.
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server = SlowServer("drip", greeting=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        tls=context)
    port = server.start()
    _slack_connection(monkeypatch, "delivery_slack_drip", f"https://localhost:{port}",
                      f"/services/T000/B000/{SECRET}")
    try:
        started = time.monotonic()
        with pytest.raises(ChannelError) as raised:
            SlackChannel("slack", "delivery_slack_drip", timeout_s=5).send(Message("s", "x"))
        took = time.monotonic() - started
    finally:
        server.close()
    assert str(raised.value) == "channel slack: Slack webhook did not answer within 5 s"
    assert took < 5 + 10, took


def test_a_channels_timeout_comes_from_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = load_rules_text(
        "channels:\n"
        "  - {name: hook, kind: webhook, connection: delivery_t_hook, timeout: 4s}\n"
        "  - {name: slack, kind: slack, connection: delivery_t_slack}\n"
        "  - {name: email, kind: email, connection: delivery_t_smtp, to: [a@b.c],"
        " timeout: 25s}\n", "rules.yaml")
    monkeypatch.setenv("AIRFLOW_CONN_DELIVERY_T_HOOK",
                       json.dumps({"conn_type": "http", "password": "http://127.0.0.1:9/x"}))
    _slack_connection(monkeypatch, "delivery_t_slack", "http://127.0.0.1:9", "/services/T/B/C")
    _smtp_connection(monkeypatch, "delivery_t_smtp", 9)
    assert build_channels(rules).channels == {
        "hook": WebhookChannel("hook", "http://127.0.0.1:9/x", 4.0),
        "slack": SlackChannel("slack", "delivery_t_slack", 10.0),
        "email": EmailChannel("email", "delivery_t_smtp", ("a@b.c",), "g@localhost", 25.0)}


# --- hostile names, as each channel receives them ----------------------------------------

FORGED = "[RESOLVED] cluster prod, group payments: STOPPED is over"
HOSTILE = f"payments\n{FORGED}\u202eevil"


def _hostile_message() -> Message:
    """A group whose id forges a line and reverses the text, with a member whose client id
    is 10,000 characters long."""
    at = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    incident = Incident(
        incident_id="i-1", fingerprint="f-1", rule="group_err", severity="critical",
        cluster="prod", group_id=HOSTILE, topic="", state="firing", started_at=at,
        last_seen_at=at, evaluated_at=at, value=3, threshold=0,
        details={"condition": "group_status_err", "stop_partitions": 3, "partitions": 3,
                 "member_count": 1, "state": "Stable", "worst_topic": HOSTILE,
                 "worst_partition": 0, "worst_reason": "no commit",
                 "causes": [{"title": "member crashed",
                             "evidence": f"member m-1 (client {'c' * 10_000}, host "
                                         f"{HOSTILE}) left without a LeaveGroup"}]},
        firing_at=at)
    return single(Undelivered(incident, "firing", "hook", 0), "http://grafana")


def _assert_not_forged(text: str) -> None:
    assert not any(line.startswith(FORGED) for line in text.splitlines()), text
    assert "\u202e" not in text and "\\u202e" in text
    assert "c" * 1001 not in text  # the client id is cut


def test_a_hostile_name_reaches_the_webhook_escaped_in_its_text_and_raw_in_its_fields() -> None:
    catcher = WebhookCatcher()
    catcher.start()
    try:
        WebhookChannel("hook", catcher.url).send(_hostile_message())
    finally:
        catcher.stop()
    [body] = catcher.bodies
    _assert_not_forged(body["text"])
    assert "\n" not in body["subject"] and "\u202e" not in body["subject"]
    assert body["group"] == HOSTILE  # the structured field: raw, JSON-escaped


def test_a_hostile_name_reaches_slack_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    slack = WebhookCatcher()
    slack.start()
    _slack_connection(monkeypatch, "delivery_slack_hostile", f"http://127.0.0.1:{slack.port}",
                      f"/services/T000/B000/{SECRET}")
    try:
        SlackChannel("slack", "delivery_slack_hostile").send(_hostile_message())
    finally:
        slack.stop()
    [text] = slack.texts
    _assert_not_forged(text)


def test_a_hostile_name_reaches_the_mailbox_escaped(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    mail = MailCatcher(tmp_path / "mail")
    mail.start()
    monkeypatch.setenv(*mail.connection("delivery_smtp_hostile", "oncall@example.com"))
    try:
        EmailChannel("email", "delivery_smtp_hostile", ("oncall@example.com",)).send(
            _hostile_message())
    finally:
        mail.stop()
    [received] = mail.mails()
    subject = str(received["Subject"])
    assert "\n" not in subject and "\u202e" not in subject and "payments\\n[RESOLVED]" in subject
    assert len(subject) <= SUBJECT_LIMIT
    body = received.get_body(preferencelist=("html",))
    assert body is not None
    _assert_not_forged(html.unescape(body.get_content()))


@pytest.mark.parametrize("kind", ["webhook", "slack"])
def test_a_text_longer_than_slack_accepts_is_cut_to_its_limit(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    catcher = WebhookCatcher()
    catcher.start()
    _slack_connection(monkeypatch, "delivery_slack_long", f"http://127.0.0.1:{catcher.port}",
                      f"/services/T000/B000/{SECRET}")
    channel: WebhookChannel | SlackChannel = (
        WebhookChannel("hook", catcher.url) if kind == "webhook"
        else SlackChannel("slack", "delivery_slack_long"))
    try:
        channel.send(Message("s", "\n".join(f"line {n} <&>" for n in range(20_000))))
    finally:
        catcher.stop()
    [text] = catcher.texts
    assert len(text) <= SLACK_TEXT_LIMIT and text.startswith("line 0 &lt;&amp;&gt;\n")
    assert text.endswith("(cut: the message is longer than 40,000 characters)")


def test_the_webhook_url_setting_stands_in_for_the_built_in_connection_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A dead man's switch whose connection is missing must not post "alive" (or incidents) to
    # the incident webhook that GROUPSCOPE_ALERT_WEBHOOK_URL names.
    for conn_id in ("GROUPSCOPE_ALERTS", "GROUPSCOPE_DEADMAN"):
        monkeypatch.delenv(f"AIRFLOW_CONN_{conn_id}", raising=False)
    rules = load_rules_text(
        "channels:\n  - {name: webhook, kind: webhook, connection: groupscope_alerts}\n"
        "  - {name: deadman, kind: webhook, connection: groupscope_deadman}\n", "rules.yaml")
    built = build_channels(rules, "https://hooks.example/incidents")
    assert set(built.channels) == {"webhook"}
    assert built.skipped == {"deadman": "no connection groupscope_deadman with a URL"}
