"""Alert rules (groupscope.serve.alerting.rules): the built-ins load and validate; a file replaces
and adds rules; overrides by cluster and group regex, the later winning field by field; routing
by severity and labels; what an unknown value means, delivery retries and the heartbeat; and
every bad file, a 400-digit number or a hostile document included, is one line naming the file,
the rule and the field."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from groupscope.serve.alerting.kinds import (
    BELOW_KINDS,
    BY_NAME,
    CLUSTER_SUBJECT_KINDS,
    COLLECTOR_KINDS,
    GROUP_KINDS,
    KINDS,
    SELF_KINDS,
)
from groupscope.serve.alerting.rules import (
    CONDITIONS,
    MAX_DEPTH,
    RulesError,
    RuleSet,
    builtin_rules,
    load_rules,
    load_rules_text,
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
    "rebalance_stuck": ("rebalance_stuck", "critical", 90, timedelta(0)),
    "data_loss_forecast": ("loss_forecast_s", "critical", 3600, timedelta(0)),
    "collector_stale": ("collector_stale", "critical", 3, timedelta(0)),
    "snapshot_incomplete": ("snapshot_incomplete", "critical", 3, timedelta(0)),
    "quality_gate_failed": ("quality_gate_failed", "critical", 0, timedelta(0)),
    "analytics_stale": ("analytics_stale", "critical", 3, timedelta(minutes=1)),
    "task_failed": ("task_failed", "critical", 0, timedelta(0)),
    "channel_failing": ("channel_failing", "critical", 300, timedelta(0)),
    "rules_invalid": ("rules_invalid", "critical", 0, timedelta(0)),
    "offsets_feed_stale": ("offsets_feed_stale", "warning", 1800, timedelta(0)),
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
    assert set(CONDITIONS) >= set(CLUSTER_SUBJECT_KINDS) >= set(SELF_KINDS) == {
        "analytics_stale", "task_failed", "channel_failing", "rules_invalid",
        "offsets_feed_stale"}
    for rule in rules.rules:
        assert rule.enabled and rule.overrides == [] and rule.on_unknown == "keep"
        assert len(rule.runbook) > 60 and "\n" not in rule.runbook, rule.name
    assert [(c.name, c.kind, c.connection) for c in rules.channels] == [
        ("webhook", "webhook", "groupscope_alerts"), ("slack", "slack", "groupscope_slack"),
        ("email", "email", "groupscope_smtp")]
    assert rules.routes == []
    assert rules.repeat_interval == timedelta(hours=4)
    assert rules.keep_firing_for == timedelta(minutes=2)
    assert (rules.unknown_notice_after, rules.delivery_max_age, rules.retry_initial,
            rules.retry_max, rules.heartbeat) == (
        timedelta(minutes=10), timedelta(hours=4), timedelta(seconds=30),
        timedelta(minutes=15), None)
    assert load_rules(None) == rules
    # The built-in file says what the model's defaults say.
    bare = RuleSet(rules=rules.rules, channels=rules.channels)
    assert bare == rules


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
        "condition, threshold, for, labels, runbook, enabled, on_unknown, overrides)")
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


# --- unknown values, delivery and the heartbeat ------------------------------------------


def test_on_unknown_by_rule_and_by_override(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
rules:
  - name: lag_seconds_high
    on_unknown: alerting
    overrides:
      - {group: 'batch-.*', on_unknown: ok}
      - {group: 'batch-7', threshold: 1}
  - name: mine
    severity: info
    condition: lag_records
    threshold: 1
"""))
    rule = rules.rule("lag_seconds_high")
    assert rule.on_unknown == "alerting"
    assert rule.effective("prod", "orders").on_unknown == "alerting"
    assert rule.effective("prod", "batch-1").on_unknown == "ok"
    # A later override that leaves it out keeps the earlier one's.
    assert rule.effective("prod", "batch-7").on_unknown == "ok"
    assert rule.overrides[1].on_unknown is None
    assert rules.rule("mine").effective("prod", "x").on_unknown == "keep"
    assert rules.rule("group_err").effective("prod", "x").on_unknown == "keep"


def test_a_bad_on_unknown(tmp_path: Path) -> None:
    message = error(tmp_path, "rules:\n  - {name: group_err, on_unknown: firing}\n")
    assert message.endswith("rule 'group_err': field 'on_unknown': Input should be 'keep', "
                            "'alerting' or 'ok'")
    message = error(tmp_path, "rules:\n  - name: group_err\n    overrides:\n"
                              "      - {cluster: dev, on_unknown: yes}\n")
    assert "rule 'group_err': override 1: field 'on_unknown': Input should be" in message


