"""Channel safety without Airflow: a webhook URL (a secret, and each part of it) never shows in
a channel's error, Slack's markup characters are escaped, and TLS certificates are verified
(a real HTTPS server on loopback with a throwaway self-signed certificate)."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from selfsigned import self_signed

from groupscope.serve.alerting.channels import (
    ChannelError,
    first_line,
    post_json,
    scrub,
    slack_escape,
)

URL = ("https://alice:pa55word@hooks.example.com:8443/services/T0AAAA/B0BBBB/XyZsecret42"
       "?token=tok3n99#frag")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("text", [
    f"POST to {URL} failed",
    "host hooks.example.com:8443 refused",
    "host HOOKS.EXAMPLE.COM refused",  # hosts are case-insensitive
    "path /services/T0AAAA/B0BBBB/XyZsecret42 not found",
    "segment 'XyZsecret42'",
    "query token=tok3n99",
    "value tok3n99",
    "password pa55word",
    "encoded %2Fservices%2FT0AAAA",
])
def test_scrub_takes_out_the_url_and_each_of_its_parts(text: str) -> None:
    scrubbed = scrub(text, [URL])
    for part in ("XyZsecret42", "T0AAAA", "B0BBBB", "tok3n99", "pa55word", "hooks.example.com",
                 "example.com:8443", "/services/"):
        assert part.lower() not in scrubbed.lower(), scrubbed
    assert "<redacted>" in scrubbed


def test_scrub_finds_a_path_as_repr_quotes_it_with_a_control_character() -> None:
    secret = "http://127.0.0.1:1/hooks/T0\x01SECRETPART"
    quoted = f"URL can't contain control characters. {'/hooks/T0' + chr(1) + 'SECRETPART'!r}"
    assert "\\x01SECRETPART" in quoted  # as http.client writes it
    assert "SECRETPART" not in scrub(quoted, [secret])


@pytest.mark.parametrize(("secret", "text"), [
    ("http://127.0.0.1:1/hooks/S%C3%A9CRETPART", "no hook 'S\u00e9CRETPART'"),  # decoded
    ("http://127.0.0.1:1/hooks/S\u00e9CRETPART", "no hook 'S%C3%A9CRETPART'"),  # encoded
])
def test_scrub_finds_a_part_percent_encoded_or_decoded(secret: str, text: str) -> None:
    assert scrub(text, [secret]) == "no hook '<redacted>'"


def test_scrub_takes_out_any_url_and_keeps_the_rest() -> None:
    text = "see https://api.slack.com/messaging/webhooks#errors: [Errno 111] Connection refused"
    assert scrub(text, []) == "see <url> [Errno 111] Connection refused"
    # short pieces ("/", a one-digit port) are no secret and stay
    assert scrub("HTTP 500 at /", ["http://127.0.0.1:1/"]) == "HTTP 500 at /"


def test_scrub_takes_out_a_slack_connections_password_path_and_host() -> None:
    text = ("URL can't contain control characters. '/services/T000/B000/sec ret' "
            "(found at least ' ') on hooks.internal.example")
    scrubbed = scrub(text, ["/services/T000/B000/sec ret", "hooks.internal.example"])
    assert "sec ret" not in scrubbed and "T000" not in scrubbed
    assert "hooks.internal" not in scrubbed and scrubbed.startswith("URL can't contain")


def test_first_line_scrubs_before_it_cuts() -> None:
    # cut first, the secret would be cut in two and a half of it would stay
    line = first_line(ValueError("x" * 295 + "XyZsecret42 and more\nsecond line"), [URL])
    assert len(line) <= 300 and "XyZs" not in line and "second" not in line


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:{port}/hooks/T0 SECRETPART",
    "http://127.0.0.1:{port}/hooks/T0\x01SECRETPART",
    "http://127.0.0.1:{port}/hooks/T0\nSECRETPART",
    "http://127.0.0.1:{port}/hooks/T0\tSECRETPART",
    "http://127.0.0.1:{port}/hooks/T0\x7fSECRETPART",
])
def test_a_url_with_a_space_or_a_control_character_is_malformed_and_not_quoted(url: str) -> None:
    with pytest.raises(ChannelError) as raised:
        post_json("hook", url.format(port=_closed_port()), {"text": "x"}, timeout_s=5)
    text = str(raised.value)
    assert text == ("channel hook: the webhook URL is malformed (it contains a space or a "
                    "control character)")


@pytest.mark.parametrize(("url", "secrets"), [
    # http.client: InvalidURL("nonnumeric port: 'SECRETPORT'")
    ("http://127.0.0.1:SECRETPORT/hooks/T0/SECRETPART", ["SECRETPORT", "SECRETPART"]),
    # urllib.parse: ValueError("Invalid IPv6 URL")
    ("http://[::1/hooks/SECRETPART", ["SECRETPART", "hooks"]),
    # the IDNA codec: UnicodeError
    ("http://" + "\u00e9" * 70 + ".example/hooks/SECRETPART", ["SECRETPART", "\u00e9\u00e9"]),
    # a refused connection, with the password in the URL
    ("http://alice:SECRETPW@127.0.0.1:{port}/hooks/SECRETPART", ["SECRETPW", "SECRETPART"]),
])
def test_a_failed_post_names_no_part_of_the_url(url: str, secrets: list[str]) -> None:
    url = url.replace("{port}", str(_closed_port()))
    with pytest.raises(ChannelError) as raised:
        post_json("hook", url, {"text": "x"}, timeout_s=5)
    text = str(raised.value)
    assert text.startswith("channel hook: webhook post failed: "), text
    for secret in (*secrets, url, "127.0.0.1"):
        assert secret not in text, text


def test_a_server_that_does_not_speak_http_is_a_channel_error() -> None:
    # http.client raises BadStatusLine, an HTTPException and not an OSError
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(ChannelError) as raised:
            post_json("hook", f"http://127.0.0.1:{port}/hooks/SECRETPART", {}, timeout_s=5)
    assert "BadStatusLine" in str(raised.value) and "SECRETPART" not in str(raised.value)


@pytest.mark.parametrize(("text", "escaped"), [
    ("<!channel>", "&lt;!channel&gt;"),
    ("a & b <c>", "a &amp; b &lt;c&gt;"),
    ("&lt; stays text", "&amp;lt; stays text"),  # plain text: an entity is escaped again
    ("group <@U123|x> and <https://evil|click>",
     "group &lt;@U123|x&gt; and &lt;https://evil|click&gt;"),
])
def test_slack_escaping(text: str, escaped: str) -> None:
    assert slack_escape(text) == escaped


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, Path, list[dict[str, Any]]]]:
    cert, key = self_signed(tmp_path)
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    class Server(HTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # the refused handshakes of the test

    server = Server(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_port}/hooks/SECRETPART", cert, received
    server.shutdown()
    server.server_close()


def test_a_self_signed_https_server_is_refused(
        https_server: tuple[str, Path, list[dict[str, Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, cert, received = https_server
    with pytest.raises(ChannelError) as raised:
        post_json("hook", url, {"text": "x"}, timeout_s=5)
    text = str(raised.value)
    assert "TLS certificate verification failed" in text and "SECRETPART" not in text, text
    assert received == []
    # the same server, once its certificate is trusted: the refusal was the verification's
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    post_json("hook", url, {"text": "x"}, timeout_s=5)
    assert received == [{"text": "x"}]
