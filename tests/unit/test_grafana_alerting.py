"""Grafana alerting from the alert rules file (groupscope.serve.grafana.alerting): the structure
of every rule (a condition refId in its data, the SQL on the warehouse datasource, the
``__expr__`` reduce and threshold steps), every rule present and paused by default, overrides
honoured subject by subject, SQL literals and regexes quoted safely, contact points without
secrets, and the notification policy from the routes.

Pure: no Grafana, no warehouse.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from groupscope.serve.alerting.kinds import SELF_KINDS
from groupscope.serve.alerting.rules import RuleSet, builtin_rules, load_rules
from groupscope.serve.grafana import DATASOURCE_TYPE, DATASOURCE_UID
from groupscope.serve.grafana.alerting import (
    EXPR_UID,
    RULE_LABEL,
    AlertingError,
    api_contact_points,
    api_policy_route,
    api_rules,
    destinations,
    duration,
    enabled_from_env,
    file_provisioning,
    grafana_rules,
    group_interval,
    merge_policy,
    pg_regex,
    skipped_rules,
    sql_literal,
    uid,
)

# The docs/alerts.md example, plus overrides that disable and change `for` and severity.
CUSTOM = """
repeat_interval: 2h
channels:
  - {name: pager, kind: webhook, connection: pagerduty_events}
  - {name: team-slack, kind: slack, connection: groupscope_slack}
  - {name: payments-slack, kind: slack, connection: slack_payments}
  - {name: ops-mail, kind: email, connection: groupscope_smtp, to: [kafka-ops@example.com]}
routes:
  - {severities: [critical], channels: [pager, ops-mail]}
  - {labels: {team: payments}, channels: [payments-slack], continue: false}
  - {severities: [critical, warning], channels: [team-slack]}
rules:
  - name: lag_records_high
    threshold: 500000
    overrides:
      - group: 'payments-.*'
        threshold: 1000
        for: 2m
        labels: {team: payments}
        runbook: Page the payments on-call ($PAGER); {{ not a template }}.
      - cluster: 'staging|dev'
        severity: info
      - {cluster: dev, group: 'batch-.*', enabled: false}
  - name: lag_seconds_high
    overrides:
      - {cluster: dev, enabled: false}
  - name: rebalance_storm
    enabled: false
  - name: payments_lag_seconds
    severity: critical
    condition: lag_seconds
    threshold: 120
    for: 1m
    labels: {team: payments}
    runbook: Payments are more than 2 minutes behind.
    overrides:
      - {group: '(?!payments-).*', enabled: false}
  - name: collector_stale
    overrides:
      - {cluster: 'prod-.*', threshold: 2}
  - name: quoted_group
    severity: warning
    condition: lag_records
    threshold: 10
    overrides:
      - {group: "o'reilly\\\\d+", threshold: 5}
  - name: task_failed
    threshold: 1
    overrides:
      - {cluster: dev, on_unknown: ok}
  - name: my_channel_watch
    severity: warning
    condition: channel_failing
    threshold: 60
