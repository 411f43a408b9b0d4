"""Security settings pass through to librdkafka unchanged; secrets never reach the output."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import SASL_USERS

from groupscope_dev.kafka import KafkaCluster

pytestmark = pytest.mark.integration

PASSWORD = SASL_USERS["alice"]


def _cli(bootstrap: str, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groupscope.cli", "snapshot", "--bootstrap", bootstrap,
         "--cluster", "secure", "--format", "json", "--timeout", "5",
         "--config", "security.protocol=SASL_PLAINTEXT", "--config", "sasl.mechanism=PLAIN",
         "--config", "sasl.username=alice", "--config", f"sasl.password={password}"],
        capture_output=True, text=True, timeout=60,
    )


def test_sasl_credentials_pass_through(kafka_secure: KafkaCluster) -> None:
    result = _cli(kafka_secure.sasl_bootstrap, PASSWORD)
    assert result.returncode == 0, result.stderr
    assert '"complete": true' in result.stdout
    assert PASSWORD not in result.stdout + result.stderr


def test_bad_credentials_are_a_clear_error_without_the_secret(kafka_secure: KafkaCluster) -> None:
    wrong = "not-" + PASSWORD
    result = _cli(kafka_secure.sasl_bootstrap, wrong)
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "authentication failed" in lines[0]
    assert wrong not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_the_java_admin_path_connects_with_the_same_sasl_settings(
        kafka_secure: KafkaCluster) -> None:
    """Share and streams groups go through Kafka's Java Admin client: the connection's
    librdkafka SASL settings, mapped, authenticate it; a wrong password fails it clearly,
    without the password."""
    from groupscope.contract.model import GroupType
    from groupscope.kafka.java_admin import JavaAdmin, JavaKafkaError
    from groupscope_dev.kafka import kafka_libs

    def client(password: str) -> dict[str, str]:
        return {"bootstrap.servers": kafka_secure.sasl_bootstrap,
                "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                "sasl.username": "alice", "sasl.password": password}

    libs = str(kafka_libs("4.3.1"))
    java = JavaAdmin.open(client(PASSWORD), libs, 10)
    try:
        assert java.supported_kinds() == {GroupType.SHARE, GroupType.STREAMS}
    finally:
        java.close()
    wrong = "not-" + PASSWORD
    java = JavaAdmin.open(client(wrong), libs, 10)
    try:
        with pytest.raises(JavaKafkaError) as failed:
            java.supported_kinds()
    finally:
        java.close()
    assert failed.value.name() == "SASL_AUTHENTICATION_FAILED"
    assert wrong not in str(failed.value) and PASSWORD not in str(failed.value)
