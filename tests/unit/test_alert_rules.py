"""Alert rules (groupscope.serve.rules): the built-ins load and validate; a file replaces and
adds rules; overrides by cluster and group regex, the later winning field by field; routing
by severity and labels; and every bad file is one line naming the file, the rule and the
field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from groupscope.serve.rules import (
    CLUSTER_CONDITIONS,
    CONDITIONS,
    RulesError,
    RuleSet,
    builtin_rules,
    load_rules,
    parse_duration,
)

BUILTINS = {  # name: (condition, severity, threshold, for)
    "group_err": ("group_status_err", "critical", 0, timedelta(0)),
    "partition_rewind": ("partition_rewind", "warning", 0, timedelta(0)),
    "lag_seconds_high": ("lag_seconds", "warning", 600, timedelta(minutes=5)),
    "lag_records_high": ("lag_records", "warning", 100000, timedelta(minutes=5)),
    "lag_beyond_retention": ("lag_beyond_retention", "critical", 0, timedelta(0)),
    "group_empty_lag_growing": ("group_empty_lag_growing", "critical", 0, timedelta(0)),
    "rebalance_storm": ("rebalances_per_hour", "warning", 10, timedelta(0)),
    "collector_stale": ("collector_stale", "critical", 3, timedelta(0)),
    "snapshot_incomplete": ("snapshot_incomplete", "critical", 3, timedelta(0)),
    "quality_gate_failed": ("quality_gate_failed", "critical", 0, timedelta(0)),
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return path


def error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(RulesError) as info:
        load_rules(path)
    message = str(info.value)
    assert message.startswith(f"rules file {path}: "), message
    assert "\n" not in message
    return message


def test_the_builtin_rules_load_and_validate() -> None:
    rules = builtin_rules()
    assert {r.name: (r.condition, r.severity, r.threshold, r.for_)
            for r in rules.rules} == BUILTINS
    assert set(CONDITIONS) == {c for c, *_ in BUILTINS.values()}
    assert set(CONDITIONS) >= CLUSTER_CONDITIONS
    for rule in rules.rules:
        assert rule.enabled and rule.overrides == []
        assert len(rule.runbook) > 60 and "\n" not in rule.runbook, rule.name
    assert [(c.name, c.kind, c.connection) for c in rules.channels] == [
        ("webhook", "webhook", "groupscope_alerts"), ("slack", "slack", "groupscope_slack"),
        ("email", "email", "groupscope_smtp")]
    assert rules.routes == []
    assert rules.repeat_interval == timedelta(hours=4)
    assert rules.keep_firing_for == timedelta(minutes=2)
    assert load_rules(None) == rules


def test_an_empty_file_is_the_builtins_alone(tmp_path: Path) -> None:
    assert load_rules(write(tmp_path, "")) == builtin_rules()
    assert load_rules(write(tmp_path, "# nothing yet\n")) == builtin_rules()


def test_a_file_replaces_a_builtin_and_adds_a_rule(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
repeat_interval: 1h
rules:
  - name: lag_records_high
    severity: critical
    condition: lag_records
    threshold: 5000
    for: 1h30m
    labels: {team: data}
    runbook: page the data team
  - name: rebalance_storm
    enabled: false
  - name: orders_lag
    severity: info
    condition: lag_seconds
    threshold: 90.5
    for: 90
"""))
    names = [r.name for r in rules.rules]
    assert names == [*BUILTINS, "orders_lag"]  # replaced in place, the new one after
    lag = rules.rule("lag_records_high")
    assert (lag.severity, lag.threshold, lag.for_, lag.labels, lag.runbook) == (
        "critical", 5000, timedelta(hours=1, minutes=30), {"team": "data"}, "page the data team")
    # A rule named like a built-in keeps the built-in's value of every field it leaves out.
    storm = rules.rule("rebalance_storm")
    assert not storm.enabled
    assert (storm.condition, storm.threshold) == ("rebalances_per_hour", 10)
    assert storm.runbook == builtin_rules().rule("rebalance_storm").runbook
    mine = rules.rule("orders_lag")
    assert (mine.threshold, mine.for_, mine.runbook) == (90.5, timedelta(seconds=90), "")
    assert rules.repeat_interval == timedelta(hours=1)
    assert rules.keep_firing_for == timedelta(minutes=2)  # not given: the built-in's
    assert [c.name for c in rules.channels] == ["webhook", "slack", "email"]


