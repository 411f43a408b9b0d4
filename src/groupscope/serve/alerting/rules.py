"""Alert rules from one source: the built-in rules (``default_rules.yaml``) and an operator's
YAML file on top, validated at load with pydantic. A rule is a condition over the marts, a
threshold (it fires when the value is above it; below it for a time left, the loss
forecast), ``for`` (how long it must hold), a severity,
labels, a runbook line, and per-cluster and per-group overrides matched by regex. The same
file names the channels (Airflow connections) and routes notifications by severity and labels.
docs/alerts.md is the file's reference.

A rule's value for a subject can be **unknown** (no data, a partial snapshot, a value that
cannot be computed); its ``on_unknown`` says what that means, as Grafana's NoData state does:
``keep`` the incident's state (the default), treat the value as ``alerting``, or as ``ok``.

The rule set also says how alerting keeps from failing silently: a subject whose value stays
unknown for ``unknown_notice_after`` while its incident is open gets a notice of its own; a
failing channel is retried after ``retry_initial * 2 ** (attempts - 1)``, at most
``retry_max`` (``RuleSet.retry_delay``); each channel sends apart, within
``delivery_deadline`` per evaluation; a notification still undelivered after
``delivery_max_age`` is given up; ``heartbeat`` (off by default) sends "groupscope is alive"
to its ``channels`` ``every`` so long. groupscope watches itself with cluster conditions of its
own (``kinds.SELF_KINDS``): analytics behind the snapshots, a failed task, a failing channel, an
invalid rules file.

Every number is bounded (a threshold within +-1e15, a duration within 10 years) and a file
nests at most ``MAX_DEPTH`` levels, so a 400-digit number or a hostile document is a
``RulesError`` like any other mistake, never an ``OverflowError`` or a ``RecursionError``.
``load_rules_text`` validates a text, so that a stored copy of a file can be checked again
(``groupscope.serve.alerting.rules_store`` keeps the last valid one).

Every problem is one ``RulesError`` line naming the file, the rule and the field::

    rules file /etc/groupscope/rules.yaml: rule 'lag_seconds_high': field 'for': not a
    duration: '5 minutes' (use 90s, 5m, 1h30m or seconds)

A rules file holds connection ids, never secrets; still, no message quotes a channel's
connection field back (someone may have pasted a webhook URL there).
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from groupscope.serve.alerting.kinds import BELOW_KINDS, KINDS

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

# Condition kind -> what its value is (``kinds``, where every kind is defined). A rule fires
# when the value is above its threshold (below it for ``kinds.BELOW_KINDS``) for `for`, per
# subject: cluster and group, or the cluster alone for the collector's and groupscope's own.
CONDITIONS: Mapping[str, str] = {k.name: k.meaning for k in KINDS}
# How far the loss forecast looks (serve.group_conditions, migration 0016): its value when no
# loss is forecast, so a threshold must stay below it.
FORECAST_HORIZON_S = 604800.0


def breached(condition: str, value: float, threshold: float) -> bool:
    """Whether a known value is past its threshold: above it, or below it for a kind of
    ``kinds.BELOW_KINDS``."""
    return value < threshold if condition in BELOW_KINDS else value > threshold



BUILTIN_SOURCE = "built-in rules"
_NAME = re.compile(r"^[a-z0-9_-]+$")
_CONNECTION_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")
_SECONDS = re.compile(r"^\d+(?:\.\d+)?$")
_MAX_DURATION_S = timedelta(days=3650).total_seconds()
_DURATION_HINT = "(use 90s, 5m, 1h30m or seconds)"
# Far above any lag or count, far below where a float stops counting whole units (2**53).
MAX_THRESHOLD = 1e15
# A rules file nests 6 levels (the document, rules, a rule, overrides, an override, its
# labels); PyYAML composes nodes recursively, so a far deeper one ends in a RecursionError.
MAX_DEPTH = 20
# A channel's send deadline at most, and its whole delivery's in one evaluation (the rules'
# ``delivery_deadline``, which it is by default): the alert task is killed at 2 minutes, and
# also waits for another evaluation, evaluates, and sends the heartbeat and the outage notices.
MAX_CHANNEL_TIMEOUT = timedelta(seconds=30)


class RulesError(ValueError):
    """A rules file that cannot be used; the one-line message names the file, the rule and the
    field."""


class _Short(reprlib.Repr):
    """A value as a message quotes it: cut short, so that a 400-digit number or a document of
    aliases stays one readable line."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict = 2, 4, 4
        self.maxstring = self.maxother = 60
        self.maxlong = 40

    def repr_int(self, x: int, level: int) -> str:
        # repr() refuses an int of more than 4300 digits (sys.get_int_max_str_digits).
        if x.bit_length() > 256:
            return f"a number of about {math.floor(math.log10(abs(x))) + 1} digits"
        return super().repr_int(x, level)


