"""Secured clusters: SASL/PLAIN, SCRAM-SHA-256/512 over TLS and mutual TLS reach the same rows
as plaintext on every Kafka path; each misconfiguration is one line saying what to fix, at
once; no secret reaches the output. One broker (``kafka_secure``) carries every listener; the
Spark offsets ingest runs over its SCRAM listener in test_spark_offsets_ingest."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLED_TOPICS, SASL_USERS, SCRAM_USERS, unique
from kafkautil import admin, commit_offsets, create_topic, produce_counts, wait_until
from test_spark_offsets_ingest import _rows

from groupscope.collect.collector import take_snapshot
from groupscope.contract.cluster import ClusterConfig
from groupscope.contract.model import Snapshot
from groupscope.kafka.admin import ClusterUnavailable
from groupscope.land.snapshots import landed_snapshots
from groupscope.offsets.ingest import ingest_cluster
from groupscope.pipeline import collect_here
from groupscope_dev.kafka import SCRAM_ITERATIONS, KafkaCluster

pytestmark = pytest.mark.integration

PASSWORD = SASL_USERS["alice"]
SCRAM_PASSWORD = next(iter(SCRAM_USERS.values()))
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "mTLS")


def _cli(bootstrap: str, settings: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groupscope.cli", "snapshot", "--bootstrap", bootstrap,
         "--cluster", "secure", "--format", "json", "--timeout", "20",
         *(arg for k, v in settings.items() for arg in ("--config", f"{k}={v}"))],
        capture_output=True, text=True, timeout=60,
    )


def _plain(password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": password}


def _secrets(kafka: KafkaCluster) -> list[str]:
    """Every secret of the stack, as it could leak: passwords and the client key's body."""
    key_body = "".join(kafka.tls.client.key.read_text().splitlines()[1:-1])
    return [PASSWORD, SCRAM_PASSWORD, key_body[:40]]


def test_sasl_credentials_pass_through(kafka_secure: KafkaCluster) -> None:
    result = _cli(kafka_secure.sasl_bootstrap, _plain(PASSWORD))
    assert result.returncode == 0, result.stderr
    assert '"complete": true' in result.stdout
    assert PASSWORD not in result.stdout + result.stderr


def test_bad_credentials_are_a_clear_error_without_the_secret(kafka_secure: KafkaCluster) -> None:
    wrong = "not-" + PASSWORD
    result = _cli(kafka_secure.sasl_bootstrap, _plain(wrong))
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "authentication failed" in lines[0] and "check sasl.username and sasl.password" \
        in lines[0]
    assert wrong not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_the_java_admin_path_connects_with_the_same_settings(kafka_secure: KafkaCluster) -> None:
    """Share and streams groups go through Kafka's Java Admin client: the connection's
    librdkafka settings (SASL/PLAIN, SCRAM, mutual TLS with PEM files), mapped, connect it;
    a wrong password fails it clearly, without the password."""
    from groupscope.contract.model import GroupType
    from groupscope.kafka.java_admin import JavaAdmin, JavaKafkaError
    from groupscope_dev.kafka import kafka_libs

    libs = str(kafka_libs("4.3.1"))
    plain = {"bootstrap.servers": kafka_secure.sasl_bootstrap, **_plain(PASSWORD)}
    for client in (plain, *(kafka_secure.secure_client(m) for m in MECHANISMS)):
        java = JavaAdmin.open(client, libs, 10)
        try:
            assert java.supported_kinds() == {GroupType.SHARE, GroupType.STREAMS}, client
        finally:
            java.close()
    wrong = "not-" + PASSWORD
    java = JavaAdmin.open({**plain, "sasl.password": wrong}, libs, 10)
    try:
        with pytest.raises(JavaKafkaError) as failed:
            java.supported_kinds()
    finally:
        java.close()
    assert failed.value.name() == "SASL_AUTHENTICATION_FAILED"
    assert wrong not in str(failed.value) and PASSWORD not in str(failed.value)


# -- the same rows on every mechanism ------------------------------------------------------

