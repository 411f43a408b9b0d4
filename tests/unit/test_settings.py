"""Settings: the documented defaults; each bad value is one line naming the variable and the
value (never a secret's); parsing creates nothing, the landing check is separate; warehouses
are migrated once per process; the CLI and the Spark job entry read through the settings."""

from __future__ import annotations

import sys
import threading
import time
import traceback
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from groupscope import cli, warehouse
from groupscope.contract.cluster import ConfigError
from groupscope.settings import SettingsError, is_cron, load_settings, reveal

SECRET = "S3CRET-T0KEN"


def _error(environ: dict[str, str]) -> SettingsError:
    with pytest.raises(SettingsError) as info:
        load_settings(environ)
    return info.value


def test_defaults_when_nothing_is_set(tmp_path: Path) -> None:
    s = load_settings({"AIRFLOW_HOME": str(tmp_path)})
    assert s.landing == tmp_path / "groupscope-landing"
    assert s.snapshot_every == timedelta(seconds=60)
    assert s.ingest_every == timedelta(seconds=300)
    assert s.analytics_schedule == "0 * * * *"
    assert s.kafka_timeout_s == 30
    assert s.retries == 2
    assert s.retry_delay == timedelta(seconds=30)
    assert s.spark_conn_id == "spark_default"
    assert s.kafka_connection_ids == ()
    assert s.alert_log == Path.home() / ".groupscope" / "alerts.jsonl"
    assert s.alert_webhook_url is None and s.warehouse_url is None
    assert s.retention == {"raw": timedelta(days=14), "mart": timedelta(days=90),
                           "hourly": timedelta(days=400), "incidents": timedelta(days=90),
                           "quality": timedelta(days=30), "drops": timedelta(days=400)}
    # Without AIRFLOW_HOME, Airflow's own default home.
    assert load_settings({}).landing == Path.home() / "airflow" / "groupscope-landing"


def test_values_when_set(tmp_path: Path) -> None:
    s = load_settings({
        "GROUPSCOPE_LANDING": str(tmp_path / "landing"), "GROUPSCOPE_SNAPSHOT_EVERY_S": "15",
        "GROUPSCOPE_INGEST_EVERY_S": "2.5", "GROUPSCOPE_ANALYTICS_SCHEDULE": "assets",
        "GROUPSCOPE_KAFKA_TIMEOUT_S": "5", "GROUPSCOPE_RETRIES": "0",
        "GROUPSCOPE_RETRY_DELAY_S": "1", "GROUPSCOPE_SPARK_CONN_ID": "spark_prod",
        "GROUPSCOPE_KAFKA_CONNECTIONS": "kafka_prod, kafka_dr,",
        "GROUPSCOPE_ALERT_LOG": str(tmp_path / "alerts.jsonl"),
        "GROUPSCOPE_ALERT_WEBHOOK_URL": f"https://hooks.example/{SECRET}",
        "WAREHOUSE_URL": f"postgresql://gs:{SECRET}@db:5432/groupscope",
        "GROUPSCOPE_RETENTION_RAW_DAYS": "7", "GROUPSCOPE_RETENTION_MART_DAYS": "30.0",
        "GROUPSCOPE_RETENTION_HOURLY_DAYS": "730", "GROUPSCOPE_OFFSET_FETCH_CONNECTIONS": "2",
        "GROUPSCOPE_RETENTION_INCIDENTS_DAYS": "180", "GROUPSCOPE_RETENTION_QUALITY_DAYS": "7",
        "GROUPSCOPE_RETENTION_DROPS_DAYS": "60",
    })
    assert s.landing == tmp_path / "landing"
    assert (s.snapshot_every, s.ingest_every) == (timedelta(seconds=15), timedelta(seconds=2.5))
    assert s.analytics_schedule == "assets"
    assert (s.kafka_timeout_s, s.retries, s.retry_delay) == (5, 0, timedelta(seconds=1))
    assert s.spark_conn_id == "spark_prod"
    assert s.kafka_connection_ids == ("kafka_prod", "kafka_dr")
    assert s.alert_log == tmp_path / "alerts.jsonl"
    assert reveal(s.alert_webhook_url) == f"https://hooks.example/{SECRET}"
    assert reveal(s.warehouse_url) == f"postgresql://gs:{SECRET}@db:5432/groupscope"
    assert s.retention == {"raw": timedelta(days=7), "mart": timedelta(days=30),
                           "hourly": timedelta(days=730), "incidents": timedelta(days=180),
                           "quality": timedelta(days=7), "drops": timedelta(days=60)}
    assert s.offset_fetch_connections == 2


