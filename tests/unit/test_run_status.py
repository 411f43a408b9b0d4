"""The status line of ./run (groupscope_dev.runstatus), rendered from fixed rows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from groupscope.serve.alerting.incidents import Incident
from groupscope_dev.runstatus import (
    NAME_WIDTH,
    GroupNow,
    Sent,
    cell,
    reason,
    render_groups,
    render_notification,
    render_summary,
)

AT = datetime(2026, 11, 23, 10, 42, 0, tzinfo=UTC)


def _group(group_id: str = "orders", **fields: object) -> GroupNow:
    values: dict[str, object] = {"snapshot_ts": AT, "state": "Stable", "members": 3,
                                 "partitions": 10, "lag": 0, "status": "OK"}
    return GroupNow(group_id=group_id, **(values | fields))  # type: ignore[arg-type]


def test_a_falling_behind_group_is_told_in_group_terms_from_one_snapshot() -> None:
    g = _group(lag=34_800, behind=3, warn_partitions=3, status="WARN", time_lag_s=130.4,
               earlier_lag=12_100, earlier_ts=AT - timedelta(minutes=5))
    assert reason(g) == ("3 of 10 partitions falling behind; lag 12,100 -> 34,800 in 5 m; "
                         "about 2 m 10 s behind")
    assert reason(replace(g, behind=5)).startswith("3 of 10 partitions falling behind, 5 behind;")
    table = render_groups([g, _group("payments", lag=2, behind=0)]).splitlines()
    # the snapshot is named once, and the row's lag column is the lag its reason ends on
    assert table[0] == ("  every figure from the snapshot of 10:42:00Z (lag in records, in time,"
                        " status)")
    row = next(line for line in table if line.startswith("  orders"))
    assert row.split()[1:4] == ["3", "34,800", "~2"]
    assert row.endswith("WARN: " + reason(g))
    payments = next(line for line in table if line.startswith("  payments"))
    assert payments.endswith("OK: caught up")


def test_an_exact_time_lag_is_not_called_an_estimate() -> None:
    g = _group(lag=500, behind=2, time_lag_s=75.0, time_lag_exact=True)
    assert reason(g) == "consuming"  # OK: its lag is in flight, not "behind"; the column has it
    assert "~" not in render_groups([g]) and "1 m 15 s" in render_groups([g])


def test_an_empty_group_says_since_when() -> None:
    stopped = _group("billing", state="Empty", members=0, status="ERR", stop_partitions=10,
                     behind=10, lag=1_200, earlier_lag=380, earlier_ts=AT - timedelta(minutes=2),
                     empty_since=AT - timedelta(minutes=2, seconds=30), time_lag_s=95)
    assert reason(stopped) == ("Empty since 10:39:30Z; 10 of 10 partitions stopped (no members);"
                               " lag 380 -> 1,200 in 2 m; about 1 m 35 s behind")
    idle = _group("archive", state="Empty", members=0, partitions=2, lag=0,
                  empty_since=AT - timedelta(hours=1))
    assert reason(idle) == "Empty since 09:42:00Z; nothing left to read"
    never = _group("archive", state="Empty", members=0, partitions=2, lag=0,
                   empty_since=AT - timedelta(hours=1), empty_since_known=False)
    assert reason(never) == "Empty, no member seen since 09:42:00Z; nothing left to read"
    # Empty without a known start (before the look-back): still says Empty, never "consuming"
    assert reason(_group("old", state="Empty", members=0, lag=0)).startswith("Empty (no members)")
    # a group that only commits (assign()) has no members by design
    assert reason(_group("flink", state="Empty", members=0, protocol_type="", lag=0)) == \
        "no members by design (assign() and commit); caught up"
    assert reason(_group("flink", state="Empty", members=0, protocol_type="", lag=23)) == \
        "no members by design (assign() and commit); consuming"
    assert reason(_group("left", state="Empty", members=0, lag=50)) == \
        "Empty (no members); its lag is not growing"


def test_a_group_without_analytics_shows_its_own_snapshot() -> None:
    newer = AT + timedelta(seconds=15)
    fresh = _group("new-group", snapshot_ts=newer, status=None, lag=40, behind=2)
    table = render_groups([_group(), fresh])
    lines = table.splitlines()
    assert "each row's figures from the snapshot it names" in lines[0]
    assert "snapshot" in lines[1]
    row = next(line for line in lines if line.startswith("  new-group"))
    assert "10:42:15Z" in row and row.endswith("-: not computed yet")
    assert "10:42:00Z" in next(line for line in lines if line.startswith("  orders"))
    no_offsets = _group("joining", status=None, partitions=0, lag=None)
    assert reason(no_offsets) == "no committed offset yet"


def test_hostile_group_names_do_not_break_the_table() -> None:
    names = ["'; drop table x; --", "line\nbreak\x1b[31mred", "订单" * 30, "g" * 249,
             'quo"te', "e\u0301", "para\u2029graph", "back\\slash"]
    table = render_groups([_group(n) for n in names]).splitlines()
    assert len(table) == 2 + len(names)  # no name adds a line
    for line in table[2:]:
        assert "\n" not in line and "\x1b" not in line
    assert "line\\nbreak\\x1b[31mred" in table[3]
    assert "para\\u2029graph" in table[8] and "back\\\\slash" in table[9]
    for name in names:
        shown = cell(name, NAME_WIDTH)
        width = sum(2 if "\u4e00" <= ch <= "\u9fff" else 0 if ch == "\u0301" else 1
                    for ch in shown)
        assert width == NAME_WIDTH, (name, shown)
    assert cell("g" * 249, NAME_WIDTH).endswith("…")
    assert cell("short", NAME_WIDTH) == "short" + " " * (NAME_WIDTH - 5)


def test_no_group_yet() -> None:
    assert render_groups([]) == "  no consumer group in the warehouse yet"


def _incident(**fields: object) -> Incident:
    values: dict[str, object] = {
        "incident_id": "i1", "fingerprint": "f", "rule": "group_err", "severity": "critical",
        "cluster": "local", "group_id": "demo-roundrobin", "topic": "", "state": "firing",
        "started_at": AT, "last_seen_at": AT, "evaluated_at": AT, "value": 1.0,
        "threshold": 0.0, "details": {"condition": "group_status_err", "stop_partitions": 10,
                                      "member_count": 0},
        "firing_at": AT}
    return Incident(**(values | fields))  # type: ignore[arg-type]


def test_a_notification_line_says_where_it_went() -> None:
    sent = Sent("i1", "firing", AT, "demo-roundrobin", "local", "STOPPED",
                (("email", "sent", None), ("webhook", "failed", "HTTP 503")))
    line = render_notification(sent, {"email": "dev/.stack/mail/"})
    assert line == ("10:42:00Z  FIRING    demo-roundrobin STOPPED -> email dev/.stack/mail/, "
                    "webhook FAILED (HTTP 503; retried at the next evaluation)")
    resolved = Sent("i1", "resolved", AT, "", "local", "collector STALE",
                    (("webhook", "sent", None),))
    assert render_notification(resolved, {}).startswith(
        "10:42:00Z  RESOLVED  cluster local collector STALE is over -> webhook")


def test_the_summary_counts_incidents_and_points_onwards() -> None:
    resolved = _incident(state="resolved", resolved_at=AT + timedelta(minutes=3))
    slow = _incident(incident_id="i2", group_id="demo-slow", rule="lag_seconds_high",
                     value=140.0, details={"condition": "lag_seconds"})
    held = _incident(incident_id="i3", rule="group_empty_lag_growing",
                     details={"condition": "group_empty_lag_growing",
                              "inhibited_by": "group_status_err"})
    text = render_summary(42, AT - timedelta(minutes=10), AT, [resolved, slow, held], 4, 2,
                          {"email": "dev/.stack/mail/", "webhook": "dev/.stack/webhook/x.log"},
                          ["mount dev/.stack/grafana", "or publish"])
    lines = text.splitlines()
    assert lines[1] == "groupscope ran for 10 m: 42 snapshots in the warehouse."
    assert lines[2].endswith("2 fired, 1 resolved, 1 still firing (1 more held: their group's "
                             "STOPPED or STALLED said it)")
    assert any("demo-roundrobin" in line and "resolved 10:45:00Z" in line and "STOPPED" in line
               for line in lines)
    assert any("demo-slow" in line and "still firing" in line and "lag 2 m 20 s behind" in line
               for line in lines)
    assert "  e-mails        2 in dev/.stack/mail/" in lines
    assert lines[-2:] == ["  dashboards     mount dev/.stack/grafana",
                          "                 or publish"]
