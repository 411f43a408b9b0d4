"""Apache Kafka in KRaft mode, from Maven Central jars, on loopback.

Every node is a combined broker + controller; the quorum is the static list of all nodes, so a
3-node cluster keeps its quorum with one node stopped. The offsets topic is replicated
min(3, nodes) ways.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from groupscope_dev import StackError
from groupscope_dev.ports import LOOPBACK, require_free, wait_for_port
from groupscope_dev.tls import DevTLS

# The newest 4.x release whose every artifact we need (the server and kafka-tools) is on Maven
# Central. 4.4.0's kafka_2.13 was published on 2026-11-20 without kafka-tools; move the
# default once it is complete.
DEFAULT_KAFKA_VERSION = "4.3.1"
SUPPORTED_VERSION = re.compile(r"^(3\.9|4\.\d+)\.\d+$")
DEFAULT_BROKER_PORT = 19092
CONTROLLER_PORT_OFFSET = 100
# The secured listeners, each a port per node from ``secure_base_port``: SASL_SSL offering
# SCRAM-SHA-256 and SCRAM-SHA-512; SSL requiring a client certificate (mutual TLS); and SSL
# with a certificate for another host name (to see host-name verification refuse it).
SECURE_LISTENERS = (("SASL_SSL", "SASL_SSL"), ("SSL", "SSL"), ("MISNAMED", "SSL"))
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS = 4096
# The ACLs groupscope's principal needs (docs/security.md), as (resource type, name, pattern
# type, operation): describe the cluster, every group and topic and the topics' retention;
# read the offsets topic (the offsets ingest), and join the Spark offsets reader's
# throwaway groups.
MONITOR_ACLS = (
    ("BROKER", "kafka-cluster", "LITERAL", "DESCRIBE"),
    ("GROUP", "*", "LITERAL", "DESCRIBE"),
    ("TOPIC", "*", "LITERAL", "DESCRIBE"),
    ("TOPIC", "*", "LITERAL", "DESCRIBE_CONFIGS"),
    ("TOPIC", "__consumer_offsets", "LITERAL", "READ"),
    ("GROUP", "groupscope-", "PREFIXED", "READ"),
)
DESCRIBE_ONLY_ACLS = tuple(acl for acl in MONITOR_ACLS if acl[3] != "READ")
Acl = tuple[str, str, str, str]


def cache_dir() -> Path:
    base = os.environ.get("GROUPSCOPE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "groupscope"
    )
    return Path(base)


def kafka_libs(version: str) -> Path:
    """The folder of jars for one Kafka version, resolved with Maven on first use."""
    if not SUPPORTED_VERSION.match(version):
        raise StackError(f"Kafka version {version!r} is not supported: use 3.9.x or 4.x.y")
    return maven_libs("kafka-pom.xml", cache_dir() / "kafka" / version / "libs",
                      {"kafka.version": version}, f"Kafka {version}")


def spark_kafka_libs() -> list[Path]:
    """The jars of Spark's Kafka source (spark-sql-kafka), for spark-submit --jars."""
    libs = maven_libs("spark-kafka-pom.xml", cache_dir() / "spark-kafka" / "libs", {},
                      "Spark's Kafka source")
    return sorted(libs.glob("*.jar"))


def streams_libs(version: str = DEFAULT_KAFKA_VERSION) -> Path:
    """The jars of Kafka Streams and its examples (WordCountDemo), for Streams applications
    that use the streams rebalance protocol (KIP-1071) in tests and the demo."""
    return maven_libs("streams-pom.xml", cache_dir() / "kafka-streams" / version / "libs",
                      {"kafka.version": version}, f"Kafka Streams {version}")


def maven_libs(pom_name: str, libs: Path, properties: dict[str, str], what: str) -> Path:
    """Copies the dependencies of a packaged pom into ``libs`` with Maven, once. Processes
    that fetch jars at once (test workers, a demo beside a test run) take turns, one Maven at
    a time on the one local repository: the second finds the jars complete, never jars
    another is still writing."""
    done = libs / ".complete"
    if done.exists():
        return libs
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".maven.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return libs
        return _fetch_maven_libs(pom_name, libs, properties, what)