_shown = _Short().repr


# --- value types -------------------------------------------------------------------------


def parse_duration(raw: Any) -> timedelta:
    """``90s``, ``5m``, ``1h30m``, ``4h``, ``2d``, or a number of seconds (``300``, ``1.5``)."""
    seconds: float
    if isinstance(raw, timedelta):
        seconds = raw.total_seconds()
    elif isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"not a duration: {_shown(raw)} {_DURATION_HINT}")
    elif isinstance(raw, int | float):
        seconds = raw  # compared below as it is: float() of a huge int overflows
    else:
        text = raw.strip()
        match = _DURATION.match(text) if text else None
        if _SECONDS.match(text):
            seconds = float(text)  # inf, not an error, when it has hundreds of digits
        elif match is not None and any(match.groups()):
            d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
            seconds = d * 86400 + h * 3600 + m * 60 + s
        else:
            raise ValueError(f"not a duration: {_shown(raw)} {_DURATION_HINT}")
    if isinstance(seconds, float) and math.isnan(seconds):
        raise ValueError(f"not a duration: {_shown(raw)} {_DURATION_HINT}")
    if seconds < 0:
        raise ValueError(f"not a duration: {_shown(raw)} (a duration is 0 or more)")
    if seconds > _MAX_DURATION_S:
        raise ValueError(f"a duration is at most 10 years, not {_shown(raw)}")
    return timedelta(seconds=float(seconds))


def _seconds(value: timedelta) -> str:
    return f"{value.total_seconds():g}s"


def _threshold(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError(f"must be a number, not {_shown(raw)}")
    if isinstance(raw, float) and not math.isfinite(raw):
        raise ValueError(f"must be a finite number, not {_shown(raw)}")
    if abs(raw) > MAX_THRESHOLD:  # before float(): an int of 400 digits overflows it
        raise ValueError(f"must be between -1e15 and 1e15, not {_shown(raw)}")
    return float(raw)


def _regex(raw: Any) -> re.Pattern[str] | None:
    if raw is None:
        return None
    if isinstance(raw, re.Pattern):
        return raw
    if not isinstance(raw, str):
        raise ValueError(f"a regex is a string, not {_shown(raw)}")
    try:
        return re.compile(raw)
    except re.error as exc:
        raise ValueError(f"bad regex {raw!r}: {exc}") from None


Duration = Annotated[timedelta, PlainValidator(parse_duration)]
Threshold = Annotated[float, PlainValidator(_threshold)]
Regex = Annotated[re.Pattern[str] | None, PlainValidator(_regex)]
# What an unknown value counts as (Grafana's NoData state): keep the incident's state, or
# treat the value as past the threshold, or as not.
OnUnknown = Literal["keep", "alerting", "ok"]


def _check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"a {what} name is lower-case letters, digits, '_' and '-', "
                         f"not {_shown(value)}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True,
                              arbitrary_types_allowed=True)


# --- rules -------------------------------------------------------------------------------