def test_delivery_intervals_and_the_heartbeat_from_a_file(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, """
unknown_notice_after: 5m
delivery_max_age: 1h
retry_initial: 10s
retry_max: 2m
heartbeat: {channels: [slack, email], every: 1h}
"""))
    assert (rules.unknown_notice_after, rules.delivery_max_age, rules.retry_initial,
            rules.retry_max) == (timedelta(minutes=5), timedelta(hours=1),
                                 timedelta(seconds=10), timedelta(minutes=2))
    assert rules.heartbeat is not None
    assert (rules.heartbeat.channels, rules.heartbeat.every) == (["slack", "email"],
                                                                 timedelta(hours=1))
    assert [rules.retry_delay(n).total_seconds() for n in range(1, 7)] == [
        10, 20, 40, 80, 120, 120]
    assert rules.retry_delay(10**6) == timedelta(minutes=2)
    assert rules.retry_delay(0) == timedelta(seconds=10)
    # The longest intervals there are: the doublings stay capped at retry_max.
    longest = load_rules(write(tmp_path, "retry_initial: 3650d\nretry_max: 3650d\n"
                                         "delivery_max_age: 3650d\n"))
    assert longest.retry_delay(100) == timedelta(days=3650)
    # Not given: the built-in values.
    only = load_rules(write(tmp_path, "retry_max: 1m\n"))
    assert (only.retry_initial, only.retry_max, only.delivery_max_age, only.heartbeat) == (
        timedelta(seconds=30), timedelta(minutes=1), timedelta(hours=4), None)
    # Left empty, as a channels: or routes: left empty: the built-in values.
    assert load_rules(write(tmp_path, "retry_max:\ndelivery_max_age:\nheartbeat:\n")) == \
        builtin_rules()
    # A heartbeat may name the file's own channels, which replace the built-in ones.
    own = load_rules(write(tmp_path, "channels:\n  - {name: pager, kind: webhook, "
                                     "connection: p}\nheartbeat: {channels: [pager], every: 1m}\n"))
    assert own.heartbeat is not None and own.heartbeat.channels == ["pager"]


@pytest.mark.parametrize(("text", "expected"), [
    ("retry_initial: 0s\n", "field 'retry_initial': must be more than 0s"),
    ("retry_initial: 1h\n", "field 'retry_max': 900s is below retry_initial (3600s)"),
    ("retry_max: 10s\n", "field 'retry_max': 10s is below retry_initial (30s)"),
    ("delivery_max_age: 10s\n", "field 'delivery_max_age': 10s is below retry_initial (30s): "
                                "a failed notification would be given up before its first retry"),
    ("unknown_notice_after: soon\n", "field 'unknown_notice_after': not a duration: 'soon'"),
    ("heartbeat: {channels: [pager], every: 1h}\n",
     "field 'heartbeat.channels': no channel 'pager' (channels: webhook, slack, email)"),
    ("heartbeat: {channels: [], every: 1h}\n", "field 'heartbeat.channels': List should have "
                                               "at least 1 item"),
    ("heartbeat: {channels: [slack], every: 30s}\n",
     "field 'heartbeat.every': must be at least 1m, not 30s"),
    ("heartbeat: {channels: [slack]}\n", "field 'heartbeat.every': missing (required)"),
    ("heartbeat: {channels: [slack], every: 1h, to: x}\n",
     "field 'heartbeat.to': unknown field (allowed: channels, every)"),
    ("heartbeat: every hour\n", "field 'heartbeat': Input should be a valid dictionary"),
])
def test_bad_delivery_intervals_and_heartbeats(tmp_path: Path, text: str, expected: str) -> None:
    message = error(tmp_path, text)
    assert message.startswith(f"rules file {tmp_path / 'rules.yaml'}: {expected}"), message


def test_a_text_validates_as_a_file_does(tmp_path: Path) -> None:
    text = "rules:\n  - {name: group_err, threshold: 2}\nretry_max: 5m\n"
    assert load_rules_text(text, "stored rules") == load_rules(write(tmp_path, text))
    assert load_rules_text("", "stored rules") == builtin_rules()
    with pytest.raises(RulesError) as info:
        load_rules_text("rules:\n  - {name: group_err, threshold: x}\n", "stored rules")
    assert str(info.value) == "stored rules: rule 'group_err': field 'threshold': " \
                              "must be a number, not 'x'"


# --- numbers bounded, hostile documents: still one line naming the field -----------------


BIG = "1" + "0" * 400  # 401 digits: float() of it overflows