def _fetch_maven_libs(pom_name: str, libs: Path, properties: dict[str, str],
                      what: str) -> Path:
    done = libs / ".complete"
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(
            "Maven (mvn) is not on PATH; it fetches jars from Maven Central. "
            "Install it (Debian: apt-get install maven) and run again."
        )
    require_java()
    libs.mkdir(parents=True, exist_ok=True)
    package = resources.files("groupscope_dev")
    with resources.as_file(package.joinpath(pom_name)) as pom_path, \
            resources.as_file(package.joinpath("maven-settings.xml")) as settings_path:
        result = subprocess.run(
            [
                mvn, "-B", "-q", "-s", str(settings_path), "-f", str(pom_path),
                *(f"-D{k}={v}" for k, v in properties.items()),
                "dependency:copy-dependencies", f"-DoutputDirectory={libs}",
                "-DincludeScope=runtime",
            ],
            capture_output=True, text=True, check=False,
        )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise StackError(f"Maven could not fetch {what} from Maven Central:\n{tail}")
    done.write_text(json.dumps(properties))
    return libs


def require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise StackError(
            "Java is not on PATH; Kafka needs Java 17 or newer. "
            "Install it (Debian: apt-get install openjdk-17-jre-headless) and run again."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    found = re.search(r'version "(\d+)', out.stderr + out.stdout)
    if found and int(found.group(1)) < 17:
        raise StackError(f"Kafka needs Java 17 or newer; {java} is Java {found.group(1)}.")
    return java


def classpath(libs: Path) -> str:
    # Kafka uses the slf4j 1.x API: a binding for slf4j 2 (from an older cache) cannot load.
    jars = sorted(p.name for p in libs.glob("*.jar") if not p.name.startswith("log4j-slf4j2"))
    # Kafka 3.9 brings its own slf4j binding (reload4j); two bindings make slf4j pick one at
    # random, so ours is left out there.
    if any(j.startswith("slf4j-reload4j") for j in jars):
        jars = [j for j in jars if not j.startswith("log4j-slf4j-impl")]
    return os.pathsep.join(str(libs / j) for j in jars)


LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""

LOG4J1 = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
"""


@dataclass
class KafkaCluster:
    """A local KRaft cluster. ``start`` is idempotent; ``stop_node`` / ``start_node`` let tests
    move partition leadership (and so group coordinators)."""

    state_dir: Path
    nodes: int = 1
    version: str = DEFAULT_KAFKA_VERSION
    base_port: int = DEFAULT_BROKER_PORT
    controller_base_port: int | None = None
    offsets_topic_partitions: int = 50
    heap: str = "512m"
    extra_config: dict[str, str] = field(default_factory=dict)
    # A second, SASL/PLAIN listener with these user -> password pairs (for security tests).
    sasl_users: dict[str, str] | None = None
    sasl_base_port: int | None = None
    # The secured listeners (SECURE_LISTENERS), their CA and certificates in state_dir/tls,
    # and the SCRAM users created on them through the Admin API.
    secure_base_port: int | None = None
    scram_users: dict[str, str] | None = None
    # Kafka's StandardAuthorizer, with nothing allowed but to the plaintext listener's
    # (anonymous) super user and these ACLs (principal -> ACLs), granted at start.
    authorizer: bool = False
    grants: dict[str, tuple[Acl, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise StackError(f"a cluster needs at least one broker, not {self.nodes}")
        if self.controller_base_port is None:
            self.controller_base_port = self.base_port + CONTROLLER_PORT_OFFSET

    # -- addresses ---------------------------------------------------------------------
    def node_ids(self) -> list[int]:
        return list(range(1, self.nodes + 1))

    def broker_port(self, node_id: int) -> int:
        return self.base_port + node_id - 1

    def controller_port(self, node_id: int) -> int:
        assert self.controller_base_port is not None
        return self.controller_base_port + node_id - 1

    def node_ports(self, node_id: int) -> list[int]:
        ports = [self.broker_port(node_id), self.controller_port(node_id)]
        if self.sasl_users:
            ports.append(self.sasl_port(node_id))
        if self.secure_base_port is not None:
            ports += [self.secure_port(node_id, name) for name, _ in SECURE_LISTENERS]
        return ports

    def secure_port(self, node_id: int, listener: str) -> int:
        if self.secure_base_port is None:
            raise StackError("this cluster has no secured listeners")
        index = [name for name, _ in SECURE_LISTENERS].index(listener)
        return self.secure_base_port + len(SECURE_LISTENERS) * (node_id - 1) + index

    def secure_bootstrap(self, listener: str) -> str:
        """The bootstrap servers of one secured listener: SASL_SSL, SSL or MISNAMED."""
        return ",".join(f"{LOOPBACK}:{self.secure_port(n, listener)}" for n in self.node_ids())

    @property
    def tls(self) -> DevTLS:
        return DevTLS(self.state_dir / "tls")

    def secure_client(self, mechanism: str, user: str | None = None) -> dict[str, str]:
        """librdkafka settings (a ``kafka`` connection's extra) for one secured listener:
        ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` as ``user`` (the first SCRAM user by default),
        or ``mTLS`` with the stack's client certificate."""
        if mechanism == "mTLS":
            return {"bootstrap.servers": self.secure_bootstrap("SSL"),
                    "security.protocol": "SSL", "ssl.ca.location": str(self.tls.ca),
                    "ssl.certificate.location": str(self.tls.client.cert),
                    "ssl.key.location": str(self.tls.client.key)}
        if mechanism not in SCRAM_MECHANISMS or not self.scram_users:
            raise StackError(f"no {mechanism} listener on this cluster")
        user = user or next(iter(self.scram_users))
        return {"bootstrap.servers": self.secure_bootstrap("SASL_SSL"),
                "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": self.scram_users[user],
                "ssl.ca.location": str(self.tls.ca)}

    def sasl_port(self, node_id: int) -> int:
        if self.sasl_base_port is None:
            raise StackError("this cluster has no SASL listener")
        return self.sasl_base_port + node_id - 1

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{self.sasl_port(n)}" for n in self.node_ids())

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{self.broker_port(n)}" for n in self.node_ids())

    def node_dir(self, node_id: int) -> Path:
        return self.state_dir / f"node-{node_id}"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        manifest = self.state_dir / "cluster.json"
        wanted = {"nodes": self.nodes, "version": self.version, "base_port": self.base_port}
        if manifest.exists():
            existing = json.loads(manifest.read_text())
            if existing.get("layout") != wanted:
                raise StackError(
                    f"a Kafka cluster with a different layout ({existing.get('layout')}) "
                    f"already lives in {self.state_dir}; stop it first (dev/stack down)."
                )
        libs = kafka_libs(self.version)
        java = require_java()
        if not manifest.exists():
            self._format(java, libs)
        for node_id in self.node_ids():
            if not self.node_running(node_id):
                self._launch(java, libs, node_id)
        self.wait_ready(timeout)
        if self.scram_users:
            self._create_scram_users()
        if self.grants:
            self._grant_acls()

    def stop(self) -> None:
        self._stop_nodes(self.node_ids(), hard=False)

    def destroy(self) -> None:
        # Its data is deleted next: a clean shutdown would only cost time (up to the stop
        # timeout for the last nodes of a 3-node cluster, which have lost their quorum).
        self._stop_nodes(self.node_ids(), hard=True)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def start_node(self, node_id: int, timeout: float = 60.0) -> None:
        if not self.node_running(node_id):
            self._launch(require_java(), kafka_libs(self.version), node_id)
        if not wait_for_port(self.broker_port(node_id), time.monotonic() + timeout):
            raise StackError(self._startup_failure(node_id))

    def stop_node(self, node_id: int, *, hard: bool = False, timeout: float = 30.0) -> None:
        self._stop_nodes([node_id], hard=hard, timeout=timeout)

    def _stop_nodes(self, node_ids: list[int], *, hard: bool, timeout: float = 30.0) -> None:
        # Signalled together: stopped one by one, the last nodes of a cluster wait for a
        # quorum that the first ones took away.
        pids = {node_id: pid for node_id in node_ids if (pid := self._pid(node_id)) is not None}
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL if hard else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids.values()):
            time.sleep(0.2)
        for node_id, pid in pids.items():
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                while _alive(pid):
                    time.sleep(0.1)
            (self.node_dir(node_id) / "pid").unlink(missing_ok=True)

    def node_running(self, node_id: int) -> bool:
        return self._pid(node_id) is not None

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Every node accepts connections and the cluster metadata lists all of them."""
        deadline = time.monotonic() + timeout
        for node_id in self.node_ids():
            if not wait_for_port(self.broker_port(node_id), deadline):
                raise StackError(self._startup_failure(node_id))
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        seen: set[int] = set()
        while time.monotonic() < deadline:
            try:
                seen = set(admin.list_topics(timeout=5).brokers)
            except Exception:
                seen = set()
            if seen >= set(self.node_ids()):
                return
            time.sleep(0.5)
        raise StackError(
            f"Kafka at {self.bootstrap} did not register all brokers within {timeout:.0f}s "
            f"(registered: {sorted(seen)}); see {self.state_dir}/node-*/server.log"
        )

    # -- internals ---------------------------------------------------------------------
    def _grant_acls(self) -> None:
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
        )

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        bindings = [
            AclBinding(ResourceType[kind], name, ResourcePatternType[pattern], principal, "*",
                       AclOperation[operation], AclPermissionType.ALLOW)
            for principal, acls in self.grants.items()
            for kind, name, pattern, operation in acls
        ]
        for binding, future in admin.create_acls(bindings).items():
            try:
                future.result(timeout=30)
            except Exception as exc:
                raise StackError(f"could not grant {binding}: {exc}") from None

    def _create_scram_users(self) -> None:
        """Every SCRAM user with both mechanisms, over the plaintext listener (an upsert: a
        restarted stack keeps its users)."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        assert self.scram_users
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        # One request per mechanism: Kafka refuses a request that alters a user twice.
        for mechanism in SCRAM_MECHANISMS:
            info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")),
                                       SCRAM_ITERATIONS)
            upserts: list[UserScramCredentialAlteration] = [
                UserScramCredentialUpsertion(user, info, password.encode())
                for user, password in self.scram_users.items()]
            for user, future in admin.alter_user_scram_credentials(upserts).items():
                try:
                    future.result(timeout=30)
                except Exception as exc:
                    error: Any = exc.args[0] if exc.args else None  # a KafkaError: no secret
                    reason = error.str() if hasattr(error, "str") else type(exc).__name__
                    raise StackError(f"could not create the SCRAM user {user!r} "
                                     f"({mechanism}): {reason}") from None

    def _format(self, java: str, libs: Path) -> None:
        require_free(
            [p for n in self.node_ids() for p in self.node_ports(n)],
            "Kafka",
            "Stop whatever listens there, or pick other ports (dev/stack up --kafka-port N).",
        )
        cluster_id = _kafka_cluster_id()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for node_id in self.node_ids():
            props = self._write_config(node_id)
            result = subprocess.run(
                [java, "-cp", classpath(libs), *self._log_props(node_id),
                 "kafka.tools.StorageTool", "format", "--cluster-id", cluster_id,
                 "--config", str(props), "--ignore-formatted"],
                capture_output=True, text=True, check=False,
            )
            if result.returncode != 0:
                raise StackError(
                    f"formatting Kafka storage for node {node_id} failed:\n"
                    f"{(result.stdout + result.stderr).strip()[-2000:]}"
                )
        (self.state_dir / "cluster.json").write_text(
            json.dumps({"layout": {"nodes": self.nodes, "version": self.version,
                                   "base_port": self.base_port}, "cluster_id": cluster_id})
        )

    def _write_config(self, node_id: int) -> Path:
        node_dir = self.node_dir(node_id)
        (node_dir / "data").mkdir(parents=True, exist_ok=True)
        replication = min(3, self.nodes)
        voters = ",".join(f"{n}@{LOOPBACK}:{self.controller_port(n)}" for n in self.node_ids())
        config = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://{LOOPBACK}:{self.broker_port(node_id)},"
                f"CONTROLLER://{LOOPBACK}:{self.controller_port(node_id)}"
            ),
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.broker_port(node_id)}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node_dir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "offsets.topic.replication.factor": str(replication),
            "offsets.topic.num.partitions": str(self.offsets_topic_partitions),
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": "1",
            "min.insync.replicas": "1",
            "default.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Let tests and the demo use short session timeouts, so crashes show in seconds.
            "group.min.session.timeout.ms": "1000",
            "group.consumer.min.session.timeout.ms": "3000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            "log.retention.check.interval.ms": "5000",
            "leader.imbalance.check.interval.seconds": "5",
        }
        if self.sasl_users:
            sasl = f"SASL_PLAINTEXT://{LOOPBACK}:{self.sasl_port(node_id)}"
            config["listeners"] += f",{sasl}"
            config["advertised.listeners"] += f",{sasl}"
            config["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            config["sasl.enabled.mechanisms"] = "PLAIN"
            users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
            config["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            )
        if self.secure_base_port is not None:
            self._secure_listeners(node_id, config)
        if self.authorizer:
            config["authorizer.class.name"] = (
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
            config["super.users"] = "User:ANONYMOUS"  # the plaintext and controller listeners
            config["allow.everyone.if.no.acl.found"] = "false"
        if self.version.startswith("3."):
            # KIP-848 is a preview in 3.9 and must be switched on to be tried at all.
            config["group.coordinator.rebalance.protocols"] = "classic,consumer"
        else:
            # Share groups keep their state in __share_group_state, created on first use with
            # a replication factor of 3 and a min ISR of 2 by default: on fewer brokers it is
            # never created, and a share consumer gets no record at all.
            config["share.coordinator.state.topic.replication.factor"] = str(replication)
            config["share.coordinator.state.topic.min.isr"] = "1"
            config["share.coordinator.state.topic.num.partitions"] = str(
                self.offsets_topic_partitions)
        config.update(self.extra_config)
        props = node_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        return props

    def _secure_listeners(self, node_id: int, config: dict[str, str]) -> None:
        tls = self.tls.create()
        for name, protocol in SECURE_LISTENERS:
            address = f"{name}://{LOOPBACK}:{self.secure_port(node_id, name)}"
            config["listeners"] += f",{address}"
            config["advertised.listeners"] += f",{address}"
            config["listener.security.protocol.map"] += f",{name}:{protocol}"
        config["ssl.keystore.type"] = "PEM"
        config["ssl.keystore.location"] = str(tls.broker_keystore(tls.broker))
        config["ssl.truststore.type"] = "PEM"
        config["ssl.truststore.location"] = str(tls.ca)
        config["listener.name.ssl.ssl.client.auth"] = "required"
        config["listener.name.misnamed.ssl.keystore.location"] = str(
            tls.broker_keystore(tls.misnamed_broker))
        config["listener.name.sasl_ssl.sasl.enabled.mechanisms"] = ",".join(SCRAM_MECHANISMS)
        for mechanism in SCRAM_MECHANISMS:
            config[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;")

    def _log_props(self, node_id: int) -> list[str]:
        node_dir = self.node_dir(node_id)
        node_dir.mkdir(parents=True, exist_ok=True)
        log = node_dir / "server.log"
        (node_dir / "log4j2.properties").write_text(LOG4J2.format(log=log))
        (node_dir / "log4j.properties").write_text(LOG4J1.format(log=log))
        return [
            f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
            f"-Dlog4j.configuration=file:{node_dir / 'log4j.properties'}",
            f"-Dkafka.logs.dir={node_dir}",
        ]

    def _launch(self, java: str, libs: Path, node_id: int) -> None:
        node_dir = self.node_dir(node_id)
        props = self._write_config(node_id)
        require_free(
            self.node_ports(node_id),
            f"Kafka node {node_id}",
            "Stop whatever listens there, or pick other ports (dev/stack up --kafka-port N).",
        )
        with open(node_dir / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                [java, f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC",
                 "-Djava.awt.headless=true", *self._log_props(node_id),
                 "-cp", classpath(libs), "kafka.Kafka", str(props)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=node_dir,
            )
        (node_dir / "pid").write_text(str(proc.pid))

    def _pid(self, node_id: int) -> int | None:
        pid_file = self.node_dir(node_id) / "pid"
        try:
            pid = int(pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def _startup_failure(self, node_id: int) -> str:
        node_dir = self.node_dir(node_id)
        tail = ""
        for name in ("stdout.log", "server.log"):
            path = node_dir / name
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()
                errors = [line for line in lines if " ERROR " in line or "Exception" in line]
                tail += "\n".join((errors or lines)[-8:]) + "\n"
        return (
            f"Kafka node {node_id} did not start listening on {LOOPBACK}:"
            f"{self.broker_port(node_id)}; last log lines:\n{tail}"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _kafka_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding. Like Kafka's own
    Uuid.randomUuid, never one starting with '-', which a command line reads as an option."""
    import base64

    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate
