"""A long-lived Spark Connect server for the live analytics (``dev/stack``, ``./run`` and the
tests): ``sbin/start-connect-server.sh`` of the pyspark wheel (its SPARK_HOME), in the
foreground of a process group of its own, with a ``local[2]`` master and the confs every
groupscope Spark application runs with (``groupscope.analyze.io.spark_conf``), listening on
loopback. Its log and pid file are in its state folder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from groupscope_dev import StackError
from groupscope_dev.ports import LOOPBACK, require_free, wait_for_port


@dataclass
class SparkConnectServer:
    state_dir: Path
    port: int
    master: str = "local[2]"
    cores: int = 2
    driver_memory: str = "1g"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def log(self) -> Path:
        return self.state_dir / "spark-connect.log"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "spark-connect.pid"

    def command(self) -> list[str]:
        from groupscope.analyze.io import spark_conf
        from groupscope.analyze.submit import spark_home

        conf = {**spark_conf(self.cores), "spark.driver.memory": self.driver_memory,
                "spark.connect.grpc.binding.address": LOOPBACK,
                "spark.connect.grpc.binding.port": str(self.port)}
        argv = [str(spark_home() / "sbin" / "start-connect-server.sh"), "--master", self.master]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        return argv

    def environment(self) -> dict[str, str]:
        from groupscope.analyze.submit import environment

        return {**environment(),
                # In the foreground (no pid file of spark-daemon.sh's, no nohup): this object
                # owns the process and its group.
                "SPARK_NO_DAEMONIZE": "1",
                "SPARK_LOG_DIR": str(self.state_dir / "logs"),
                "SPARK_PID_DIR": str(self.state_dir)}

    def start(self, timeout_s: float = 180.0) -> None:
        """Starts the server and waits until it answers a query."""
        if self.running():
            raise StackError(f"a Spark Connect server already runs (pid file {self.pid_file}); "
                             "stop it first")
        require_free([self.port], "Spark Connect", "stop what uses it or choose another port")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command(), env=self.environment(), stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        self.pid_file.write_text(str(self.process.pid))
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise StackError(f"the Spark Connect server exited ({self.process.returncode}):"
                                 f"\n{self._tail()}")
            if wait_for_port(self.port, min(deadline, time.monotonic() + 2)):
                break
        else:
            raise StackError(f"the Spark Connect server did not listen on :{self.port} in "
                             f"{timeout_s:.0f}s:\n{self._tail()}")
        # Listening is not serving: a query in a child process (a process whose pyspark took
        # a remote session stays in Connect mode; the caller's may be a local one).
        probe = ("import sys; from pyspark.sql import SparkSession; "
                 "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); "
                 "assert s.range(3).count() == 3; s.stop()")
        left = max(10.0, deadline - time.monotonic())
        done = subprocess.run([_python(), "-c", probe, self.url], capture_output=True,
                              text=True, timeout=left, check=False)
        if done.returncode != 0:
            raise StackError(f"the Spark Connect server at {self.url} does not answer:\n"
                             f"{done.stderr[-2000:]}")

    def running(self) -> bool:
        from groupscope_dev.airflow import process_group_alive

        return process_group_alive(self._pid())

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stops the server's process group (this object's, or the one its pid file names)."""
        from groupscope_dev.airflow import stop_process_group

        pid = self._pid()
        if pid is not None:
            reap = self.process.poll if self.process is not None else (lambda: _reap(pid))
            stop_process_group(pid, timeout_s, reap)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        self.pid_file.unlink(missing_ok=True)

    def send_signal(self, sig: int) -> None:
        """Signals the server's process group: SIGSTOP freezes it as a hung server would be
        (its port still accepts connections, nothing answers), SIGCONT resumes it."""
        pid = self._pid()
        if pid is None:
            raise StackError("no Spark Connect server runs")
        os.killpg(pid, sig)

    def _pid(self) -> int | None:
        if self.process is not None:
            return self.process.pid
        try:
            return int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None

    def _tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return f"(no log at {self.log})"


def _reap(pid: int) -> None:
    """Reaps the server's launcher if this process started it (else it is not our child): a
    zombie would keep its process group alive."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _python() -> str:
    import sys

    return sys.executable
