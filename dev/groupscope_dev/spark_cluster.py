"""A Spark standalone cluster for ``dev/stack up --spark-cluster`` and the tests: a master and
one worker of the pyspark wheel (``spark-class org.apache.spark.deploy.master.Master`` and
``...worker.Worker``, its SPARK_HOME), each in the foreground of a process group of its own,
listening on loopback. Logs, pid files and the worker's folder (the executors' logs) are in
its state folder.

The worker runs with spark-submit's environment (``groupscope.analyze.submit.environment``):
its executors run this venv's Python, which has groupscope, as the driver does."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupscope_dev import StackError
from groupscope_dev.ports import LOOPBACK, require_free

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
ROLES = ("master", "worker")


@dataclass
class SparkCluster:
    state_dir: Path
    master_port: int
    webui_port: int  # the master's web UI, and its JSON state at /json/
    worker_webui_port: int
    worker_cores: int = 1
    worker_memory: str = "1g"
    # spark.deploy.defaultCores: the cores an application gets unless it sets
    # spark.cores.max. Without it the first application takes every core of the worker and
    # keeps them while it runs (a Spark Connect server: for ever), so others wait.
    cores_per_app: int | None = None
    daemon_memory: str = "512m"  # the master's and the worker's own heaps
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}"

    def log(self, role: str) -> Path:
        return self.state_dir / f"{role}.log"

    def pid_file(self, role: str) -> Path:
        return self.state_dir / f"{role}.pid"

    def command(self, role: str) -> list[str]:
        from groupscope.analyze.submit import spark_home

        spark_class = str(spark_home() / "bin" / "spark-class")
        if role == "master":
            return [spark_class, MASTER_CLASS, "--host", LOOPBACK,
                    "--port", str(self.master_port), "--webui-port", str(self.webui_port)]
        return [spark_class, WORKER_CLASS, "--host", LOOPBACK,
                "--webui-port", str(self.worker_webui_port),
                "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                "--work-dir", str(self.state_dir / "work"), self.master_url]

    def environment(self) -> dict[str, str]:
        from groupscope.analyze.submit import environment

        master_opts = [
            # The REST submission server is on by default (Spark 4) on the fixed port 6066,
            # unauthenticated; jobs are submitted in client mode here and never need it.
            "-Dspark.master.rest.enabled=false",
            *([f"-Dspark.deploy.defaultCores={self.cores_per_app}"]
              if self.cores_per_app else []),
        ]
        return {**environment(),
                # Everything (RPC, the web UIs, the executors) on loopback.
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_LOG_DIR": str(self.state_dir / "logs"),
                "SPARK_PID_DIR": str(self.state_dir),
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_MASTER_OPTS": " ".join(master_opts)}

    def start(self, timeout_s: float = 120.0) -> None:
        """Starts the master and the worker and waits until the master counts the worker
        alive (a worker retries its master, so both start at once)."""
        if any(self.running(role) for role in ROLES):
            raise StackError(f"a Spark master or worker already runs (pid files in "
                             f"{self.state_dir}); stop it first")
        require_free([self.master_port, self.webui_port, self.worker_webui_port],
                     "Spark standalone cluster", "stop what uses it or choose other ports")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            for role in ROLES:
                with self.log(role).open("ab") as log:
                    self.processes[role] = subprocess.Popen(
                        self.command(role), env=self.environment(), stdout=log,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        start_new_session=True)
                self.pid_file(role).write_text(str(self.processes[role].pid))
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for role, process in self.processes.items():
                if process.poll() is not None:
                    raise StackError(f"the Spark {role} exited ({process.returncode}):\n"
                                     f"{self._tail(role)}")
            state = self.state()
            if state and state.get("status") == "ALIVE" and state.get("aliveworkers", 0) >= 1:
                return
            time.sleep(0.5)
        raise StackError(f"the Spark master at {self.master_url} did not count a live worker "
                         f"in {timeout_s:.0f}s:\n{self._tail('master')}\n{self._tail('worker')}")

    def state(self) -> dict[str, Any] | None:
        """The master's state (its web UI's ``/json/``: workers, active and completed
        applications), or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as answer:  # noqa: S310 - our own loopback URL
                return dict(json.load(answer))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master knows, active and completed (id, name, state,
        cores...)."""
        state = self.state() or {}
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def running(self, role: str) -> bool:
        from groupscope_dev.airflow import process_group_alive

        return process_group_alive(self._pid(role))

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stops the worker (and the executors it started), then the master: the process
        groups this object started, or those its pid files name."""
        from groupscope_dev.airflow import stop_process_group

        for role in reversed(ROLES):
            pid = self._pid(role)
            if pid is not None:
                process = self.processes.get(role)
                reap = process.poll if process is not None else _reaper(pid)
                stop_process_group(pid, timeout_s, reap)
            if role in self.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.processes.pop(role).wait(10)
            self.pid_file(role).unlink(missing_ok=True)

    def describe(self) -> str:
        """One line per daemon, for ``dev/stack status``."""
        state = self.state() or {}
        workers = state.get("aliveworkers", "?")
        apps = len(state.get("activeapps", []))
        return (f"Spark master {self.master_url} (UI {self.webui_url}): "
                f"{'up' if self.running('master') else 'DOWN'}, {workers} live worker(s), "
                f"{apps} running application(s)\n"
                f"Spark worker ({self.worker_cores} core(s), {self.worker_memory}): "
                f"{'up' if self.running('worker') else 'DOWN'}")

    def _pid(self, role: str) -> int | None:
        if role in self.processes:
            return self.processes[role].pid
        try:
            return int(self.pid_file(role).read_text())
        except (OSError, ValueError):
            return None

    def _tail(self, role: str) -> str:
        try:
            return "\n".join(self.log(role).read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return f"(no log at {self.log(role)})"


def _reaper(pid: int) -> Callable[[], None]:
    def reap() -> None:
        """Reaps the daemon's launcher if this process started it (else it is not our child):
        a zombie would keep its process group alive."""
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)

    return reap
