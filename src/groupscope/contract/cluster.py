"""Cluster connection settings, validated before anything connects.

The client settings are confluent-kafka (librdkafka) properties and pass through unchanged, so
SASL_SSL, SCRAM and OAUTHBEARER work as they do in any librdkafka client. Secrets among them are
masked whenever the settings are shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """Settings that cannot work; the message names the offending entry."""


# librdkafka properties whose values are credentials or key material.
_SECRET_KEY = re.compile(
    r"(password|secret|sasl\.oauthbearer\.config|ssl\.key\.pem|ssl_key|"
    r"ssl\.keystore\.|token|credentials?)",
    re.IGNORECASE,
)
MASK = "********"

CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def is_secret(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (MASK if is_secret(k) else v) for k, v in settings.items()}


def parse_key_values(pairs: Iterable[str]) -> dict[str, str]:
    """``["security.protocol=SASL_SSL", ...]`` to a dict; the value may itself contain '='."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--config expects key=value, got {pair!r}")
        parsed[key] = value
    return parsed


@dataclass(frozen=True)
class ClusterConfig:
    """One Kafka cluster to watch: a name for the warehouse and librdkafka client settings."""

    name: str
    client: Mapping[str, str] = field(repr=False)

    def __post_init__(self) -> None:
        if not CLUSTER_NAME.match(self.name):
            raise ConfigError(
                f"cluster name {self.name!r} must be 1-100 characters of letters, digits, "
                "'.', '_' or '-' (it names landing folders and warehouse rows)"
            )
        bootstrap = str(self.client.get("bootstrap.servers", "")).strip()
        if not bootstrap:
            raise ConfigError(f"cluster {self.name!r}: bootstrap.servers is required")
        for address in bootstrap.split(","):
            host, sep, port = address.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    f"cluster {self.name!r}: bootstrap address {address.strip()!r} "
                    "is not host:port"
                )

    @property
    def bootstrap(self) -> str:
        return str(self.client["bootstrap.servers"])

    def __repr__(self) -> str:
        return f"ClusterConfig(name={self.name!r}, client={redact(self.client)!r})"

    @classmethod
    def from_cli(
        cls, bootstrap: str, overrides: Iterable[str] = (), name: str | None = None
    ) -> ClusterConfig:
        client = {"bootstrap.servers": bootstrap, **parse_key_values(overrides)}
        return cls(name=name or "default", client=client)