class Override(_Strict):
    """Changes a rule for the subjects whose cluster and group fully match its regexes (None:
    any). Fields left out keep the rule's value; ``labels`` are merged into the rule's."""

    cluster: Regex = None
    group: Regex = None
    threshold: Threshold | None = None
    for_: Duration | None = Field(default=None, alias="for")
    severity: Severity | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    runbook: str | None = None
    enabled: bool | None = None
    on_unknown: OnUnknown | None = None

    def matches(self, cluster: str, group: str) -> bool:
        return ((self.cluster is None or self.cluster.fullmatch(cluster) is not None)
                and (self.group is None or self.group.fullmatch(group) is not None))


@dataclass(frozen=True)
class EffectiveRule:
    """A rule as it applies to one subject, its matching overrides applied."""

    name: str
    severity: Severity
    condition: str
    threshold: float
    for_: timedelta
    labels: Mapping[str, str]
    runbook: str
    enabled: bool
    on_unknown: OnUnknown


class Rule(_Strict):
    name: str
    severity: Severity
    condition: str
    threshold: Threshold
    for_: Duration = Field(default=timedelta(0), alias="for")
    labels: dict[str, str] = Field(default_factory=dict)
    runbook: str = ""
    enabled: bool = True
    on_unknown: OnUnknown = "keep"
    overrides: list[Override] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "rule")

    @field_validator("condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        if value not in CONDITIONS:
            raise ValueError(f"unknown condition {value!r} (one of: {', '.join(CONDITIONS)})")
        return value

    def effective(self, cluster: str, group: str) -> EffectiveRule:
        """The rule for one subject (``group`` is '' for the cluster-level conditions): the
        overrides whose regexes fully match, in file order, a later one winning field by
        field; labels merged."""
        return self.applying([o for o in self.overrides if o.matches(cluster, group)])

    def applying(self, overrides: Iterable[Override]) -> EffectiveRule:
        """The rule with ``overrides`` applied in order, a later one winning field by field;
        labels merged (Grafana's export applies each combination of overrides with it)."""
        severity: Severity = self.severity
        on_unknown: OnUnknown = self.on_unknown
        threshold, for_, runbook, enabled = self.threshold, self.for_, self.runbook, self.enabled
        labels = dict(self.labels)
        for override in overrides:
            severity = override.severity if override.severity is not None else severity
            threshold = override.threshold if override.threshold is not None else threshold
            for_ = override.for_ if override.for_ is not None else for_
            runbook = override.runbook if override.runbook is not None else runbook
            enabled = override.enabled if override.enabled is not None else enabled
            on_unknown = override.on_unknown if override.on_unknown is not None else on_unknown
            labels.update(override.labels)
        return EffectiveRule(self.name, severity, self.condition, threshold, for_, labels,
                             runbook, enabled, on_unknown)


# --- channels and routes -----------------------------------------------------------------


class Channel(_Strict):
    """Where notifications go, through an Airflow connection: ``webhook`` (any connection
    type, the URL in its password or host), ``slack`` (type ``slackwebhook``), ``email`` (type
    ``smtp``; recipients in ``to``, else the connection's extra ``to``). ``timeout``: the
    deadline of one send, all told (None: the kind's default,
    ``groupscope.serve.alerting.airflow_channels``). ``incidents: false``: a channel for the
    heartbeat alone (a dead man's switch, to which any post is a sign of life): no incident
    goes there, by default or as a fallback, and no route may name it."""

    name: str
    kind: Literal["webhook", "slack", "email"]
    connection: str  # an Airflow connection id
    to: list[str] = Field(default_factory=list)
    from_email: str | None = None
    timeout: Duration | None = None
    incidents: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "channel")

    @field_validator("connection")
    @classmethod
    def _connection(cls, value: str) -> str:
        # Not quoted back: a pasted webhook URL is a secret.
        if not _CONNECTION_ID.match(value):
            raise ValueError("must be an Airflow connection id (letters, digits, '_', '-', "
                             "'.'); put a URL or a password in the connection, not here")
        return value

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not timedelta(0) < value <= MAX_CHANNEL_TIMEOUT:
            raise ValueError("must be more than 0s and at most 30s (a channel's whole delivery "
                             "has at most 30s: the rules' delivery_deadline)")
        return value

    @field_validator("to", "from_email")
    @classmethod
    def _email_only(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("kind")
        if value and kind is not None and kind != "email":
            raise ValueError(f"only an email channel has it, not a {kind} channel")
        return value


class Route(_Strict):
    """Sends the notifications that match (severity in ``severities``, empty: any; every
    label in ``labels`` equal) to ``channels``; ``continue: false`` stops at this route."""

    channels: list[str] = Field(min_length=1)
    severities: list[Severity] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    continue_: bool = Field(default=True, alias="continue")

    def matches(self, severity: str, labels: Mapping[str, str]) -> bool:
        return ((not self.severities or severity in self.severities)
                and all(labels.get(k) == v for k, v in self.labels.items()))


class Heartbeat(_Strict):
    """A "groupscope is alive" message to ``channels`` every ``every``: its absence tells the
    receivers that alerting itself stopped."""

    channels: list[str] = Field(min_length=1)
    every: Duration

    @field_validator("every")
    @classmethod
    def _every(cls, value: timedelta) -> timedelta:
        # Evaluations run about once a minute: a shorter heartbeat could not be kept.
        if value < timedelta(minutes=1):
            raise ValueError(f"must be at least 1m, not {_seconds(value)}")
        return value


class RuleSet(_Strict):
    rules: list[Rule]
    channels: list[Channel]
    routes: list[Route] = Field(default_factory=list)
    repeat_interval: Duration = timedelta(hours=4)
    keep_firing_for: Duration = timedelta(minutes=2)
    unknown_notice_after: Duration = timedelta(minutes=10)
    delivery_max_age: Duration = timedelta(hours=4)
    retry_initial: Duration = timedelta(seconds=30)
    retry_max: Duration = timedelta(minutes=15)
    # The total time each channel is given for all it sends in one evaluation (the channels
    # send at once, each apart): one that has not finished by then fails like a refusal. With
    # the wait for another evaluation (30 s), the notices (10 s each) and the evaluation, it
    # fits the alert task's 2 minutes.
    delivery_deadline: Duration = MAX_CHANNEL_TIMEOUT
    heartbeat: Heartbeat | None = None
    # The sliding window rebalances_per_hour counts over, scaled to an hour: an hour, except
    # to compress time in a test (or to look at a storm through a shorter lens).
    rebalance_window: Duration = timedelta(hours=1)

    @field_validator("rebalance_window")
    @classmethod
    def _rebalance_window(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=10) <= value <= timedelta(days=1):
            raise ValueError(f"must be from 10s to 1d, not {_seconds(value)}")
        return value

    @field_validator("delivery_deadline")
    @classmethod
    def _delivery_deadline(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= MAX_CHANNEL_TIMEOUT:
            raise ValueError(f"must be from 1s to 30s, not {_seconds(value)}: the alert task "
                             "has 2 minutes for the evaluation, the delivery and the heartbeat")
        return value

    @field_validator("retry_initial")
    @classmethod
    def _retry_initial(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be more than 0s: a failing channel would be retried at "
                             "every evaluation")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RuleSet:
        for kind, names in (("rule", [r.name for r in self.rules]),
                            ("channel", [c.name for c in self.channels])):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{kind} {twice[0]!r}: field 'name': given to "
                                 f"{names.count(twice[0])} {kind}s; {kind} names are unique")
        known = [c.name for c in self.channels]
        watchers = [c.name for c in self.channels if not c.incidents]
        for index, route in enumerate(self.routes, start=1):
            unknown = [c for c in route.channels if c not in known]
            if unknown:
                raise ValueError(f"route {index}: field 'channels': no channel {unknown[0]!r} "
                                 f"(channels: {', '.join(known) or 'none'})")
            heartbeat_only = [c for c in route.channels if c in watchers]
            if heartbeat_only:
                raise ValueError(f"route {index}: field 'channels': channel "
                                 f"{heartbeat_only[0]!r} takes no incidents (incidents: false)")
        if self.heartbeat is not None:
            unknown = [c for c in self.heartbeat.channels if c not in known]
            if unknown:
                raise ValueError(f"field 'heartbeat.channels': no channel {unknown[0]!r} "
                                 f"(channels: {', '.join(known) or 'none'})")
        for rule in self.rules:
            if rule.condition not in BELOW_KINDS:
                continue
            thresholds = [("", rule.threshold)] + [
                (f"override {i}: ", o.threshold) for i, o in enumerate(rule.overrides, start=1)
                if o.threshold is not None]
            for where, threshold in thresholds:
                if threshold >= FORECAST_HORIZON_S:
                    raise ValueError(
                        f"rule {rule.name!r}: {where}field 'threshold': {threshold:g} s is not "
                        f"below the forecast's horizon of 7 days ({FORECAST_HORIZON_S:g} s, the "
                        "value when no loss is forecast): it would fire for every group")
        if self.retry_initial > self.retry_max:
            raise ValueError(f"field 'retry_max': {_seconds(self.retry_max)} is below "
                             f"retry_initial ({_seconds(self.retry_initial)})")
        if self.delivery_max_age < self.retry_initial:
            raise ValueError(f"field 'delivery_max_age': {_seconds(self.delivery_max_age)} is "
                             f"below retry_initial ({_seconds(self.retry_initial)}): a failed "
                             "notification would be given up before its first retry")
        return self

    def retry_delay(self, attempts: int) -> timedelta:
        """How long a channel waits after its ``attempts``-th failed try in a row (1 or more):
        ``retry_initial * 2 ** (attempts - 1)``, at most ``retry_max``."""
        # In float seconds, the doublings capped: a timedelta overflows long before 2**64.
        seconds = self.retry_initial.total_seconds() * 2.0 ** min(max(attempts - 1, 0), 64)
        if seconds >= self.retry_max.total_seconds():
            return self.retry_max
        return timedelta(seconds=seconds)

    def rule(self, name: str) -> Rule:
        """The rule of that name (KeyError if none)."""
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)

    def exceeded(self, observation: Any) -> bool:
        """Whether an observed value (``conditions.Observation``) is past the threshold of an
        enabled rule of its condition (``breached``), the overrides for its subject applied
        (unknown: no)."""
        value = observation.value
        if observation.unknown is not None or math.isnan(value):
            return False
        for rule in self.rules:
            if rule.condition == observation.condition:
                effective = rule.effective(observation.cluster, observation.group_id)
                if effective.enabled and breached(rule.condition, value, effective.threshold):
                    return True
        return False

    def routed(self, severity: str, labels: Mapping[str, str]) -> list[str]:
        """The channels the matching routes name, in route order, up to and including the
        first matching route with ``continue: false``; none when no route matches."""
        names: list[str] = []
        for route in self.routes:
            if route.matches(severity, labels):
                names += [n for n in route.channels if n not in names]
                if not route.continue_:
                    break
        return names

    def channels_for(self, severity: str, labels: Mapping[str, str]) -> list[Channel]:
        """The channels of every matching route (``routed``); when no route matches (or there
        are none): every channel that takes incidents."""
        names = self.routed(severity, labels)
        if not names:
            return [c for c in self.channels if c.incidents]
        by_name = {c.name: c for c in self.channels}
        return [by_name[n] for n in names]