def test_an_empty_variable_counts_as_unset() -> None:
    s = load_settings({"GROUPSCOPE_SNAPSHOT_EVERY_S": "", "GROUPSCOPE_RETRIES": "",
                       "GROUPSCOPE_ANALYTICS_SCHEDULE": "", "WAREHOUSE_URL": ""})
    assert (s.snapshot_every_s, s.retries, s.analytics_schedule, s.warehouse_url) == \
        (60, 2, "0 * * * *", None)


def test_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUPSCOPE_RETRIES", "5")
    assert load_settings().retries == 5
    monkeypatch.setenv("GROUPSCOPE_RETRIES", "abc")
    assert load_settings({}).retries == 2  # a given environment is the only one read


@pytest.mark.parametrize(("variable", "value", "reason"), [
    ("GROUPSCOPE_SNAPSHOT_EVERY_S", "abc", "is not a number of seconds"),
    ("GROUPSCOPE_SNAPSHOT_EVERY_S", "60s", "is not a number of seconds"),
    ("GROUPSCOPE_INGEST_EVERY_S", "0", "must be a positive number of seconds"),
    ("GROUPSCOPE_KAFKA_TIMEOUT_S", "-5", "must be a positive number of seconds"),
    ("GROUPSCOPE_RETRY_DELAY_S", "nan", "is not a number of seconds"),
    ("GROUPSCOPE_RETRY_DELAY_S", "1e300", "is too many seconds"),
    ("GROUPSCOPE_RETRIES", "-1", "must be 0 or more retries"),
    ("GROUPSCOPE_RETRIES", "two", "is not a whole number of retries"),
    ("GROUPSCOPE_RETRIES", "2.5", "is not a whole number of retries"),
    ("GROUPSCOPE_ANALYTICS_SCHEDULE", "hourly", "is neither \"assets\" nor a cron"),
    ("GROUPSCOPE_ANALYTICS_SCHEDULE", "61 * * * *", "is neither \"assets\" nor a cron"),
    ("GROUPSCOPE_ANALYTICS_SCHEDULE", "0 * * *", "is neither \"assets\" nor a cron"),
    ("GROUPSCOPE_ANALYTICS_SCHEDULE", "0 0 * * * *", "is neither \"assets\" nor a cron"),
    ("GROUPSCOPE_KAFKA_CONNECTIONS", " , ", "names no connection"),
    ("GROUPSCOPE_SPARK_CONN_ID", "spark prod", "is not an Airflow connection id"),
    ("GROUPSCOPE_RETENTION_RAW_DAYS", "0", "must be at least 1 day"),
    ("GROUPSCOPE_OFFSET_FETCH_CONNECTIONS", "0",
     "must be a whole number of connections from 1 to 16"),
    ("GROUPSCOPE_OFFSET_FETCH_CONNECTIONS", "two", "is not a whole number of connections"),
    ("GROUPSCOPE_RETENTION_MART_DAYS", "90d", "is not a whole number of days"),
    ("GROUPSCOPE_RETENTION_HOURLY_DAYS", "0.5", "is not a whole number of days"),
    ("GROUPSCOPE_RETENTION_INCIDENTS_DAYS", "0", "must be at least 1 day"),
    ("GROUPSCOPE_RETENTION_QUALITY_DAYS", "a month", "is not a whole number of days"),
    ("GROUPSCOPE_RETENTION_DROPS_DAYS", "-3", "must be at least 1 day"),
])
def test_a_bad_value_is_one_line_naming_the_variable(variable: str, value: str,
                                                      reason: str) -> None:
    error = _error({variable: value})
    assert str(error).startswith(f"{variable}={value!r} {reason}")
    assert "\n" not in str(error)
    assert isinstance(error, ConfigError)  # the CLI's and the stages' usage error