"""
CLUSTERS = ["prod-eu", "staging", "dev"]
GROUPS = ["", "payments-eu", "old-payments-eu", "batch-7", "orders", "o'reilly42", "o'reilly"]


@pytest.fixture(scope="module")
def custom(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(CUSTOM, encoding="utf-8")
    return load_rules(path)


def _by_ref(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {step["refId"]: step for step in rule["data"]}


@pytest.mark.parametrize("which", ["builtin", "custom"])
@pytest.mark.parametrize("shape", ["file", "api"])
def test_every_rule_has_a_condition_its_query_and_expression_steps(
        which: str, shape: str, custom: RuleSet) -> None:
    rules = builtin_rules() if which == "builtin" else custom
    exported = grafana_rules(rules)
    assert exported
    for grafana_rule in exported:
        rule = grafana_rule.file_shape() if shape == "file" else grafana_rule.api_shape()
        where = rule["title"]
        steps = _by_ref(rule)
        assert len(steps) == len(rule["data"]), where  # refIds unique
        assert rule["condition"] in steps, where
        query = steps["A"]
        assert query["datasourceUid"] == DATASOURCE_UID
        assert query["model"]["datasource"] == {"type": DATASOURCE_TYPE, "uid": DATASOURCE_UID}
        assert query["model"]["format"] == "time_series"  # what alert conditions need
        assert "FROM serve.alert_conditions" in query["model"]["rawSql"]
        assert query["relativeTimeRange"]["from"] > 0
        kinds = {}
        for ref, step in steps.items():
            if ref == "A":
                continue
            assert step["datasourceUid"] == EXPR_UID, where
            assert step["model"]["datasource"]["uid"] == EXPR_UID
            assert step["model"]["refId"] == ref
            assert step["model"]["expression"] in steps  # refers to an existing step
            assert step["model"]["expression"] != ref
            kinds[step["model"]["type"]] = step["model"]
        assert kinds["reduce"]["reducer"] == "last" and kinds["reduce"]["expression"] == "A"
        assert steps[rule["condition"]]["model"]["type"] == "threshold"
        evaluator = kinds["threshold"]["conditions"][0]["evaluator"]
        # A time left (the loss forecast) fires below its threshold, every other kind above.
        below = grafana_rule.variant.rule.condition == "loss_forecast_s"
        assert evaluator["type"] == ("lt" if below else "gt")
        assert evaluator["params"] == [grafana_rule.variant.threshold]
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["labels"][RULE_LABEL] == grafana_rule.variant.rule.name
        assert rule["isPaused"] is True  # Grafana alerting off by default: no double notify
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", rule["uid"])
        assert rule["noDataState"] == "OK" and rule["execErrState"] == "Error"
        assert rule["for"] == duration(grafana_rule.variant.for_)
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        link = rule["annotations"]["dashboard_url"]
        assert "/d/groupscope-overview/overview?" in link or \
            "/d/groupscope-group/group-detail?" in link
        if grafana_rule.variant.runbook:
            assert rule["annotations"]["runbook"]
        if shape == "api":
            assert rule["folderUID"] == "groupscope" and rule["ruleGroup"] == "groupscope"
            assert rule["keep_firing_for"] == duration(rules.keep_firing_for)
        else:
            assert rule["keepFiringFor"] == duration(rules.keep_firing_for)
    uids = [r.uid for r in exported]
    titles = [r.variant.title for r in exported]
    assert len(set(uids)) == len(uids) and len(set(titles)) == len(titles)


def test_every_enabled_rule_is_exported_and_the_disabled_ones_are_not(custom: RuleSet) -> None:
    for rules in (builtin_rules(), custom):
        names = {r.variant.rule.name for r in grafana_rules(rules)}
        enabled = {r.name for r in rules.rules
                   if (r.enabled or any(o.enabled for o in r.overrides))
                   and r.condition not in SELF_KINDS}
        assert names == enabled
    assert "rebalance_storm" not in {r.variant.rule.name for r in grafana_rules(custom)}
    assert {"payments_lag_seconds", "quoted_group"} <= {
        r.variant.rule.name for r in grafana_rules(custom)}
    # The built-ins, one Grafana rule each (no overrides), uid from the name.
    assert sorted(r.uid for r in grafana_rules(builtin_rules())) == sorted(
        f"groupscope-{r.name}" for r in builtin_rules().rules
        if r.condition not in SELF_KINDS)


def test_groupscope_s_watch_over_itself_is_not_exported(custom: RuleSet) -> None:
    """analytics_stale, task_failed, channel_failing, rules_invalid and offsets_feed_stale
    judge groupscope's own evaluation and feeds: serve.alert_conditions has no rows for them,
    so a Grafana rule would never fire. They are left out, built-in or not, and said to be."""
    watch = {"analytics_stale", "task_failed", "channel_failing", "rules_invalid",
             "offsets_feed_stale"}
    assert watch == set(SELF_KINDS)
    for rules, skipped in ((builtin_rules(), watch), (custom, watch | {"my_channel_watch"})):
        exported = grafana_rules(rules)
        assert not {r.variant.rule.condition for r in exported} & watch
        assert {r.variant.rule.name for r in exported} & skipped == set()
        reasons = skipped_rules(rules)
        assert set(reasons) == skipped
        assert all("groupscope's own evaluation" in why for why in reasons.values())
        sql = "\n".join(r.data[0]["model"]["rawSql"] for r in exported)
        assert not any(f"'{condition}'" in sql for condition in watch)
    # The other rules are all still there.
    assert len(grafana_rules(builtin_rules())) == len(builtin_rules().rules) - len(watch)
    group = file_provisioning(builtin_rules())["groups"][0]
    assert not {r["labels"][RULE_LABEL] for r in group["rules"]} & watch
    assert not {r["labels"][RULE_LABEL] for r in api_rules(custom)} & (
        watch | {"my_channel_watch"})


def test_switching_grafana_alerting_on_unpauses_every_rule(custom: RuleSet) -> None:
    assert not any(r["isPaused"] for r in api_rules(custom, enabled=True))
    group = file_provisioning(custom, enabled=True)["groups"][0]
    assert not any(r["isPaused"] for r in group["rules"])
    assert enabled_from_env({"GROUPSCOPE_GRAFANA_ALERTING": "1"})
    assert enabled_from_env({"GROUPSCOPE_GRAFANA_ALERTING": "true"})
    assert not enabled_from_env({"GROUPSCOPE_GRAFANA_ALERTING": "0"})
    assert not enabled_from_env({})


def test_overrides_are_honoured_subject_by_subject(custom: RuleSet) -> None:
    """Every subject is selected by exactly one Grafana rule of a rule when the rule applies
    to it (none when an override disables it), with the values Rule.effective gives it."""
    exported = grafana_rules(custom)
    for rule in custom.rules:
        if rule.condition in SELF_KINDS:
            continue  # not exported (test_groupscope_s_watch_over_itself_is_not_exported)
        mine = [r for r in exported if r.variant.rule.name == rule.name]
        for cluster in CLUSTERS:
            for group in GROUPS:
                effective = rule.effective(cluster, group)
                chosen = [r for r in mine if r.variant.selects(cluster, group)]
                if not effective.enabled:
                    assert chosen == [], (rule.name, cluster, group)
                    continue
                assert len(chosen) == 1, (rule.name, cluster, group)
                variant = chosen[0].variant
                assert variant.threshold == effective.threshold
                assert variant.for_ == effective.for_
                assert variant.severity == effective.severity
                assert dict(variant.labels) == dict(effective.labels)
                assert variant.runbook == effective.runbook
                assert chosen[0].labels["severity"] == effective.severity
    # The examples of docs/alerts.md, by hand.
    lag = {r.variant.title: r for r in exported if r.variant.rule.name == "lag_records_high"}
    payments = lag["lag_records_high (override 1)"]
    assert payments.variant.threshold == 1000 and payments.variant.for_ == timedelta(minutes=2)
    assert payments.labels["team"] == "payments"
    assert payments.variant.selects("prod-eu", "payments-eu")
    assert not payments.variant.selects("prod-eu", "old-payments-eu")  # whole-name match
    assert lag["lag_records_high"].variant.threshold == 500000
    assert lag["lag_records_high (override 2)"].variant.severity == "info"
    assert not any(r.variant.selects("dev", "batch-7") for r in lag.values())  # disabled
    only_payments = [r for r in exported if r.variant.rule.name == "payments_lag_seconds"]
    assert [r.variant.selects("prod-eu", g) for r in only_payments
            for g in ("payments-eu", "orders")] == [True, False]


def test_the_override_masks_are_in_the_sql(custom: RuleSet) -> None:
    exported = {r.variant.title: r for r in grafana_rules(custom)}
    sql = exported["lag_records_high (override 1)"].data[0]["model"]["rawSql"]
    assert "WHERE condition = 'lag_records'" in sql
    assert "CASE WHEN group_id ~ '^(?:payments-.*)$' THEN 1 ELSE 0 END" in sql
    assert "CASE WHEN cluster ~ '^(?:staging|dev)$' THEN 2 ELSE 0 END" in sql
    assert "CASE WHEN cluster ~ '^(?:dev)$' AND group_id ~ '^(?:batch-.*)$' THEN 4" in sql
    masks = exported["lag_records_high (override 1)"].variant.masks
    assert masks is not None and f"WHERE variant IN ({', '.join(map(str, masks))})" in sql
    assert sql.endswith("ORDER BY 1")
    # Quotes doubled, backslashes in an escape string: the literal means the regex whatever
    # standard_conforming_strings is.
    quoted = exported["quoted_group (override 1)"].data[0]["model"]["rawSql"]
    assert "group_id ~ E'^(?:o''reilly\\\\d+)$'" in quoted
    no_overrides = exported["group_err"].data[0]["model"]["rawSql"]
    assert no_overrides == ('SELECT "time", cluster, group_id, value\n'
                            "FROM serve.alert_conditions\n"
                            "WHERE condition = 'group_status_err'\nORDER BY 1")


def test_collector_staleness_is_counted_in_snapshot_intervals() -> None:
    rule = next(r for r in grafana_rules(builtin_rules(), snapshot_every=timedelta(seconds=30))
                if r.variant.rule.name == "collector_stale")
    sql = rule.data[0]["model"]["rawSql"]
    assert "WHERE condition = 'collector_stale_s'" in sql
    assert "value / 30.0 AS value" in sql
    assert group_interval(timedelta(seconds=30)) == "30s"
    assert group_interval(timedelta(seconds=45)) == "50s"
    assert group_interval(timedelta(seconds=1)) == "10s"
    assert group_interval(timedelta(minutes=1)) == "1m"


def test_literals_and_regexes() -> None:
    assert sql_literal("plain") == "'plain'"
    assert sql_literal("it's") == "'it''s'"
    assert sql_literal("a\\d'") == "E'a\\\\d'''"
    with pytest.raises(AlertingError):
        sql_literal("nul\x00")
    assert pg_regex("payments-.*", "x") == "^(?:payments-.*)$"
    assert pg_regex("(?i)Payments", "x") == "(?i)^(?:Payments)$"
    assert pg_regex("a\\\\b", "x") == "^(?:a\\\\b)$"  # an escaped backslash, then b
    assert pg_regex("(?!payments-).*", "x") == "^(?:(?!payments-).*)$"
    for bad in ("\\bword", "(?P<n>a)", "(?<n>a)", "a(?i)b", "(?>a)", "(a)\\1", "(?m)a",
                "$__timeFilter(x)"):
        with pytest.raises(AlertingError, match="rule 'r'"):
            pg_regex(bad, "rule 'r'")


def test_a_regex_postgresql_reads_differently_is_refused_naming_the_rule(
        tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - name: lag_records_high\n    overrides:\n"
                    "      - {group: '\\bpay', threshold: 1}\n", encoding="utf-8")
    with pytest.raises(AlertingError, match=r"rule 'lag_records_high': override 1: regex"):
        grafana_rules(load_rules(path))


def test_user_text_is_literal_in_templates_and_untouched_by_env_interpolation(
        custom: RuleSet) -> None:
    rule = next(r for r in grafana_rules(custom)
                if r.variant.title == "lag_records_high (override 1)")
    runbook = rule.annotations["runbook"]
    assert runbook == ('Page the payments on-call ({{ "$" }}PAGER); {{ "{{" }} not a template '
                       '}}.')
    for value in [*rule.annotations.values(), *rule.labels.values()]:
        assert "${" not in value and "$$" not in value
        assert not re.search(r"\$[A-Za-z_]", value)  # no $VAR for Grafana to interpolate


def test_uids_are_stable_short_and_safe() -> None:
    assert uid("groupscope", "group_err") == "groupscope-group_err"
    long = uid("groupscope", "a" * 60)
    assert len(long) == 40 and long == uid("groupscope", "a" * 60)
    assert long != uid("groupscope", "a" * 61)
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", uid("groupscope", "x y/z"))
    assert duration(timedelta(0)) == "0s"
    assert duration(timedelta(seconds=90)) == "1m30s"
    assert duration(timedelta(hours=4)) == "4h"
    assert duration(timedelta(seconds=1.5)) == "2s"


def test_contact_points_hold_placeholders_never_secrets(custom: RuleSet) -> None:
    secret = "https://hooks.example/very-secret"
    environ = {"GROUPSCOPE_ALERT_PAGER_URL": secret,
               "GROUPSCOPE_ALERT_TEAM_SLACK_URL": secret + "-slack"}
    found, skipped = destinations(custom, environ)
    assert [d.channel.name for d in found] == ["pager", "team-slack", "ops-mail"]
    assert skipped == {"payments-slack": "GROUPSCOPE_ALERT_PAYMENTS_SLACK_URL is not set"}
    document = file_provisioning(custom, environ=environ)
    assert secret not in repr(document)
    points = {p["name"]: p["receivers"] for p in document["contactPoints"]}
    assert points["groupscope-pager"] == [{
        "uid": "groupscope-pager", "type": "webhook", "disableResolveMessage": False,
        "settings": {"url": "$__env{GROUPSCOPE_ALERT_PAGER_URL}", "httpMethod": "POST"}}]
    assert points["groupscope-team-slack"][0]["settings"] == {
        "url": "$__env{GROUPSCOPE_ALERT_TEAM_SLACK_URL}"}
    assert points["groupscope-ops-mail"][0]["settings"]["addresses"] == "kafka-ops@example.com"
    assert {r["type"] for r in points["groupscope"]} == {"webhook", "slack", "email"}
    receivers = [r["uid"] for rs in points.values() for r in rs]
    assert len(set(receivers)) == len(receivers)
    # The HTTP-API shape (publish) reads the values from the publisher's environment.
    api = {p["uid"]: p for p in api_contact_points(found, environ)}
    assert api["groupscope-pager"]["settings"]["url"] == secret
    assert api["groupscope-pager"]["name"] == "groupscope-pager"
    # With every channel (--all-channels), placeholders for the unset ones too.
    found_all, skipped_all = destinations(custom, {}, all_channels=True)
    assert len(found_all) == 4 and not skipped_all
    # No destination at all: rules only, Grafana's own policy left alone.
    bare = file_provisioning(builtin_rules(), environ={})
    assert set(bare) == {"apiVersion", "groups"}


def test_the_notification_policy_follows_the_routes(custom: RuleSet) -> None:
    environ = {f"GROUPSCOPE_ALERT_{n}_URL": "x" for n in ("PAGER", "TEAM_SLACK",
                                                          "PAYMENTS_SLACK")}
    found, _ = destinations(custom, environ)
    branch = api_policy_route(custom, found)
    assert branch["object_matchers"] == [[RULE_LABEL, "=~", ".+"]]
    assert branch["receiver"] == "groupscope" and branch["repeat_interval"] == "2h"
    assert branch["continue"] is False
    assert branch["routes"] == [
        {"object_matchers": [["severity", "=", "critical"]], "continue": True,
         "routes": [{"receiver": "groupscope-pager", "continue": True},
                    {"receiver": "groupscope-ops-mail", "continue": True}]},
        {"object_matchers": [["team", "=", "payments"]], "continue": False,
         "routes": [{"receiver": "groupscope-payments-slack", "continue": True}]},
        {"object_matchers": [["severity", "=~", "critical|warning"]], "continue": True,
         "routes": [{"receiver": "groupscope-team-slack", "continue": True}]},
    ]
    document = file_provisioning(custom, environ=environ)
    (policy,) = document["policies"]
    assert policy["receiver"] == "groupscope" and policy["routes"] == [branch]
    receivers = {p["name"] for p in document["contactPoints"]}
    routed = {c["receiver"] for r in branch["routes"] for c in r["routes"]}
    assert routed | {"groupscope"} <= receivers
    # Publishing grafts the branch into an existing tree, replacing an earlier one.
    tree = {"receiver": "default", "routes": [{"receiver": "team-x"}, {**branch, "old": 1}]}
    merged = merge_policy(tree, branch)
    assert merged["receiver"] == "default"
    assert merged["routes"] == [branch, {"receiver": "team-x"}]
    assert merge_policy(merged, branch) == merged
