"""Share groups (KIP-932) and streams groups (KIP-1071) through Kafka's own Java Admin client.

librdkafka (confluent-kafka 2.16) has no admin call for either kind: its ListConsumerGroups
leaves them out, and DescribeConsumerGroups calls them Dead classic groups. Kafka's Java
``Admin`` has them all, and it is what ``kafka-share-groups.sh`` and ``kafka-streams-groups.sh``
call, so what it answers is what those tools print. It is called in process through JPype: a
JVM in the snapshot's own process (``collect/isolated.py`` runs each snapshot in a child, so the
JVM lives as long as one snapshot), started only when a snapshot has share or streams groups to
describe. Why this path and not py4j or a protocol client: docs/architecture.md.

The jars: ``kafka-clients`` and ``slf4j-api`` from Maven Central, found through a classpath
setting (``GROUPSCOPE_KAFKA_JAVA_CLASSPATH``: jars or folders of jars). The connection's
librdkafka settings are mapped to the Java client's by ``java_client_properties``.

Everything handed back is plain data (the contract's records): nothing past this module sees a
Java object. Failures are raised as ``JavaKafkaError``, which reads like a librdkafka
KafkaError (``name()``, ``str()``, ``retriable()``) so the collector's policy judges both alike.
"""

from __future__ import annotations

import glob
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groupscope.contract.cluster import ConfigError
from groupscope.contract.model import (
    CommittedOffset,
    GroupType,
    Member,
    SharePartition,
    StreamsTask,
    Subtopology,
    TaskRole,
    TopicPartition,
)

__all__ = [
    "JavaAdmin",
    "JavaKafkaError",
    "KindDescription",
    "KindListing",
    "java_client_properties",
    "resolve_classpath",
    "spark_kafka_options",
]

CLASSPATH_ENV = "GROUPSCOPE_KAFKA_JAVA_CLASSPATH"

# librdkafka settings that mean the same in the Java client, under the same name.
_SAME = ("bootstrap.servers", "client.id", "sasl.kerberos.service.name")
# librdkafka settings that only tune librdkafka itself (buffers, logging, its own timeouts):
# they change nothing about whom the Java client connects to or as whom.
_LIBRDKAFKA_ONLY = ("socket.", "debug", "statistics.", "log.", "log_", "api.version.",
                    "broker.version.fallback", "topic.metadata.", "metadata.",
                    "reconnect.", "request.timeout.ms", "connections.max.idle.ms",
                    "enable.sasl.oauthbearer.unsecure.jwt", "client.dns.lookup",
                    "client.rack", "retry.backoff")
_SCRAM = {"SCRAM-SHA-256", "SCRAM-SHA-512"}


def java_client_properties(client: Mapping[str, Any]) -> dict[str, str]:
    """The Java Admin client's properties for a connection given in librdkafka's terms (the
    ``kafka`` connection's extra): the bootstrap servers, the security protocol, SASL PLAIN and
    SCRAM (username and password into ``sasl.jaas.config``), TLS (PEM CA, client certificate and
    key, as files or inline, or a PKCS#12 keystore; host-name verification). A security setting
    with no Java equivalent raises ConfigError naming it (never its value)."""
    props: dict[str, str] = {}
    given = {k: str(v) for k, v in client.items()}
    for key in _SAME:
        if key in given:
            props[key] = given.pop(key)
    if "security.protocol" in given:
        props["security.protocol"] = given.pop("security.protocol").upper()
    mechanism = (given.pop("sasl.mechanism", None) or given.pop("sasl.mechanisms", None)
                 or "").upper()
    given.pop("sasl.mechanisms", None)
    username, password = given.pop("sasl.username", None), given.pop("sasl.password", None)
    if mechanism:
        props["sasl.mechanism"] = mechanism
        if mechanism == "PLAIN" or mechanism in _SCRAM:
            if username is None or password is None:
                raise ConfigError(f"SASL {mechanism} needs sasl.username and sasl.password")
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                      if mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            props["sasl.jaas.config"] = (f'{module} required username="{_jaas(username)}" '
                                         f'password="{_jaas(password)}";')
        elif mechanism != "GSSAPI":
            raise ConfigError(f"sasl.mechanism {mechanism} is not mapped to the Java Admin "
                              "client (share and streams groups): use PLAIN or SCRAM")
    _tls(given, props)
    for key in given:
        if key.startswith(_LIBRDKAFKA_ONLY):
            continue
        if key.startswith(("ssl", "sasl", "enable.ssl", "security")):
            raise ConfigError(f"the connection setting {key!r} is not mapped to the Java Admin "
                              "client (share and streams groups)")
    return props


