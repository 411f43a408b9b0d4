"""Grafana's expansion of PostgreSQL queries (groupscope.serve.grafana.macros), by exact
strings: the forms of Grafana's own macro engine (pkg/tsdb/grafana-postgresql-datasource,
macros.go and its tests) and of the scenes ``sqlstring`` formatter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from groupscope.serve.grafana.macros import expand, sqlstring

FROM = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
TO = datetime(2026, 11, 23, 16, 0, tzinfo=UTC)


def _x(sql: str, **variables: str | list[str]) -> str:
    return expand(sql, time_from=FROM, time_to=TO, variables=variables)


@pytest.mark.parametrize(("sql", "expected"), [
    # 1. the forms the design names
    ("WHERE $__timeFilter(time)",
     "WHERE time BETWEEN '2026-11-23T10:00:00Z' AND '2026-11-23T16:00:00Z'"),
    ("SELECT $__timeGroupAlias(time,'5m'), avg(v)",
     "SELECT floor(extract(epoch from time)/300)*300 AS \"time\", avg(v)"),
    ("GROUP BY $__timeGroup(time,'5m')", "GROUP BY floor(extract(epoch from time)/300)*300"),
    ("SELECT $__timeFrom(), $__timeTo()", "SELECT '2026-11-23T10:00:00Z', '2026-11-23T16:00:00Z'"),
    ("$__timeTo()::timestamptz - interval '24 hours'",
     "'2026-11-23T16:00:00Z'::timestamptz - interval '24 hours'"),
    # 2. arguments are split at ',' and trimmed of spaces; the interval of its quotes
    ("$__timeGroupAlias( t.snapshot_ts , '1h' )",
     "floor(extract(epoch from t.snapshot_ts)/3600)*3600 AS \"time\""),
    ("$__timeGroup(time,1d)", "floor(extract(epoch from time)/86400)*86400"),
    ("$__timeGroup(time,'1w')", "floor(extract(epoch from time)/604800)*604800"),
    # 3. Go's %v of the seconds: fractions, and %e from 1e6 up
    ("$__timeGroup(time,'500ms')", "floor(extract(epoch from time)/0.5)*0.5"),
    ("$__timeGroup(time,'1h30m')", "floor(extract(epoch from time)/5400)*5400"),
    ("$__timeGroup(time,'3w')", "floor(extract(epoch from time)/1.8144e+06)*1.8144e+06"),
    # 4. the fill argument is accepted (it changes the frames, not the SQL)
    ("$__timeGroup(time,'5m',NULL)", "floor(extract(epoch from time)/300)*300"),
    ("$__timeGroup(time,'5m',0)", "floor(extract(epoch from time)/300)*300"),
    # 5. pre-5.3 compatibility: $__timeGroup directly followed by ',' gets the alias
    ("SELECT $__timeGroup(time,'5m'), v",
     "SELECT floor(extract(epoch from time)/300)*300 AS \"time\", v"),
    # 6. the other macros of the engine
    ("SELECT $__time(ts)", "SELECT ts AS \"time\""),
    ("SELECT $__timeEpoch(ts)", "SELECT extract(epoch from ts) as \"time\""),
    ("WHERE $__unixEpochFilter(e)", "WHERE e >= 1795428000 AND e <= 1795449600"),
    ("WHERE $__unixEpochNanoFilter(e)",
     "WHERE e >= 1795428000000000000 AND e <= 1795449600000000000"),
    ("$__unixEpochNanoFrom() $__unixEpochNanoTo()", "1795428000000000000 1795449600000000000"),
    ("$__unixEpochGroupAlias(e,'1m')", "floor((e)/60)*60 AS \"time\""),
    # 7. the global substitutions
    ("$__unixEpochFrom() $__unixEpochTo()", "1795428000 1795449600"),
    # 8. SQL without any $ is left alone, quotes and all
    ("SELECT 'a''b' AS \"x\"", "SELECT 'a''b' AS \"x\""),
])
def test_macros(sql: str, expected: str) -> None:
    assert _x(sql) == expected


def test_times_are_rfc3339_in_utc_without_trailing_zeros() -> None:
    # Go's RFC3339Nano of t.UTC(): an offset becomes Z, fractions lose their trailing zeros.
    paris = timezone(timedelta(hours=1))
    start = datetime(2026, 11, 23, 11, 0, 0, 500000, tzinfo=paris)
    end = datetime(2026, 11, 23, 16, 0, 0, 123, tzinfo=UTC)
    assert expand("$__timeFilter(c)", time_from=start, time_to=end) == (
        "c BETWEEN '2026-11-23T10:00:00.5Z' AND '2026-11-23T16:00:00.000123Z'")


@pytest.mark.parametrize(("value", "expected"), [
    ("payments", "'payments'"),
    ("'; drop table x; --", "'''; drop table x; --'"),
    ("o'brien's", "'o''brien''s'"),
    ("grüße-组-🚀", "'grüße-组-🚀'"),
    ("", "''"),
    # scenes >= 1.20 (Grafana 12): a double quote becomes \" (kept as such by PostgreSQL)
    ('say "hi"', "'say \\\"hi\\\"'"),
    (["a", "b'c"], "'a','b''c'"),
    (["only"], "'only'"),
    ([], ""),
])
def test_sqlstring(value: str | list[str], expected: str) -> None:
    assert sqlstring(value) == expected


def test_variables_as_sqlstring() -> None:
    sql = ("SELECT 1 FROM serve.x WHERE cluster = ${cluster:sqlstring} "
           "AND group_id = ${group:sqlstring} AND topic IN (${topic:sqlstring}) "
           "AND $__timeFilter(time)")
    assert _x(sql, cluster="dev", group="'; drop table x; --", topic=["t1", "t'2"]) == (
        "SELECT 1 FROM serve.x WHERE cluster = 'dev' "
        "AND group_id = '''; drop table x; --' AND topic IN ('t1','t''2') "
        "AND time BETWEEN '2026-11-23T10:00:00Z' AND '2026-11-23T16:00:00Z'")


def test_a_value_holding_a_macro_is_expanded_inside_its_literal_as_in_grafana() -> None:
    # Variables are interpolated in the browser, macros in the backend afterwards: the value's
    # macro is expanded too. Its timestamp cuts the literal (a syntax error), and the value's
    # own text stays inside quotes.
    assert _x("WHERE g = ${group:sqlstring}", group="x$__timeFrom()y") == (
        "WHERE g = 'x'2026-11-23T10:00:00Z'y'")
    # A value's '$' is not a leftover of the query.
    assert _x("WHERE g = ${group:sqlstring}", group="$1 $x ${y}") == "WHERE g = '$1 $x ${y}'"


def test_the_interval_when_given() -> None:
    sql = "$__interval $__interval_ms"
    assert expand(sql, time_from=FROM, time_to=TO, interval=timedelta(minutes=5)) == "5m 300000"
    assert expand(sql, time_from=FROM, time_to=TO, interval=timedelta(seconds=90)) == "1m 90000"
    with pytest.raises(ValueError, match="interval"):
        expand(sql, time_from=FROM, time_to=TO)


@pytest.mark.parametrize(("sql", "variables", "message"), [
    ("WHERE $__timeFilterx(t)", {}, "unknown macro '\\$__timeFilterx\\(t\\)'"),
    ("WHERE $__from", {}, "'\\$' left over in the query near 'WHERE \\$__from'"),
    ("WHERE g = ${group:sqlstring}", {}, "unknown variable '\\$\\{group:sqlstring\\}'"),
    ("WHERE g = $group", {"group": "a"}, "must be written \\$\\{group:sqlstring\\}"),
    ("WHERE g = ${group}", {"group": "a"}, "must be written \\$\\{group:sqlstring\\}"),
    ("WHERE g = [[group]]", {"group": "a"}, "must be written \\$\\{group:sqlstring\\}"),
    ("WHERE g = ${group:raw}", {"group": "a"}, "must be written \\$\\{group:sqlstring\\}"),
    ("WHERE x = $1", {}, "unknown variable '\\$1'"),
    ("SELECT $$body$$", {}, "unknown variable '\\$body'"),
    ("SELECT 'cost: $'", {}, "'\\$' left over"),
    ("$__timeGroup(time)", {}, "needs a time column and an interval"),
    ("$__timeGroup(time,'5x')", {}, "error parsing interval '5x'"),
    ("$__timeGroup(time,'1M')", {}, "error parsing interval '1M'"),
    ("$__timeGroup(time,'5m',sometimes)", {}, "error parsing fill value sometimes"),
])
def test_errors_name_what_is_wrong(sql: str, variables: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand(sql, time_from=FROM, time_to=TO, variables=variables)


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        expand("$__timeFrom()", time_from=datetime(2026, 1, 1), time_to=TO)
