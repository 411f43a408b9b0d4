"""Every setting groupscope reads from the environment, in one typed object, validated once at
start-up (the Airflow plugin at import, the CLI and the Spark jobs before they do anything).

A bad value is one ``SettingsError`` whose one-line message names the variable and the value,
e.g. ``GROUPSCOPE_SNAPSHOT_EVERY_S='abc' is not a number of seconds``. Secrets (the alert
webhook URL, the warehouse URL and its password) are ``SecretStr``: never in a message or a
repr. Parsing has no side effects; ``Settings.writable_landing`` creates and checks the landing
folder where it is about to be written.

The variables, their defaults and rules are documented in docs/configuration.md (its table is
checked against this class by tests/unit/test_docs.py).
"""

from __future__ import annotations

import contextvars
import importlib
import math
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from groupscope.contract.cluster import ConfigError

ENV_PREFIX = "GROUPSCOPE_"
WAREHOUSE_URL_ENV = "WAREHOUSE_URL"
ASSETS = "assets"  # the analytics schedule that runs when snapshots land instead of on a cron

# Airflow's cron presets (airflow.sdk CRON_PRESETS): Airflow took them before settings were
# validated here, so a deployment that uses one keeps working.
CRON_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?#-]+$")
# Far above any sensible duration, far below timedelta's limit (an OverflowError, not a message).
_MAX_SECONDS = timedelta(days=365_000).total_seconds()

# The environment load_settings was given (tests, a task's environment); None: os.environ.
# A context variable, not a class attribute: two threads may load different environments.
_ENVIRON: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "groupscope_settings_environ", default=None)


class SettingsError(ConfigError):
    """A setting that cannot work; the one-line message names the variable (never a secret)."""


def _environ() -> Mapping[str, str]:
    given = _ENVIRON.get()
    return os.environ if given is None else given


def _default_landing() -> Path:
    home = _environ().get("AIRFLOW_HOME") or Path.home() / "airflow"
    return Path(home) / "groupscope-landing"


def _default_alert_log() -> Path:
    return Path.home() / ".groupscope" / "alerts.jsonl"


