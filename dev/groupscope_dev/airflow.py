"""A local Airflow for the main job and the tests: ``airflow standalone`` (scheduler, DAG
processor, API server, triggerer; LocalExecutor on a SQLite metadata database) in its own
``AIRFLOW_HOME``, pointed at this repository's ``dags/`` and ``plugins/``, with the
connections groupscope needs given as ``AIRFLOW_CONN_*`` environment variables, and a small
client for its REST API v2."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupscope_dev import StackError

REPO = Path(__file__).resolve().parents[2]
ADMIN = "admin"
TERMINAL_STATES = {"success", "failed"}


def connection_env(conn_id: str, conn_type: str, **fields: Any) -> tuple[str, str]:
    """One Airflow connection as its environment variable (JSON form)."""
    return f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, **fields})


def kafka_connection(cluster: str, client: Mapping[str, str]) -> tuple[str, str]:
    return connection_env(f"kafka_{cluster}", "kafka", extra=dict(client))


def warehouse_connection(url: str) -> tuple[str, str]:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return connection_env("groupscope_warehouse", "postgres", host=u.host, port=u.port,
                          login=u.username, password=u.password, schema=u.database)


def spark_connection(master: str = "local[2]") -> tuple[str, str]:
    return connection_env("spark_default", "spark", host=master)


def spark_connect_connection(url: str, conn_id: str = "spark_connect_default") -> tuple[str, str]:
    """A ``spark_connect`` connection (the apache-spark provider's) to a Spark Connect server
    at ``sc://host:port``."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    return connection_env(conn_id, "spark_connect", host=parsed.hostname, port=parsed.port)


@dataclass
class LocalAirflow:
    home: Path
    api_port: int
    log_ports: tuple[int, int]  # the worker's and the triggerer's log servers
    env: dict[str, str] = field(default_factory=dict)  # connections and GROUPSCOPE_* settings
    process: subprocess.Popen[bytes] | None = None
    _token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def environment(self) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        return {
            **os.environ,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_ports[0]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.log_ports[1]),
            "GX_ANALYTICS_ENABLED": "false",
            # spark-submit, and the airflow commands, of this environment
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            **self.env,
        }

    def migrate(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([_airflow(), "db", "migrate"], env=self.environment(),
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StackError(f"airflow db migrate failed:\n{done.stderr[-2000:]}")

    def start(self) -> None:
        """Starts ``airflow standalone`` (its output goes to ``standalone.log`` in the home)."""
        self.migrate()
        log = (self.home / "standalone.log").open("ab")
        self.process = subprocess.Popen([_airflow(), "standalone"], env=self.environment(),
                                        stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise StackError(f"airflow standalone exited ({self.process.returncode}); "
                                 f"see {self.home / 'standalone.log'}")
            try:
                health = self._call("GET", "/api/v2/monitor/health", auth=False)
                if health.get("scheduler", {}).get("status") == "healthy":
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(2)
        raise StackError(f"Airflow was not ready in {timeout_s:.0f}s; "
                         f"see {self.home / 'standalone.log'}")

    def password(self) -> str:
        generated = self.home / "simple_auth_manager_passwords.json.generated"
        return str(json.loads(generated.read_text())[ADMIN])

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One API call. Reads and updates (GET, PATCH) are retried on a server error: with
        a SQLite metadata database the API server answers 500 while another component holds
        the write lock."""
        if self._token is None:
            self._token = self._call("POST", "/auth/token", {"username": ADMIN,
                                                              "password": self.password()},
                                     auth=False)["access_token"]
        attempts = 6 if method in ("GET", "PATCH") else 1
        for attempt in range(1, attempts + 1):
            try:
                return self._call(method, path, body)
            except urllib.error.HTTPError as exc:
                if exc.code < 500 or attempt == attempts:
                    detail = exc.read().decode(errors="replace")[:500]
                    raise StackError(f"Airflow API {method} {path}: HTTP {exc.code} "
                                     f"{detail}") from None
                time.sleep(attempt)
        raise AssertionError("unreachable")

    def _call(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(  # noqa: S310 - our own loopback URL
            self.url + path, method=method, headers=headers,
            data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.loads(response.read() or b"null")

    def dag_ids(self) -> list[str]:
        return [d["dag_id"] for d in self.request("GET", "/api/v2/dags?limit=100")["dags"]]

    def unpause(self, dag_id: str) -> None:
        if self.request("GET", f"/api/v2/dags/{dag_id}")["is_paused"]:
            self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.request(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=-run_after")["dag_runs"]
        return runs

    def trigger(self, dag_id: str) -> str:
        """A manual run now (no logical date: a run of the current hour, see the DAGs)."""
        run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
        return str(run["dag_run_id"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in TERMINAL_STATES:
                return str(state)
            time.sleep(3)
        raise StackError(f"{dag_id} run {run_id} did not finish in {timeout_s:.0f}s")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stops standalone and every process it started (they share its process group)."""
        if self.process is None or self.process.poll() is not None:
            return
        # Polling reaps standalone, which would otherwise linger as a zombie in its group.
        stop_process_group(self.process.pid, timeout_s, self.process.poll)
        self.process.wait(10)


def process_group_alive(group: int | None) -> bool:
    """Whether a process group of that id still has a process (a pid file's, say)."""
    if group is None:
        return False
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_process_group(group: int, timeout_s: float,
                       reap: Callable[[], object] = lambda: None) -> None:
    """SIGTERM to every process of ``group``, so each component shuts down cleanly; SIGKILL to
    what is left after ``timeout_s``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reap()
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")
