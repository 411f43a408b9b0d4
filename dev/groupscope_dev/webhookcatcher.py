"""A local HTTP endpoint that keeps every JSON POST it receives: the webhook alert channel of
``./run`` when no webhook URL is given, and the webhook and Slack receivers of the tests. Each
notification is appended to ``webhook.log`` as a person reads it (the time it arrived and the
text) and to ``webhook.jsonl`` as received. It can be stopped and started again on the same
port, to play an endpoint that is down for a while, or answer another status (``answer``) to
play one that refuses (what it refuses is counted in ``refused``, not kept), or drip its
answer one byte every ``drip_every_s`` seconds (``drip``) to play a receiver or a proxy that
stalls mid-response (what it drips to is counted in ``dripped``, not kept). The heartbeat
catcher (``heartbeatcatcher``) is one of these, with its own files and a listener told of each
body kept."""

from __future__ import annotations

import html
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from groupscope_dev.ports import free_ports


class Listener(Protocol):
    def __call__(self, body: dict[str, Any], received: datetime) -> None: ...


class WebhookCatcher:
    def __init__(self, folder: Path | None = None, port: int = 0, *, name: str = "webhook",
                 listener: Listener | None = None) -> None:
        self.folder, self.port = folder, port or free_ports(1)[0]
        # ``name``: the log files' stem and the server thread's name.
        self.name, self.listener = name, listener
        self.bodies: list[dict[str, Any]] = []
        self.answer = 200
        self.refused = 0
        self.dripped = 0
        self._drip_every: float | None = None
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def texts(self) -> list[str]:
        with self._lock:
            return [str(b.get("text", "")) for b in self.bodies]

    def start(self, host: str = "127.0.0.1") -> None:
        """Listens on ``host`` (loopback; all interfaces in a container)."""
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        catcher = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                if catcher._drip_every is not None:
                    catcher._drip(self)
                    return
                if catcher.answer != 200:
                    with catcher._lock:
                        catcher.refused += 1
                    self.send_response(catcher.answer)
                    self.end_headers()
                    return
                catcher.keep(body if isinstance(body, dict) else {"body": body})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass  # the log files are the record

        self._server = ThreadingHTTPServer((host, self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name=f"{self.name}-catcher-{self.port}").start()

    def drip(self, every_s: float | None) -> None:
        """From now on, answer each POST one byte every ``every_s`` seconds (for as long as
        dripping lasts, then close); None: answer normally again."""
        self._drip_every = every_s

    def _drip(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.dripped += 1
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
        answer += b"." * 100000
        try:
            for byte in answer:
                every = self._drip_every
                if every is None or self._stopping.wait(every):
                    break
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
        except OSError:
            pass  # the client gave up: what a stall is for
        handler.close_connection = True

    def stop(self) -> None:
        if self._server is not None:
            self._stopping.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def keep(self, body: dict[str, Any]) -> None:
        received = datetime.now(UTC)
        with self._lock:
            self.bodies.append(body)
            if self.listener is not None:
                self.listener(body, received)
            if self.folder is None:
                return
            with (self.folder / f"{self.name}.jsonl").open("a", encoding="utf-8") as out:
                out.write(json.dumps({"received": received.isoformat(), **body},
                                     ensure_ascii=False) + "\n")
            with (self.folder / f"{self.name}.log").open("a", encoding="utf-8") as out:
                # The text as a person reads it: groupscope escapes it for Slack (&amp; ...).
                shown = html.unescape(str(body.get("text", json.dumps(body, ensure_ascii=False))))
                out.write(f"--- {received:%Y-%m-%d %H:%M:%S}Z {body.get('kind', 'message')}\n"
                          f"{shown}\n\n")
