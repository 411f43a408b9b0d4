"""docker-compose.yml, validated without a Docker engine: interpolated with .env.example as
Compose does, validated against Compose's own schema (compose-go's compose-spec.json, pinned in
dev/compose-validator, fetched once from the Go module proxy), then held to the deployment's
rules: healthchecks or one-shots, depends_on conditions, no secret in the file, every variable
in .env.example, the connections the code uses, Airflow's metadata database apart from the
warehouse, the heartbeat configured, Grafana on the read-only role, the files it mounts and
builds from, and the compose section of docs/operations.md."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from datetime import timedelta
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
RULES = ROOT / "deploy" / "groupscope" / "rules.yaml"
AIRFLOW_COMPONENTS = ("airflow-init", "airflow-apiserver", "airflow-scheduler",
                      "airflow-dag-processor", "airflow-triggerer")
ONE_SHOT = "service_completed_successfully"
CONDITIONS = {"service_healthy", ONE_SHOT}
# Variables that hold secrets: always required (${VAR:?...}), never given a default.
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY$")
def _validator() -> ModuleType:
    path = ROOT / "dev" / "compose-validator"
    loader = SourceFileLoader("compose_validator", str(path))
    spec = spec_from_loader("compose_validator", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


cv = _validator()


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return dict(cv.read_env_file(ENV_EXAMPLE))


@pytest.fixture(scope="module")
def used(env: dict[str, str]) -> set[str]:
    names: set[str] = set()
    cv.load(COMPOSE, env, names)
    return names


@pytest.fixture(scope="module")
def config(env: dict[str, str]) -> dict[str, Any]:
    """The file as Compose sees it with .env.example."""
    return dict(cv.load(COMPOSE, env))


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """The file before interpolation (the variable references themselves)."""
    return dict(yaml.safe_load(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def services(config: dict[str, Any]) -> dict[str, Any]:
    return dict(config["services"])


def _depends(service: dict[str, Any]) -> dict[str, Any]:
    depends = service.get("depends_on") or {}
    return {name: None for name in depends} if isinstance(depends, list) else dict(depends)


def _environment(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)
    return {str(k): "" if v is None else str(v) for k, v in environment.items()}


# -- Compose itself -----------------------------------------------------------------------------
def test_the_pinned_schema_is_compose_gos_own() -> None:
    path = cv.schema_path()  # downloads once (dev/bootstrap does it first), then the cache
    assert cv.MODULE == "github.com/compose-spec/compose-go/v2"
    assert re.fullmatch(r"v2\.\d+\.\d+", cv.VERSION)
    assert cv._sha256(path.read_bytes()) == cv.SCHEMA_SHA256
    assert json.loads(path.read_text())["title"] == "Compose Specification"


def test_the_compose_file_is_valid_for_compose() -> None:
    assert cv.validate(COMPOSE, ENV_EXAMPLE) == []


def test_the_validator_rejects_what_compose_rejects(tmp_path: Path) -> None:
    """The same validation catches a wrong key, a wrong type, a bad duration, an unknown
    dependency and a missing required variable (it is not vacuous)."""
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump({
        "services": {
            "a": {"image": "x:1", "restart_policy": "always",
                  "healthcheck": {"test": ["CMD", "true"], "interval": "ten"},
                  "ports": "8080:8080",
                  "depends_on": {"nope": {"condition": "service_healthy"}},
                  "environment": {"P": "${NEEDED:?set NEEDED}"}}}}))
    env = tmp_path / ".env"
    env.write_text("NEEDED=1\n")
    errors = cv.validate(bad, env)
    assert any("restart_policy" in e for e in errors), errors
    assert any(e.startswith("services.a.ports:") for e in errors), errors
    assert any("'ten' is not a duration" in e for e in errors), errors
    assert any("no service 'nope'" in e for e in errors), errors
    env.write_text("NEEDED=\n")
    assert cv.validate(bad, env) == [
        "services.a.environment.P: required variable NEEDED is missing a value: set NEEDED"]


@pytest.mark.parametrize(("text", "expected"), [
    ("plain", "plain"),
    ("$$HOSTNAME and $${X}", "$HOSTNAME and ${X}"),
    ("${SET}/$SET", "v/v"),
    ("${UNSET:-dflt} ${EMPTY:-dflt} ${EMPTY-dflt}", "dflt dflt "),
    ("${UNSET:-${SET}}", "v"),
    ("${SET:+alt}${EMPTY:+alt}${EMPTY+alt}", "altalt"),
    ("${SET:?must}", "v"),
    ('{"password": "${SET:?x}"}', '{"password": "v"}'),
])
def test_interpolation_is_composes(text: str, expected: str) -> None:
    assert cv.interpolate(text, {"SET": "v", "EMPTY": ""}) == expected


@pytest.mark.parametrize("text", ["${UNSET:?say why}", "${EMPTY:?say why}", "${UNSET?say why}"])
def test_a_required_variable_without_a_value_is_an_error(text: str) -> None:
    with pytest.raises(cv.ComposeError, match="say why"):
        cv.interpolate(text, {"EMPTY": ""})


# -- the stack's rules -----------------------------------------------------------------------
def test_the_full_stack_is_there(services: dict[str, Any]) -> None:
    for name in ("kafka", "demo", "warehouse", "warehouse-migrate", "warehouse-reader",
                 "airflow-db", "airflow-init", "airflow-apiserver", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-triggerer", "spark-master", "spark-worker",
                 "spark-connect", "grafana-provision", "grafana", "mailpit",
                 "heartbeat-catcher"):
        assert name in services, name
    commands = {name: " ".join(map(str, s.get("command") or [])) for name, s in services.items()}
    assert commands["airflow-init"] == "airflow db migrate"
    assert commands["airflow-scheduler"] == "airflow scheduler"
    assert commands["airflow-dag-processor"] == "airflow dag-processor"
    assert commands["airflow-triggerer"] == "airflow triggerer"
    assert "airflow api-server" in (ROOT / "deploy/airflow/api-server.sh").read_text()
    assert "org.apache.spark.deploy.master.Master" in commands["spark-master"]
    assert "org.apache.spark.deploy.worker.Worker spark://spark-master:7077" \
        in commands["spark-worker"]
    assert "start-connect-server.sh" in (ROOT / "deploy/spark/connect-server.sh").read_text()
    assert services["spark-connect"]["environment"]["SPARK_MASTER_URL"] \
        == "spark://spark-master:7077"
    assert commands["demo"].startswith("python -m groupscope_dev demo --bootstrap kafka:9092")
    # KRaft formats its storage with this id: 16 bytes in base64url, 22 characters.
    cluster_id = str(services["kafka"]["environment"]["CLUSTER_ID"])
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16 and len(cluster_id) == 22


def test_images_are_pinned(services: dict[str, Any]) -> None:
    images = {name: s["image"] for name, s in services.items()}
    for name, image in images.items():
        assert re.search(r":[\w.-]*\d", image), f"{name}: {image} has no version tag"
    assert images["kafka"].startswith("apache/kafka:4.")
    assert images["warehouse"].startswith("postgres:17")
    assert images["airflow-db"].startswith("postgres:17")
    assert images["grafana"].startswith("grafana/grafana:12.")
    built = {name for name, s in services.items() if "build" in s}
    assert {s["image"] for name, s in services.items() if name in built} == {"groupscope:0.1.0"}
    assert {"demo", "airflow-scheduler", "spark-connect", "grafana-provision"} <= built


def test_every_service_is_healthchecked_or_a_one_shot(services: dict[str, Any]) -> None:
    waited_for = {target: condition for s in services.values()
                  for target, how in _depends(s).items()
                  for condition in [(how or {}).get("condition")]}
    for name, service in services.items():
        health = service.get("healthcheck")
        if health is not None and not health.get("disable"):
            assert health.get("test"), name
            continue
        assert service.get("restart") == "no", f"{name}: no healthcheck and not a one-shot"
        assert waited_for.get(name) == ONE_SHOT, \
            f"{name}: a one-shot nothing waits for with {ONE_SHOT}"


def test_every_depends_on_has_a_condition_that_can_be_met(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for target, how in _depends(service).items():
            condition = (how or {}).get("condition")
            assert condition in CONDITIONS, f"{name} -> {target}: condition {condition!r}"
            if condition == "service_healthy":
                assert services[target].get("healthcheck"), f"{target} has no healthcheck"
            else:
                assert services[target].get("restart") == "no", \
                    f"{target} is waited for as a one-shot but restarts"


def test_no_secret_is_written_in_the_file(raw: dict[str, Any], env: dict[str, str]) -> None:
    text = COMPOSE.read_text()
    secrets = {k for k in env if SECRET_NAME.search(k)}
    assert {"POSTGRES_PASSWORD", "WAREHOUSE_PASSWORD", "AIRFLOW_DB_PASSWORD",
            "GROUPSCOPE_READER_PASSWORD", "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_JWT_SECRET",
            "AIRFLOW_SECRET_KEY", "GRAFANA_ADMIN_PASSWORD"} <= secrets
    # Every use of a secret variable is required: no default that would be a literal secret.
    for ref in re.finditer(r"\$\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}", text):
        if ref.group(1) in secrets:
            assert ref.group(2).startswith(":?"), f"${{{ref.group(1)}{ref.group(2)}}}"
    # The placeholders of .env.example are nowhere in the file.
    for name in secrets:
        assert env[name].startswith("change-me"), f".env.example {name} is not a placeholder"
        assert env[name] not in text
    # Every secret-looking setting is a variable: environment values, JSON connection
    # passwords and the passwords in URLs.
    for name, service in {**raw["services"], "x-airflow-env": {"environment":
                                                                  raw["x-airflow-env"]}}.items():
        for key, value in _environment(service).items():
            if SECRET_NAME.search(key) and not key.endswith("_FILE"):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", value), f"{name}: {key}={value}"
            if key.startswith("AIRFLOW_CONN_") and value.startswith("{"):
                password = json.loads(value).get("password")
                assert password is None or re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", password), \
                    f"{name}: {key}"
            for url_password in re.findall(r"://[^:/@\s]+:(\$\{[^}]*\}|[^@\s]+)@", value):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", url_password), f"{name}: {key}"


def test_every_variable_is_in_env_example_and_no_more(env: dict[str, str],
                                                      used: set[str]) -> None:
    assert used - set(env) == set(), "used by docker-compose.yml, missing from .env.example"
    assert set(env) - used == set(), "in .env.example, used by nothing"


def test_env_is_not_committed() -> None:
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT, check=False)
    assert ignored.returncode == 0, ".env is not in .gitignore"
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", ".env"], cwd=ROOT,
                             capture_output=True, check=False)
    assert tracked.returncode != 0, ".env is committed"


def test_airflow_has_the_connections_the_code_uses(services: dict[str, Any]) -> None:
    from groupscope.settings import Settings

    plugin = (ROOT / "plugins" / "groupscope_airflow.py").read_text()
    ids = dict(re.findall(r'^(\w+_CONN_ID) = "(\w+)"', plugin, re.M))
    from groupscope.serve.alerting.rules import load_rules

    rules = load_rules(RULES)  # the stack's: the built-in channels and the heartbeat's
    wanted = {
        ids["WAREHOUSE_CONN_ID"]: "postgres",
        Settings.model_fields["spark_conn_id"].default: "spark",
        Settings.model_fields["spark_connect_conn_id"].default: "spark_connect",
        **{c.connection: None for c in rules.channels},
    }
    wanted["groupscope_smtp"] = "smtp"
    wanted["groupscope_deadman"] = "http"
    assert set(wanted) >= {"groupscope_warehouse", "groupscope_alerts", "groupscope_slack",
                           "groupscope_smtp", "groupscope_deadman", "spark_default",
                           "spark_connect_default"}
    for name in AIRFLOW_COMPONENTS:
        environment = _environment(services[name])
        conns = {k[len("AIRFLOW_CONN_"):].lower(): v for k, v in environment.items()
                 if k.startswith("AIRFLOW_CONN_")}
        assert set(wanted) <= set(conns), f"{name}: missing {set(wanted) - set(conns)}"
        for conn_id, conn_type in wanted.items():
            if conn_type is None and conns[conn_id] == "":
                continue  # an optional channel .env.example leaves out
            assert json.loads(conns[conn_id])["conn_type"] == conn_type, conn_id
        kafka = {i: json.loads(v) for i, v in conns.items() if i.startswith("kafka_")}
        assert list(kafka) == ["kafka_local"], "the watched cluster is `local`, as with ./run"
        assert kafka["kafka_local"]["conn_type"] == "kafka"
        assert kafka["kafka_local"]["extra"]["bootstrap.servers"] == "kafka:9092"
        warehouse = json.loads(conns["groupscope_warehouse"])
        assert (warehouse["host"], warehouse["login"], warehouse["schema"]) \
            == ("warehouse", "groupscope", "groupscope")
        assert json.loads(conns["spark_default"])["host"] == "spark://spark-master"
        assert json.loads(conns["spark_connect_default"])["host"] == "spark-connect"
        assert json.loads(conns["groupscope_smtp"])["host"] == "mailpit"
        assert environment["GROUPSCOPE_LANDING"] == "/landing"
        assert "landing:/landing" in services[name]["volumes"]
    # The components agree on their shared secrets (they come from one anchor).
    shared = ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY",
              "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    assert len({tuple(_environment(services[n])[k] for k in shared)
                for n in AIRFLOW_COMPONENTS}) == 1
    # Spark executors read the landing zone at the path the drivers give them.
    for name in ("spark-worker", "spark-connect"):
        assert "landing:/landing" in services[name]["volumes"]


def _data_volume(service: dict[str, Any]) -> str:
    [volume] = [m.split(":")[0] for m in service["volumes"]
                if m.split(":")[1] == "/var/lib/postgresql/data"]
    return str(volume)


def _needs(services: dict[str, Any], name: str) -> set[str]:
    """Every service ``name`` waits for at `up`, through the others."""
    found: set[str] = set()
    todo = [name]
    while todo:
        for target in _depends(services[todo.pop()]):
            if target not in found:
                found.add(target)
                todo.append(target)
    return found


def test_airflows_metadata_database_is_apart_from_the_warehouse(
        services: dict[str, Any], raw: dict[str, Any]) -> None:
    """With the warehouse's server down, Airflow still runs the alert task that says so: its
    metadata database is another service, on another volume, and no Airflow component waits
    for the warehouse's server, but the scheduler's first start (the migrations)."""
    metadata = urlsplit(_environment(services["airflow-scheduler"])
                        ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    warehouse = json.loads(_environment(services["airflow-scheduler"])
                           ["AIRFLOW_CONN_GROUPSCOPE_WAREHOUSE"])
    assert (metadata.hostname, metadata.port, metadata.username, metadata.path) \
        == ("airflow-db", 5432, "airflow", "/airflow")
    assert warehouse["host"] == "warehouse" and metadata.hostname != warehouse["host"]
    assert _data_volume(services["airflow-db"]) != _data_volume(services["warehouse"])
    assert {_data_volume(services[n]) for n in ("airflow-db", "warehouse")} \
        <= set(raw["volumes"])
    # Each server creates only its own database and owner role, with the same script.
    for name, owner, password in (("airflow-db", "airflow", "AIRFLOW_DB_PASSWORD"),
                                  ("warehouse", "groupscope", "WAREHOUSE_PASSWORD")):
        environment = _environment(raw["services"][name])
        assert environment["DATABASE_OWNER"] == owner
        assert environment["DATABASE_OWNER_PASSWORD"].startswith(f"${{{password}:?")
        assert not {"AIRFLOW_DB_PASSWORD", "WAREHOUSE_PASSWORD"} & set(environment)
        assert "./deploy/postgres/initdb.sh:/docker-entrypoint-initdb.d/10-groupscope.sh:ro" \
            in services[name]["volumes"]
        assert services[name]["healthcheck"]["test"][-4:] == ["-U", owner, "-d", owner]
    assert metadata.password == cv.read_env_file(ENV_EXAMPLE)["AIRFLOW_DB_PASSWORD"]
    script = (ROOT / "deploy/postgres/initdb.sh").read_text()
    assert "CREATE DATABASE :\"owner\" OWNER :\"owner\"" in script
    # The migrations wait for Airflow's own server; the components that keep running wait
    # for the warehouse's at most through the migrations, at the scheduler's first start.
    assert _depends(services["airflow-init"]) == {"airflow-db": {"condition": "service_healthy"}}
    for name in AIRFLOW_COMPONENTS:
        assert "airflow-db" in _needs(services, name) or name == "airflow-init", name
        assert "warehouse" not in _depends(services[name]), name
        if name != "airflow-scheduler":
            assert "warehouse" not in _needs(services, name), name
    assert "warehouse" not in _needs(services, "airflow-scheduler") - _needs(
        services, "warehouse-migrate") - {"warehouse-migrate"}


def test_the_heartbeat_goes_to_a_dead_mans_switch(services: dict[str, Any],
                                                   raw: dict[str, Any]) -> None:
    """Every Airflow component reads the stack's rules file, which sends the heartbeat to the
    `deadman` channel and no incident there; its connection is required in .env and is, in
    .env.example, the stack's heartbeat-catcher, listening where it points and expecting the
    heartbeat as often as the rules send it. The rules are ./run's (heartbeat_rules), every 5 m."""
    from groupscope.serve.alerting.rules import load_rules
    from groupscope_dev.__main__ import build_parser as build_stack_parser
    from groupscope_dev.heartbeatcatcher import DEADMAN_CHANNEL, heartbeat_rules

    rules = load_rules(RULES)
    assert rules.heartbeat is not None and rules.heartbeat.channels == [DEADMAN_CHANNEL]
    every = rules.heartbeat.every
    assert every == timedelta(minutes=5)
    assert yaml.safe_load(RULES.read_text()) == yaml.safe_load(heartbeat_rules(every)) | {
        "heartbeat": {"channels": [DEADMAN_CHANNEL], "every": "5m"}}
    assert all(DEADMAN_CHANNEL not in route.channels for route in rules.routes)

    mount = "/etc/groupscope/rules.yaml"
    deadman = set()
    for name in AIRFLOW_COMPONENTS:
        environment = _environment(services[name])
        assert environment["GROUPSCOPE_ALERT_RULES"] == mount, name
        assert f"./deploy/groupscope/rules.yaml:{mount}:ro" in services[name]["volumes"], name
        deadman.add(environment["AIRFLOW_CONN_GROUPSCOPE_DEADMAN"])
    assert _environment({"environment": raw["x-airflow-env"]})[
        "AIRFLOW_CONN_GROUPSCOPE_DEADMAN"].startswith("${GROUPSCOPE_DEADMAN_CONNECTION:?")
    [connection] = deadman
    url = urlsplit(json.loads(connection)["password"])
    # The catcher's command, read by the dev stack's own parser.
    catcher = services["heartbeat-catcher"]
    command = [str(c) for c in catcher["command"]]
    assert command[:3] == ["python", "-m", "groupscope_dev"]
    args = build_stack_parser().parse_args(command[3:])
    assert args.action == "heartbeat-catcher"
    assert (url.scheme, url.hostname, url.port) == ("http", "heartbeat-catcher", args.port)
    assert args.host == "0.0.0.0"
    assert args.every == every.total_seconds()
    assert f"'127.0.0.1', {args.port}" in " ".join(catcher["healthcheck"]["test"])