class _MappingEnvSource(EnvSettingsSource):
    """The environment source, over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        # As EnvSettingsSource prepares os.environ: names folded unless case-sensitive, and
        # an empty value counts as unset when env_ignore_empty is on.
        self.env_vars = {
            (key if self.case_sensitive else key.lower()): value
            for key, value in environ.items()
            if not (self.env_ignore_empty and value == "")
        }


class Settings(BaseSettings):
    """What groupscope is configured with. Field ``x`` is ``GROUPSCOPE_X`` (the warehouse URL
    is ``WAREHOUSE_URL``); an empty variable counts as unset, as it always has."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="ignore", frozen=True,
        # Inputs stay out of pydantic's own messages: some are secrets.
        hide_input_in_errors=True,
        # The defaults below are the documented ones; the validators judge what was set.
        validate_default=False,
    )

    # Shared storage every Airflow worker and Spark executor sees.
    landing: Path = Field(default_factory=_default_landing)
    snapshot_every_s: float = 60.0
    ingest_every_s: float = 300.0
    analytics_schedule: str = "0 * * * *"  # a cron expression, or "assets"
    kafka_timeout_s: float = 30.0
    # Connections (AdminClients) each snapshot spreads its one-group OffsetFetch requests over
    # (groupscope.collect.collector.CollectorSettings; docs/benchmarks.md).
    offset_fetch_connections: int = 3
    # Share and streams groups (groupscope.kafka.java_admin): auto (when the cluster has
    # some), always, or never; and the jars of Kafka's Java Admin client they are read with.
    group_kinds: Literal["auto", "always", "never"] = "auto"
    kafka_java_classpath: str = ""
    retries: int = 2
    retry_delay_s: float = 30.0
    spark_conn_id: str = "spark_default"
    # The Airflow connection (type spark_connect) of the Spark Connect server the live
    # analytics run on; without it they fall back to spark-submit through spark_conn_id.
    spark_connect_conn_id: str = "spark_connect_default"
    # Comma-separated Airflow connection ids of the watched clusters; empty: every environment
    # connection of type kafka. A string, not a tuple: pydantic-settings would parse a tuple
    # from the environment as JSON.
    kafka_connections: str = ""
    alert_log: Path = Field(default_factory=_default_alert_log)
    alert_webhook_url: SecretStr | None = None
    # The alert rules file (YAML, groupscope.serve.alerting.rules); unset: the built-in rules alone.
    alert_rules: Path | None = None
    # Grafana's base URL, for the dashboard links in alert messages.
    dashboard_url: str = "http://localhost:3000"
    warehouse_url: SecretStr | None = Field(default=None, validation_alias=WAREHOUSE_URL_ENV)
    # How long the warehouse keeps each family of tables (groupscope.warehouse.partitions),
    # in whole days: the raw snapshot tables, the per-snapshot marts, the hourly roll-ups.
    retention_raw_days: int = 14
    retention_mart_days: int = 90
    retention_hourly_days: int = 400
    # How long the operational tables keep their rows, in whole days: resolved alert incidents
    # (with their deliveries; open ones are kept), quality results, records of dropped
    # partitions (groupscope.pipeline.OPS_RETENTION).
    retention_incidents_days: int = 90
    retention_quality_days: int = 30
    retention_drops_days: int = 400

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment only (no .env file, no secrets folder): what is documented.
        given = _ENVIRON.get()
        if given is None:
            return init_settings, env_settings
        return init_settings, _MappingEnvSource(settings_cls, given)

    @field_validator("snapshot_every_s", "ingest_every_s", "kafka_timeout_s", "retry_delay_s",
                     mode="before")
    @classmethod
    def _seconds(cls, raw: Any) -> float:
        try:
            seconds = float(raw)
        except (TypeError, ValueError):
            raise ValueError("is not a number of seconds") from None
        if math.isnan(seconds):
            raise ValueError("is not a number of seconds")
        if seconds <= 0:
            raise ValueError("must be a positive number of seconds")
        if seconds > _MAX_SECONDS:
            raise ValueError("is too many seconds")
        return seconds

    @field_validator("retries", mode="before")
    @classmethod
    def _retries(cls, raw: Any) -> int:
        try:
            # Through float: "2.0" was accepted before and still is.
            count = float(raw)
        except (TypeError, ValueError):
            raise ValueError("is not a whole number of retries") from None
        if not count.is_integer():
            raise ValueError("is not a whole number of retries")
        if count < 0:
            raise ValueError("must be 0 or more retries")
        return int(count)

    @field_validator("offset_fetch_connections", mode="before")
    @classmethod
    def _connections(cls, raw: Any) -> int:
        try:
            count = float(raw)
        except (TypeError, ValueError):
            raise ValueError("is not a whole number of connections") from None
        if not count.is_integer() or not 1 <= count <= 16:
            raise ValueError("must be a whole number of connections from 1 to 16")
        return int(count)

    @field_validator("retention_raw_days", "retention_mart_days", "retention_hourly_days",
                     "retention_incidents_days", "retention_quality_days",
                     "retention_drops_days", mode="before")
    @classmethod
    def _days(cls, raw: Any) -> int:
        try:
            days = float(raw)
        except (TypeError, ValueError):
            raise ValueError("is not a whole number of days") from None
        if not days.is_integer():
            raise ValueError("is not a whole number of days")
        if days < 1:
            raise ValueError("must be at least 1 day (retention keeps whole days)")
        if days > _MAX_SECONDS / 86400:
            raise ValueError("is too many days")
        return int(days)

    @field_validator("analytics_schedule", mode="before")
    @classmethod
    def _schedule(cls, raw: Any) -> str:
        text = str(raw).strip()
        if text == ASSETS or is_cron(text):
            return text
        raise ValueError(f'is neither "{ASSETS}" nor a cron expression of 5 fields '
                         "(minute hour day-of-month month day-of-week)")

    @field_validator("spark_conn_id", mode="before")
    @classmethod
    def _spark_conn_id(cls, raw: Any) -> str:
        text = str(raw).strip()
        if not text or any(c.isspace() for c in text):
            raise ValueError("is not an Airflow connection id")
        return text

    @field_validator("spark_connect_conn_id", mode="before")
    @classmethod
    def _spark_connect_conn_id(cls, raw: Any) -> str:
        return cls._spark_conn_id(raw)

    @field_validator("kafka_connections", mode="before")
    @classmethod
    def _connection_ids(cls, raw: Any) -> str:
        ids = [c.strip() for c in str(raw).split(",") if c.strip()]
        if not ids:
            raise ValueError("names no connection (give comma-separated connection ids, or "
                             "leave it unset to watch every kafka connection)")
        return ",".join(ids)

    @field_validator("alert_webhook_url", mode="before")
    @classmethod
    def _webhook(cls, raw: Any) -> Any:
        value = raw.get_secret_value() if isinstance(raw, SecretStr) else str(raw)
        if not value.startswith(("https://", "http://")):
            raise ValueError("is not an http(s) URL")
        return raw

    @field_validator("warehouse_url", mode="before")
    @classmethod
    def _warehouse(cls, raw: Any) -> Any:
        value = raw.get_secret_value() if isinstance(raw, SecretStr) else str(raw)
        if not re.match(r"^postgres(ql)?(\+\w+)?://", value):
            raise ValueError("is not a PostgreSQL URL "
                             "(postgresql://user:password@host:port/database)")
        return raw

    @property
    def snapshot_every(self) -> timedelta:
        return timedelta(seconds=self.snapshot_every_s)

    @property
    def ingest_every(self) -> timedelta:
        return timedelta(seconds=self.ingest_every_s)

    @property
    def retry_delay(self) -> timedelta:
        return timedelta(seconds=self.retry_delay_s)

    @property
    def retention(self) -> dict[str, timedelta]:
        """The retention per table family (groupscope.warehouse.partitions.FAMILIES) and per
        operational table (groupscope.pipeline.OPS_RETENTION)."""
        return {"raw": timedelta(days=self.retention_raw_days),
                "mart": timedelta(days=self.retention_mart_days),
                "hourly": timedelta(days=self.retention_hourly_days),
                "incidents": timedelta(days=self.retention_incidents_days),
                "quality": timedelta(days=self.retention_quality_days),
                "drops": timedelta(days=self.retention_drops_days)}

    @property
    def kafka_connection_ids(self) -> tuple[str, ...]:
        return tuple(self.kafka_connections.split(",")) if self.kafka_connections else ()

    def writable_landing(self) -> Path:
        """The landing folder, created if missing and checked writable (a file is written and
        removed). Separate from parsing, so that loading settings never creates a folder."""
        where = f"{env_name('landing')}={str(self.landing)!r}"
        if self.landing.exists() and not self.landing.is_dir():
            raise SettingsError(f"{where} is not a folder")
        try:
            self.landing.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.landing, prefix=".groupscope-write-check-"):
                pass
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise SettingsError(f"{where} cannot be written: {reason}") from None
        return self.landing