@pytest.fixture(scope="module")
def seeded(kafka_secure: KafkaCluster) -> tuple[str, str]:
    """A topic with records and a group with committed offsets, made over plaintext."""
    topic, group = unique(SAMPLED_TOPICS), unique("sec-g")
    create_topic(kafka_secure.bootstrap, topic, 2)
    produce_counts(kafka_secure.bootstrap, topic, [30, 20])
    commit_offsets(kafka_secure.bootstrap, group, {(topic, 0): 10, (topic, 1): 20})
    return topic, group


def _view(snapshot: Snapshot, topic: str, group: str) -> tuple[Any, ...]:
    assert snapshot.complete, snapshot.errors
    groups = [g for g in snapshot.groups if g.group_id == group]
    assert groups and groups[0].offsets
    return (groups,
            [p for p in snapshot.partitions if p.topic == topic],
            [t for t in snapshot.topics if t.topic == topic],
            sorted((r for r in snapshot.record_timestamps if r.topic == topic),
                   key=lambda r: r.partition))


def _ingest(client: dict[str, str], root: Path) -> dict[str, list[tuple[Any, ...]]]:
    result = ingest_cluster(ClusterConfig("it", client), root, datetime.now(UTC), 20, 60)
    assert result.complete
    return _rows(root)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_snapshot_and_offsets_ingest_equal_plaintext(
        kafka_secure: KafkaCluster, seeded: tuple[str, str], mechanism: str,
        tmp_path: Path) -> None:
    topic, group = seeded
    plaintext = {"bootstrap.servers": kafka_secure.bootstrap}
    secured = kafka_secure.secure_client(mechanism)
    now = datetime.now(UTC)
    view = _view(take_snapshot(ClusterConfig("it", secured), 20, now), topic, group)
    assert view == _view(take_snapshot(ClusterConfig("it", plaintext), 20, now), topic, group)
    assert view[3], "the record sampler read the record at the lagging committed offset"
    assert _ingest(secured, tmp_path / "secured") == _ingest(plaintext, tmp_path / "plain")


# -- errors a user can act on ----------------------------------------------------------------

def _pair(kafka: KafkaCluster, name: str) -> dict[str, str]:
    pair = getattr(kafka.tls, name)
    return {"ssl.certificate.location": str(pair.cert), "ssl.key.location": str(pair.key)}


MISCONFIGURED: dict[str, tuple[Callable[[KafkaCluster], dict[str, str]], str]] = {
    "wrong SCRAM password": (
        lambda k: {**k.secure_client("SCRAM-SHA-256"), "sasl.password": "not-" + SCRAM_PASSWORD},
        "the broker rejected user 'scram-bob' with SASL SCRAM-SHA-256: check sasl.username "
        "and sasl.password"),
    "unknown CA": (
        lambda k: {**k.secure_client("mTLS"), "ssl.ca.location": str(k.tls.other_ca)},
        "not signed by a CA the client trusts (unable to get local issuer certificate): "
        "point ssl.ca.location"),
    "expired client certificate": (
        lambda k: {**k.secure_client("mTLS"), **_pair(k, "expired_client")},
        "TLS failed: the client certificate expired on "),
    "host-name mismatch": (
        lambda k: {**k.secure_client("mTLS"), "bootstrap.servers": k.secure_bootstrap("MISNAMED")},
        "does not name the host connected to (IP address mismatch, certificate is not valid "
        "for '127.0.0.1'.)"),
    "mechanism not offered": (
        lambda k: {**k.secure_client("SCRAM-SHA-512"), "sasl.mechanism": "PLAIN"},
        "does not offer SASL PLAIN on this listener: set sasl.mechanism to one of "),
    "plaintext client on a TLS port": (
        lambda k: {"bootstrap.servers": k.secure_bootstrap("SSL")},
        "if the port speaks TLS, set security.protocol to SSL or SASL_SSL"),
    "TLS client on a plaintext port": (
        lambda k: {**k.secure_client("mTLS"), "bootstrap.servers": k.bootstrap},
        "the broker's port speaks plaintext, not TLS: set security.protocol to PLAINTEXT"),
}


