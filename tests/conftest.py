"""Real services: Kafka clusters and a PostgreSQL server on free loopback ports, started once
(the clusters few modules use, once per module) and torn down at the end. Tests isolate
themselves with unique names."""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_timeout import _get_item_settings

from groupscope_dev.kafka import (
    DEFAULT_KAFKA_VERSION,
    DESCRIBE_ONLY_ACLS,
    MONITOR_ACLS,
    KafkaCluster,
)
from groupscope_dev.ports import free_port_block, free_ports
from groupscope_dev.postgres import LocalPostgres
from groupscope_dev.spark_connect import SparkConnectServer
from groupscope_dev.tls import CLIENT_NAME

KAFKA_39 = "3.9.2"

# py4j logs "Closing down clientserver connection" at INFO from a destructor at interpreter
# exit, after pytest has closed the streams: a traceback per worker in every run's output.
logging.getLogger("py4j").setLevel(logging.WARNING)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Short and world-traversable: Kafka and PostgreSQL state live here.
    return tmp_path_factory.mktemp("services")


def _cluster(base: Path, name: str, nodes: int, version: str) -> KafkaCluster:
    return KafkaCluster(base / name, nodes=nodes, version=version,
                        base_port=free_port_block(nodes),
                        controller_base_port=free_port_block(nodes))


def _running(cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    try:
        cluster.start()
    except BaseException:
        cluster.destroy()  # the nodes that did start must not outlive the run
        raise
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="session")
def kafka(services_dir: Path) -> Iterator[KafkaCluster]:
    yield from _running(_cluster(services_dir, "kafka-1", 1, DEFAULT_KAFKA_VERSION))


# The clusters that few modules use live for a module, not the session: an idle broker
# still takes about 5% of a core (a 3-node cluster 16%), which the rest of the run needs.
@pytest.fixture(scope="module")
def kafka3(services_dir: Path) -> Iterator[KafkaCluster]:
    yield from _running(_cluster(services_dir, unique("kafka-3"), 3, DEFAULT_KAFKA_VERSION))


@pytest.fixture(scope="module")
def kafka39(services_dir: Path) -> Iterator[KafkaCluster]:
    yield from _running(_cluster(services_dir, unique("kafka-39"), 1, KAFKA_39))


SASL_USERS = {"alice": "alice-s3cret-pw"}
SCRAM_USERS = {"scram-bob": "bob-scr4m-s3cret"}
# The optional ACL of docs/security.md, on test_security's topics: Read on the watched topics,
# for the exact time lag (the record sampler).
SAMPLED_TOPICS = "sec-t"
TIME_LAG_ACL = (("TOPIC", SAMPLED_TOPICS, "PREFIXED", "READ"),)


@pytest.fixture(scope="session")
def kafka_secure(services_dir: Path) -> Iterator[KafkaCluster]:
    """The one secured broker of a run (test_security; test_spark_offsets_ingest, whose
    Spark job reads over its SCRAM and mutual TLS listeners; test_airflow's snapshot DAG over
    SCRAM): beside the plaintext
    listener, SASL/PLAIN, SASL_SSL with SCRAM-SHA-256/512, SSL with client certificates and
    a misnamed SSL listener, all with certificates from a throwaway CA. Its StandardAuthorizer
    allows the SCRAM user and the client certificate's principal the documented ACLs only
    (MONITOR_ACLS, and Read on the sampled topics), and the PLAIN user the same without
    Read."""
    yield from _running(KafkaCluster(
        services_dir / unique("kafka-secure"), base_port=free_port_block(1),
        controller_base_port=free_port_block(1), sasl_users=SASL_USERS,
        sasl_base_port=free_port_block(1), secure_base_port=free_port_block(3),
        scram_users=SCRAM_USERS, authorizer=True, grants={
            **{f"User:{user}": MONITOR_ACLS + TIME_LAG_ACL for user in SCRAM_USERS},
            f"User:CN={CLIENT_NAME}": MONITOR_ACLS + TIME_LAG_ACL,
            **{f"User:{user}": DESCRIBE_ONLY_ACLS for user in SASL_USERS}}))