@pytest.mark.parametrize(("text", "expected"), [
    (f"rules:\n  - name: group_err\n    threshold: {BIG}\n",
     "rule 'group_err': field 'threshold': must be between -1e15 and 1e15, not a number of "
     "about 401 digits"),
    (f"rules:\n  - name: group_err\n    threshold: -{BIG}\n",
     "rule 'group_err': field 'threshold': must be between -1e15 and 1e15"),
    ("rules:\n  - name: group_err\n    threshold: 1.0e+16\n",
     "rule 'group_err': field 'threshold': must be between -1e15 and 1e15, not 1e+16"),
    (f"rules:\n  - name: group_err\n    overrides:\n      - {{cluster: x, threshold: {BIG}}}\n",
     "rule 'group_err': override 1: field 'threshold': must be between -1e15 and 1e15"),
    (f"rules:\n  - name: group_err\n    for: {BIG}\n",
     "rule 'group_err': field 'for': a duration is at most 10 years, not a number of about "
     "401 digits"),
    (f"rules:\n  - name: group_err\n    for: '{BIG}'\n",
     "rule 'group_err': field 'for': a duration is at most 10 years, not '1000000000"),
    (f"rules:\n  - name: group_err\n    for: {BIG}d\n",
     "rule 'group_err': field 'for': a duration is at most 10 years"),
    (f"rules:\n  - name: group_err\n    overrides:\n      - {{cluster: x, for: {BIG}}}\n",
     "rule 'group_err': override 1: field 'for': a duration is at most 10 years"),
    (f"repeat_interval: {BIG}\n", "field 'repeat_interval': a duration is at most 10 years"),
    (f"retry_max: {BIG}\n", "field 'retry_max': a duration is at most 10 years"),
    (f"heartbeat: {{channels: [slack], every: {BIG}}}\n",
     "field 'heartbeat.every': a duration is at most 10 years"),
    # A hex int has no digit limit in PyYAML: 20000 bits, more than repr() will print.
    ("rules:\n  - name: group_err\n    threshold: 0x" + "f" * 5000 + "\n",
     "rule 'group_err': field 'threshold': must be between -1e15 and 1e15, not a number of "
     "about 6021 digits"),
    ("rules:\n  - name: group_err\n    threshold: [1]\n",
     "rule 'group_err': field 'threshold': must be a number, not [1]"),
    ("rules:\n  - name: group_err\n    threshold: {a: 1}\n",
     "rule 'group_err': field 'threshold': must be a number, not {'a': 1}"),
    ("rules:\n  - name: group_err\n    threshold: 2024-01-01\n",
     "rule 'group_err': field 'threshold': must be a number, not datetime.date(2024, 1, 1)"),
    ("rules:\n  - name: group_err\n    for: [5m]\n",
     "rule 'group_err': field 'for': not a duration: ['5m']"),
    ("rules:\n  - name: group_err\n    enabled: [true]\n",
     "rule 'group_err': field 'enabled': Input should be a valid boolean"),
    ("rules:\n  - name: group_err\n    overrides: {cluster: x}\n",
     "rule 'group_err': field 'overrides': Input should be a valid list"),
    ("rules:\n  - group_err\n", "rule 1: Input should be a valid dictionary"),
    (f"rules:\n  - name: group_err\n    {BIG}: 1\n",
     "rule 'group_err': field '" + BIG[:57] + "...': Keys should be strings"),
])
def test_huge_numbers_and_odd_types(tmp_path: Path, text: str, expected: str) -> None:
    message = error(tmp_path, text)
    assert f"rules file {tmp_path / 'rules.yaml'}: {expected}" in message, message
    assert len(message) - len(str(tmp_path)) < 250, message  # the value is quoted cut short


def test_the_threshold_bound_is_inclusive(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, "rules:\n"
                                       "  - {name: group_err, threshold: 1000000000000000}\n"
                                       "  - {name: lag_records_high, threshold: -1.0e+15}\n"))
    assert rules.rule("group_err").threshold == 1e15
    assert rules.rule("lag_records_high").threshold == -1e15


