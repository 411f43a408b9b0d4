"""A total time for one send of an alert channel: connect, TLS handshake, write, every read,
redirects and a provider's own retries, all within ``seconds``.

A socket timeout does not bound a send: it bounds each wait, and a receiver that answers one
byte every few seconds resets it on every byte, so it holds the send for as long as it likes
(a webhook send took 6.1 s against a timeout of 1 s). Here every socket the send opens is
given to ``Deadline.watch``: its timeout becomes the time left, and when the time is up a
timer thread shuts it down, which ends a read or a write blocked on it at once. A socket opened
after that is refused (``DeadlinePassed``), so a provider that retries fails at once too.

The send hands its sockets over where it opens them: ``Deadline.connect`` in place of
``socket.create_connection``, and ``Deadline.tls`` for an ``ssl.SSLContext``, whose sockets
are watched before their handshake. A name lookup (DNS) is not a socket and is not cut: the
system resolver's own timeouts bound it.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from types import TracebackType
from typing import Any


class DeadlinePassed(TimeoutError):
    """The send's time is up: nothing more is opened."""


class Deadline:
    """Use as a context manager around one send; ``passed`` says afterwards whether the send
    was cut (its error, whatever it is, is then the deadline's)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._ends = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._cut = False
        self._timer = threading.Timer(seconds, self._cut_all)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._timer.cancel()
        with self._lock:
            self._sockets.clear()

    def left(self) -> float:
        return max(0.0, self._ends - time.monotonic())

    @property
    def passed(self) -> bool:
        return self._cut or self.left() <= 0

    def watch(self, sock: socket.socket) -> socket.socket:
        """``sock``, its timeout the time left, shut down when the time is up."""
        with self._lock:
            if self.passed:
                raise DeadlinePassed(f"the send's {self.seconds:g} s are up")
            sock.settimeout(self.left())
            self._sockets.append(sock)
        return sock

    def connect(self, address: tuple[str, int], timeout: Any = None,
                source_address: Any = None) -> socket.socket:
        """``socket.create_connection`` within the time left (``timeout`` is ignored: the
        deadline is the timeout), the socket watched."""
        if self.passed:
            raise DeadlinePassed(f"the send's {self.seconds:g} s are up")
        sock = socket.create_connection(address, self.left(), source_address)
        try:
            return self.watch(sock)
        except BaseException:
            sock.close()
            raise

    def tls(self, context: ssl.SSLContext) -> ssl.SSLContext:
        """``context``, its sockets watched from before their handshake (``wrap_socket``
        detaches the plain socket and shakes hands before it returns)."""
        deadline = self

        class WatchedSSLSocket(ssl.SSLSocket):
            def do_handshake(self, block: bool = False) -> None:
                deadline.watch(self)
                super().do_handshake(block)

        context.sslsocket_class = WatchedSSLSocket
        return context

    def _cut_all(self) -> None:
        with self._lock:
            self._cut = True
            for sock in self._sockets:
                # OSError: closed already, or detached (a plain socket now wrapped in TLS).
                with contextlib.suppress(OSError):
                    # socket.socket's own shutdown, not SSLSocket's: it ends the TLS socket's
                    # blocked read at the file descriptor, without touching its TLS state.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