@pytest.fixture(scope="session")
def postgres(services_dir: Path) -> Iterator[LocalPostgres]:
    from groupscope import warehouse

    server = LocalPostgres(services_dir / "postgres", port=free_ports(1)[0])
    server.start()
    # Migrated as the deployment does before any task runs: the stages only check it.
    engine = warehouse.engine_for(server.url)
    warehouse.migrate(engine)
    engine.dispose()
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def warehouse_engine(postgres: LocalPostgres):  # type: ignore[no-untyped-def]
    from groupscope import warehouse

    engine = warehouse.engine_for(postgres.url)
    warehouse.migrate(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """Spark in local mode, one session for the whole run (it takes seconds to start). Its
    JVM serves every Spark test of the run: with the default 1 GiB heap, the demo's timeline
    test found it 750-770 MiB full after a full GC, and spent its time in full GCs."""
    from groupscope.analyze.io import session

    spark = session("groupscope-tests", master="local[2]", driver_memory="2g")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def spark_connect(services_dir: Path) -> Iterator[SparkConnectServer]:
    """One long-lived Spark Connect server (a JVM) for the whole run, as dev/stack runs it.
    A process that takes a remote session stays in Connect mode (pyspark), and this one holds
    the local ``spark``: tests reach the server from processes of their own."""
    server = SparkConnectServer(services_dir / "spark-connect", port=free_ports(1)[0])
    server.start()
    yield server
    server.stop()


# The scenario tests: loops of pipeline passes, each pass some 40 Spark jobs, through
# minutes of compressed time. Run in parallel (``./run-tests``: two pytest-xdist workers),
# they take one worker, one after another, so that two of them never share the two cores;
# the rest of the suite runs on the other worker meanwhile.
SCENARIOS = frozenset({"test_alerting.py", "test_alert_causes.py", "test_alert_unknown.py",
                       "test_demo.py", "test_fast_detection.py", "test_kind_alerts.py"})


def _work_unit(nodeid: str) -> str:
    """What one worker runs whole: the scenarios together, otherwise a module (its
    module-scoped clusters start once)."""
    module = nodeid.split("::", 1)[0]
    return "scenarios" if Path(module).name in SCENARIOS else module


def _run_order(item: pytest.Item) -> int:
    """In parallel, the longest work first (the scenarios, then the Airflow module), so that
    none is left to end the run alone; the unit tests, short, fill the end."""
    if _work_unit(item.nodeid) == "scenarios":
        return 0
    if "integration" not in str(item.fspath):
        return 3
    return 1 if Path(str(item.fspath)).name == "test_airflow.py" else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_run_order)
    else:
        # Integration tests follow the fast unit tests, so a broken invariant shows first.
        items.sort(key=lambda item: "integration" in str(item.fspath))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Work units as ``_work_unit`` says, in the order of collection. (pytest-xdist's own
    ``xdist_group`` grouping is lost on pytest 9, whose node ids it can no longer amend.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False
    return SuiteScheduling(config, log)


# pytest-timeout interrupts a test with SIGALRM, whose handler runs only once the main thread is
# back in Python. A test stuck inside a C call (a client library's blocking close, a finally
# block's call to a JVM that stopped answering) outlives it, and the run hangs until CI's limit
# with nothing printed. faulthandler's watchdog is a C thread: past the timeout and a grace
# period, it prints every thread's stack and ends the run. It is armed again for each phase,
# since pytest cancels it whenever it reports a failure.
WATCHDOG_GRACE_S = 120
_watchdog_fd = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_watchdog_fd] = os.dup(sys.stderr.fileno())  # before capture takes fd 2


def _watched(item: pytest.Item) -> Generator[None, object, object]:
    timeout = _get_item_settings(item).timeout  # pytest-timeout's own: marker, option, ini
    if timeout:
        faulthandler.dump_traceback_later(timeout + WATCHDOG_GRACE_S, exit=True,
                                          file=item.config.stash[_watchdog_fd])
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_watched)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_watched)
pytest_runtest_teardown = pytest.hookimpl(wrapper=True)(_watched)
