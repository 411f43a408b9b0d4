"""The AdminClient for one cluster, at the I/O edge. librdkafka says *why* a broker could not
be reached (refused connection, failed SASL authentication, TLS handshake) only in its log,
so the log lines are kept here, out of the user's way, to explain a failure in one line.

A failure of the security settings (wrong password, unknown CA, expired or refused
certificate, host-name mismatch, a mechanism the broker does not offer, plaintext against a
TLS port) retries forever in librdkafka; ``wait_for_metadata`` stops at the first such line
instead of waiting out the timeout, and ``explain`` turns it into what to fix.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from groupscope.contract.cluster import ClusterConfig, ConfigError

_REASON = re.compile(r"^\w+ \[[^\]]*\] \[[^\]]*\]: (?:[^:]+://)?([^ ]+)/(?:bootstrap|\d+): "
                     r"(.*?)(?: \(after \d+ms in state \w+.*\))?$")
_AUTH = re.compile(r"SASL|[Aa]uthenticat|SSL|certificate|handshake", re.IGNORECASE)
_ids = itertools.count()
NO_HOSTNAME_CHECK = "ssl.endpoint.identification.algorithm"
log = logging.getLogger(__name__)


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
        if str(cluster.client.get(NO_HOSTNAME_CHECK, "https")).lower() == "none":
            log.warning("cluster %r: TLS host-name verification is OFF (%s=none): any server "
                        "with a certificate from a trusted CA can pose as the broker",
                        cluster.name, NO_HOSTNAME_CHECK)
        self.client = cluster.client
        self.admin = AdminClient(settings)

    def _reasons(self) -> list[tuple[str, str]]:
        """(broker address, reason) of librdkafka's connection failures, oldest first."""
        self.admin.poll(0)  # delivers the log lines queued by librdkafka's threads
        return [(m.group(1), m.group(2)) for line in self._recent.lines
                if (m := _REASON.match(line))]

    def security_failure(self, reasons: list[tuple[str, str]] | None = None) -> str | None:
        """What to fix, if a connection failed on the security settings (which no retry
        cures), else None. ``reasons``: ``_reasons()``, when the caller has them already."""
        def expired_on() -> datetime | None:
            return _expired_on(self.client, datetime.now(UTC))

        for address, reason in reversed(self._reasons() if reasons is None else reasons):
            explained = explain(reason, self.client,
                                functools.partial(_verify_message, address, self.client),
                                expired_on)
            if explained:
                return explained
        return None

    def diagnosis(self) -> str | None:
        """Why the brokers could not be reached, as librdkafka last said it, or None."""
        found = self._reasons()
        if not found:
            return None
        explained = self.security_failure(found)
        if explained:
            return explained
        reasons = [reason for _, reason in found]
        auth = [r for r in reasons if _AUTH.search(r)]
        reason = (auth or reasons)[-1]
        return f"authentication failed: {reason}" if auth else reason

    def wait_for_metadata(self, timeout_s: float) -> Any:
        """The cluster's metadata; raises librdkafka's error at once on a security failure,
        else once ``timeout_s`` has passed without an answer."""
        deadline = time.monotonic() + timeout_s
        wait = 0.25  # a refusal is logged within milliseconds; a slow cluster gets longer
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self.admin.list_topics(timeout=max(0.1, min(wait, remaining)))
            except Exception:
                if remaining <= wait or self.security_failure():
                    raise
            wait = min(2 * wait, 2.0)


_SCRAM_OR_PLAIN = re.compile(r"invalid credentials|Authentication failed", re.IGNORECASE)
_UNOFFERED = re.compile(r"Unsupported SASL mechanism: broker's supported mechanisms: (\S+)")
_REFUSED_CERT = re.compile(r"alert (certificate unknown|bad certificate|certificate expired|"
                           r"certificate required|unknown ca|certificate revoked)")
_PLAINTEXT_PROTOCOLS = ("", "plaintext", "sasl_plaintext")


