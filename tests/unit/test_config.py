import pytest

from groupscope.contract.cluster import MASK, ClusterConfig, ConfigError, parse_key_values, redact


def test_key_values_keep_equals_signs_in_values() -> None:
    parsed = parse_key_values(["sasl.jaas.config=a=b;c=d", "security.protocol=SASL_SSL"])
    assert parsed == {"sasl.jaas.config": "a=b;c=d", "security.protocol": "SASL_SSL"}


@pytest.mark.parametrize("bad", ["novalue", "=x", ""])
def test_malformed_key_values_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_key_values([bad])


@pytest.mark.parametrize(
    "key",
    ["sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.config",
     "sasl.oauthbearer.client.secret", "ssl.key.pem"],
)
def test_secrets_are_masked(key: str) -> None:
    assert redact({key: "hunter2", "sasl.username": "alice"}) == {
        key: MASK, "sasl.username": "alice"
    }


def test_repr_never_shows_secrets() -> None:
    cfg = ClusterConfig.from_cli("h:9092", ["sasl.password=hunter2"], "prod")
    assert "hunter2" not in repr(cfg)
    assert "hunter2" not in str(cfg)
    assert cfg.client["sasl.password"] == "hunter2"  # passed through unchanged


@pytest.mark.parametrize("bootstrap", ["", "host", "host:", ":9092", "host:abc", "h:70000"])
def test_bad_bootstrap_is_refused_before_connecting(bootstrap: str) -> None:
    with pytest.raises(ConfigError):
        ClusterConfig.from_cli(bootstrap)


def test_ipv6_and_lists_are_accepted() -> None:
    cfg = ClusterConfig.from_cli("[::1]:9092,b:9093")
    assert cfg.bootstrap == "[::1]:9092,b:9093"


@pytest.mark.parametrize("name", ["", "a b", "../x", "x" * 101, "é"])
def test_cluster_names_must_be_path_safe(name: str) -> None:
    with pytest.raises(ConfigError, match="cluster name"):
        ClusterConfig(name, {"bootstrap.servers": "h:1"})
