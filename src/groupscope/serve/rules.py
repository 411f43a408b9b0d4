"""Alert rules from one source: the built-in rules (``default_rules.yaml``) and an operator's
YAML file on top, validated at load with pydantic. A rule is a condition over the marts, a
threshold (it fires when the value is above it), ``for`` (how long it must hold), a severity,
labels, a runbook line, and per-cluster and per-group overrides matched by regex. The same
file names the channels (Airflow connections) and routes by severity and labels.

Errors name the file, the rule and the field::

    rules file /etc/groupscope/rules.yaml: rule 'lag_seconds_high': field 'for': not a
    duration: '5 minutes' (use 90s, 5m, 1h30m or a number of seconds)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

Severity = Literal["critical", "warning", "info"]

CONDITIONS: Mapping[str, str] = {
    "group_status_err": "partitions of the group in STOP or STALL (group status ERR)",
    "partition_rewind": "partitions whose committed offset moved back (REWIND)",
    "lag_seconds": "the group's largest time lag, seconds (exact where sampled, else estimated)",
    "lag_records": "the group's lag, records",
    "lag_beyond_retention": "partitions whose committed offset is below the log start",
    "group_empty_lag_growing": "records the lag of a group without members grew by since the "
                               "previous snapshot",
    "rebalances_per_hour": "rebalances of the group in the last hour",
    "collector_stale": "snapshot intervals since the cluster's last complete snapshot",
    "snapshot_incomplete": "incomplete snapshots in a row",
    "quality_gate_failed": "quality suites whose latest check failed",
}

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class RulesError(ValueError):
    """A rules file that cannot be used; the message names the rule and the field."""


def parse_duration(raw: Any) -> timedelta:
    """``90s``, ``5m``, ``1h30m``, ``2d``, or a number of seconds."""
    if isinstance(raw, timedelta):
        return raw
    if isinstance(raw, bool):
        raise ValueError(f"not a duration: {raw!r}")
    if isinstance(raw, int | float):
        seconds = float(raw)
    else:
        match = _DURATION.match(str(raw).strip().replace(" ", "")) if str(raw).strip() else None
        if match is None or not any(match.groups()):
            raise ValueError(f"not a duration: {raw!r} (use 90s, 5m, 1h30m or a number of "
                             "seconds)")
        d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
        seconds = d * 86400 + h * 3600 + m * 60 + s
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {raw!r}")
    return timedelta(seconds=seconds)


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
Threshold = StrictInt | StrictFloat


def _regex(raw: Any) -> re.Pattern[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValueError(f"a regex must be a string, not {raw!r}")
    try:
        return re.compile(raw)
    except re.error as exc:
        raise ValueError(f"bad regex {raw!r}: {exc}") from None


Regex = Annotated[re.Pattern[str] | None, BeforeValidator(_regex)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True,
                              arbitrary_types_allowed=True)


class Override(_Strict):
    """Applies to the subjects whose cluster and group fully match (None: any)."""

    cluster: Regex = None
    group: Regex = None
    threshold: Threshold | None = None
    for_: Duration | None = Field(default=None, alias="for")
    severity: Severity | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    runbook: str | None = None
    enabled: bool | None = None

    def matches(self, cluster: str, group: str) -> bool:
        return ((self.cluster is None or self.cluster.fullmatch(cluster) is not None)
                and (self.group is None or self.group.fullmatch(group) is not None))


@dataclass(frozen=True)
class EffectiveRule:
    """A rule as it applies to one subject, overrides applied."""

    name: str
    severity: str
    condition: str
    threshold: float
    for_: timedelta
    labels: Mapping[str, str]
    runbook: str
    enabled: bool


class Rule(_Strict):
    name: str
    severity: Severity
    condition: str
    threshold: Threshold
    for_: Duration = Field(default=timedelta(0), alias="for")
    labels: dict[str, str] = Field(default_factory=dict)
    runbook: str = ""
    enabled: bool = True
    overrides: list[Override] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"a rule name is letters, digits, '_', '-' and '.', not {value!r}")
        return value

    @field_validator("condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        if value not in CONDITIONS:
            raise ValueError(f"unknown condition {value!r}; one of: {', '.join(CONDITIONS)}")
        return value

    def effective(self, cluster: str, group: str) -> EffectiveRule:
        """Overrides that match, in file order; a later one wins field by field."""
        values: dict[str, Any] = {
            "threshold": float(self.threshold), "for_": self.for_, "severity": self.severity,
            "runbook": self.runbook, "enabled": self.enabled}
        labels = dict(self.labels)
        for override in self.overrides:
            if not override.matches(cluster, group):
                continue
            for key in values:
                value = getattr(override, key)
                if value is not None:
                    values[key] = float(value) if key == "threshold" else value
            labels.update(override.labels)
        return EffectiveRule(self.name, values["severity"], self.condition,
                             values["threshold"], values["for_"], labels, values["runbook"],
                             values["enabled"])


class Channel(_Strict):
    name: str
    kind: Literal["webhook", "slack", "email"]
    connection: str  # an Airflow connection id
    to: list[str] = Field(default_factory=list)
    from_email: str | None = None


class Route(_Strict):
    """Sends what matches to ``channels``; ``continue: false`` stops at the first match."""

    channels: list[str]
    severities: list[Severity] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    continue_: bool = Field(default=True, alias="continue")

    def matches(self, severity: str, labels: Mapping[str, str]) -> bool:
        return ((not self.severities or severity in self.severities)
                and all(labels.get(k) == v for k, v in self.labels.items()))


class _File(_Strict):
    """A rules file as written: every part optional."""

    rules: list[Rule] = Field(default_factory=list)
    channels: list[Channel] | None = None
    routes: list[Route] | None = None
    repeat_interval: Duration | None = None
    keep_firing_for: Duration | None = None


class RuleSet(_Strict):
    rules: list[Rule]
    channels: list[Channel]
    routes: list[Route] = Field(default_factory=list)
    repeat_interval: Duration = timedelta(hours=4)
    keep_firing_for: Duration = timedelta(minutes=2)

    @model_validator(mode="after")
    def _consistent(self) -> RuleSet:
        for kind, names in (("rule", [r.name for r in self.rules]),
                            ("channel", [c.name for c in self.channels])):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"{kind} names must be unique: {', '.join(duplicates)}")
        known = {c.name for c in self.channels}
        for index, route in enumerate(self.routes):
            unknown = [c for c in route.channels if c not in known]
            if unknown:
                raise ValueError(f"route {index + 1} names unknown channel(s) "
                                 f"{', '.join(unknown)} (channels: {', '.join(sorted(known))})")
        return self

    def channels_for(self, severity: str, labels: Mapping[str, str]) -> list[Channel]:
        """The routed channels: every matching route's (until one that does not continue);
        no route matches, or there are none: every channel."""
        names: list[str] = []
        for route in self.routes:
            if route.matches(severity, labels):
                names += [n for n in route.channels if n not in names]
                if not route.continue_:
                    break
        if not names:
            return list(self.channels)
        by_name = {c.name: c for c in self.channels}
        return [by_name[n] for n in names]


def _parse(text: str, source: str) -> _File:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise RulesError(f"{source}: not valid YAML{where}: "
                         f"{getattr(exc, 'problem', None) or exc}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise RulesError(f"{source}: must be a mapping (rules:, channels:, routes:, ...), "
                         f"not {type(document).__name__}")
    try:
        return _File.model_validate(document)
    except ValidationError as exc:
        raise RulesError(f"{source}: {_describe(exc, document)}") from None


def _describe(exc: ValidationError, document: Mapping[str, Any]) -> str:
    """The first error, as: rule 'x': field 'y': what is wrong."""
    error = exc.errors()[0]
    loc = list(error["loc"])
    where: list[str] = []
    if len(loc) >= 2 and loc[0] in ("rules", "channels") and isinstance(loc[1], int):
        items = document.get(str(loc[0])) or []
        item = items[loc[1]] if loc[1] < len(items) else None
        name = item.get("name") if isinstance(item, dict) else None
        kind = "rule" if loc[0] == "rules" else "channel"
        where.append(f"{kind} {name!r}" if name else f"{kind} {loc[1] + 1}")
        loc = loc[2:]
    elif len(loc) >= 2 and loc[0] == "routes" and isinstance(loc[1], int):
        where.append(f"route {loc[1] + 1}")
        loc = loc[2:]
    if len(loc) >= 2 and loc[0] == "overrides" and isinstance(loc[1], int):
        where.append(f"override {loc[1] + 1}")
        loc = loc[2:]
    # Union members (int | float) and validator names add parts that are not fields.
    fields = [str(p) for p in loc if isinstance(p, str) and not p.startswith(("function-",))
              and p not in ("int", "float", "is-instance[Pattern]")]
    if fields:
        where.append(f"field {fields[0]!r}")
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        message = "unknown field"
    elif error.get("type", "").startswith(("int_", "float_")) and "threshold" in fields:
        message = f"must be a number, not {error.get('input')!r}"
    return ": ".join([*where, message])


def builtin_rules() -> RuleSet:
    text = (resources.files("groupscope.serve") / "default_rules.yaml").read_text("utf-8")
    parsed = _parse(text, "built-in rules")
    return RuleSet(rules=parsed.rules, channels=parsed.channels or [],
                   routes=parsed.routes or [],
                   repeat_interval=parsed.repeat_interval or timedelta(hours=4),
                   keep_firing_for=parsed.keep_firing_for or timedelta(minutes=2))


def load_rules(path: Path | None) -> RuleSet:
    """The built-in rules, then ``path``'s on top (a rule of a built-in's name replaces it;
    the file's channels, routes and intervals replace the built-in ones when given)."""
    base = builtin_rules()
    if path is None:
        return base
    source = f"rules file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"{source}: cannot be read: {exc.strerror or exc}") from None
    parsed = _parse(text, source)
    names = [r.name for r in parsed.rules]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RulesError(f"{source}: rule names must be unique: {', '.join(duplicates)}")
    mine = {r.name: r for r in parsed.rules}
    rules = [mine.pop(r.name, r) for r in base.rules] + list(mine.values())
    try:
        return RuleSet(
            rules=rules,
            channels=parsed.channels if parsed.channels is not None else base.channels,
            routes=parsed.routes if parsed.routes is not None else base.routes,
            repeat_interval=(parsed.repeat_interval if parsed.repeat_interval is not None
                             else base.repeat_interval),
            keep_firing_for=(parsed.keep_firing_for if parsed.keep_firing_for is not None
                             else base.keep_firing_for))
    except ValidationError as exc:
        message = str(exc.errors()[0].get("msg", "invalid")).removeprefix("Value error, ")
        raise RulesError(f"{source}: {message}") from None