# --- loading -----------------------------------------------------------------------------


# yaml.safe_load keeps the last of two equal keys; a rules file with `threshold` twice is a
# mistake to report, not to guess. (A SafeLoader subclass built with type(): PyYAML has no
# type hints.)
_UniqueKeyLoader: Any = type("_UniqueKeyLoader", (yaml.SafeLoader,), {})


def _construct_mapping(loader: Any, node: Any) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            continue  # construct_mapping reports the unhashable key
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice in one mapping", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node))


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_mapping)


def _reported(construct: Any) -> Any:
    """A PyYAML constructor whose ValueError (an int of more than 4300 digits, a date like
    2024-13-45) is a YAML error at the value's line, not an exception of PyYAML's own."""
    def constructor(loader: Any, node: Any) -> Any:
        try:
            return construct(loader, node)
        except ValueError as exc:
            reason = str(exc).split(";")[0]  # not the advice to raise Python's digit limit
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {_shown(node.value)}: {reason}",
                node.start_mark) from None
    return constructor


for _tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:timestamp"):
    _UniqueKeyLoader.add_constructor(_tag, _reported(yaml.SafeLoader.yaml_constructors[_tag]))


def _check_depth(text: str) -> None:
    """A YAMLError at the first collection nested deeper than ``MAX_DEPTH`` (PyYAML's parser
    is not recursive; its composer is)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_DEPTH} levels",
                                           problem_mark=event.start_mark)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _document(text: str, source: str) -> dict[str, Any]:
    try:
        _check_depth(text)
        document = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RulesError(f"{source}: not valid YAML{where}: {problem}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise RulesError(f"{source}: must be a mapping of rules:, channels:, routes:, "
                         f"repeat_interval:, keep_firing_for:, not a {type(document).__name__}")
    for key in ("rules", "channels", "routes"):
        if document.get(key) is not None and not isinstance(document[key], list):
            raise RulesError(f"{source}: field {key!r}: must be a list (items starting with "
                             f"'- '), not a {type(document[key]).__name__}")
    return document


@cache
def _builtin_text() -> str:
    return (resources.files("groupscope.serve.alerting") / "default_rules.yaml").read_text("utf-8")


def builtin_rules() -> RuleSet:
    """The built-in rules, channels and intervals (``default_rules.yaml``)."""
    document = _document(_builtin_text(), BUILTIN_SOURCE)
    return _validate(document, BUILTIN_SOURCE, list(range(len(document.get("rules") or []))))


# The rule set's own keys: a file that gives one replaces the built-in value.
_RULESET_KEYS = ("channels", "routes", "repeat_interval", "keep_firing_for",
                 "unknown_notice_after", "delivery_max_age", "retry_initial", "retry_max",
                 "delivery_deadline", "heartbeat", "rebalance_window")


def rules_source(path: Path) -> str:
    """How errors name a rules file: ``rules file PATH``."""
    return f"rules file {path}"


def salvage_channels(text: str, source: str) -> list[Channel]:
    """The channels of a rules text that is invalid elsewhere, each one that is valid on its
    own: where the invalid file's own notice (``rules_invalid``) and what its channels are
    owed can still go while a fallback is in use. None when the text is not a YAML mapping."""
    try:
        document = _document(text, source)
    except RulesError:
        return []
    found = []
    for item in document.get("channels") or []:
        try:
            found.append(Channel.model_validate(item))
        except ValidationError:
            continue
    return found


def read_rules_file(path: Path) -> str:
    """The text of a rules file; a ``RulesError`` naming it when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RulesError(f"{rules_source(path)}: cannot be read: {reason}") from None


