"""The alert rules file: built-ins, a file on top, overrides, routing, and the errors a bad
file gives (each naming the rule and the field)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from groupscope.serve.rules import CONDITIONS, RulesError, builtin_rules, load_rules


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return path


def test_the_built_in_rules_cover_the_issue_table() -> None:
    rules = builtin_rules()
    by_name = {r.name: r for r in rules.rules}
    assert set(by_name) == {
        "group_err", "partition_rewind", "lag_seconds_high", "lag_records_high",
        "lag_beyond_retention", "group_empty_lag_growing", "rebalance_storm",
        "collector_stale", "snapshot_incomplete", "quality_gate_failed"}
    assert {r.condition for r in rules.rules} == set(CONDITIONS)
    assert by_name["group_err"].severity == "critical"
    assert by_name["lag_seconds_high"].for_ == timedelta(minutes=5)
    assert all(r.runbook for r in rules.rules)
    assert rules.repeat_interval == timedelta(hours=4)
    assert [c.name for c in rules.channels] == ["webhook", "slack", "email"]


def test_a_file_replaces_a_built_in_by_name_and_adds_its_own(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
repeat_interval: 1h30m
rules:
  - name: lag_seconds_high
    severity: critical
    condition: lag_seconds
    threshold: 120
    for: 90s
    runbook: page the payments team
  - name: payments_lag
    severity: warning
    condition: lag_records
    threshold: 5000.5
    labels: {team: payments}
"""))
    by_name = {r.name: r for r in rules.rules}
    assert len(rules.rules) == 11
    assert by_name["lag_seconds_high"].threshold == 120
    assert by_name["lag_seconds_high"].for_ == timedelta(seconds=90)
    assert by_name["payments_lag"].labels == {"team": "payments"}
    assert rules.repeat_interval == timedelta(hours=1, minutes=30)
    assert rules.keep_firing_for == timedelta(minutes=2)  # the built-in default


def test_overrides_by_cluster_and_group_regex_later_wins(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
rules:
  - name: lag_records_high
    severity: warning
    condition: lag_records
    threshold: 100000
    for: 5m
    labels: {team: platform}
    overrides:
      - group: 'payments-.*'
        threshold: 1000
        labels: {team: payments}
      - cluster: 'prod-.*'
        group: 'payments-eu'
        for: 1m
        severity: critical
      - group: 'batch-.*'
        enabled: false
"""))
    rule = {r.name: r for r in rules.rules}["lag_records_high"]
    eu = rule.effective("prod-1", "payments-eu")
    assert (eu.threshold, eu.for_, eu.severity, eu.labels["team"]) == \
        (1000, timedelta(minutes=1), "critical", "payments")
    us = rule.effective("staging", "payments-us")
    assert (us.threshold, us.for_, us.severity) == (1000, timedelta(minutes=5), "warning")
    assert rule.effective("prod-1", "xpayments-eu").threshold == 100000  # fullmatch only
    assert not rule.effective("prod-1", "batch-nightly").enabled


def test_routes_by_severity_and_labels(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
channels:
  - {name: oncall, kind: slack, connection: slack_oncall}
  - {name: payments-mail, kind: email, connection: smtp_default, to: [pay@example.com]}
  - {name: audit, kind: webhook, connection: audit_hook}
routes:
  - {severities: [critical], channels: [oncall]}
  - {labels: {team: payments}, channels: [payments-mail], continue: false}
  - {channels: [audit]}
"""))
    names = [c.name for c in rules.channels_for("critical", {"team": "payments"})]
    assert names == ["oncall", "payments-mail"]
    assert [c.name for c in rules.channels_for("warning", {})] == ["audit"]
    assert [c.name for c in rules.channels_for("critical", {})] == ["oncall", "audit"]


@pytest.mark.parametrize(("text", "expected"), [
    ("rules:\n  - name: lag_seconds_high\n    severity: warning\n    condition: lag_seconds\n"
     "    threshold: 1\n    colour: red\n",
     "rule 'lag_seconds_high': field 'colour': unknown field"),
    ("rules:\n  - name: mine\n    severity: warning\n    condition: lag_records\n"
     "    threshold: 1\n    overrides:\n      - group: 'payments-(['\n",
     "rule 'mine': override 1: field 'group': bad regex 'payments-(['"),
    ("rules:\n  - name: lag_seconds_high\n    severity: warning\n    condition: lag_seconds\n"
     "    threshold: 1\n    for: 5 minutes\n",
     "rule 'lag_seconds_high': field 'for': not a duration: '5 minutes'"),
    ("rules:\n  - name: mine\n    severity: warning\n    condition: lag_records\n"
     "    threshold: lots\n",
     "rule 'mine': field 'threshold': must be a number, not 'lots'"),
    ("rules:\n  - name: mine\n    severity: warning\n    condition: lag_in_furlongs\n"
     "    threshold: 1\n",
     "rule 'mine': field 'condition': unknown condition 'lag_in_furlongs'"),
    ("rules:\n  - name: mine\n    severity: page\n    condition: lag_records\n"
     "    threshold: 1\n", "rule 'mine': field 'severity'"),
    ("rules: [\n", "not valid YAML at line"),
    ("- just a list\n", "must be a mapping"),
    ("routes:\n  - {channels: [pager]}\n", "route 1 names unknown channel(s) pager"),
    ("rules:\n  - {name: a, severity: info, condition: lag_records, threshold: 1}\n"
     "  - {name: a, severity: info, condition: lag_records, threshold: 2}\n",
     "rule names must be unique: a"),
    ("keep_firing_for: -5\n", "field 'keep_firing_for': a duration cannot be negative"),
])
def test_a_bad_file_names_the_rule_and_the_field(tmp_path: Path, text: str,
                                                 expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(RulesError) as raised:
        load_rules(path)
    message = str(raised.value)
    assert message.startswith(f"rules file {path}: "), message
    assert expected in message, message


def test_an_empty_file_is_the_built_ins(tmp_path: Path) -> None:
    assert load_rules(write(tmp_path, "")) == builtin_rules()


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="cannot be read"):
        load_rules(tmp_path / "nope.yaml")