def test_per_group_and_per_cluster_overrides_by_regex(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
rules:
  - name: lag_records_high
    labels: {team: platform}
    overrides:
      - group: 'payments-.*'
        threshold: 1000
        labels: {team: payments}
      - cluster: 'staging|dev'
        severity: info
        for: 30m
      - cluster: dev
        group: 'batch-.*'
        enabled: false
"""))
    rule = rules.rule("lag_records_high")
    plain = rule.effective("prod", "orders")
    assert (plain.threshold, plain.severity, plain.for_, plain.enabled) == (
        100000, "warning", timedelta(minutes=5), True)
    assert plain.labels == {"team": "platform"}
    assert plain.runbook == rule.runbook and plain.condition == "lag_records"

    payments = rule.effective("prod", "payments-eu")
    assert (payments.threshold, payments.severity) == (1000, "warning")
    assert payments.labels == {"team": "payments"}
    # fullmatch: a regex matches the whole name, not a part of it
    assert rule.effective("prod", "old-payments-eu").threshold == 100000
    assert rule.effective("prod-2", "payments-eu").threshold == 1000

    staging = rule.effective("staging", "orders")
    assert (staging.severity, staging.for_, staging.threshold) == (
        "info", timedelta(minutes=30), 100000)
    assert rule.effective("staging-eu", "orders").severity == "warning"  # no partial match
    assert rule.effective("dev", "batch-nightly").enabled is False
    assert rule.effective("prod", "batch-nightly").enabled is True


def test_a_later_matching_override_wins_field_by_field(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
rules:
  - name: lag_seconds_high
    overrides:
      - group: 'payments-.*'
        threshold: 60
        for: 1m
        labels: {team: payments, tier: "1"}
        runbook: call payments
      - group: 'payments-eu'
        threshold: 30
        labels: {tier: "0"}
      - cluster: other
        threshold: 1
"""))
    rule = rules.rule("lag_seconds_high")
    eu = rule.effective("prod", "payments-eu")
    assert eu.threshold == 30  # the later override
    assert eu.for_ == timedelta(minutes=1)  # the earlier one: the later does not set it
    assert eu.runbook == "call payments"
    assert eu.labels == {"team": "payments", "tier": "0"}
    us = rule.effective("prod", "payments-us")
    assert (us.threshold, us.labels) == (60, {"team": "payments", "tier": "1"})


def test_cluster_conditions_see_no_group_overrides(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
rules:
  - name: collector_stale
    overrides:
      - {group: '.*x', threshold: 100}
      - {cluster: prod, threshold: 10}
"""))
    rule = rules.rule("collector_stale")
    assert rule.effective("prod", "").threshold == 10  # a cluster subject's group is ''
    assert rule.effective("dev", "").threshold == 3


ROUTED = """
channels:
  - {name: pager, kind: webhook, connection: pagerduty_hook}
  - {name: team-slack, kind: slack, connection: slack_team}
  - {name: payments-slack, kind: slack, connection: slack_payments}
  - name: mail
    kind: email
    connection: smtp_ops
    to: [ops@example.com]
    from_email: gs@example.com
routes:
  - {severities: [critical], channels: [pager], continue: true}
  - {labels: {team: payments}, channels: [payments-slack], continue: false}
  - {severities: [critical, warning], channels: [team-slack, pager]}
"""


def test_routing_by_severity_and_labels(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, ROUTED))

    def names(severity: str, **labels: str) -> list[str]:
        return [c.name for c in rules.channels_for(severity, labels)]

    assert names("critical") == ["pager", "team-slack"]  # both routes, each channel once
    assert names("warning") == ["team-slack", "pager"]
    # the payments route matches and does not continue: the third route is not reached
    assert names("critical", team="payments") == ["pager", "payments-slack"]
    assert names("warning", team="payments", tier="1") == ["payments-slack"]
    assert names("warning", team="orders") == ["team-slack", "pager"]
    # no route matches: every channel
    assert names("info") == ["pager", "team-slack", "payments-slack", "mail"]
    mail = rules.channels[3]
    assert (mail.kind, mail.to, mail.from_email) == ("email", ["ops@example.com"],
                                                     "gs@example.com")
    # no routes: every channel
    assert [c.name for c in builtin_rules().channels_for("critical", {})] == [
        "webhook", "slack", "email"]


def test_a_route_to_builtin_channels_and_with_labels_only(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
routes:
  - {labels: {env: prod, team: payments}, channels: [slack]}
"""))
    assert [c.name for c in rules.channels_for("info", {"env": "prod", "team": "payments"})
            ] == ["slack"]
    # every label must match
    assert len(rules.channels_for("info", {"env": "prod"})) == 3


@pytest.mark.parametrize(("raw", "seconds"), [
    ("90s", 90), ("5m", 300), ("1h30m", 5400), ("4h", 14400), ("2d", 172800), ("0s", 0),
    ("1m30s", 90), (" 5m ", 300), ("1.5s", 1.5), ("300", 300), (0, 0), (90, 90), (2.5, 2.5),
    (timedelta(seconds=7), 7)])