def load_rules(path: Path | None) -> RuleSet:
    """The built-in rules, then ``path``'s on top (``load_rules_text``). None: the built-ins."""
    if path is None:
        return builtin_rules()
    return load_rules_text(read_rules_file(path), rules_source(path))


def load_rules_text(text: str, source: str) -> RuleSet:
    """The built-in rules, then those of ``text`` (a rules file's content) on top; ``source``
    names the text in every error (``rules file PATH``). A file rule named like a built-in
    replaces it (the fields it leaves out keep the built-in's values); other file rules are
    added after the built-ins. The rule set's own keys (``channels``, ``routes``, the
    intervals, ``heartbeat``), when the text gives them, replace the built-in ones. An empty
    text: the built-ins alone."""
    base = _document(_builtin_text(), BUILTIN_SOURCE)
    mine = _document(text, source)

    file_rules: list[Any] = list(mine.get("rules") or [])
    names = [r.get("name") for r in file_rules if isinstance(r, dict)]
    twice = [n for n in names if isinstance(n, str) and names.count(n) > 1]
    if twice:
        raise RulesError(f"{source}: rule {twice[0]!r}: field 'name': given to "
                         f"{names.count(twice[0])} rules; rule names are unique")
    by_name = {r["name"]: (i, r) for i, r in enumerate(file_rules)
               if isinstance(r, dict) and isinstance(r.get("name"), str)}
    rules: list[Any] = []
    origin: list[int | None] = []  # the index of each merged rule in the file, if from it
    for builtin in base.get("rules") or []:
        index, rule = by_name.pop(builtin["name"], (None, None))
        rules.append(builtin if rule is None else {**builtin, **rule})
        origin.append(index)
    taken = {index for index in origin if index is not None}
    for index, rule in enumerate(file_rules):
        if index not in taken:
            rules.append(rule)
            origin.append(index)

    merged: dict[str, Any] = {**mine, "rules": rules}
    for key in _RULESET_KEYS:
        if mine.get(key) is None:
            merged.pop(key, None)
            if key in base:
                merged[key] = base[key]
    return _validate(merged, source, origin)