_SECRETS = {"alert_webhook_url", "warehouse_url"}


def env_name(field: str) -> str:
    """The environment variable of a Settings field."""
    alias = Settings.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + field.upper()


def reveal(secret: SecretStr | None) -> str | None:
    """A secret's value, to pass on (never to log)."""
    return secret.get_secret_value() if secret is not None else None


def is_cron(text: str) -> bool:
    """A 5-field cron expression or one of Airflow's presets: with croniter's rules when it is
    installed (Airflow depends on it), else a field-count check."""
    fields = CRON_PRESETS.get(text, text).split()
    if len(fields) != 5:
        return False
    try:
        croniter = importlib.import_module("croniter")
    except ImportError:  # the library without Airflow: Airflow itself checks it later
        return all(_CRON_FIELD.match(f) for f in fields)
    return bool(croniter.croniter.is_valid(" ".join(fields)))


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``environ`` (default: the process environment), validated; a bad
    value raises ``SettingsError`` naming every bad variable, on one line."""
    token = _ENVIRON.set(environ)
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError("; ".join(_describe(e) for e in exc.errors())) from None
    finally:
        _ENVIRON.reset(token)


def _describe(error: Any) -> str:
    fields = {env_name(f): f for f in Settings.model_fields}
    located = str(error["loc"][0]) if error["loc"] else ""
    field = fields.get(located) or (located if located in Settings.model_fields else "")
    variable = env_name(field) if field else located or "a setting"
    cause = error.get("ctx", {}).get("error")
    reason = str(cause) if isinstance(cause, ValueError) else str(error["msg"])
    if field in _SECRETS:
        return f"{variable} (not shown: a secret) {reason}"
    return f"{variable}={str(error['input'])!r} {reason}"