@pytest.mark.parametrize(("text", "expected"), [
    # Over Python's 4300-digit limit: PyYAML raises a bare ValueError of its own.
    ("rules:\n  - name: group_err\n    threshold: 1" + "0" * 5000 + "\n",
     "not valid YAML at line 3, column 16: cannot read '1000"),
    ("rules:\n  - name: group_err\n    threshold: 2024-13-45\n",
     "not valid YAML at line 3, column 16: cannot read '2024-13-45': month must be in 1..12"),
    ("rules:\n  - name: group_err\n    threshold: " + "[" * 5000 + "]" * 5000 + "\n",
     f"not valid YAML at line 3, column {16 + MAX_DEPTH - 3}: nested deeper than {MAX_DEPTH} "
     "levels"),
    ("a: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
     f"not valid YAML at line 1, column {4 + 4 * (MAX_DEPTH - 1)}: nested deeper than"),
    ("x:\n" + "".join(" " * i + "- \n" for i in range(MAX_DEPTH + 5)),
     f"not valid YAML at line {MAX_DEPTH + 1}"),
])
def test_documents_pyyaml_cannot_take_are_yaml_errors(tmp_path: Path, text: str,
                                                      expected: str) -> None:
    message = error(tmp_path, text)
    assert message.startswith(f"rules file {tmp_path / 'rules.yaml'}: {expected}"), message
    assert len(message) - len(str(tmp_path)) < 250, message
    assert "set_int_max_str_digits" not in message


def test_aliases_cannot_blow_a_message_up(tmp_path: Path) -> None:
    # A billion laughs: 9**9 items if anything walked them in full; a cycle; a chain of 3000
    # aliases, each one list deeper (the text is flat, the value is not).
    laughs = "x0: &x0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n" for i in range(1, 10))
    message = error(tmp_path, laughs + "rules:\n  - name: group_err\n    threshold: *x9\n")
    assert "rule 'group_err': field 'threshold': must be a number, not [[[...], [...], " in \
        message
    assert len(message) - len(str(tmp_path)) < 250, message
    assert "rule 1: Input should be a valid dictionary" in error(tmp_path, laughs + "rules: *x9\n")
    message = error(tmp_path, "rules:\n  - name: group_err\n    threshold: &c [*c]\n")
    assert "field 'threshold': must be a number, not [[[...]]]" in message
    chain = "z0: &z0 [1]\n" + "".join(f"z{i}: &z{i} [*z{i - 1}]\n" for i in range(1, 3000))
    message = error(tmp_path, chain + "rules:\n  - name: group_err\n    threshold: *z2999\n")
    assert "field 'threshold': must be a number, not [[[...]]]" in message


def test_huge_ints_as_durations_do_not_overflow() -> None:
    with pytest.raises(ValueError, match="at most 10 years"):
        parse_duration(10**400)
    with pytest.raises(ValueError, match="at most 10 years"):
        parse_duration(math.inf)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(math.nan)
    assert parse_duration(3650 * 86400) == timedelta(days=3650)


def test_the_rebalance_window_is_an_hour_unless_given_and_bounded() -> None:
    assert builtin_rules().rebalance_window == timedelta(hours=1)
    assert load_rules_text("rebalance_window: 10m\n", "f").rebalance_window == \
        timedelta(minutes=10)
    for bad in ("5s", "2d"):
        with pytest.raises(RulesError, match=r"f: field 'rebalance_window': must be from 10s "
                                             r"to 1d, not "):
            load_rules_text(f"rebalance_window: {bad}\n", "f")


def test_a_time_left_holds_below_its_threshold_which_stays_below_the_horizon(
        tmp_path: Path) -> None:
    from groupscope.serve.alerting.conditions import Observation

    rules = builtin_rules()
    soon = Observation("loss_forecast_s", "c", "g", 120.0)
    assert rules.exceeded(soon)
    assert not rules.exceeded(replace(soon, value=604_800.0))  # no loss forecast
    assert not rules.exceeded(replace(soon, value=3600.0))  # at the threshold: not below it
    message = error(tmp_path, "rules:\n  - name: data_loss_forecast\n    overrides:\n"
                              "      - {group: x, threshold: 604800}\n")
    assert "rule 'data_loss_forecast': override 1: field 'threshold'" in message, message
    assert "it would fire for every group" in message


def test_every_condition_kind_is_defined_once_with_a_subject_and_a_headline() -> None:
    # One registry: the subjects partition the kinds, and the rules, the observations and the
    # messages read the same table.
    names = [k.name for k in KINDS]
    assert len(names) == len(set(names)) == len(CONDITIONS)
    assert sorted(GROUP_KINDS + COLLECTOR_KINDS + SELF_KINDS) == sorted(names)
    assert set(CLUSTER_SUBJECT_KINDS) == set(COLLECTOR_KINDS) | set(SELF_KINDS)
    assert {"loss_forecast_s"} == BELOW_KINDS
    for kind in KINDS:
        assert kind.meaning and kind.headline, kind.name
        assert CONDITIONS[kind.name] == BY_NAME[kind.name].meaning
    # The view holds a column per group kind: conditions reads each by its name.
    assert "lag_records" in GROUP_KINDS and "collector_stale" in COLLECTOR_KINDS