def test_grafana_logs_in_as_the_read_only_role(services: dict[str, Any],
                                               raw: dict[str, Any]) -> None:
    from groupscope.serve.grafana import READER_ROLE

    grafana, provision = services["grafana"], services["grafana-provision"]
    raw_env = _environment(raw["services"]["grafana"])
    assert raw_env["GROUPSCOPE_READER_PASSWORD"].startswith("${GROUPSCOPE_READER_PASSWORD:?")
    owner_secrets = ("WAREHOUSE_PASSWORD", "POSTGRES_PASSWORD")
    for name in ("grafana", "grafana-provision"):
        text = json.dumps(raw["services"][name])
        assert not any(s in text for s in owner_secrets), f"{name} sees an owner's password"
    # Grafana reads the tree the one-shot wrote, with the library's own command.
    mount = "/etc/grafana/provisioning"
    assert provision["command"] == ["groupscope", "grafana", "provision", mount]
    assert f"grafana-provisioning:{mount}" in provision["volumes"]
    assert f"grafana-provisioning:{mount}:ro" in grafana["volumes"]
    assert _depends(grafana)["grafana-provision"]["condition"] == ONE_SHOT
    assert _depends(grafana)["warehouse-reader"]["condition"] == ONE_SHOT
    # The role is created, after the migrations, by the superuser with the same password.
    reader = services["warehouse-reader"]
    script = (ROOT / "deploy/postgres/reader-role.sh").read_text()
    assert "reader_password=\"$GROUPSCOPE_READER_PASSWORD\"" in script
    assert "/opt/groupscope/reader_role.sql" in script
    assert "./src/groupscope/warehouse/reader_role.sql:/opt/groupscope/reader_role.sql:ro" \
        in reader["volumes"]
    assert _environment(raw["services"]["warehouse-reader"])["GROUPSCOPE_READER_PASSWORD"] \
        == raw_env["GROUPSCOPE_READER_PASSWORD"]
    assert _depends(reader)["warehouse-migrate"]["condition"] == ONE_SHOT
    assert READER_ROLE == "grafana_reader"