def _validate(document: Mapping[str, Any], source: str,
              origin: Sequence[int | None]) -> RuleSet:
    try:
        return RuleSet.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RulesError(f"{source}: {_describe(errors[0], document, origin)}{more}") from None


_ITEMS: Mapping[str, tuple[str, type[BaseModel]]] = {
    "rules": ("rule", Rule), "channels": ("channel", Channel), "routes": ("route", Route),
    "overrides": ("override", Override)}


def _field_name(part: Any) -> str:
    """A field of an error's location as the message names it: a file's key may be anything,
    a 400-digit number too."""
    if isinstance(part, str):
        return part if len(part) <= 60 else part[:57] + "..."
    return _shown(part)


def _describe(error: Any, document: Mapping[str, Any], origin: Sequence[int | None]) -> str:
    """One pydantic error as ``rule 'x': override 2: field 'y': what is wrong`` (items counted
    from 1, as in the file)."""
    loc: list[Any] = list(error["loc"])
    where: list[str] = []
    model: type[BaseModel] = RuleSet
    container: Any = document
    while len(loc) >= 2 and loc[0] in _ITEMS and isinstance(loc[1], int):
        kind, model = _ITEMS[loc[0]]
        items = container.get(loc[0]) if isinstance(container, Mapping) else None
        item = items[loc[1]] if isinstance(items, list) and loc[1] < len(items) else None
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and kind in ("rule", "channel"):
            where.append(f"{kind} {name!r}")
        elif kind == "rule" and container is document:
            # A rule without a usable name comes from the file: its place there.
            number = origin[loc[1]] if loc[1] < len(origin) else None
            where.append(f"rule {(loc[1] if number is None else number) + 1}")
        else:
            where.append(f"{kind} {loc[1] + 1}")
        container, loc = item, loc[2:]
    fields = [_field_name(part) for part in loc]
    if loc[:1] == ["heartbeat"]:  # the one model nested outside the item lists
        model = Heartbeat
    if fields:
        where.append(f"field {'.'.join(fields)!r}")
    kind_of_error = error.get("type", "")
    if kind_of_error == "extra_forbidden":
        allowed = [f.alias or n for n, f in model.model_fields.items()]
        message = f"unknown field (allowed: {', '.join(allowed)})"
    elif kind_of_error == "missing":
        message = "missing (required)"
    else:
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return ": ".join([*where, message])
