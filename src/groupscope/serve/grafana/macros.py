"""Grafana's expansion of a PostgreSQL panel or variable query, done here exactly as Grafana 12
does it, so that tests (and the panel benchmark) run the very SQL Grafana would send.

Grafana expands a raw-SQL target in three passes, in this order:

1. **Dashboard variables, in the browser** (``sceneInterpolator`` of grafana/scenes): every
   ``$var``, ``[[var]]`` or ``${var[.path][:format]}``. Dashboards of this project use only
   ``${var:sqlstring}``: the value in single quotes with ``'`` doubled and, since scenes 1.20
   (Grafana 10.3 onwards, so Grafana 12), ``"`` turned into ``\\"``; a multi-value (or *All*)
   is each value so quoted, joined by ``,``. Note the ``\\"``: PostgreSQL keeps the backslash
   (``standard_conforming_strings``), so a value holding ``"`` no longer equals itself — such a
   group finds no rows in Grafana, it is not an injection.
2. **Global substitutions, in the backend** (``sqleng.Interpolate``): ``$__interval_ms``,
   ``$__interval``, ``$__unixEpochFrom()``, ``$__unixEpochTo()``.
3. **The PostgreSQL macro engine** (``pkg/tsdb/grafana-postgresql-datasource/macros.go``):
   every ``$name(args)`` with ``args`` free of ``)``, split at ``,`` and trimmed of spaces:
   ``$__timeFilter(c)`` -> ``c BETWEEN '<from>' AND '<to>'`` (RFC 3339 in UTC, Go's
   ``RFC3339Nano``: ``2026-11-23T10:00:00Z``, fractions without trailing zeros),
   ``$__timeFrom()`` / ``$__timeTo()`` -> the quoted time, ``$__timeGroup(c,'5m')`` ->
   ``floor(extract(epoch from c)/300)*300`` and ``$__timeGroupAlias`` the same ``AS "time"``
   (a ``$__timeGroup(...)`` followed directly by ``,`` gets the alias too, as in Grafana),
   ``$__time``, ``$__timeEpoch``, ``$__unixEpochFilter``, ``$__unixEpochNanoFilter``,
   ``$__unixEpochNanoFrom/To()``, ``$__unixEpochGroup(Alias)``. Anything else is Grafana's
   "unknown macro" error.

Because pass 3 runs after pass 1, a variable *value* holding a macro call (a group named
``x$__timeFrom()``) is expanded inside its string literal, as Grafana does: the literal is cut
around a timestamp, a syntax error at worst, never SQL of the value's choosing.

Stricter than Grafana, by the project's rules: a variable that is not given, a variable used
without ``:sqlstring``, and any ``$`` of the query text that no pass consumed (Grafana would
send it on) are errors (ValueError naming them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

__all__ = ["expand", "sqlstring"]

VariableValue = str | Sequence[str]

# grafana/scenes packages/scenes/src/variables/constants.ts (VARIABLE_REGEX)
_VARIABLE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]"
    r"|\$\{(\w+)((?:\.[^:^{}\[\]]+|\[\"[^\"]*\"\]|\['[^']*'\]|\[[^\]\"']*\])*)(?::([^}]+))?\}"
)
# pkg/tsdb/grafana-postgresql-datasource/macros.go (sExpr)
_MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^)]*)\)")
_GLOBALS = ("$__interval_ms", "$__interval", "$__unixEpochFrom()", "$__unixEpochTo()")
# Go's time.ParseDuration units, and gtime's calendar units
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
             "m": 60.0, "h": 3600.0}
_GO_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_DATE_UNIT = re.compile(r"^(\d+)([dwMy])$")


def sqlstring(value: VariableValue) -> str:
    """Grafana's ``sqlstring`` format: ``'…'`` with ``'`` doubled and ``"`` as ``\\"``;
    several values each quoted, joined by ``,``."""
    if isinstance(value, str):
        return _quote(value)
    return ",".join(_quote(v) for v in value)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''").replace('"', '\\"') + "'"


def expand(sql: str, *, time_from: datetime, time_to: datetime,
           variables: Mapping[str, VariableValue] | None = None,
           interval: timedelta | None = None) -> str:
    """The SQL Grafana sends to PostgreSQL for ``sql`` over [time_from, time_to] (aware
    datetimes) with the dashboard ``variables`` set (name -> value, or list of values for a
    multi-value or *All*) and, if the query uses ``$__interval``, the panel's ``interval``."""
    for name, moment in (("time_from", time_from), ("time_to", time_to)):
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware, got {moment!r}")
    variables = dict(variables or {})
    _check_leftovers(sql, variables)
    sql = _interpolate_variables(sql, variables)
    sql = _interpolate_globals(sql, time_from, time_to, interval)
    return _interpolate_macros(sql, time_from, time_to)


