"""Channel delivery against real HTTP servers on loopback: redirects (a 307 or 308 keeps the
POST and its body; a 301, 302 or 303, which urllib would follow as a GET without the body, is
refused and nothing is delivered), TLS verification through the Slack provider, Slack escaping
through the real ``SlackChannel`` and Slack provider (``SlackWebhookNotifier``) against a local
stand-in for Slack, and failures whose URL has a secret path: the secret is in neither the
error nor any log record nor anything printed."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Airflow configures logging when it is first imported; imported here, before a test's caplog
# puts its handler on the root logger, it does not take that handler away.
import airflow.providers.slack.notifications.slack_webhook  # noqa: F401
import pytest
from selfsigned import self_signed

from groupscope.serve.alerting.airflow_channels import SlackChannel
from groupscope.serve.alerting.channels import ChannelError, Message, WebhookChannel, post_json
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
    ``/elsewhere`` answers 307 to a URL with the secret as its port; ``/status/CODE`` answers
    CODE with the request's path in the body."""

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