def spark_kafka_options(client: Mapping[str, Any]) -> dict[str, str]:
    """Spark's Kafka source options for the same connection: the Java client's properties,
    ``kafka.``-prefixed. Secrets among them (the JAAS line, a PEM key) travel in the query
    plan, never in Spark's conf or on a command line; SPARK_REDACTION masks them where Spark
    shows options (UI, event log)."""
    return {f"kafka.{k}": v for k, v in java_client_properties(client).items()}


# Spark's redaction settings for a session whose Kafka options carry secrets: its defaults
# (secret|password|token|access key) miss sasl.jaas.config and the PEM key and keystore.
_REDACTED_OPTIONS = r"(?i)secret|password|token|access[.]?key|jaas|ssl[.]key|keystore"
SPARK_REDACTION: dict[str, Any] = {"spark.redaction.regex": _REDACTED_OPTIONS,
                   "spark.sql.redaction.options.regex": _REDACTED_OPTIONS + "|url"}


def _tls(given: dict[str, str], props: dict[str, str]) -> None:
    if "ssl.ca.location" in given:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = given.pop("ssl.ca.location")
    if "ssl.ca.pem" in given:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.certificates"] = given.pop("ssl.ca.pem")
    certificate = given.pop("ssl.certificate.pem", None)
    if "ssl.certificate.location" in given:
        certificate = Path(given.pop("ssl.certificate.location")).read_text()
    key = given.pop("ssl.key.pem", None)
    if "ssl.key.location" in given:
        key = Path(given.pop("ssl.key.location")).read_text()
    if certificate is not None or key is not None:
        if certificate is None or key is None:
            raise ConfigError("a TLS client certificate needs both its certificate and its key")
        props["ssl.keystore.type"] = "PEM"
        props["ssl.keystore.certificate.chain"] = certificate
        props["ssl.keystore.key"] = key
    if "ssl.keystore.location" in given:
        props["ssl.keystore.type"] = "PKCS12"
        props["ssl.keystore.location"] = given.pop("ssl.keystore.location")
        if "ssl.keystore.password" in given:
            props["ssl.keystore.password"] = given.pop("ssl.keystore.password")
    if "ssl.key.password" in given:
        props["ssl.key.password"] = given.pop("ssl.key.password")
    if "ssl.endpoint.identification.algorithm" in given:
        value = given.pop("ssl.endpoint.identification.algorithm").lower()
        props["ssl.endpoint.identification.algorithm"] = "" if value == "none" else value