def test_the_provisioned_datasource_is_the_reader(tmp_path: Path) -> None:
    """What grafana-provision writes (the library's `groupscope grafana provision`) logs in as
    grafana_reader with the password Grafana gets from its environment."""
    import argparse

    from groupscope import cli
    from groupscope.serve.grafana import READER_ROLE
    from groupscope.settings import load_settings

    def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next((dict(a.choices) for a in parser._actions
                     if isinstance(a, argparse._SubParsersAction)), {})

    grafana = commands(cli.build_parser(load_settings()))["grafana"]
    assert "provision" in commands(grafana)
    assert cli.main(["grafana", "provision", str(tmp_path)]) == 0

    sources = [s for f in sorted((tmp_path / "datasources").glob("*.y*ml"))
               for s in (yaml.safe_load(f.read_text()) or {}).get("datasources", [])]
    assert sources, "no datasource provisioned"
    for source in sources:
        assert source["user"] == READER_ROLE
        assert source["secureJsonData"]["password"] == "$__env{GROUPSCOPE_READER_PASSWORD}"


def test_what_the_file_mounts_and_builds_from_exists(raw: dict[str, Any]) -> None:
    for name, service in raw["services"].items():
        for mount in service.get("volumes") or []:
            source, kind = cv._mount_source(mount)
            if kind == "bind":
                assert (ROOT / source).exists(), f"{name}: {source}"
    dockerfile = (ROOT / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", dockerfile, re.M):
        for path in source.split():
            assert (ROOT / path).exists(), f"Dockerfile copies {path}"
            assert _docker_context_keeps(path), f".dockerignore drops {path}"
    # The script entry points the services run are in deploy/ and executable.
    for script in ("deploy/postgres/initdb.sh", "deploy/postgres/reader-role.sh",
                   "deploy/airflow/api-server.sh", "deploy/spark/connect-server.sh"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} is not executable"
    text = COMPOSE.read_text()
    for path in re.findall(r"/opt/groupscope/deploy/(\S+?)[\"\s]", text):
        assert (ROOT / "deploy" / path).is_file(), path


def _docker_context_keeps(path: str) -> bool:
    """Whether .dockerignore (here: ignore all, then re-include) keeps ``path``."""
    kept = [line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
            if line.startswith("!")]
    return any(path == k or path.startswith(k + "/") for k in kept)


def test_the_image_installs_the_wheel_with_the_locked_dependencies() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.M)
    assert "default-jre-headless" in dockerfile
    lock = dockerfile.index("-r /tmp/requirements.lock")
    wheel = dockerfile.index("--no-deps /tmp/dist/groupscope-")
    assert lock < wheel
    assert "COPY --chown=groupscope:0 dags /opt/airflow/dags" in dockerfile
    assert "COPY --chown=groupscope:0 plugins /opt/airflow/plugins" in dockerfile


