"""Grafana alerting from the alert rules file (``groupscope.serve.alerting.rules``): the same rules,
channels and routes that drive groupscope's own notifications, as Grafana rule groups, contact
points and a notification policy, in Grafana's file-provisioning shape
(``file_provisioning``, for ``/etc/grafana/provisioning/alerting``) and in its HTTP-API shape
(``api_rules``, ``api_contact_points``, ``api_policy_route``, for ``publish``).

Each rule queries ``serve.alert_conditions`` (one row per subject and condition kind at the
newest snapshot) through the warehouse datasource, in time_series format (what Grafana's alert
conditions need), then reduces each series (cluster, group_id) to its last value and compares
it with the threshold: refIds ``A`` (SQL), ``B`` (reduce last), ``C`` (threshold, the
condition).

Overrides (per-cluster and per-group regexes) become separate Grafana rules: Grafana's ``for``,
severity and labels are per rule, so each distinct effective rule (threshold, for, severity,
labels, runbook) over the combinations of matching overrides is one Grafana rule whose SQL
selects exactly the subjects that get it; a subject is selected by exactly one of them, with
the values ``Rule.effective`` gives it (the tests check this). Regexes are matched whole, as in
``Override.matches``, by PostgreSQL (``~ '^(?:regex)$'``); the constructs whose meaning differs
between Python and PostgreSQL are refused.

The rules of groupscope's watch over itself (``SELF_KINDS``: analytics behind the
snapshots, a failed task, a failing channel, an invalid rules file) are not exported
(``skipped_rules`` says so): they judge groupscope's own evaluation and delivery, which Grafana
cannot see, and ``serve.alert_conditions`` has no rows for them.

A rule's ``on_unknown`` is groupscope's own: the Grafana rules keep ``noDataState: OK``.

By default the rules are **paused** (``isPaused: true``): groupscope's own notifications (the
Airflow channels) already notify, and the two must not both do it. ``enabled=True`` (the
``--grafana-alerting`` flag or ``GROUPSCOPE_GRAFANA_ALERTING=1``) unpauses them; then turn
the Airflow channels off.

Contact points never hold a secret here: a webhook or Slack URL is ``$__env{VAR}`` (Grafana
reads ``VAR`` from its environment) in the files, and read from the publisher's environment
by ``publish``; ``channel_env`` names the variable of each channel.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from groupscope.serve.alerting.kinds import BELOW_KINDS, BY_NAME, CLUSTER_SUBJECT_KINDS, SELF_KINDS
from groupscope.serve.alerting.rules import Channel, Rule, RuleSet
from groupscope.serve.grafana import (
    DASHBOARDS,
    DATASOURCE_TYPE,
    DATASOURCE_UID,
    FOLDER_TITLE,
    FOLDER_UID,
)

ORG_ID = 1
RULE_GROUP = "groupscope"
QUERY, REDUCE, THRESHOLD = "A", "B", "C"
EXPR_UID = "__expr__"
# Every groupscope rule carries this label (its rule name): the notification policy routes on it.
RULE_LABEL = "groupscope_rule"
ENABLE_ENV = "GROUPSCOPE_GRAFANA_ALERTING"
ALL_RECEIVER = "groupscope"
GROUP_BY = ["alertname", "cluster", "severity"]
MAX_OVERRIDES = 8
UID_MAX = 40
QUERY_WINDOW_S = 600
# serve.alert_conditions names the collector's staleness in seconds; the rule counts intervals.
_VIEW_CONDITION = {"collector_stale": "collector_stale_s"}
_TRUE = {"1", "true", "yes", "on"}
# Grafana's root URL in an annotation template, without its trailing slash.
EXTERNAL_URL = '{{ reReplaceAll "/+$" "" externalURL }}'


class AlertingError(ValueError):
    """A rules file that cannot be exported to Grafana; the message names the rule."""


def enabled_from_env(environ: Mapping[str, str]) -> bool:
    """``GROUPSCOPE_GRAFANA_ALERTING`` is 1/true/yes/on."""
    return environ.get(ENABLE_ENV, "").strip().lower() in _TRUE


# --- names -------------------------------------------------------------------------------


def uid(*parts: str) -> str:
    """A Grafana uid from ``parts``: ``[a-zA-Z0-9-_]``, at most 40 characters (a long one keeps
    its start and ends in a hash of the whole, so it stays stable and unique)."""
    text = re.sub(r"[^a-zA-Z0-9_-]", "-", "-".join(parts))
    if len(text) <= UID_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:UID_MAX - 9]}-{digest}"


def channel_env(channel: Channel) -> str:
    """The environment variable holding a channel's Grafana destination: the URL of a webhook
    or Slack channel, ``GROUPSCOPE_ALERT_<NAME>_URL``; the recipients of an e-mail channel
    without ``to`` in the rules file, ``GROUPSCOPE_ALERT_<NAME>_TO`` (comma-separated)."""
    suffix = "TO" if channel.kind == "email" else "URL"
    return f"GROUPSCOPE_ALERT_{channel.name.upper().replace('-', '_')}_{suffix}"


def receiver_name(channel: Channel) -> str:
    return f"groupscope-{channel.name}"


def duration(value: timedelta) -> str:
    """A Prometheus-style duration Grafana parses (``0s``, ``90s``, ``5m``, ``1h30m``, ``2d``),
    rounded up to a whole second."""
    seconds = math.ceil(value.total_seconds())
    if seconds == 0:
        return "0s"
    text = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            text += f"{count}{unit}"
    return text


def group_interval(snapshot_every: timedelta) -> str:
    """How often Grafana evaluates the rules: the snapshot interval, rounded up to a multiple
    of 10 s (Grafana's base interval), at least 10 s."""
    seconds = max(10, math.ceil(snapshot_every.total_seconds() / 10) * 10)
    return duration(timedelta(seconds=seconds))


# --- SQL ---------------------------------------------------------------------------------


def sql_literal(text: str) -> str:
    """A PostgreSQL string literal of ``text``, whatever standard_conforming_strings says: ``'``
    doubled, and an escape string (``E'...'``, backslashes doubled) when it has a backslash."""
    if "\x00" in text:
        raise AlertingError("a NUL character cannot be in a SQL literal")
    quoted = text.replace("'", "''")
    if "\\" in text:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


# Python regex constructs PostgreSQL's AREs lack or read differently.
_UNSUPPORTED = (
    (re.compile(r"\\[bB]"), r"\b and \B (PostgreSQL: \y and \Y)"),
    (re.compile(r"\\N"), r"\N{...}"),
    (re.compile(r"\(\?P"), "named groups (?P...)"),
    (re.compile(r"\(\?<(?![=!])"), "named groups (?<name>...)"),
    (re.compile(r"\(\?>"), "atomic groups (?>...)"),
    (re.compile(r"\(\?\("), "conditionals (?(...)...)"),
    (re.compile(r"\(\?[aiLmsux-]+[:)]"), "inline flags other than a leading (?i)"),
    (re.compile(r"\\[0-9]"), "backreferences and octal escapes"),
)
_LEADING_FLAGS = re.compile(r"^\(\?([aiLmsux]+)\)")


def pg_regex(pattern: str, where: str) -> str:
    """``pattern`` (a Python regex matched whole, as ``re.fullmatch``) as a PostgreSQL ARE
    matched whole: ``^(?:pattern)$``, a leading ``(?i)`` kept in front."""
    flags = ""
    leading = _LEADING_FLAGS.match(pattern)
    if leading:
        if set(leading.group(1)) != {"i"}:
            raise AlertingError(f"{where}: regex {pattern!r}: only (?i) is supported as an "
                                "inline flag in Grafana (PostgreSQL) regexes")
        flags, pattern = "(?i)", pattern[leading.end():]
    # The escaped pairs are taken out first so that `\\b` (a backslash, then b) is not `\b`.
    scanned = re.sub(r"\\\\", "", pattern)
    for construct, what in _UNSUPPORTED:
        if construct.search(scanned):
            raise AlertingError(f"{where}: regex {pattern!r}: {what} cannot be exported to "
                                "Grafana (PostgreSQL regexes)")
    if "$__" in pattern:
        raise AlertingError(f"{where}: regex {pattern!r}: '$__' would be read as a Grafana "
                            "macro")
    return f"{flags}^(?:{pattern})$"


def _override_sql(rule: Rule, index: int) -> str:
    override = rule.overrides[index]
    where = f"rule {rule.name!r}: override {index + 1}"
    tests = []
    if override.cluster is not None:
        tests.append(f"cluster ~ {sql_literal(pg_regex(override.cluster.pattern, where))}")
    if override.group is not None:
        tests.append(f"group_id ~ {sql_literal(pg_regex(override.group.pattern, where))}")
    return " AND ".join(tests) or "true"


def rule_sql(rule: Rule, masks: Sequence[int] | None, snapshot_every: timedelta) -> str:
    """The query of one Grafana rule: the condition's values per (cluster, group_id), for the
    subjects whose set of matching overrides (a bit mask, bit i = override i+1) is in
    ``masks`` (None: every subject)."""
    view_condition = _VIEW_CONDITION.get(rule.condition, rule.condition)
    value = "value"
    if rule.condition == "collector_stale":
        # Seconds since the last complete snapshot, in snapshot intervals.
        value = f"value / {max(snapshot_every.total_seconds(), 1.0)!r} AS value"
    select = f'SELECT "time", cluster, group_id, {value}'
    source = (f"FROM serve.alert_conditions\n"
              f"WHERE condition = {sql_literal(view_condition)}")
    if masks is None:
        return f"{select}\n{source}\nORDER BY 1"
    bits = "\n     + ".join(f"CASE WHEN {_override_sql(rule, i)} THEN {1 << i} ELSE 0 END"
                          for i in range(len(rule.overrides)))
    return (f"{select}\nFROM (\n  SELECT *,\n    ({bits}) AS variant\n  {source}\n) c\n"
            f"WHERE variant IN ({', '.join(str(m) for m in sorted(masks))})\nORDER BY 1")


# --- rules -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One Grafana rule: a groupscope rule as it applies to the subjects whose matching
    overrides are one of ``masks`` (None: the rule has no overrides, every subject)."""

    rule: Rule
    masks: tuple[int, ...] | None
    threshold: float
    for_: timedelta
    severity: str
    labels: Mapping[str, str]
    runbook: str

    @property
    def overrides(self) -> tuple[int, ...]:
        """The overrides (counted from 1) of the smallest mask: what names the variant."""
        if not self.masks:
            return ()
        first = min(self.masks, key=lambda m: (bin(m).count("1"), m))
        return tuple(i + 1 for i in range(len(self.rule.overrides)) if first & (1 << i))

    @property
    def uid(self) -> str:
        tail = "-".join(str(i) for i in self.overrides)
        return uid("groupscope", self.rule.name, *([f"o{tail}"] if tail else []))

    @property
    def title(self) -> str:
        numbers = self.overrides
        if not numbers:
            return self.rule.name
        word = "override" if len(numbers) == 1 else "overrides"
        return f"{self.rule.name} ({word} {', '.join(map(str, numbers))})"

    def selects(self, cluster: str, group: str) -> bool:
        """Whether this variant's SQL selects the subject (evaluated with Python's regexes)."""
        if self.masks is None:
            return True
        return _mask(self.rule, cluster, group) in self.masks


def _mask(rule: Rule, cluster: str, group: str) -> int:
    return sum(1 << i for i, o in enumerate(rule.overrides) if o.matches(cluster, group))


def _apply(rule: Rule, mask: int) -> tuple[Any, ...]:
    """The effective (enabled, threshold, for, severity, labels, runbook) for a mask, as
    ``Rule.effective`` computes them: matching overrides in file order, later ones winning."""
    rule_ = rule.applying(o for i, o in enumerate(rule.overrides) if mask & (1 << i))
    return (rule_.enabled, rule_.threshold, rule_.for_, rule_.severity,
            tuple(sorted(rule_.labels.items())), rule_.runbook)


def variants(rule: Rule) -> list[Variant]:
    """The Grafana rules of one groupscope rule: one per distinct effective rule over every
    combination of matching overrides; none for the combinations that disable it."""
    if not rule.overrides:
        if not rule.enabled:
            return []
        return [Variant(rule, None, rule.threshold, rule.for_, rule.severity,
                        dict(rule.labels), rule.runbook)]
    if len(rule.overrides) > MAX_OVERRIDES:
        raise AlertingError(f"rule {rule.name!r}: {len(rule.overrides)} overrides; the Grafana "
                            f"export takes at most {MAX_OVERRIDES} per rule")
    shapes: dict[tuple[Any, ...], list[int]] = {}
    for mask in range(1 << len(rule.overrides)):
        shapes.setdefault(_apply(rule, mask), []).append(mask)
    found = []
    for (enabled, threshold, for_, severity, labels, runbook), masks in shapes.items():
        if enabled:
            found.append(Variant(rule, tuple(masks), threshold, for_, severity, dict(labels),
                                 runbook))
    return sorted(found, key=lambda v: (v.overrides != (), min(v.masks or (0,))))


def _template_text(text: str) -> str:
    """Literal text in a Grafana template (annotations and labels are Go templates): ``{{``
    and ``$`` written as template string constants, so that neither the template engine nor
    the provisioning's environment interpolation reads them."""
    return re.sub(r"\{\{|\$", lambda m: '{{ "' + m.group(0) + '" }}', text)


def _number(value: float) -> str:
    return f"{value:g}"


def _annotations(variant: Variant, dashboard_base: str) -> dict[str, str]:
    rule = variant.rule
    cluster_level = rule.condition in CLUSTER_SUBJECT_KINDS
    subject = "{{ .Labels.cluster }}" + ("" if cluster_level else "/{{ .Labels.group_id }}")
    meaning = BY_NAME[rule.condition].meaning
    if cluster_level:
        dashboard = f"{dashboard_base}/d/groupscope-overview/{DASHBOARDS['groupscope-overview']}"
        query = "?var-cluster={{ urlquery .Labels.cluster }}"
    else:
        dashboard = f"{dashboard_base}/d/groupscope-group/{DASHBOARDS['groupscope-group']}"
        query = ("?var-cluster={{ urlquery .Labels.cluster }}"
                 "&var-group={{ urlquery .Labels.group_id }}")
    annotations = {
        "summary": (f"{rule.name}: {subject}: {_template_text(meaning)} is "
                    f'{{{{ index .Values "{REDUCE}" }}}} (threshold {_number(variant.threshold)})'),
        "description": _template_text(
            f"{rule.condition}: {meaning}. The rule fires when it is "
            f"{'below' if rule.condition in BELOW_KINDS else 'above'} "
            f"{_number(variant.threshold)} for {duration(variant.for_)}."
            + (f" Runbook: {variant.runbook}" if variant.runbook else "")),
        "dashboard_url": dashboard + query,
    }
    if variant.runbook:
        annotations["runbook"] = _template_text(variant.runbook)
    return annotations


def _labels(variant: Variant) -> dict[str, str]:
    labels = {k: _template_text(v) for k, v in variant.labels.items()}
    labels["severity"] = variant.severity
    labels[RULE_LABEL] = variant.rule.name
    return labels


def _data(variant: Variant, snapshot_every: timedelta) -> list[dict[str, Any]]:
    expr_source = {"type": EXPR_UID, "uid": EXPR_UID}
    no_range = {"from": 0, "to": 0}
    return [
        {"refId": QUERY, "relativeTimeRange": {"from": QUERY_WINDOW_S, "to": 0},
         "datasourceUid": DATASOURCE_UID,
         "model": {"refId": QUERY, "datasource": {"type": DATASOURCE_TYPE, "uid": DATASOURCE_UID},
                   "editorMode": "code", "format": "time_series", "rawQuery": True,
                   "rawSql": rule_sql(variant.rule, variant.masks, snapshot_every),
                   "intervalMs": 1000, "maxDataPoints": 43200}},
        {"refId": REDUCE, "relativeTimeRange": no_range, "datasourceUid": EXPR_UID,
         "model": {"refId": REDUCE, "datasource": expr_source, "type": "reduce",
                   "expression": QUERY, "reducer": "last", "settings": {"mode": "dropNN"}}},
        {"refId": THRESHOLD, "relativeTimeRange": no_range, "datasourceUid": EXPR_UID,
         "model": {"refId": THRESHOLD, "datasource": expr_source, "type": "threshold",
                   "expression": REDUCE,
                   "conditions": [{"type": "query",
                                   "evaluator": {
                                       "type": ("lt" if variant.rule.condition
                                                in BELOW_KINDS else "gt"),
                                       "params": [variant.threshold]},
                                   "operator": {"type": "and"},
                                   "query": {"params": [THRESHOLD]},
                                   "reducer": {"type": "last", "params": []}}]}},
    ]


@dataclass(frozen=True)
class GrafanaRule:
    """One Grafana alert rule, shape-neutral; ``file_shape`` and ``api_shape`` render it."""

    variant: Variant
    data: list[dict[str, Any]]
    labels: dict[str, str]
    annotations: dict[str, str]
    paused: bool
    keep_firing_for: timedelta

    @property
    def uid(self) -> str:
        return self.variant.uid

    def _common(self) -> dict[str, Any]:
        return {"uid": self.uid, "title": self.variant.title, "condition": THRESHOLD,
                "data": self.data, "noDataState": "OK", "execErrState": "Error",
                "for": duration(self.variant.for_), "annotations": self.annotations,
                "labels": self.labels, "isPaused": self.paused}

    def file_shape(self) -> dict[str, Any]:
        return {**self._common(), "keepFiringFor": duration(self.keep_firing_for)}

    def api_shape(self) -> dict[str, Any]:
        return {**self._common(), "folderUID": FOLDER_UID, "ruleGroup": RULE_GROUP,
                "orgID": ORG_ID, "keep_firing_for": duration(self.keep_firing_for)}


def skipped_rules(rules: RuleSet) -> dict[str, str]:
    """The rules the export leaves out, and why (rule name -> reason)."""
    return {rule.name: f"{rule.condition} watches groupscope's own evaluation, which Grafana "
                       "cannot see" for rule in rules.rules if rule.condition in SELF_KINDS}


def grafana_rules(rules: RuleSet, *, enabled: bool = False,
                  snapshot_every: timedelta = timedelta(seconds=60),
                  dashboard_base: str = EXTERNAL_URL) -> list[GrafanaRule]:
    """Every Grafana rule of a rule set, paused unless ``enabled``; not the rules of
    groupscope's watch over itself (``skipped_rules``)."""
    found: list[GrafanaRule] = []
    for rule in rules.rules:
        # They watch groupscope's own evaluation (its analytics, tasks, deliveries and rules
        # file), which Grafana cannot see: serve.alert_conditions has no rows for them, so a
        # Grafana rule of theirs would never fire.
        if rule.condition in SELF_KINDS:
            continue
        for variant in variants(rule):
            found.append(GrafanaRule(variant, _data(variant, snapshot_every), _labels(variant),
                                     _annotations(variant, dashboard_base), not enabled,
                                     rules.keep_firing_for))
    uids = [r.uid for r in found]
    twice = sorted({u for u in uids if uids.count(u) > 1})
    if twice:  # two rule names that only differ beyond the uid's 40 characters
        raise AlertingError(f"two Grafana rules would share the uid {twice[0]!r}")
    return found


def api_rules(rules: RuleSet, *, enabled: bool = False,
              snapshot_every: timedelta = timedelta(seconds=60)) -> list[dict[str, Any]]:
    """The rules in the HTTP-API shape (``POST /api/v1/provisioning/alert-rules``)."""
    return [r.api_shape() for r in grafana_rules(rules, enabled=enabled,
                                                 snapshot_every=snapshot_every)]


# --- contact points and the notification policy ------------------------------------------


@dataclass(frozen=True)
class Destination:
    """Where a channel's Grafana contact point sends: its settings (an ``EnvRef`` where the
    value comes from the environment)."""

    channel: Channel
    settings: dict[str, Any]


@dataclass(frozen=True)
class EnvRef:
    name: str


def destinations(rules: RuleSet, environ: Mapping[str, str],
                 all_channels: bool = False) -> tuple[list[Destination], dict[str, str]]:
    """The channels that get a Grafana contact point, and why the others do not (channel name
    -> reason). A channel gets one when its variable (``channel_env``) is set in ``environ``
    (or ``all_channels``), or, for e-mail, when the rules file gives its ``to``."""
    found: list[Destination] = []
    skipped: dict[str, str] = {}
    for channel in rules.channels:
        variable = channel_env(channel)
        present = bool(environ.get(variable)) or all_channels
        if channel.kind == "email" and channel.to:
            found.append(Destination(channel, {"addresses": ";".join(channel.to),
                                               "singleEmail": True}))
        elif not present:
            skipped[channel.name] = f"{variable} is not set"
        elif channel.kind == "email":
            found.append(Destination(channel, {"addresses": EnvRef(variable),
                                               "singleEmail": True}))
        elif channel.kind == "slack":
            found.append(Destination(channel, {"url": EnvRef(variable)}))
        else:
            found.append(Destination(channel, {"url": EnvRef(variable), "httpMethod": "POST"}))
    return found, skipped


def _settings(settings: Mapping[str, Any], resolve: Any) -> dict[str, Any]:
    return {k: resolve(v) for k, v in settings.items()}


def _integrations(found: Sequence[Destination]) -> list[tuple[str, str, Destination]]:
    """(contact point name, integration uid, destination): one contact point per channel and
    ``groupscope`` with every channel (the policy's default)."""
    rows = [(receiver_name(d.channel), uid("groupscope", d.channel.name), d) for d in found]
    rows += [(ALL_RECEIVER, uid("groupscope-all", d.channel.name), d) for d in found]
    return rows


def _env_value(environ: Mapping[str, str]) -> Any:
    def resolve(value: Any) -> Any:
        return environ.get(value.name, "") if isinstance(value, EnvRef) else value
    return resolve


def _placeholder(value: Any) -> Any:
    if isinstance(value, EnvRef):
        return f"$__env{{{value.name}}}"
    return _dollars(value)


def api_contact_points(found: Sequence[Destination],
                       environ: Mapping[str, str]) -> list[dict[str, Any]]:
    """The contact points in the HTTP-API shape (one object per integration, as
    ``/api/v1/provisioning/contact-points`` has them), values read from ``environ``."""
    resolve = _env_value(environ)
    return [{"uid": integration, "name": name, "type": d.channel.kind,
             "settings": _settings(d.settings, resolve), "disableResolveMessage": False}
            for name, integration, d in _integrations(found)]


def _matchers(severities: Sequence[str], labels: Mapping[str, str]) -> list[list[str]]:
    matchers: list[list[str]] = []
    if len(severities) == 1:
        matchers.append(["severity", "=", severities[0]])
    elif severities:
        matchers.append(["severity", "=~", "|".join(severities)])
    matchers += [[k, "=", v] for k, v in labels.items()]
    return matchers


def api_policy_route(rules: RuleSet, found: Sequence[Destination]) -> dict[str, Any]:
    """The groupscope branch of a notification policy tree: every groupscope alert (label
    ``groupscope_rule``) goes to ``groupscope`` (every channel) unless a route of the rules
    file matches; a matching route sends to each of its channels (one child each) and goes on
    to the next route unless its ``continue`` is false, as groupscope's own routing does."""
    included = {d.channel.name for d in found}
    by_name = {c.name: c for c in rules.channels}
    routes = []
    for route in rules.routes:
        children = [{"receiver": receiver_name(by_name[name]), "continue": True}
                    for name in route.channels if name in included]
        if not children:
            continue
        routes.append({"object_matchers": _matchers(route.severities, route.labels),
                       "continue": route.continue_, "routes": children})
    repeat = rules.repeat_interval
    return {"receiver": ALL_RECEIVER, "object_matchers": [[RULE_LABEL, "=~", ".+"]],
            "group_by": list(GROUP_BY), "group_wait": "30s",
            "group_interval": duration(min(repeat, timedelta(minutes=5))),
            "repeat_interval": duration(repeat), "continue": False, "routes": routes}


def is_groupscope_route(route: Mapping[str, Any]) -> bool:
    return [RULE_LABEL, "=~", ".+"] in [list(m) for m in route.get("object_matchers") or []]


def merge_policy(tree: Mapping[str, Any], branch: Mapping[str, Any]) -> dict[str, Any]:
    """``tree`` (an organisation's notification policy tree) with the groupscope branch first
    among its routes, any earlier groupscope branch replaced; the rest kept as it is."""
    others = [r for r in tree.get("routes") or [] if not is_groupscope_route(r)]
    return {**tree, "routes": [dict(branch), *others]}


# --- file provisioning -------------------------------------------------------------------


def _dollars(value: Any) -> Any:
    """``$`` doubled in every string: Grafana interpolates environment variables in these
    provisioning fields, and reads ``$$`` as one ``$``."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_dollars(v) for v in value]
    if isinstance(value, dict):
        return {k: _dollars(v) for k, v in value.items()}
    return value


def file_provisioning(rules: RuleSet, *, enabled: bool = False,
                      snapshot_every: timedelta = timedelta(seconds=60),
                      environ: Mapping[str, str] | None = None,
                      all_channels: bool = False) -> dict[str, Any]:
    """The alerting provisioning file (apiVersion 1): the rule group, and, when at least one
    channel has a destination, the contact points and the notification policy (a whole tree:
    Grafana's file provisioning replaces the organisation's tree)."""
    document: dict[str, Any] = {
        "apiVersion": 1,
        "groups": [{"orgId": ORG_ID, "name": RULE_GROUP, "folder": FOLDER_TITLE,
                    "interval": group_interval(snapshot_every),
                    "rules": [r.file_shape() for r in grafana_rules(
                        rules, enabled=enabled, snapshot_every=snapshot_every)]}],
    }
    found, _ = destinations(rules, environ or {}, all_channels)
    if not found:
        return document
    points: dict[str, list[dict[str, Any]]] = {}
    for name, integration, d in _integrations(found):
        points.setdefault(name, []).append(
            {"uid": integration, "type": d.channel.kind,
             "settings": _settings(d.settings, _placeholder), "disableResolveMessage": False})
    document["contactPoints"] = [{"orgId": ORG_ID, "name": name, "receivers": receivers}
                                 for name, receivers in points.items()]
    branch = api_policy_route(rules, found)
    document["policies"] = [{"orgId": ORG_ID, "receiver": ALL_RECEIVER,
                             "group_by": list(GROUP_BY), "routes": [_dollars(branch)]}]
    return document