def _jaas(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def resolve_classpath(spec: str) -> list[str]:
    """The jars of a classpath setting: entries separated by ``os.pathsep``, each a jar, a
    folder (every jar in it) or a glob. Raises ConfigError when it has no kafka-clients jar."""
    jars: list[str] = []
    for entry in filter(None, (e.strip() for e in spec.split(os.pathsep))):
        path = Path(entry).expanduser()
        if path.is_dir():
            jars.extend(sorted(str(p) for p in path.glob("*.jar")))
        else:
            jars.extend(sorted(glob.glob(str(path))))
    if not any(Path(j).name.startswith("kafka-clients-") for j in jars):
        raise ConfigError(
            f"no kafka-clients jar on the Java Admin classpath ({CLASSPATH_ENV}="
            f"{spec!r}): share and streams groups need org.apache.kafka:kafka-clients and "
            "org.slf4j:slf4j-api from Maven Central (docs/architecture.md)")
    return jars


class JavaKafkaError(Exception):
    """A Java Admin call's failure, named as Kafka names its errors (UNSUPPORTED_VERSION,
    GROUP_ID_NOT_FOUND...)."""

    def __init__(self, code: str, message: str, retriable: bool) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.is_retriable = code, message, retriable

    def name(self) -> str:
        return self.code

    def str(self) -> str:
        return self.message

    def retriable(self) -> bool:
        return self.is_retriable


@dataclass(frozen=True)
class KindListing:
    group_id: str
    group_type: GroupType
    state: str


@dataclass(frozen=True)
class KindDescription:
    """A share or streams group as describeShareGroups / describeStreamsGroups answer it."""

    group_type: GroupType
    state: str
    coordinator_id: int | None
    group_epoch: int | None
    assignment_epoch: int | None
    members: tuple[Member, ...]
    topology_epoch: int | None = None
    subtopologies: tuple[Subtopology, ...] = ()


_jvm_lock = threading.Lock()


def _start_jvm(classpath: Sequence[str]) -> None:
    """Starts this process's JVM once (a JVM cannot be restarted in a process)."""
    import jpype
    import jpype.config

    with _jvm_lock:
        if not jpype.isJVMStarted():
            # At exit, JPype would wait for the JVM's shutdown, which waits for every
            # non-daemon Java thread: a process ends with its JVM, without that wait.
            jpype.config.destroy_jvm = False
            try:
                jpype.startJVM(classpath=list(classpath), convertStrings=True)
            except (OSError, jpype.JVMNotFoundException, jpype.JVMNotSupportedException) as exc:
                raise ConfigError(f"no usable Java runtime for the Java Admin client ({exc}); "
                                  "install a JRE 17+ or set JAVA_HOME") from None


@dataclass
class JavaAdmin:
    """One Java ``Admin`` of a cluster. ``open`` starts the JVM if this process has none."""

    admin: Any
    timeout_s: float

    @classmethod
    def open(cls, client: Mapping[str, Any], classpath: str, timeout_s: float) -> JavaAdmin:
        props = java_client_properties(client)
        _start_jvm(resolve_classpath(classpath))
        import jpype

        properties = jpype.JClass("java.util.Properties")()
        timeout_ms = str(int(timeout_s * 1000))
        for key, value in {**props, "request.timeout.ms": timeout_ms,
                           "default.api.timeout.ms": timeout_ms}.items():
            properties.setProperty(key, value)
        admin = _call(lambda: jpype.JClass("org.apache.kafka.clients.admin.Admin")
                      .create(properties))
        return cls(admin, timeout_s)

    def close(self) -> None:
        import jpype

        self.admin.close(jpype.JClass("java.time.Duration").ofSeconds(5))

    def _get(self, future: Any) -> Any:
        import jpype

        unit = jpype.JClass("java.util.concurrent.TimeUnit").MILLISECONDS
        return _call(lambda: future.get(int(self.timeout_s * 1000) + 5000, unit))

    def supported_kinds(self) -> set[GroupType]:
        """The kinds the cluster has switched on: the finalized ``share.version`` and
        ``streams.version`` features (DescribeFeatures). A cluster before Kafka 4.1 has
        neither."""
        answer = self._get(self.admin.describeFeatures().featureMetadata())
        finalized = answer.finalizedFeatures()
        return {kind for kind, feature in ((GroupType.SHARE, "share.version"),
                                           (GroupType.STREAMS, "streams.version"))
                if finalized.containsKey(feature)
                and int(finalized.get(feature).maxVersionLevel()) >= 1}

    def list_groups(self, kinds: Sequence[GroupType]) -> list[KindListing]:
        """Every group of ``kinds`` (ListGroups with a types filter, one per broker)."""
        import jpype

        group_type = jpype.JClass("org.apache.kafka.common.GroupType")
        types = jpype.JClass("java.util.Set").copyOf(jpype.JClass("java.util.List").of(
            [group_type.SHARE if k is GroupType.SHARE else group_type.STREAMS for k in kinds]))
        options = jpype.JClass("org.apache.kafka.clients.admin.ListGroupsOptions")()
        listed = self._get(self.admin.listGroups(options.withTypes(types)).all())
        return sorted(
            (KindListing(str(g.groupId()), GroupType(str(g.type().get()).lower()),
                         str(g.groupState().get()) if g.groupState().isPresent() else "Unknown")
             for g in listed if g.type().isPresent()),
            key=lambda g: g.group_id)

    def describe_share_groups(self, group_ids: Sequence[str]
                              ) -> dict[str, KindDescription | JavaKafkaError]:
        answer = self.admin.describeShareGroups(_list(group_ids)).describedGroups()
        return self._each(group_ids, answer, _share_description)

    def describe_streams_groups(self, group_ids: Sequence[str]
                                ) -> dict[str, KindDescription | JavaKafkaError]:
        answer = self.admin.describeStreamsGroups(_list(group_ids)).describedGroups()
        return self._each(group_ids, answer, _streams_description)

    def share_group_offsets(self, group_ids: Sequence[str]
                            ) -> dict[str, tuple[SharePartition, ...] | JavaKafkaError]:
        import jpype

        spec = jpype.JClass("org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec")
        result = self.admin.listShareGroupOffsets(_specs(group_ids, spec))
        return self._each(group_ids, {g: result.partitionsToOffsetInfo(g) for g in group_ids},
                          _share_partitions)

    def streams_group_offsets(self, group_ids: Sequence[str]
                              ) -> dict[str, tuple[CommittedOffset, ...] | JavaKafkaError]:
        import jpype

        spec = jpype.JClass("org.apache.kafka.clients.admin.ListStreamsGroupOffsetsSpec")
        result = self.admin.listStreamsGroupOffsets(_specs(group_ids, spec))
        return self._each(group_ids,
                          {g: result.partitionsToOffsetAndMetadata(g) for g in group_ids},
                          _committed)

    def _each(self, group_ids: Sequence[str], futures: Any, read: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group_id in group_ids:
            try:
                out[group_id] = read(self._get(futures.get(group_id)))
            except JavaKafkaError as exc:
                out[group_id] = exc
        return out


def _call(action: Any) -> Any:
    """Runs a Java call, its failure raised as a JavaKafkaError named by Kafka's error code."""
    import jpype

    try:
        return action()
    except jpype.JException as exc:
        cause = exc
        while (cause.getClass().getName() == "java.util.concurrent.ExecutionException"
               and cause.getCause() is not None):
            cause = cause.getCause()
        errors = jpype.JClass("org.apache.kafka.common.protocol.Errors")
        retriable = jpype.JClass("org.apache.kafka.common.errors.RetriableException")
        if cause.getClass().getName() == "java.util.concurrent.TimeoutException":
            raise JavaKafkaError("_TIMED_OUT", "no answer before the request timeout",
                                 True) from None
        code = str(errors.forException(cause).name())
        message = str(cause.getMessage() or cause.getClass().getSimpleName())
        raise JavaKafkaError(code, message, isinstance(cause, retriable)) from None


def _list(values: Sequence[str]) -> Any:
    import jpype

    return jpype.JClass("java.util.ArrayList")(list(values))


def _specs(group_ids: Sequence[str], spec: Any) -> Any:
    import jpype

    specs = jpype.JClass("java.util.HashMap")()
    for group_id in group_ids:
        specs.put(group_id, spec())
    return specs


def _optional(value: Any) -> Any:
    return value.get() if value.isPresent() else None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _share_description(d: Any) -> KindDescription:
    members = tuple(sorted(
        (Member(member_id=str(m.consumerId()), client_id=str(m.clientId() or ""),
                host=str(m.host() or ""), instance_id=None,
                assignment=tuple(sorted(TopicPartition(str(tp.topic()), int(tp.partition()))
                                        for tp in m.assignment().topicPartitions())),
                member_epoch=int(m.memberEpoch()))
         for m in d.members()), key=lambda m: m.member_id))
    return KindDescription(
        group_type=GroupType.SHARE, state=str(d.groupState()),
        coordinator_id=int(d.coordinator().id()) if d.coordinator() is not None else None,
        group_epoch=int(d.groupEpoch()), assignment_epoch=int(d.targetAssignmentEpoch()),
        members=members)


def _tasks(assignment: Any, target: bool) -> list[StreamsTask]:
    if assignment is None:
        return []
    return [StreamsTask(role, str(task.subtopologyId()), int(partition), target)
            for role, tasks in ((TaskRole.ACTIVE, assignment.activeTasks()),
                                (TaskRole.STANDBY, assignment.standbyTasks()),
                                (TaskRole.WARMUP, assignment.warmupTasks()))
            for task in tasks for partition in task.partitions()]


def _streams_description(d: Any) -> KindDescription:
    members = tuple(sorted(
        (Member(member_id=str(m.memberId()), client_id=str(m.clientId() or ""),
                host=str(m.clientHost() or ""), instance_id=_optional(m.instanceId()),
                assignment=(), member_epoch=int(m.memberEpoch()),
                tasks=tuple(sorted(_tasks(m.assignment(), False)
                                   + _tasks(m.targetAssignment(), True))),
                process_id=str(m.processId()))
         for m in d.members()), key=lambda m: m.member_id))
    subtopologies = tuple(sorted(
        (Subtopology(
            subtopology_id=str(s.subtopologyId()),
            source_topics=tuple(sorted(str(t) for t in s.sourceTopics())),
            repartition_sink_topics=tuple(sorted(str(t) for t in s.repartitionSinkTopics())),
            repartition_source_topics=tuple(sorted(
                str(t) for t in s.repartitionSourceTopics().keySet())),
            changelog_topics=tuple(sorted(str(t) for t in s.stateChangelogTopics().keySet())))
         for s in d.subtopologies()), key=lambda s: s.subtopology_id))
    return KindDescription(
        group_type=GroupType.STREAMS, state=str(d.groupState()),
        coordinator_id=int(d.coordinator().id()) if d.coordinator() is not None else None,
        group_epoch=int(d.groupEpoch()), assignment_epoch=int(d.targetAssignmentEpoch()),
        members=members, topology_epoch=int(d.topologyEpoch()), subtopologies=subtopologies)


def _per_partition(offsets: Any, read: Any) -> tuple[Any, ...]:
    """``read(topic, partition, value)`` for each entry of a Java map of TopicPartition ->
    value (null where the group has nothing there), sorted by topic and partition."""
    return tuple(sorted((read(str(tp.topic()), int(tp.partition()), value)
                         for tp, value in offsets.items()),
                        key=lambda r: (r.topic, r.partition)))


def _share_partition(topic: str, partition: int, info: Any) -> SharePartition:
    if info is None:
        return SharePartition(topic, partition, None, None)
    return SharePartition(topic, partition, int(info.startOffset()), _int(_optional(info.lag())),
                          _int(_optional(info.leaderEpoch())))


def _committed_offset(topic: str, partition: int, meta: Any) -> CommittedOffset:
    if meta is None:
        return CommittedOffset(topic, partition, None)
    return CommittedOffset(topic, partition, int(meta.offset()),
                           _int(_optional(meta.leaderEpoch())), str(meta.metadata()) or None)


def _share_partitions(offsets: Any) -> tuple[SharePartition, ...]:
    return _per_partition(offsets, _share_partition)


def _committed(offsets: Any) -> tuple[CommittedOffset, ...]:
    return _per_partition(offsets, _committed_offset)