def test_durations(raw: object, seconds: float) -> None:
    assert parse_duration(raw) == timedelta(seconds=seconds)


@pytest.mark.parametrize("raw", [
    "5 minutes", "250ms", "5", "m", "", "1h 30", "-5m", -1, -0.5, True, None, [5],
    float("nan"), float("inf"), "99999d"])
def test_bad_durations(raw: object) -> None:
    if raw == "5":  # a bare number of seconds, even as a string, is a duration
        assert parse_duration(raw) == timedelta(seconds=5)
        return
    with pytest.raises(ValueError, match="duration"):
        parse_duration(raw)


# --- bad files: one line naming the rule and the field -----------------------------------


def test_an_unknown_field(tmp_path: Path) -> None:
    message = error(tmp_path, "rules:\n  - name: lag_seconds_high\n    treshold: 60\n")
    assert message.endswith(
        "rule 'lag_seconds_high': field 'treshold': unknown field (allowed: name, severity, "
        "condition, threshold, for, labels, runbook, enabled, overrides)")
    message = error(tmp_path, "rules:\n  - name: lag_records_high\n    overrides:\n"
                              "      - {group: 'a.*', threshold: 5, window: 1m}\n")
    assert "rule 'lag_records_high': override 1: field 'window': unknown field" in message
    assert "unknown field (allowed: rules, channels, routes" in error(tmp_path, "rulez: []\n")
    message = error(tmp_path, "channels:\n  - {name: a, kind: webhook, connection: c, url: x}\n")
    assert "channel 'a': field 'url': unknown field" in message


def test_a_bad_regex(tmp_path: Path) -> None:
    message = error(tmp_path, """
rules:
  - name: lag_records_high
    overrides:
      - group: 'payments-.*'
        threshold: 1000
      - cluster: prod
        group: 'orders-(eu'
        threshold: 10
""")
    assert "rule 'lag_records_high': override 2: field 'group': bad regex 'orders-(eu': " \
           "missing )" in message


def test_a_bad_duration(tmp_path: Path) -> None:
    message = error(tmp_path, "rules:\n  - name: lag_seconds_high\n    for: 5 minutes\n")
    assert message.endswith("rule 'lag_seconds_high': field 'for': not a duration: "
                            "'5 minutes' (use 90s, 5m, 1h30m or seconds)")
    message = error(tmp_path, "rules:\n  - name: lag_seconds_high\n    overrides:\n"
                              "      - {group: x, for: -30}\n")
    assert "rule 'lag_seconds_high': override 1: field 'for': not a duration: -30" in message
    assert "field 'keep_firing_for': not a duration: '2 min'" in error(
        tmp_path, "keep_firing_for: 2 min\n")


def test_a_threshold_of_the_wrong_type(tmp_path: Path) -> None:
    message = error(tmp_path, "rules:\n  - name: lag_seconds_high\n    threshold: '600'\n")
    assert message.endswith("rule 'lag_seconds_high': field 'threshold': "
                            "must be a number, not '600'")
    message = error(tmp_path, "rules:\n  - name: mine\n    severity: info\n"
                              "    condition: lag_records\n    threshold: lots\n")
    assert message.endswith("rule 'mine': field 'threshold': must be a number, not 'lots'")
    message = error(tmp_path, "rules:\n  - name: lag_records_high\n    overrides:\n"
                              "      - {group: x, threshold: true}\n")
    assert "rule 'lag_records_high': override 1: field 'threshold': must be a number" in message


def test_a_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    message = error(tmp_path, "rules:\n  - name: mine\n   severity: info\n")
    assert ": not valid YAML at line 3, column " in message
    message = error(tmp_path, "rules:\n  - name: lag_seconds_high\n    threshold: 1\n"
                              "    threshold: 2\n")
    assert "at line 4" in message and "key 'threshold' given twice" in message
    assert "must be a mapping" in error(tmp_path, "- name: x\n")
    assert "field 'rules': must be a list" in error(tmp_path, "rules: {name: x}\n")


def test_an_unknown_condition_lists_the_known_ones(tmp_path: Path) -> None:
    message = error(tmp_path, "rules:\n  - name: mine\n    severity: info\n"
                              "    condition: lag\n    threshold: 1\n")
    assert message.endswith(f"rule 'mine': field 'condition': unknown condition 'lag' "
                            f"(one of: {', '.join(CONDITIONS)})")


