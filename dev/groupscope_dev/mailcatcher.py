"""A local SMTP server (aiosmtpd) that writes every mail it receives to a folder: the e-mail
alert channel of ``./run`` and of the tests, so alert e-mails can be read without a mail
server. Each mail lands twice: ``NNNN.eml`` as received, and ``NNNN.txt`` as a person reads it
(the headers that matter and the text body)."""

from __future__ import annotations

import email
import email.policy
import html
import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupscope_dev.airflow import connection_env
from groupscope_dev.ports import free_ports


@dataclass
class MailCatcher:
    folder: Path
    port: int = 0
    _controller: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        from aiosmtpd.controller import Controller

        # aiosmtpd logs every SMTP exchange at INFO: the mails themselves are the record here.
        logging.getLogger("mail.log").setLevel(logging.WARNING)
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.port:
            [self.port] = free_ports(1)
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def connection(self, conn_id: str = "groupscope_smtp",
                   to: str = "oncall@groupscope.local") -> tuple[str, str]:
        """The Airflow ``smtp`` connection (as its environment variable) that sends here."""
        return connection_env(conn_id, "smtp", host="127.0.0.1", port=self.port,
                              extra={"disable_ssl": True, "disable_tls": True,
                                     "from_email": "groupscope@localhost", "to": to})

    def mails(self) -> list[email.message.EmailMessage]:
        return [email.message_from_bytes(p.read_bytes(), policy=email.policy.default)
                for p in sorted(self.folder.glob("*.eml"))]

    def write(self, content: bytes) -> Path:
        with self._lock:
            number = len(list(self.folder.glob("*.eml"))) + 1
            path = self.folder / f"{number:04d}.eml"
            path.write_bytes(content)
        path.with_suffix(".txt").write_text(readable(content), encoding="utf-8")
        return path


class _Handler:
    def __init__(self, catcher: MailCatcher) -> None:
        self.catcher = catcher

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.catcher.write(envelope.original_content or envelope.content)
        return "250 Message accepted for delivery"


def readable(content: bytes) -> str:
    """A mail as a person reads it: From, To, Date, Subject, then the text (an HTML body's
    text with the markup taken out)."""
    message = email.message_from_bytes(content, policy=email.policy.default)
    body = message.get_body(preferencelist=("plain", "html"))
    text = body.get_content() if body is not None else ""
    if body is not None and body.get_content_type() == "text/html":
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    headers = "".join(f"{name}: {message[name]}\n" for name in ("From", "To", "Date", "Subject")
                      if message[name])
    return f"{headers}\n{text.strip()}\n"