# -- its documentation ---------------------------------------------------------------------------
DOC = ROOT / "docs" / "operations.md"


def _doc_section() -> str:
    text = DOC.read_text()
    match = re.search(r"^## docker compose\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, f"{DOC.relative_to(ROOT)} has no '## docker compose' section"
    return match.group(1)


def test_the_doc_names_only_what_the_file_has(services: dict[str, Any]) -> None:
    section = _doc_section()
    named = set(re.findall(r"service `([\w-]+)`", section))
    for row in re.findall(r"^\| ((?:`[\w-]+`(?:, )?)+) \|", section, re.M):
        named |= set(re.findall(r"`([\w-]+)`", row))
    assert named - set(services) == set(), "the doc names services the file does not have"
    assert set(services) - named == set(), "services the doc's table leaves out"
    published = {int(str(p).split(":")[-2]) for s in services.values()
                 for p in s.get("ports") or []}
    mentioned = {int(p) for p in re.findall(r"localhost:(\d+)", section)}
    assert mentioned, "the doc mentions no port"
    assert mentioned - published == set(), "the doc names ports the file does not publish"
    assert published - mentioned == set(), "published ports the doc does not mention"
    for step in ("cp .env.example .env", "docker compose up -d"):
        assert step in section
    assert "./run" in section