def explain(reason: str, client: Mapping[str, Any], verify_message: Callable[[], str | None],
            expired_on: Callable[[], datetime | None]) -> str | None:
    """One librdkafka connection failure, if it is the security settings' fault, as what to
    fix. ``verify_message()`` asks the broker again why its certificate was not trusted;
    ``expired_on()`` is when the client certificate expired, if it has."""
    protocol = str(client.get("security.protocol", "")).lower()
    mechanism = str(client.get("sasl.mechanism") or client.get("sasl.mechanisms") or "PLAIN")
    if "SASL" in reason and _SCRAM_OR_PLAIN.search(reason):
        return (f"authentication failed: the broker rejected user "
                f"{client.get('sasl.username')!r} with SASL {mechanism.upper()}: check "
                "sasl.username and sasl.password")
    if offered := _UNOFFERED.search(reason):
        return (f"authentication failed: the broker does not offer SASL {mechanism.upper()} "
                f"on this listener: set sasl.mechanism to one of {offered.group(1)}")
    if "certificate verify failed" in reason:
        why = verify_message() or "certificate verify failed"
        if "mismatch" in why.lower():
            return (f"TLS failed: the broker's certificate does not name the host "
                    f"connected to ({why}): connect by a name the certificate lists, or have "
                    "it reissued (host-name verification stays on)")
        if "expired" in why.lower():
            return ("TLS failed: the broker's certificate has expired: renew it on the broker")
        return (f"TLS failed: the broker's certificate is not signed by a CA the client "
                f"trusts ({why}): point ssl.ca.location (or ssl.ca.pem) at the CA that "
                "signed it")
    if refused := _REFUSED_CERT.search(reason):
        if (expiry := expired_on()) is not None:
            return (f"TLS failed: the client certificate expired on {expiry:%Y-%m-%d %H:%M} "
                    "UTC: renew it (ssl.certificate.location / ssl.certificate.pem)")
        return (f"TLS failed: the broker refused the client certificate ({refused.group(1)}):"
                " set ssl.certificate.location and ssl.key.location to a valid certificate "
                "signed by a CA the broker trusts")
    if "connecting to a PLAINTEXT broker listener" in reason:
        return ("TLS failed: the broker's port speaks plaintext, not TLS: set "
                "security.protocol to PLAINTEXT or SASL_PLAINTEXT, or use its TLS port")
    if protocol in _PLAINTEXT_PROTOCOLS and "connection closed by peer: receive 0" in reason:
        return ("the broker closed a plaintext connection at once: if the port speaks TLS, "
                "set security.protocol to SSL or SASL_SSL and ssl.ca.location")
    return None


def _verify_message(address: str, client: Mapping[str, Any]) -> str | None:
    """Why the broker at ``address`` fails TLS verification with the client's CA, as
    OpenSSL says it (host-name mismatch, expired, unknown issuer), or None."""
    host, _, port = address.rpartition(":")
    try:
        context = ssl.create_default_context(
            cafile=client.get("ssl.ca.location"), cadata=client.get("ssl.ca.pem"))
        with socket.create_connection((host.strip("[]"), int(port)), timeout=3) as sock, \
                context.wrap_socket(sock, server_hostname=host.strip("[]")):
            return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message)
    except (OSError, ValueError):
        return None


def _expired_on(client: Mapping[str, Any], now: datetime) -> datetime | None:
    """When the client certificate expired, if it has before ``now`` and can be read (with
    ``cryptography``, which Airflow installs; without it, None)."""
    try:
        from cryptography import x509
    except ImportError:
        return None
    try:
        pem = client.get("ssl.certificate.pem")
        if pem is None and client.get("ssl.certificate.location"):
            with open(str(client["ssl.certificate.location"]), "rb") as file:
                pem = file.read()
        if pem is None:
            return None
        data = pem.encode() if isinstance(pem, str) else pem
        expiry = x509.load_pem_x509_certificate(data).not_valid_after_utc
    except (OSError, ValueError):
        return None
    return expiry if expiry < now else None


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
        connection.wait_for_metadata(timeout_s)
    except Exception as exc:
        reason = connection.diagnosis() or kafka_message(exc)
        raise ClusterUnavailable(f"cluster {cluster.name!r} at {cluster.bootstrap} is "
                                 f"unavailable: {reason}") from None
    return connection