# -- pass 1: dashboard variables ---------------------------------------------------------------

def _interpolate_variables(sql: str, variables: Mapping[str, VariableValue]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        if name not in variables:
            if name.startswith("__"):
                return match.group(0)  # a macro for the later passes (checked beforehand)
            raise ValueError(f"unknown variable {match.group(0)!r}: not among "
                             f"{sorted(variables)}")
        fmt = match.group(3) or match.group(6)
        if match.group(5):
            raise ValueError(f"{match.group(0)!r}: field paths are not used in SQL here")
        if fmt != "sqlstring":
            raise ValueError(f"variable {match.group(0)!r} must be written ${{{name}:sqlstring}}"
                             " (any other interpolation is not safe for arbitrary names)")
        return sqlstring(variables[name])

    return _VARIABLE.sub(replace, sql)


# -- pass 2: sqleng.Interpolate -----------------------------------------------------------------

def _interpolate_globals(sql: str, time_from: datetime, time_to: datetime,
                         interval: timedelta | None) -> str:
    if "$__interval" in sql:
        if interval is None:
            raise ValueError("the query uses $__interval: pass the panel's interval")
        sql = sql.replace("$__interval_ms", str(_milliseconds(interval)))
        sql = sql.replace("$__interval", _format_interval(interval))
    sql = sql.replace("$__unixEpochFrom()", str(_unix(time_from)))
    return sql.replace("$__unixEpochTo()", str(_unix(time_to)))


def _milliseconds(interval: timedelta) -> int:
    return int(interval / timedelta(milliseconds=1))


def _format_interval(interval: timedelta) -> str:
    """gtime.FormatInterval: the largest whole unit, e.g. ``5m``, ``1h``, ``2d``, ``500ms``."""
    ms = _milliseconds(interval)
    for unit, size in (("y", 31536000000), ("w", 604800000), ("d", 86400000), ("h", 3600000),
                       ("m", 60000), ("s", 1000)):
        if ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


# -- pass 3: the PostgreSQL macro engine --------------------------------------------------------

def _interpolate_macros(sql: str, time_from: datetime, time_to: datetime) -> str:
    original = sql

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "__timeGroup":
            # pre-5.3 compatibility: a $__timeGroup(...) directly followed by "," (at its
            # first occurrence in the query) is given the alias
            at = original.find(match.group(0)) + len(match.group(0))
            if at < len(original) and original[at] == ",":
                name = "__timeGroupAlias"
        args = [arg.strip(" ") for arg in match.group(2).split(",")]
        return _macro(name, args, match.group(0), time_from, time_to)

    return _MACRO.sub(replace, sql)


def _macro(name: str, args: list[str], text: str, time_from: datetime,
           time_to: datetime) -> str:
    start, end = _rfc3339(time_from), _rfc3339(time_to)
    column = args[0]
    if name == "__time":
        return f'{column} AS "time"'
    if name == "__timeEpoch":
        return f'extract(epoch from {column}) as "time"'
    if name == "__timeFilter":
        return f"{column} BETWEEN '{start}' AND '{end}'"
    if name == "__timeFrom":
        return f"'{start}'"
    if name == "__timeTo":
        return f"'{end}'"
    if name in ("__timeGroup", "__timeGroupAlias"):
        seconds = _go_float(_group_interval(name, args, text))
        alias = ' AS "time"' if name == "__timeGroupAlias" else ""
        return f"floor(extract(epoch from {column})/{seconds})*{seconds}{alias}"
    if name == "__unixEpochFilter":
        return f"{column} >= {_unix(time_from)} AND {column} <= {_unix(time_to)}"
    if name == "__unixEpochNanoFilter":
        return f"{column} >= {_unix_nano(time_from)} AND {column} <= {_unix_nano(time_to)}"
    if name == "__unixEpochNanoFrom":
        return str(_unix_nano(time_from))
    if name == "__unixEpochNanoTo":
        return str(_unix_nano(time_to))
    if name in ("__unixEpochGroup", "__unixEpochGroupAlias"):
        seconds = _go_float(_group_interval(name, args, text))
        alias = ' AS "time"' if name == "__unixEpochGroupAlias" else ""
        return f"floor(({column})/{seconds})*{seconds}{alias}"
    raise ValueError(f"unknown macro {text!r} (Grafana: unknown macro \"{name}\")")


def _group_interval(name: str, args: list[str], text: str) -> float:
    if len(args) < 2:
        raise ValueError(f"macro {text!r}: {name} needs a time column and an interval "
                         "and an optional fill value")
    seconds = _parse_interval(args[1].strip("'"))
    if seconds is None:
        raise ValueError(f"macro {text!r}: error parsing interval {args[1]}")
    if len(args) == 3 and not _fill_value_ok(args[2]):
        raise ValueError(f"macro {text!r}: error parsing fill value {args[2]}")
    return seconds


def _fill_value_ok(value: str) -> bool:
    # sqleng.SetupFillmode: NULL, previous or a number
    if value in ("NULL", "previous"):
        return True
    try:
        float(value)
    except ValueError:
        return False
    return True


def _parse_interval(text: str) -> float | None:
    """gtime.ParseInterval in seconds: Go durations (``5m``, ``1h30m``, ``500ms``) and whole
    days/weeks (``1d``, ``2w``). Months and years depend on the current date in Grafana:
    refused here (None)."""
    unit = _DATE_UNIT.match(text)
    if unit:
        days = {"d": 1, "w": 7}.get(unit.group(2))
        return None if days is None else float(int(unit.group(1)) * days * 86400)
    return _go_parse_duration(text)


def _go_parse_duration(text: str) -> float | None:
    sign = 1.0
    if text and text[0] in "+-":
        sign, text = (-1.0 if text[0] == "-" else 1.0), text[1:]
    if text == "0":
        return 0.0
    if not text:
        return None
    total, at = Decimal(0), 0
    while at < len(text):
        match = _GO_DURATION.match(text, at)
        if not match or match.group(1) in ("", "."):
            return None
        total += Decimal(match.group(1)) * Decimal(str(_GO_UNITS[match.group(2)]))
        at = match.end()
    return sign * float(total)


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float64: the shortest digits that round-trip, in ``%e`` form
    (``1e+06``) when the decimal exponent is below -4 or at least 6."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    digits = repr(float(value))
    mantissa = Decimal(digits).normalize()
    sign, figures, exponent = mantissa.as_tuple()
    assert isinstance(exponent, int)
    decimal_exponent = len(figures) + exponent - 1
    if decimal_exponent < -4 or decimal_exponent >= 6:
        lead = "".join(str(f) for f in figures)
        body = lead[0] + ("." + lead[1:] if len(lead) > 1 else "")
        return f"{'-' if sign else ''}{body}e{'-' if decimal_exponent < 0 else '+'}" \
               f"{abs(decimal_exponent):02d}"
    return format(mantissa, "f")


def _rfc3339(moment: datetime) -> str:
    """Go's ``t.UTC().Format(time.RFC3339Nano)``: ``Z``, fraction without trailing zeros."""
    utc = moment.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += "." + f"{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def _unix(moment: datetime) -> int:
    return int(moment.timestamp() // 1)


def _unix_nano(moment: datetime) -> int:
    delta = moment.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


# -- what no pass consumes ----------------------------------------------------------------------

def _check_leftovers(sql: str, variables: Mapping[str, VariableValue]) -> None:
    """Every ``$`` of the query text must belong to a given variable, a global substitution
    or a macro call (macro names are checked when expanded)."""
    rest = _MACRO.sub(" ", sql)
    for token in _GLOBALS:
        rest = rest.replace(token, " ")

    def known(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        if name in variables:
            return " "
        if name.startswith("__"):
            return match.group(0)
        raise ValueError(f"unknown variable {match.group(0)!r}: not among {sorted(variables)}")

    rest = _VARIABLE.sub(known, rest)
    at = rest.find("$")
    if at >= 0:
        raise ValueError(f"'$' left over in the query near {rest[max(0, at - 20):at + 30]!r}: "
                         "not a variable or a Grafana macro this expansion knows")
