"""Real members of the Kafka 4.2+ group kinds, and Kafka's own tools for them, from the cached
Maven Central jars: share consumers (``ConsoleShareConsumer``, KIP-932), Kafka Streams
applications on the streams rebalance protocol (``WordCountDemo`` with
``group.protocol=streams``, KIP-1071), and ``kafka-share-groups.sh`` /
``kafka-streams-groups.sh`` (their classes). No hand-written Java."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from groupscope_dev.kafka import (
    DEFAULT_KAFKA_VERSION,
    classpath,
    kafka_libs,
    require_java,
    streams_libs,
)

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
STREAMS_GROUP_COMMAND = "org.apache.kafka.tools.streams.StreamsGroupCommand"
SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
WORD_COUNT = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"
# WordCountDemo's topics (its source names them).
WORD_COUNT_INPUT = "streams-plaintext-input"
WORD_COUNT_OUTPUT = "streams-wordcount-output"
# Short-lived JVMs: start fast, stay small.
_JVM_FLAGS = ["-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def _kafka_classpath(version: str = DEFAULT_KAFKA_VERSION) -> str:
    return classpath(kafka_libs(version))


def run_tool(tool: str, *args: str, version: str = DEFAULT_KAFKA_VERSION,
             timeout: float = 60.0) -> str:
    """A Kafka command-line tool's standard output (its class, as the .sh scripts run it)."""
    result = subprocess.run(
        [require_java(), *_JVM_FLAGS, "-cp", _kafka_classpath(version), tool, *args],
        capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}"[-3000:])
    return result.stdout


@dataclass
class JavaProcesses:
    """Java processes this helper started, stopped (by their own pids) together."""

    logs: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                self.stop(process)


def share_consumer(procs: JavaProcesses, bootstrap: str, topic: str, group: str,
                   name: str, max_messages: int | None = None) -> subprocess.Popen[bytes]:
    """A real share consumer (Kafka's console share consumer): acknowledges every record it
    gets; with ``max_messages`` it leaves after that many."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group]
    if max_messages is not None:
        args += ["--max-messages", str(max_messages)]
    return procs.spawn(name, [require_java(), *_JVM_FLAGS, "-cp", _kafka_classpath(),
                              SHARE_CONSUMER, *args])


def streams_instance(procs: JavaProcesses, bootstrap: str, application_id: str,
                     name: str, state_dir: Path,
                     version: str = DEFAULT_KAFKA_VERSION) -> subprocess.Popen[bytes]:
    """One instance of Kafka's WordCountDemo on the streams rebalance protocol. Its topics
    (``WORD_COUNT_INPUT``, ``WORD_COUNT_OUTPUT``) must exist; the broker creates the
    internal ones. Offsets are committed every 100 ms, so a test sees them at once."""
    props = procs.logs / f"{name}.properties"
    procs.logs.mkdir(parents=True, exist_ok=True)
    props.write_text("".join(f"{k}={v}\n" for k, v in {
        "bootstrap.servers": bootstrap, "application.id": application_id,
        "group.protocol": "streams", "state.dir": str(state_dir),
        "commit.interval.ms": "100",
    }.items()))
    libs = kafka_libs(version)
    logging = [str(p) for p in sorted(libs.glob("log4j-*.jar"))]
    jars = os.pathsep.join([classpath(streams_libs(version)), *logging])
    return procs.spawn(name, [require_java(), "-Xmx192m", "-cp", jars, WORD_COUNT, str(props)])