def test_duplicate_names(tmp_path: Path) -> None:
    rule = "{name: mine, severity: info, condition: lag_records, threshold: 1}"
    message = error(tmp_path, f"rules:\n  - {rule}\n  - {rule}\n")
    assert message.endswith("rule 'mine': field 'name': given to 2 rules; rule names are unique")
    message = error(tmp_path, "channels:\n  - {name: a, kind: webhook, connection: x}\n"
                              "  - {name: a, kind: slack, connection: y}\n")
    assert message.endswith("channel 'a': field 'name': given to 2 channels; "
                            "channel names are unique")


def test_a_route_naming_an_unknown_channel(tmp_path: Path) -> None:
    message = error(tmp_path, "routes:\n  - {severities: [critical], channels: [webhook]}\n"
                              "  - {channels: [slack, pager]}\n")
    assert message.endswith("route 2: field 'channels': no channel 'pager' "
                            "(channels: webhook, slack, email)")
    # the file's channels replace the built-in ones
    message = error(tmp_path, "channels:\n  - {name: pager, kind: webhook, connection: p}\n"
                              "routes:\n  - {channels: [slack]}\n")
    assert message.endswith("route 1: field 'channels': no channel 'slack' (channels: pager)")


@pytest.mark.parametrize(("text", "expected"), [
    ("rules:\n  - {name: mine, condition: lag_records, threshold: 1}\n",
     "rule 'mine': field 'severity': missing (required)"),
    ("rules:\n  - {severity: info, condition: lag_records, threshold: 1}\n",
     "rule 1: field 'name': missing (required)"),
    ("rules:\n  - {name: Lag High, severity: info, condition: lag_records, threshold: 1}\n",
     "rule 'Lag High': field 'name': a rule name is lower-case letters, digits"),
    ("rules:\n  - {name: group_err, severity: page}\n",
     "rule 'group_err': field 'severity': Input should be 'critical', 'warning' or 'info'"),
    ("rules:\n  - {name: group_err, labels: {team: 1}}\n",
     "rule 'group_err': field 'labels.team': Input should be a valid string"),
    ("rules:\n  - {name: group_err, threshold: .nan}\n",
     "rule 'group_err': field 'threshold': must be a finite number"),
    ("channels:\n  - {name: w, kind: pager, connection: c}\n", "channel 'w': field 'kind'"),
    ("channels:\n  - {name: w, kind: webhook, connection: c, to: [a@b.c]}\n",
     "channel 'w': field 'to': only an email channel has it, not a webhook channel"),
    ("routes:\n  - {channels: []}\n", "route 1: field 'channels'"),
    ("routes:\n  - {channels: [slack], severities: [page]}\n", "route 1: field 'severities.0'"),
    ("routes:\n  - {channels: [slack], stop: true}\n", "route 1: field 'stop': unknown field"),
])
def test_other_mistakes(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error(tmp_path, text)


def test_a_url_in_a_connection_field_is_refused_and_not_echoed(tmp_path: Path) -> None:
    secret = "https://hooks.slack.com/services/T000/B000/S3CRET"
    message = error(tmp_path, f"channels:\n  - {{name: s, kind: slack, connection: '{secret}'}}\n")
    assert "channel 's': field 'connection': must be an Airflow connection id" in message
    assert "S3CRET" not in message


def test_the_first_problem_and_how_many_more(tmp_path: Path) -> None:
    message = error(tmp_path, "rules:\n  - {name: group_err, threshold: x, for: y}\n")
    assert message.endswith("field 'threshold': must be a number, not 'x' (and 1 more)")


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match=r"rules file .*missing\.yaml: cannot be read: "):
        load_rules(tmp_path / "missing.yaml")


def test_a_ruleset_is_a_model_the_lead_can_build_in_code() -> None:
    base = builtin_rules()
    rules = RuleSet(rules=base.rules[:1], channels=base.channels)
    assert rules.repeat_interval == timedelta(hours=4)
    with pytest.raises(KeyError):
        rules.rule("lag_seconds_high")


def test_the_full_example_of_the_docs_loads(tmp_path: Path) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    example = docs.split("## A full example", 1)[1].split("```yaml\n", 1)[1].split("```")[0]
    rules = load_rules(write(tmp_path, example))
    assert len(rules.rules) == len(BUILTINS) + 1
    lag = rules.rule("lag_records_high").effective("prod", "payments-eu")
    assert (lag.threshold, lag.for_, lag.labels) == (1000, timedelta(minutes=2),
                                                     {"team": "payments"})
    mine = rules.rule("payments_lag_seconds")
    assert mine.effective("prod", "payments-eu").enabled
    assert not mine.effective("prod", "orders").enabled
    routed = rules.channels_for("critical", {"team": "payments"})
    assert [c.name for c in routed] == ["pager", "ops-mail", "payments-slack"]