@pytest.mark.parametrize("case", MISCONFIGURED)
def test_each_misconfiguration_is_one_line_saying_what_to_fix(
        kafka_secure: KafkaCluster, case: str, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    """Through the snapshot (the collector) and the offsets ingest alike. The timeout is long:
    a failure that waited for it would show as a slow test, not pass."""
    settings, expected = MISCONFIGURED[case]
    cluster = ClusterConfig("prod-east", settings(kafka_secure))
    caplog.set_level("DEBUG")
    with pytest.raises(ClusterUnavailable) as snapshot_failed:
        take_snapshot(cluster, 60, datetime.now(UTC))
    with pytest.raises(ClusterUnavailable) as ingest_failed:
        ingest_cluster(cluster, Path("/nonexistent-landing"), datetime.now(UTC), 60, 60)
    for failed in (snapshot_failed, ingest_failed):
        message = str(failed.value)
        assert "\n" not in message
        assert message.startswith("cluster 'prod-east'"), message
        assert expected in message, message
    output = str(snapshot_failed.value) + str(ingest_failed.value) + caplog.text
    output += "".join(capfd.readouterr())
    for secret in _secrets(kafka_secure):
        assert secret not in output


def test_turning_host_name_verification_off_is_loud(
        kafka_secure: KafkaCluster, caplog: pytest.LogCaptureFixture) -> None:
    client = {**kafka_secure.secure_client("mTLS"),
              "bootstrap.servers": kafka_secure.secure_bootstrap("MISNAMED"),
              "ssl.endpoint.identification.algorithm": "none"}
    snapshot = take_snapshot(ClusterConfig("lab", client), 20, datetime.now(UTC))
    assert snapshot.complete
    assert "TLS host-name verification is OFF" in caplog.text


def test_without_read_on_the_offsets_topic_only_the_ingest_stops_and_says_so(
        kafka_secure: KafkaCluster, seeded: tuple[str, str], tmp_path: Path) -> None:
    """The PLAIN user has the documented ACLs but Read: snapshots stay complete, the offsets
    ingest names the missing ACL (the other principals, with all of them, run every path
    in the tests above)."""
    topic, group = seeded
    client = {"bootstrap.servers": kafka_secure.sasl_bootstrap, **_plain(PASSWORD)}
    snapshot = take_snapshot(ClusterConfig("it", client), 20, datetime.now(UTC))
    assert not _view(snapshot, topic, group)[3]  # complete, the group's offsets are there
    # The exact time lag reads the record at the committed offset: without Read on the topic,
    # an extra that fails visibly (the estimate stands in).
    assert {e.stage.value for e in snapshot.errors} == {"record_timestamps"}, snapshot.errors
    with pytest.raises(ClusterUnavailable) as failed:
        ingest_cluster(ClusterConfig("it", client), tmp_path, datetime.now(UTC), 20, 60)
    assert "Read on topic __consumer_offsets" in str(failed.value), str(failed.value)
    assert PASSWORD not in str(failed.value)


# -- a group hidden from ListGroups is not a group deleted ---------------------------------

def _watcher_grants(principal: str, groups: list[str]) -> list[Any]:
    """Describe on the topics and on ``groups``, not on the cluster: ListGroups then lists
    the principal the groups it may Describe, and leaves the others out without an error
    (KIP-231), as OffsetFetch needs that same Describe."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    def allow(kind: Any, name: str, operation: Any) -> Any:
        return AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*", operation,
                          AclPermissionType.ALLOW)

    return [allow(ResourceType.TOPIC, "*", AclOperation.DESCRIBE),
            allow(ResourceType.TOPIC, "*", AclOperation.DESCRIBE_CONFIGS),
            *(allow(ResourceType.GROUP, g, AclOperation.DESCRIBE) for g in groups)]


def _listed_to(client: dict[str, str]) -> set[str]:
    from confluent_kafka.admin import AdminClient

    listing = AdminClient({**client, "log_level": 0})  # held: destroyed, it answers nothing
    result = listing.list_consumer_groups().result(20)
    assert not result.errors, result.errors
    return {g.group_id for g in result.valid}


def test_a_group_hidden_from_list_groups_is_unknown_and_a_deleted_one_is_gone(
        kafka_secure: KafkaCluster, warehouse_engine: Any, tmp_path: Path) -> None:
    """A principal without Describe on the cluster is listed only the groups it may Describe:
    a group whose Describe ACL is removed vanishes from a complete snapshot as a deleted
    one does. The collector probes the groups the snapshot before found: the hidden one is
    an error naming it and the ACL at every snapshot (partial: its incidents are kept,
    unknown), a group deleted for real is nothing (complete: deleted after two)."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from groupscope import warehouse
    from groupscope.serve.alerting.conditions import _why_absent

    topic, hidden, gone = unique("absent-t"), unique("absent-hidden"), unique("absent-gone")
    create_topic(kafka_secure.bootstrap, topic, 1)
    for group in (hidden, gone):
        commit_offsets(kafka_secure.bootstrap, group, {(topic, 0): 0})
    superuser = admin(kafka_secure.bootstrap)  # the plaintext listener's super user
    user, password = unique("watcher"), "watcher-s3cret-pw"
    principal = f"User:{user}"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, SCRAM_ITERATIONS)
    for future in superuser.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode())]).values():
        future.result(timeout=30)
    for future in superuser.create_acls(_watcher_grants(principal, [hidden, gone])).values():
        future.result(timeout=30)
    client = {**kafka_secure.secure_client("SCRAM-SHA-256"), "sasl.username": user,
              "sasl.password": password}
    wait_until(lambda: _listed_to(client) == {hidden, gone}, 30, "both groups listed")
    cluster = ClusterConfig(unique("absent"), client)

    def snapshot() -> tuple[datetime, bool, list[dict[str, Any]], set[str]]:
        summary = collect_here(cluster, tmp_path, datetime.now(UTC), 20)
        (landed,) = [s for s in landed_snapshots(tmp_path, cluster.name)
                     if s.snapshot_id == summary["snapshot_id"]]
        warehouse.load_landed(warehouse_engine, landed)
        tables = landed.read()
        return (landed.snapshot_ts, summary["complete"],
                tables["collection_errors"].to_pylist(),
                set(tables["consumer_groups"].column("group_id").to_pylist()))

    def why_absent(group: str, at: datetime) -> str | None:
        with warehouse_engine.connect() as conn:
            return _why_absent(conn, cluster.name, group, at)

    assert snapshot()[1:] == (True, [], {hidden, gone})
    # Deleted for real: the probe finds nothing, so the snapshots are complete, and two of
    # them in a row without the group take it as deleted (its incidents resolve).
    for future in superuser.delete_consumer_groups([gone], request_timeout=20).values():
        future.result(timeout=30)
    for _ in range(2):
        at, complete, errors, listed = snapshot()
        assert (complete, errors, listed) == (True, [], {hidden})
    assert why_absent(gone, at) is None

    # Its Describe removed: ListGroups leaves the group out, without an error.
    describe_hidden = AclBindingFilter(
        ResourceType.GROUP, hidden, ResourcePatternType.LITERAL, principal, "*",
        AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    for future in superuser.delete_acls([describe_hidden]).values():
        future.result(timeout=30)
    wait_until(lambda: not _listed_to(client), 30, "the group no longer listed")
    for _ in range(2):  # not once: at every snapshot until the ACL is back
        at, complete, errors, listed = snapshot()
        assert not complete and not listed
        (error,) = errors
        assert (error["stage"], error["code"], error["group_id"]) == (
            "list_groups", "GROUP_AUTHORIZATION_FAILED", hidden)
        assert f"grant the monitor's principal Describe on group {hidden}" in error["message"]
    why = why_absent(hidden, at)
    assert why is not None and "missing from the partial snapshot" in why, why
    assert f"Describe on group {hidden}" in why
