"""Channel safety without Airflow: a webhook URL (a secret, and each part of it) never shows in
a channel's error, Slack's markup characters are escaped, and TLS certificates are verified
(a real HTTPS server on loopback with a throwaway self-signed certificate); a webhook send is
bounded as a whole (real receivers on loopback sockets that answer a byte at a time, or a
body of megabytes); and a hostile name (a newline, a bidi override, 10,000 characters) forges
no line of any message text, nor makes it longer than its bound."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from selfsigned import self_signed

from groupscope.serve.alerting.channels import (
    SLACK_TEXT_LIMIT,
    ChannelError,
    Message,
    first_line,
    post_json,
    scrub,
    slack_escape,
    slack_text,
)
from groupscope.serve.alerting.incidents import Incident, Undelivered
from groupscope.serve.alerting.notify import (
    grouped,
    heartbeat,
    incident_fields,
    messages,
    single,
    warehouse_message,
)
from groupscope.serve.alerting.rules import RulesError, load_rules_text
from groupscope.serve.alerting.safe_text import NAME_LIMIT, TEXT_LIMIT, shown

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


# --- messages that cannot be forged ------------------------------------------------------

# A name as hostile as Kafka allows: a newline that would start a forged line, a bidi override
# and isolate that would reorder the text.
FORGED = "[RESOLVED] cluster prod, group payments: STOPPED is over"
HOSTILE = f"payments\n{FORGED}\u202eevil\u2066x\r\x00"
LONG_CLIENT = "c" * 10_000
CONDITIONS = ["group_status_err", "group_empty_lag_growing", "partition_rewind",
              "lag_seconds", "lag_records", "lag_beyond_retention", "rebalances_per_hour",
              "rebalance_stuck", "loss_forecast_s", "collector_stale", "snapshot_incomplete",
              "quality_gate_failed", "analytics_stale", "task_failed", "channel_failing",
              "rules_invalid"]
T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _hostile_details(condition: str) -> dict[str, Any]:
    """Every string a text of ``condition`` may quote, hostile."""
    return {
        "condition": condition, "worst_topic": HOSTILE, "worst_reason": HOSTILE,
        "loss_topic": HOSTILE, "loss_basis": "retention_ms", "state": HOSTILE,
        "dag_id": HOSTILE, "task_id": HOSTILE, "run_id": HOSTILE,
        "reason": f"{HOSTILE}\nTraceback: {HOSTILE}", "channel": HOSTILE,
        "last_error": HOSTILE, "error": HOSTILE, "unknown_why": HOSTILE,
        "status": HOSTILE, "member_count": 0, "stop_partitions": 1, "partitions": 3,
        "last_errors": [{"stage": HOSTILE, "code": HOSTILE, "count": 2, "example": HOSTILE}],
        "failed_suites": [{"suite": HOSTILE, "subject": HOSTILE, "failed": 1}],
        "causes": [{"title": HOSTILE, "evidence": f"member m-1 (client {LONG_CLIENT}{HOSTILE}, "
                                                  f"host {HOSTILE}) left"}],
        "now": {"status": HOSTILE, "lag": 5, "member_count": 0},
    }


def _owed(condition: str, notification: str, group: str = HOSTILE,
          cluster: str = HOSTILE) -> Undelivered:
    incident = Incident(
        incident_id=f"id-{condition}-{len(group)}", fingerprint=f"fp-{condition}-{len(group)}",
        rule=condition.replace("_", "-"), severity="critical", cluster=cluster,
        group_id=group, topic=HOSTILE, state="firing", started_at=T0, last_seen_at=T0,
        evaluated_at=T0, value=5.0, threshold=1.0, details=_hostile_details(condition),
        firing_at=T0, resolved_at=T0 + timedelta(minutes=2))
    return Undelivered(incident, notification, "webhook", 0)


def _assert_cannot_be_forged(message: Message) -> None:
    for text in (message.text, message.subject):
        lines = text.splitlines()
        assert not any(line.startswith(FORGED) for line in lines), text
        for control in ("\u202e", "\u2066", "\r", "\x00"):
            assert control not in text
        assert "c" * (TEXT_LIMIT + 1) not in text  # the 10,000-character client id is cut
    assert "\n" not in message.subject
    assert "\\u202e" in message.text + message.subject  # shown, not obeyed


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("notification", ["firing", "resolved", "unknown"])
def test_a_hostile_name_forges_no_line_in_any_message(condition: str,
                                                      notification: str) -> None:
    one = _owed(condition, notification)
    other = _owed(condition, notification, group=HOSTILE + "2")
    for message in (single(one, "http://grafana"), grouped([one, other], "http://grafana"),
                    *(m for m, _ in messages([one, other], "http://grafana"))):
        _assert_cannot_be_forged(message)
    # the structured fields keep the names raw (JSON escapes them)
    fields = incident_fields(one.incident, notification, "http://grafana")
    assert fields["group"] == HOSTILE and fields["cluster"] == HOSTILE


def test_a_long_group_id_is_cut_to_a_name_s_length_in_the_text() -> None:
    message = single(_owed("group_status_err", "firing", group="g" * 10_000), "http://g")
    [first, *_] = message.text.splitlines()
    assert "g" * NAME_LIMIT not in first and "g" * (NAME_LIMIT - 1) + "\u2026" in first
    assert len(message.subject) < 2 * NAME_LIMIT + 200


def test_the_heartbeat_and_the_warehouse_notice_escape_the_cluster() -> None:
    beat = heartbeat(HOSTILE, T0, timedelta(minutes=5), [], "http://g")
    notice = warehouse_message(HOSTILE, f"ReadOnlySqlTransaction: {HOSTILE}", T0, T0)
    for message in (beat, notice):
        assert not any(line.startswith(FORGED) for line in message.text.splitlines())
        assert "\u202e" not in message.text + message.subject and "\n" not in message.subject


@pytest.mark.parametrize(("name", "text"), [
    ("a\nb", "a\\nb"), ("x\u202ey", "x\\u202ey"), ("\u200f\u061c\u2069", "\\u200f\\u061c\\u2069"),
    ("tab\there", "tab\\there"), ("nul\x00", "nul\\x00"), ("line\u2028sep", "line\\u2028sep"),
    ("caf\u00e9 \u00fc\u00df \u65e5\u672c", "caf\u00e9 \u00fc\u00df \u65e5\u672c"),  # printable
])
def test_shown_escapes_what_is_not_printable(name: str, text: str) -> None:
    assert shown(name) == text


def test_the_slack_text_is_cut_to_slacks_limit_without_cutting_an_entity() -> None:
    text = "\n".join(["line <&> " * 200] * 100)  # about 180,000 characters escaped
    cut_one = slack_text(text)
    assert len(cut_one) <= SLACK_TEXT_LIMIT and cut_one.endswith("characters)")
    one_long_line = slack_text("&" * 50_000)
    assert len(one_long_line) <= SLACK_TEXT_LIMIT
    assert one_long_line.split("\n")[0].endswith("&amp;")  # never "&am"


# --- a deadline for the whole send -------------------------------------------------------


class _Receiver:
    """A webhook receiver on a real loopback socket that reads the POST, then answers with
    ``answer`` in pieces of ``piece`` bytes every ``every`` seconds, and after ``hold`` bytes
    holds the connection without a word; ``closed`` is set when the client hung up."""

    def __init__(self, answer: bytes, piece: int = 1, every: float = 0.0,
                 hold: int | None = None) -> None:
        self.answer, self.piece, self.every, self.hold = answer, piece, every, hold
        self.closed = threading.Event()
        self.stop = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hooks/SECRETPART"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            answer = self.answer if self.hold is None else self.answer[:self.hold]
            try:
                for start in range(0, len(answer), self.piece):
                    conn.sendall(answer[start:start + self.piece])
                    if self.stop.wait(self.every):
                        return
                conn.settimeout(30)  # holds it, until the client hangs up (or 30 s)
                if conn.recv(1) == b"":
                    self.closed.set()
            except OSError:
                self.closed.set()

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def receivers() -> Iterator[list[_Receiver]]:
    started: list[_Receiver] = []
    yield started
    for receiver in started:
        receiver.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


def test_a_receiver_that_answers_a_byte_every_2_s_is_cut_at_the_deadline(
        receivers: list[_Receiver]) -> None:
    # Each byte comes well within a socket timeout of 3 s: only a deadline for the whole send
    # cuts it (the answer would take about 2 minutes).
    receiver = _Receiver(OK, piece=1, every=2.0)
    receivers.append(receiver)
    started = time.monotonic()
    with pytest.raises(ChannelError) as raised:
        post_json("hook", receiver.url, {"text": "x"}, timeout_s=3)
    took = time.monotonic() - started
    assert str(raised.value) == "channel hook: webhook did not answer within 3 s"
    assert took < 3 + 5, took  # the deadline, and a generous margin
    assert receiver.closed.wait(10)  # the connection was cut, not left behind


def test_a_receiver_that_answers_in_time_is_a_success(receivers: list[_Receiver]) -> None:
    receiver = _Receiver(OK, piece=8, every=0.05)  # about half a second in all
    receivers.append(receiver)
    post_json("hook", receiver.url, {"text": "x"}, timeout_s=10)


def test_an_answer_of_several_mib_is_not_read_whole(receivers: list[_Receiver]) -> None:
    # 8 MiB announced, 1 MiB sent, then nothing: reading it whole would wait for the rest
    # until the deadline; the status and the first 64 KiB are all a send reads.
    size = 8 * 2**20
    answer = (f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode()
              + b"x" * size)
    receiver = _Receiver(answer, piece=2**20, hold=len(answer) - 7 * 2**20)
    receivers.append(receiver)
    post_json("hook", receiver.url, {"text": "x"}, timeout_s=10)
    assert receiver.closed.wait(10)


@pytest.mark.parametrize(("timeout", "error"), [
    ("0s", "must be more than 0s and at most 30s"), ("31s", "must be more than 0s and at most 30s"),
    ("soon", "not a duration"),
])
def test_a_channels_timeout_is_a_duration_within_the_alert_tasks_time(timeout: str,
                                                                      error: str) -> None:
    text = (f"channels:\n  - {{name: hook, kind: webhook, connection: c, timeout: {timeout}}}\n")
    with pytest.raises(RulesError) as raised:
        load_rules_text(text, "rules.yaml")
    assert "channel 'hook': field 'timeout'" in str(raised.value) and error in str(raised.value)
    spec = load_rules_text(text.replace(timeout, "25s"), "rules.yaml").channels[0]
    assert spec.timeout == timedelta(seconds=25)
