"""The AdminClient for one cluster, at the I/O edge. librdkafka says *why* a broker could not
be reached (refused connection, failed SASL authentication, TLS handshake) only in its log,
so the log lines are kept here, out of the user's way, to explain a failure in one line."""

from __future__ import annotations

import collections
import itertools
import logging
import re
from typing import Any

from groupscope.contract.cluster import ClusterConfig, ConfigError

_REASON = re.compile(r"^\w+ \[[^\]]*\] \[[^\]]*\]: (?:[^:]+://)?[^ ]+/(?:bootstrap|\d+): (.*?)"
                     r"(?: \(after \d+ms in state \w+.*\))?$")
_AUTH = re.compile(r"SASL|[Aa]uthenticat|SSL|certificate|handshake", re.IGNORECASE)
_ids = itertools.count()


class ClusterUnavailable(RuntimeError):
    """The cluster could not be reached or refused us: nothing can be read from it at all."""


def kafka_message(exc: BaseException) -> str:
    """The text of a KafkaException (its KafkaError's), or of any other exception."""
    error = exc.args[0] if exc.args else exc
    text = getattr(error, "str", None)
    return str(text()) if callable(text) else str(error)


class _Recent(logging.Handler):
    def __init__(self, keep: int) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class AdminConnection:
    def __init__(self, cluster: ClusterConfig, request_timeout_s: float = 30.0,
                 keep_log_lines: int = 50) -> None:
        from confluent_kafka.admin import AdminClient

        self._recent = _Recent(keep_log_lines)
        # One logger per client: librdkafka's lines stay with the connection they explain
        # and never reach the root logger (where a user's handler would print them).
        logger = logging.getLogger(f"groupscope.librdkafka.{cluster.name}.{next(_ids)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        logger.handlers[:] = [self._recent]
        settings: dict[str, Any] = {
            "socket.timeout.ms": int(request_timeout_s * 1000),
            **cluster.client,
            "logger": logger,
        }
        self.admin = AdminClient(settings)

    def diagnosis(self) -> str | None:
        """Why the brokers could not be reached, as librdkafka last said it, or None."""
        self.admin.poll(0)  # delivers the log lines queued by librdkafka's threads
        reasons = [m.group(1) for line in self._recent.lines if (m := _REASON.match(line))]
        if not reasons:
            return None
        auth = [r for r in reasons if _AUTH.search(r)]
        reason = (auth or reasons)[-1]
        return f"authentication failed: {reason}" if auth else reason


def open_admin(cluster: ClusterConfig, timeout_s: float) -> AdminConnection:
    """An admin connection; a property librdkafka refuses is the user's input: ConfigError."""
    try:
        return AdminConnection(cluster, timeout_s)
    except Exception as exc:
        raise ConfigError(f"invalid client configuration: {kafka_message(exc)}") from None


def reachable(cluster: ClusterConfig, timeout_s: float) -> AdminConnection:
    """An admin connection that has reached the cluster, or ClusterUnavailable saying why."""
    connection = open_admin(cluster, timeout_s)
    try:
        connection.admin.list_topics(timeout=timeout_s)
    except Exception as exc:
        reason = connection.diagnosis() or kafka_message(exc)
        raise ClusterUnavailable(f"cluster {cluster.name!r} at {cluster.bootstrap} is "
                                 f"unavailable: {reason}") from None
    return connection