def test_every_bad_variable_is_named_in_the_one_line() -> None:
    assert str(_error({"GROUPSCOPE_SNAPSHOT_EVERY_S": "abc", "GROUPSCOPE_RETRIES": "-1"})) == (
        "GROUPSCOPE_SNAPSHOT_EVERY_S='abc' is not a number of seconds; "
        "GROUPSCOPE_RETRIES='-1' must be 0 or more retries")


@pytest.mark.parametrize("schedule", ["0 * * * *", "*/15 * * * *", "0 6 * * mon-fri",
                                      "@hourly", "@daily", "assets"])
def test_cron_expressions_and_airflow_presets_are_schedules(schedule: str) -> None:
    assert load_settings({"GROUPSCOPE_ANALYTICS_SCHEDULE": schedule}).analytics_schedule == \
        schedule


def test_without_croniter_a_cron_needs_five_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "croniter", None)  # the import now fails
    assert is_cron("0 * * * *") and is_cron("@weekly")
    assert not is_cron("0 * * *") and not is_cron("0 * * * ;") and not is_cron("hourly")


def test_secrets_are_in_no_repr_and_no_error() -> None:
    s = load_settings({"GROUPSCOPE_ALERT_WEBHOOK_URL": f"https://hooks.example/{SECRET}",
                       "WAREHOUSE_URL": f"postgresql://gs:{SECRET}@db/groupscope"})
    assert SECRET not in repr(s) and SECRET not in str(s)
    for variable, bad in (("GROUPSCOPE_ALERT_WEBHOOK_URL", f"ftp://hooks.example/{SECRET}"),
                          ("WAREHOUSE_URL", f"mysql://gs:{SECRET}@db/groupscope"),
                          ("WAREHOUSE_URL", f"gs:{SECRET}@db/groupscope")):
        error = _error({variable: bad})
        assert str(error).startswith(f"{variable} (not shown: a secret) is not a")
        # Not in what a traceback would show either (no chained pydantic error).
        assert SECRET not in "".join(traceback.format_exception(error))


def test_parsing_creates_no_folder_and_the_landing_check_does(tmp_path: Path) -> None:
    landing = tmp_path / "a" / "landing"
    s = load_settings({"GROUPSCOPE_LANDING": str(landing)})
    assert not landing.exists()
    assert s.writable_landing() == landing
    assert landing.is_dir() and list(landing.iterdir()) == []  # the probe file is gone


def test_a_landing_folder_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    # A regular file as parent: stops root too, where a read-only mode would not.
    (tmp_path / "file").write_text("")
    landing = tmp_path / "file" / "landing"
    with pytest.raises(SettingsError) as info:
        load_settings({"GROUPSCOPE_LANDING": str(landing)}).writable_landing()
    assert str(info.value) == (f"GROUPSCOPE_LANDING={str(landing)!r} cannot be written: "
                               "Not a directory")


def test_a_landing_that_is_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "landing").write_text("")
    with pytest.raises(SettingsError, match=r"^GROUPSCOPE_LANDING='.*' is not a folder$"):
        load_settings({"GROUPSCOPE_LANDING": str(tmp_path / "landing")}).writable_landing()


class CountingMigrate:
    def __init__(self, fail_first: bool = False, pause_s: float = 0.0) -> None:
        self.calls: list[str] = []
        self.fail_first, self.pause_s = fail_first, pause_s
        self.lock = threading.Lock()

    def __call__(self, engine: Any, directory: Path | None = None) -> list[str]:
        with self.lock:
            self.calls.append(engine.url.database)
            first = len(self.calls) == 1
        time.sleep(self.pause_s)
        if self.fail_first and first:
            raise warehouse.WarehouseUnavailable("warehouse is unreachable")
        return ["0001_raw"]


