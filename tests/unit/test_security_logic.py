"""The pure parts of secured connections: librdkafka's failure lines explained as what to fix,
and the connection's settings mapped to Spark's Kafka source with its secrets redacted."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from groupscope.kafka.admin import explain
from groupscope.kafka.java_admin import SPARK_REDACTION, spark_kafka_options

SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
         "sasl.username": "bob", "sasl.password": "hunter2", "ssl.ca.location": "/ca.pem"}


def _never() -> str:
    raise AssertionError("the broker is asked again only when its certificate failed")


def _valid() -> None:
    return None


@pytest.mark.parametrize(("reason", "client", "verified", "expected"), [
    ("SASL authentication error: Authentication failed during authentication due to invalid "
     "credentials with SASL mechanism SCRAM-SHA-256", SCRAM, _never,
     "the broker rejected user 'bob' with SASL SCRAM-SHA-256: check sasl.username and "
     "sasl.password"),
    ("SASL PLAIN mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's "
     "supported mechanisms: SCRAM-SHA-512,SCRAM-SHA-256", {**SCRAM, "sasl.mechanism": "plain"},
     _never, "does not offer SASL PLAIN on this listener: set sasl.mechanism to one of "
     "SCRAM-SHA-512,SCRAM-SHA-256"),
    ("SSL handshake failed: error:0A000086:SSL routines::certificate verify failed", SCRAM,
     lambda: "unable to get local issuer certificate", "point ssl.ca.location"),
    ("error:0A000086:SSL routines::certificate verify failed", SCRAM,
     lambda: "Hostname mismatch, certificate is not valid for 'kafka-1'.",
     "does not name the host connected to"),
    ("error:0A000086:SSL routines::certificate verify failed", SCRAM,
     lambda: "certificate has expired", "the broker's certificate has expired"),
    ("Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: SSL alert "
     "number 42", {"security.protocol": "SSL"}, _never,
     "the broker refused the client certificate (bad certificate)"),
    ("SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to a "
     "PLAINTEXT broker listener?", SCRAM, _never, "the broker's port speaks plaintext"),
    ("Disconnected: connection closed by peer: receive 0 after POLLIN", {}, _never,
     "set security.protocol to SSL or SASL_SSL"),
])
def test_security_failures_say_what_to_fix(reason: str, client: dict[str, str],
                                           verified: Callable[[], str | None],
                                           expected: str) -> None:
    explained = explain(reason, client, verified, _valid)
    assert explained is not None and expected in explained
    assert "hunter2" not in explained


@pytest.mark.parametrize(("reason", "client"), [
    ("Connect to ipv4#127.0.0.1:9092 failed: Connection refused", SCRAM),
    ("Disconnected: connection closed by peer: receive 0 after POLLIN", SCRAM),  # TLS already
])
def test_other_failures_are_not_blamed_on_security(reason: str, client: dict[str, str]) -> None:
    assert explain(reason, client, _never, _valid) is None


def test_an_expired_client_certificate_says_when() -> None:
    explained = explain("Receive failed: ssl/tls alert certificate unknown", {}, _never,
                        lambda: datetime(2026, 11, 25, 15, 1, tzinfo=UTC))
    assert explained == ("TLS failed: the client certificate expired on 2026-11-25 15:01 UTC: "
                         "renew it (ssl.certificate.location / ssl.certificate.pem)")


def test_spark_options_are_the_java_clients_prefixed() -> None:
    options = spark_kafka_options({"bootstrap.servers": "b:9093", **SCRAM})
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-256"
    assert options["kafka.ssl.truststore.location"] == "/ca.pem"
    assert "hunter2" in options["kafka.sasl.jaas.config"]
    assert all(k.startswith("kafka.") for k in options)


def test_spark_redacts_every_option_that_carries_a_secret() -> None:
    options = spark_kafka_options({
        "bootstrap.servers": "b:9093", **SCRAM, "ssl.certificate.pem": "CERT",
        "ssl.key.pem": "KEY", "ssl.key.password": "kp"})
    secret_keys = {k for k, v in options.items()
                   if any(s in v for s in ("hunter2", "KEY", "kp"))}
    assert secret_keys == {"kafka.sasl.jaas.config", "kafka.ssl.keystore.key",
                           "kafka.ssl.key.password"}
    for setting in ("spark.redaction.regex", "spark.sql.redaction.options.regex"):
        pattern = re.compile(SPARK_REDACTION[setting])
        assert all(pattern.search(k) for k in secret_keys), setting
        assert not pattern.search("kafka.bootstrap.servers")
