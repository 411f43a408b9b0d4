"""The warehouse over TLS with ``sslmode=verify-full``, against the session's PostgreSQL
(which serves a certificate from the dev CA for 127.0.0.1 / localhost): the loader writes
through a WAREHOUSE_URL that verifies the server, Grafana's reader role reads through the
datasource ``groupscope grafana provision`` writes from that URL, and a wrong CA or a wrong
host name is one line saying what to change, with no password in it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from conftest import unique
from kafkautil import commit_offsets, create_topic, take_snapshot

from groupscope import pipeline
from groupscope.cli import main
from groupscope.land.snapshots import land
from groupscope.warehouse import READER_ROLE
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.postgres import DATABASE, READER_PASSWORD, LocalPostgres

pytestmark = pytest.mark.integration

TLS_OF_THIS_CONNECTION = "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"


def _provisioned_datasource(tmp_path: Path, warehouse_url: str,
                            monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("WAREHOUSE_URL", warehouse_url)
    for name in ("GROUPSCOPE_ALERT_RULES", "GROUPSCOPE_GRAFANA_ALERTING"):
        monkeypatch.delenv(name, raising=False)
    assert main(["grafana", "provision", str(tmp_path / "provisioning")]) == 0
    datasources = tmp_path / "provisioning" / "datasources" / "groupscope.yaml"
    (source,) = yaml.safe_load(datasources.read_text(encoding="utf-8"))["datasources"]
    return dict(source)


def test_the_loader_writes_and_grafana_reads_over_verify_full(
        kafka: KafkaCluster, postgres: LocalPostgres, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = unique("tls")
    topic = unique("tls-t")
    create_topic(kafka.bootstrap, topic, 2)
    commit_offsets(kafka.bootstrap, unique("tls-g"), {(topic, 0): 0, (topic, 1): 0})
    snapshot = take_snapshot(kafka.bootstrap, cluster=cluster)
    landed = land(snapshot, tmp_path / "landing")

    loaded = pipeline.load(postgres.tls_url, tmp_path / "landing", cluster,
                           [landed.snapshot_id], datetime.now(UTC))
    assert loaded == 1

    # Grafana's datasource as provisioned from that URL: the same host, verify-full and the
    # CA file, as grafana_reader. libpq reads these settings as Grafana's driver does.
    source = _provisioned_datasource(tmp_path, postgres.tls_url, monkeypatch)
    settings = source["jsonData"]
    assert (settings["sslmode"], settings["tlsConfigurationMethod"],
            settings["sslRootCertFile"]) == ("verify-full", "file-path", str(postgres.tls.ca))
    host, port = source["url"].rsplit(":", 1)
    with psycopg.connect(host=host, port=port, dbname=settings["database"],
                         user=source["user"], password=READER_PASSWORD,
                         sslmode=settings["sslmode"],
                         sslrootcert=settings["sslRootCertFile"]) as conn:
        assert conn.execute(TLS_OF_THIS_CONNECTION).fetchone()[0] is True
        row = conn.execute("SELECT groups FROM serve.clusters WHERE cluster = %s",
                           (cluster,)).fetchone()
    assert row == (len(snapshot.groups),) and row[0] >= 1


@pytest.mark.parametrize(("mistake", "fix"), [
    ("wrong CA", "sslrootcert in WAREHOUSE_URL must be the CA that signed"),
    ("wrong host", "the host in WAREHOUSE_URL must be a name the warehouse's certificate"),
])
def test_a_wrong_ca_or_host_is_one_line_without_the_password(
        postgres: LocalPostgres, tmp_path: Path, mistake: str, fix: str) -> None:
    # As grafana_reader: its password ("grafana-reader") is no word of the URL's other parts.
    url = postgres.database_url(DATABASE, READER_ROLE, READER_PASSWORD, tls=True)
    if mistake == "wrong CA":
        url = url.replace(str(postgres.tls.ca), str(postgres.tls.other_ca))
    else:
        # The right address under a name the certificate does not hold.
        url = url.replace("@127.0.0.1:", "@wrong.invalid:") + "&hostaddr=127.0.0.1"
    with pytest.raises(pipeline.WarehouseUnreachable) as info:
        pipeline.load(url, tmp_path, unique("tls-bad"), [], datetime.now(UTC))
    message = str(info.value)
    assert "\n" not in message and "failed TLS verification" in message and fix in message
    assert READER_PASSWORD not in message and ":***@" in message


def test_the_session_warehouse_offers_tls_to_every_client(postgres: LocalPostgres) -> None:
    """The dev stack's PostgreSQL serves TLS (a build with OpenSSL): even the plain URL, whose
    libpq default is sslmode=prefer, ends up encrypted."""
    with psycopg.connect(postgres.url) as conn:
        ssl, version = conn.execute(TLS_OF_THIS_CONNECTION).fetchone()
    assert ssl is True and version.startswith("TLSv1.")