def _url(database: str, password: str = "pw") -> str:
    # Engines are created, never connected: migrate is replaced below.
    return f"postgresql://gs:{password}@127.0.0.1:9/{database}"


def test_ensure_migrated_migrates_once_per_warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    migrate = CountingMigrate()
    monkeypatch.setattr(warehouse, "migrate", migrate)
    db, other = f"wh_{uuid.uuid4().hex}", f"wh_{uuid.uuid4().hex}"
    assert warehouse.ensure_migrated(warehouse.engine_for(_url(db))) == ["0001_raw"]
    assert warehouse.ensure_migrated(warehouse.engine_for(_url(db))) == []
    # The same warehouse whatever the password; another database is another warehouse.
    assert warehouse.ensure_migrated(warehouse.engine_for(_url(db, "other"))) == []
    assert warehouse.ensure_migrated(warehouse.engine_for(_url(other))) == ["0001_raw"]
    assert migrate.calls == [db, other]


def test_a_failed_migration_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    migrate = CountingMigrate(fail_first=True)
    monkeypatch.setattr(warehouse, "migrate", migrate)
    engine = warehouse.engine_for(_url(f"wh_{uuid.uuid4().hex}"))
    with pytest.raises(warehouse.WarehouseUnavailable):
        warehouse.ensure_migrated(engine)
    assert warehouse.ensure_migrated(engine) == ["0001_raw"]
    assert warehouse.ensure_migrated(engine) == []
    assert len(migrate.calls) == 2


def test_concurrent_stages_migrate_once(monkeypatch: pytest.MonkeyPatch) -> None:
    migrate = CountingMigrate(pause_s=0.05)
    monkeypatch.setattr(warehouse, "migrate", migrate)
    engine = warehouse.engine_for(_url(f"wh_{uuid.uuid4().hex}"))
    start = threading.Barrier(8)
    results: list[list[str]] = []

    def stage() -> None:
        start.wait()
        results.append(warehouse.ensure_migrated(engine))

    threads = [threading.Thread(target=stage) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(migrate.calls) == 1
    assert sorted(results) == [[]] * 7 + [["0001_raw"]]


def test_warehouse_migrate_command_always_migrates(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    migrate = CountingMigrate()
    monkeypatch.setattr(warehouse, "migrate", migrate)
    monkeypatch.delenv("WAREHOUSE_URL", raising=False)
    url = _url(f"wh_{uuid.uuid4().hex}")
    warehouse.ensure_migrated(warehouse.engine_for(url))
    for _ in range(2):
        assert cli.main(["warehouse", "migrate", "--url", url]) == 0
        assert capsys.readouterr().out == "applied 1 migration(s): 0001_raw\n"
    assert len(migrate.calls) == 3


def test_the_cli_warehouse_url_defaults_to_the_setting() -> None:
    url = _url("groupscope")
    parser = cli.build_parser(load_settings({"WAREHOUSE_URL": url}))
    assert parser.parse_args(["warehouse", "migrate"]).url == url
    assert parser.parse_args(["warehouse", "load", "--landing", "d"]).url == url
    with pytest.raises(SystemExit):  # required when it is not set
        cli.build_parser(load_settings({})).parse_args(["warehouse", "migrate"])


def test_a_bad_setting_ends_the_cli_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GROUPSCOPE_SNAPSHOT_EVERY_S", "abc")
    assert cli.main(["warehouse", "migrate", "--url", _url("x")]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == (
        "groupscope: error: GROUPSCOPE_SNAPSHOT_EVERY_S='abc' is not a number of seconds\n")


def test_a_bad_setting_ends_a_spark_job_before_spark_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from groupscope import pipeline

    monkeypatch.setenv("GROUPSCOPE_RETRIES", "-1")
    with pytest.raises(SystemExit) as info:
        pipeline.analytics_job("lag", ["--landing", "d", "--cluster", "c",
                                       "--start", "2026-11-21T10:00:00Z",
                                       "--end", "2026-11-21T11:00:00Z"])
    assert str(info.value.code) == \
        "lag_job: error: GROUPSCOPE_RETRIES='-1' must be 0 or more retries"
