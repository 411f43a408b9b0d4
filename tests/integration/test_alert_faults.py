"""What the on-call hears when a part of the alert path fails, on the real things: a PostgreSQL
warehouse of this module's own (so it can be stopped and started), a real HTTP webhook
receiver and a real SMTP server (aiosmtpd) reached through Airflow connections, and the alert
task's own cycle (``pipeline.alert_cycle``: rules in use, channels, outage notice, evaluation,
delivery).

The warehouse holds the status rows the live marts would have written (a STOPPED group is three
partitions in STOP and no member): the faults here are the alert path's own, so the marts are
seeded, and time is passed in, compressed. The Kafka-side faults (a coordinator that restarts,
Spark Connect frozen) are in tests/integration/test_alert_unknown.py and test_airflow.py.

For each fault: what each channel received, in order, and that nothing was lost or sent twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from groupscope import pipeline, warehouse
from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.settings import Settings
from groupscope.warehouse.partitions import create_partitions
from groupscope_dev.mailcatcher import MailCatcher
from groupscope_dev.ports import free_ports
from groupscope_dev.postgres import LocalPostgres
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
EVERY = timedelta(seconds=30)


@pytest.fixture(scope="module")
def own_postgres(services_dir: Path) -> Iterator[LocalPostgres]:
    server = LocalPostgres(services_dir / "postgres-faults", port=free_ports(1)[0])
    server.start()
    engine = warehouse.engine_for(server.url)
    warehouse.migrate(engine)
    engine.dispose()
    yield server
    server.destroy()


@dataclass
class Stack:
    url: str
    cluster: str
    webhook: WebhookCatcher
    mail: MailCatcher
    rules: Path
    outages: Path
    groups: dict[str, int] | None = None
    seeded: float = -1.0

    def evaluate(self, seconds: float, snapshot: bool = True, **kwargs: Any) -> dict[str, Any]:
        """An evaluation at T0 + ``seconds``, after a snapshot of the groups as last seeded
        (the collector keeps snapshotting; ``snapshot`` False: it does not)."""
        if snapshot and self.groups is not None and seconds > self.seeded:
            self.seed(seconds, self.groups)
        return pipeline.alert_cycle(lambda: self.url, self.cluster, self.rules,
                                    build_channels, EVERY, "http://grafana:3000", self.outages,
                                    now=T0 + timedelta(seconds=seconds), **kwargs)

    def received(self) -> dict[str, list[str]]:
        """The first line of every notification each channel got, in order."""
        return {"webhook": [t.splitlines()[0] for t in self.webhook.texts],
                "email": [str(m["Subject"]) for m in self.mail.mails()]}

    def seed(self, seconds: float, groups: dict[str, int], complete: bool = True,
             listed: set[str] | None = None) -> None:
        """One snapshot at T0 + ``seconds`` and its status rows: ``groups`` maps a group to its
        partitions in STOP (0: OK). A partial snapshot lists only ``listed`` and has no status
        row for the others."""
        seed(self.url, self.cluster, T0 + timedelta(seconds=seconds), groups, complete, listed)
        self.groups, self.seeded = groups, seconds


def seed(url: str, cluster: str, ts: datetime, groups: dict[str, int], complete: bool = True,
         listed: set[str] | None = None) -> None:
    listed = set(groups) if listed is None else listed
    engine = warehouse.engine_for(url)
    try:
        with engine.begin() as conn:
            create_partitions(conn, [ts])
            conn.execute(text(
                "INSERT INTO raw.snapshots VALUES (:c, :t, :id, :complete, :n, :n, :errors, 50)"),
                {"c": cluster, "t": ts, "id": f"{cluster}-{ts:%H%M%S}", "complete": complete,
                 "n": len(listed), "errors": 0 if complete else 1})
            if not complete:
                conn.execute(text(
                    "INSERT INTO raw.collection_errors VALUES (:c, :t, 0, 'describe_groups',"
                    " 'COORDINATOR_NOT_AVAILABLE', 'broker 2 is restarting', NULL, NULL, NULL,"
                    " true, 3)"), {"c": cluster, "t": ts})
            for group in sorted(listed):
                stopped = groups[group]
                conn.execute(text(
                    "INSERT INTO raw.consumer_groups VALUES (:c, :t, :g, 'classic', :state,"
                    " 'consumer', 'range', 1, 1, false, true, :members)"),
                    {"c": cluster, "t": ts, "g": group, "state": "Empty" if stopped else "Stable",
                     "members": 0 if stopped else 3})
                conn.execute(text(
                    "INSERT INTO mart.group_status VALUES (:c, :t, :g, :status, :ok, 0, 0, :stop,"
                    " 0, 'orders', 0, :reason)"),
                    {"c": cluster, "t": ts, "g": group, "status": "ERR" if stopped else "OK",
                     "ok": 3 - stopped, "stop": stopped,
                     "reason": "no commit for 40 s (its rhythm: every 5 s)" if stopped
                     else "consuming"})
                conn.execute(text(
                    "INSERT INTO mart.group_lag VALUES (:c, :t, :g, 3, :lag, :lag, 0, 0, 12.0,"
                    " NULL, 10.0, :rate)"),
                    {"c": cluster, "t": ts, "g": group, "lag": 900 if stopped else 3,
                     "rate": 0.0 if stopped else 10.0})
            conn.execute(text(
                "INSERT INTO ops.live_analytics VALUES (:c, :through, :t) ON CONFLICT (cluster)"
                " DO UPDATE SET computed_through = excluded.computed_through"),
                {"c": cluster, "through": ts + timedelta(microseconds=1), "t": ts})
    finally:
        engine.dispose()


_stacks = iter(range(1000))


@pytest.fixture
def stack(own_postgres: LocalPostgres, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    webhook = WebhookCatcher()
    webhook.start()
    mail = MailCatcher(tmp_path / "mail")
    mail.start()
    rules = tmp_path / "rules.yaml"
    rules.write_text("keep_firing_for: 60s\nretry_initial: 30s\nretry_max: 2m\n"
                     "channels:\n"
                     "  - {name: webhook, kind: webhook, connection: faults_webhook}\n"
                     "  - {name: email, kind: email, connection: faults_smtp}\n")
    monkeypatch.setenv("AIRFLOW_CONN_FAULTS_WEBHOOK", json.dumps(
        {"conn_type": "http", "password": f"{webhook.url}/S3CRET-PATH"}))
    monkeypatch.setenv(*mail.connection("faults_smtp", "oncall@example.com"))
    yield Stack(own_postgres.url, f"faults{next(_stacks)}", webhook, mail, rules,
                tmp_path / "outages")
    webhook.stop()
    mail.stop()


def _deliveries(url: str, cluster: str) -> list[tuple[str, str, str, int]]:
    engine = warehouse.engine_for(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                "SELECT i.group_id, d.notification, d.channel || ':' || d.state, d.attempts"
                " FROM ops.alert_deliveries d JOIN ops.alert_incidents i USING (incident_id)"
                " WHERE i.cluster = :c ORDER BY d.created_at, d.channel, d.notification"),
                {"c": cluster})]
    finally:
        engine.dispose()


def test_a_receiver_that_refuses_three_times_gets_one_firing_then_the_resolved(
        stack: Stack) -> None:
    stack.seed(0, {"payments": 3, "orders": 0})
    stack.webhook.answer = 500
    stack.evaluate(0)       # fires: the webhook refuses; e-mail delivered
    stack.evaluate(15)      # backing off (30 s)
    stack.evaluate(31)      # refused again: 60 s
    stack.evaluate(92)      # refused again: 120 s (retry_max)
    assert stack.webhook.refused == 3
    stack.webhook.answer = 200
    stack.evaluate(150)     # backing off until 212
    assert stack.received()["webhook"] == []
    stack.evaluate(213)
    stack.seed(240, {"payments": 0, "orders": 0})
    stack.evaluate(240)     # it cleared: resolved after keep_firing_for (60 s)
    stack.evaluate(301)
    got = stack.received()
    assert got["webhook"] == [
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED.",
        f"[RESOLVED] cluster {stack.cluster}, group payments: STOPPED is over after 5 m 1 s "
        "(firing since 09:00:00Z)."]
    assert [s.split(":")[0] for s in got["email"]] == ["[FIRING] groupscope critical",
                                                      "[RESOLVED] groupscope critical"]
    # Every delivery sent once; the webhook's firing after 4 attempts.
    assert _deliveries(stack.url, stack.cluster) == [
        ("payments", "firing", "email:sent", 1), ("payments", "firing", "webhook:sent", 4),
        ("payments", "resolved", "email:sent", 1), ("payments", "resolved", "webhook:sent", 1)]
    # Each payload carries its dedup key.
    keys = [b["dedup_key"] for b in stack.webhook.bodies]
    assert len(set(keys)) == 2 and keys[0].endswith(":firing")


def test_a_resolution_while_the_firing_is_undelivered_is_one_message(stack: Stack) -> None:
    stack.seed(0, {"payments": 3})
    stack.webhook.answer = 503
    stack.evaluate(0)
    stack.seed(30, {"payments": 0})
    stack.evaluate(30)
    stack.evaluate(91)      # resolved (keep_firing_for 60 s) while the webhook refuses
    stack.webhook.answer = 200
    stack.evaluate(400)
    [text_] = stack.webhook.texts
    assert text_.startswith(f"[RESOLVED] cluster {stack.cluster}, group payments: STOPPED is "
                            "over")
    assert "could not be delivered before it resolved: this message is both" in text_
    assert {b["notification"] for b in stack.webhook.bodies[0]["incidents"]} == {"resolved"}


def test_a_302_is_a_failure_and_the_secret_path_appears_nowhere(
        stack: Stack, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"{stack.webhook.url}/S3CRET-PATH")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AIRFLOW_CONN_FAULTS_WEBHOOK", json.dumps(
        {"conn_type": "http",
         "password": f"http://127.0.0.1:{server.server_port}/hooks/S3CRET-PATH"}))
    try:
        stack.seed(0, {"payments": 3})
        summary = stack.evaluate(0)
    finally:
        server.shutdown()
    assert "302" in summary["deliveries"]["webhook"]
    assert stack.webhook.bodies == []  # never followed as a GET, never counted as sent
    assert ("payments", "firing", "webhook:failed", 1) in _deliveries(stack.url, stack.cluster)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "S3CRET" not in json.dumps(summary) and "S3CRET" not in logged


def test_a_connection_lookup_that_fails_delivers_at_the_next_evaluation(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.seed(0, {"orders": 2})
    stack.evaluate(0)  # the webhook has delivered before
    stack.seed(30, {"orders": 2, "payments": 3})
    # The connection's lookup fails as the rule fires. Airflow reports a secrets backend that
    # fails (or a variable that went missing) as "not defined": the same lookup, failing.
    good = os.environ["AIRFLOW_CONN_FAULTS_WEBHOOK"]
    monkeypatch.delenv("AIRFLOW_CONN_FAULTS_WEBHOOK")
    first = stack.evaluate(30)
    assert first["notifications"] == ["firing group_err payments"]
    assert "taken as a lookup failure, retried" in first["deliveries"]["webhook"]
    monkeypatch.setenv("AIRFLOW_CONN_FAULTS_WEBHOOK", good)
    stack.evaluate(61)
    assert stack.received()["webhook"] == [
        f"[FIRING] cluster {stack.cluster}, group orders: STOPPED.",
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED."]
    assert len(stack.mail.mails()) == 2


def test_a_bad_rules_file_keeps_the_last_good_rules_and_says_so(stack: Stack) -> None:
    stack.rules.write_text(stack.rules.read_text()
                           + "rules:\n  - name: group_err\n    threshold: 1\n")
    stack.seed(0, {"payments": 3, "orders": 1})
    stack.evaluate(0)       # threshold 1: payments (3) fires, orders (1) does not
    stack.rules.write_text(stack.rules.read_text().replace("threshold: 1", "threshold: 1" + "0"
                                                            * 400))
    stack.seed(30, {"payments": 3, "orders": 1})
    summary = stack.evaluate(30)
    assert "firing rules_invalid " in " ".join(summary["notifications"])
    webhook = stack.received()["webhook"]
    assert webhook[0] == f"[FIRING] cluster {stack.cluster}, group payments: STOPPED."
    assert webhook[1].startswith(f"[FIRING] cluster {stack.cluster}: rules file INVALID")
    invalid = stack.webhook.texts[1]
    assert f"rules file {stack.rules}" in invalid and "group_err" in invalid \
        and "threshold" in invalid
    # Still the good rules: payments stays firing (no resolution, no new firing for orders).
    stack.seed(60, {"payments": 3, "orders": 1})
    assert stack.evaluate(60)["notifications"] == []


def test_the_warehouse_down_two_minutes_loses_nothing_and_says_so(
        stack: Stack, own_postgres: LocalPostgres) -> None:
    stack.seed(0, {"payments": 0})
    stack.evaluate(0)
    stack.seed(30, {"payments": 3})  # the group stops just before the warehouse goes down
    own_postgres.stop()
    try:
        for seconds in (30, 60, 90, 120, 150):
            with pytest.raises(pipeline.StageFailed, match="is unreachable"):
                stack.evaluate(seconds, snapshot=False)
    finally:
        own_postgres.start()
    stack.evaluate(160)
    stack.evaluate(190)
    got = stack.received()
    assert got["webhook"] == [
        f"[FIRING] cluster {stack.cluster}: groupscope cannot reach its warehouse (since "
        "09:00:30Z): " + got["webhook"][0].split("): ", 1)[1],
        # The outage is over once an evaluation went through: after what it delivered.
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED.",
        f"[RESOLVED] cluster {stack.cluster}: groupscope evaluates its alert rules again, after "
        "2 m 10 s. Alert evaluation and delivery resume; what the incidents owe is sent now."]
    assert [s.split(":")[0] for s in got["email"]] == [
        "[FIRING] groupscope critical", "[FIRING] groupscope critical",
        "[RESOLVED] groupscope critical"]
    assert "S3CRET" not in json.dumps(stack.webhook.bodies[0])
    assert _deliveries(stack.url, stack.cluster) == [
        ("payments", "firing", "email:sent", 1), ("payments", "firing", "webhook:sent", 1)]


def test_a_channel_failing_past_its_max_age_is_given_up_and_told_by_the_others(
        stack: Stack) -> None:
    stack.rules.write_text(stack.rules.read_text() + "delivery_max_age: 5m\n")
    stack.webhook.answer = 500
    stack.seed(0, {"payments": 3})
    for seconds in range(0, 661, 30):
        stack.evaluate(seconds)
    mails = [str(m["Subject"]) for m in stack.mail.mails()]
    assert mails[0].startswith("[FIRING] groupscope critical") and "STOPPED" in mails[0]
    assert len(mails) == 2 and "alert channel webhook FAILING" in mails[1], mails
    states = _deliveries(stack.url, stack.cluster)
    assert ("payments", "firing", "webhook:given_up", states[1][3]) in states
    # The webhook never hears of its own failure, and nothing more is retried to it.
    refused = stack.webhook.refused
    stack.evaluate(700)
    assert stack.webhook.refused == refused


def test_the_heartbeat_comes_every_interval_and_only_to_its_channels(stack: Stack) -> None:
    stack.rules.write_text(stack.rules.read_text()
                           + "heartbeat: {channels: [webhook], every: 5m}\n")
    stack.seed(0, {"payments": 3})
    for seconds in range(0, 601, 60):
        stack.evaluate(seconds)
    beats = [b for b in stack.webhook.bodies if b.get("kind") == "heartbeat"]
    # At 0, 300 and 600 s: one per 5 minutes, while the group fires.
    assert [b["evaluated_at"][11:19] for b in beats] == ["09:00:00", "09:05:00", "09:10:00"]
    assert beats[0]["text"].startswith(f"[HEARTBEAT] groupscope is alive: the alert rules of "
                                       f"cluster {stack.cluster} were evaluated at 09:00:00Z. "
                                       "Firing now: 1 (STOPPED (")
    assert "if it does not, groupscope itself is down" in beats[0]["text"]
    assert all("HEARTBEAT" not in str(m["Subject"]) for m in stack.mail.mails())
    # A heartbeat that fails is tried again retry_initial (30 s) later, not at every
    # evaluation, and is never owed.
    stack.webhook.answer = 500
    stack.evaluate(900)
    tries = stack.webhook.refused
    stack.evaluate(915)
    assert tries >= 1 and stack.webhook.refused == tries  # 15 s after the failure: not yet
    stack.webhook.answer = 200
    stack.evaluate(960)
    beats = [b for b in stack.webhook.bodies if b.get("kind") == "heartbeat"]
    assert [b["evaluated_at"][11:19] for b in beats][-1] == "09:16:00"


def test_a_group_missing_after_a_partial_snapshot_is_unknown_until_two_complete_miss_it(
        stack: Stack) -> None:
    stack.seed(0, {"payments": 3, "orders": 0})
    stack.evaluate(0)
    # Its coordinator restarting: a partial snapshot without it, then a complete one without
    # it (a coordinator handing a group over lists nothing for a while, and no error).
    stack.seed(30, {"payments": 3, "orders": 0}, complete=False, listed={"orders"})
    stack.evaluate(30, snapshot=False)
    stack.seed(60, {"payments": 3, "orders": 0}, listed={"orders"})
    unknown_pass = stack.evaluate(60, snapshot=False)
    assert unknown_pass["unknown"] > 0 and unknown_pass["notifications"] == []
    # Deleted for real: a second complete snapshot in a row without it resolves it (it last
    # held at 0 s, past keep_firing_for).
    stack.seed(90, {"payments": 3, "orders": 0}, listed={"orders"})
    stack.evaluate(90, snapshot=False)
    assert stack.received()["webhook"] == [
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED.",
        f"[RESOLVED] cluster {stack.cluster}, group payments: STOPPED is over after 1 m 30 s "
        "(firing since 09:00:00Z)."]


def test_a_webhook_that_drips_its_answer_holds_up_no_channel_and_gets_what_it_missed_once(
        stack: Stack) -> None:
    # A receiver (or a proxy) that reads each POST and answers one byte every 2 s: it never
    # refuses and never finishes. Each evaluation gives each channel 2 s in all.
    stack.rules.write_text(stack.rules.read_text() + "delivery_deadline: 2s\n"
                           "heartbeat: {channels: [email], every: 1m}\n")
    stack.webhook.drip(2.0)
    stack.seed(0, {"payments": 0})
    stack.evaluate(0)
    stack.seed(30, {"payments": 3})  # the group stops (kill -9 of every member)
    first = stack.evaluate(61)
    # E-mail hears it at the same evaluation; the webhook fails like a refusal.
    assert any(str(m["Subject"]).startswith("[FIRING] groupscope critical: cluster")
               and "STOPPED" in str(m["Subject"]) for m in stack.mail.mails())
    assert "did not finish within 2 s" in first["deliveries"]["webhook"]
    # What was owed got through on e-mail: the heartbeat goes out.
    assert first["heartbeat"] == {"email": "sent"}
    # It stays in backoff while it drips, is told on e-mail once it has failed 5 minutes
    # (channel_failing), and is never told of its own failure.
    for seconds in range(91, 452, 30):
        stack.evaluate(seconds)
    subjects = [str(m["Subject"]) for m in stack.mail.mails()
                if "HEARTBEAT" not in str(m["Subject"])]
    assert any("alert channel webhook FAILING" in s for s in subjects), subjects
    assert stack.webhook.dripped >= 3 and stack.webhook.bodies == []
    # Once it answers, it gets what it missed, in order, once.
    stack.webhook.drip(None)
    for seconds in range(481, 842, 30):
        stack.evaluate(seconds)
    assert [t.splitlines()[0] for t in stack.webhook.texts
            if not t.startswith("[HEARTBEAT]")] == [
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED."]
    rows = _deliveries(stack.url, stack.cluster)
    assert [r[:3] for r in rows if r[0] == "payments"] == [
        ("payments", "firing", "email:sent"), ("payments", "firing", "webhook:sent")]


def test_an_smtp_server_that_never_greets_holds_up_no_channel(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import threading

    # Accepts every connection and never says a word (a hung MTA, a firewall that blackholes
    # after the handshake): the SMTP provider's hook would wait 30 s, 6 times.
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv(*stack.mail.connection("faults_smtp", "oncall@example.com"))
    port_env = os.environ["AIRFLOW_CONN_FAULTS_SMTP"].replace(
        f'"port": {stack.mail.port}', f'"port": {silent.getsockname()[1]}')
    assert port_env != os.environ["AIRFLOW_CONN_FAULTS_SMTP"]
    monkeypatch.setenv("AIRFLOW_CONN_FAULTS_SMTP", port_env)
    stack.rules.write_text(stack.rules.read_text() + "delivery_deadline: 2s\n")
    try:
        stack.seed(0, {"payments": 3})
        summary = stack.evaluate(0)
    finally:
        stop.set()
        silent.close()
        for conn in held:
            conn.close()
    assert stack.received()["webhook"] == [
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED."]
    assert "did not finish within 2 s" in summary["deliveries"]["email"]
    assert ("payments", "firing", "email:failed", 1) in _deliveries(stack.url, stack.cluster)


def _set_read_only(own_postgres: LocalPostgres, on: bool) -> None:
    engine = warehouse.engine_for(own_postgres.url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE"))
            conn.commit()
            conn.execute(text(f"ALTER DATABASE {conn.engine.url.database} SET "
                              f"default_transaction_read_only = {'on' if on else 'off'}"))
            conn.commit()
    finally:
        engine.dispose()


def test_a_read_only_warehouse_is_told_on_every_channel_and_loses_nothing(
        stack: Stack, own_postgres: LocalPostgres) -> None:
    # A failover to a replica that is still read-only (SQLSTATE 25006): it answers every read,
    # refuses every write. Before, only "unreachable" was told: this was silence.
    stack.seed(0, {"payments": 0})
    stack.evaluate(0)
    stack.seed(30, {"payments": 3})
    _set_read_only(own_postgres, True)
    try:
        for seconds in (30, 60, 90, 120, 150):
            with pytest.raises(pipeline.StageFailed, match="read-only"):
                stack.evaluate(seconds, snapshot=False)
    finally:
        _set_read_only(own_postgres, False)
    stack.evaluate(180)
    got = stack.received()
    assert got["webhook"][0].startswith(
        f"[FIRING] cluster {stack.cluster}: groupscope cannot use its warehouse: it is "
        "read-only (since 09:00:30Z): ")
    assert "25006" in stack.webhook.texts[0]
    assert got["webhook"][1:] == [
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED.",
        f"[RESOLVED] cluster {stack.cluster}: groupscope evaluates its alert rules again, after "
        "2 m 30 s. Alert evaluation and delivery resume; what the incidents owe is sent now."]
    assert [s.split(": cluster")[0] for s in got["email"]] == [
        "[FIRING] groupscope critical", "[FIRING] groupscope critical",
        "[RESOLVED] groupscope critical"]
    assert "warehouse READ-ONLY" in got["email"][0]
    assert _deliveries(stack.url, stack.cluster) == [
        ("payments", "firing", "email:sent", 1), ("payments", "firing", "webhook:sent", 1)]


def test_a_warehouse_one_migration_behind_is_told_on_every_channel(
        stack: Stack, own_postgres: LocalPostgres, tmp_path: Path) -> None:
    # A build deployed before its migration: the warehouse lacks this code's newest one.
    behind = tmp_path / "behind"
    (behind / "migrations").mkdir(parents=True)
    for m in warehouse.migrations()[:-1]:
        (behind / "migrations" / f"{m.name}.sql").write_text(m.sql, encoding="utf-8")
    url = own_postgres.create_database(f"behind{next(_stacks)}")
    engine = warehouse.engine_for(url)
    warehouse.migrate(engine, behind)
    engine.dispose()
    stack.url = url
    with pytest.raises(pipeline.StageFailed, match="not migrated"):
        stack.evaluate(0, snapshot=False)
    with pytest.raises(pipeline.StageFailed, match="not migrated"):
        stack.evaluate(30, snapshot=False)
    got = stack.received()
    assert len(got["webhook"]) == 1 and len(got["email"]) == 1  # once per outage
    assert got["webhook"][0].startswith(
        f"[FIRING] cluster {stack.cluster}: groupscope cannot use its warehouse: it is not "
        "migrated")
    assert "groupscope warehouse migrate" in stack.webhook.texts[0]


def test_a_route_to_a_channel_without_a_connection_reaches_the_others_and_names_it(
        stack: Stack) -> None:
    # A typo in a connection id (or one not created yet on a new deployment): the critical
    # route's only channel has no connection.
    stack.rules.write_text(stack.rules.read_text()
                           + "  - {name: pager, kind: webhook, connection: no_such_conn}\n"
                           "routes:\n  - {severities: [critical], channels: [pager],"
                           " continue: false}\n")
    stack.seed(0, {"payments": 3})
    summary = stack.evaluate(0)
    # Nothing routed reaches anybody: the page falls through to every channel that can.
    assert stack.received()["webhook"] == [
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED."]
    assert "STOPPED" in stack.received()["email"][0]
    assert "no connection no_such_conn" in summary["deliveries"]["pager"]
    # And the missing connection is failing from the first notification it missed.
    stack.evaluate(30)
    texts = stack.webhook.texts
    assert any(t.startswith(f"[FIRING] cluster {stack.cluster}: alert channel pager FAILING")
               and "has no connection" in t for t in texts), texts
    assert ("payments", "firing", "pager:failed", 2) in _deliveries(stack.url, stack.cluster)


def test_an_invalid_rules_file_on_a_first_deployment_resolves_no_custom_incident(
        stack: Stack) -> None:
    # A rule of the operator's own fires; then the file goes bad where no valid copy of it was
    # ever stored for this path (a new path, a first deployment): the built-ins are in use.
    custom = ("rules:\n  - name: payments_down\n    condition: group_status_err\n"
              "    threshold: 2\n    severity: critical\n    for: 0s\n")
    stack.rules.write_text(stack.rules.read_text() + custom)
    stack.seed(0, {"payments": 3})
    stack.evaluate(0)
    assert any("payments_down" in str(b) for b in stack.webhook.bodies)
    moved = stack.rules.with_name("rules-new.yaml")
    moved.write_text(stack.rules.read_text() + "  - name: broken\n    threshold: lots\n")
    stack.rules = moved
    for seconds in (30, 60, 120, 240):
        stack.evaluate(seconds)
    texts = stack.webhook.texts
    assert not any(t.startswith("[RESOLVED]") for t in texts), texts
    assert any("rules file INVALID" in t for t in texts)
    engine = warehouse.engine_for(stack.url)
    try:
        with engine.connect() as conn:
            state = conn.execute(text(
                "SELECT state, details->>'unknown_why' FROM ops.alert_incidents"
                " WHERE cluster = :c AND rule = 'payments_down'"), {"c": stack.cluster}).one()
    finally:
        engine.dispose()
    assert state[0] == "firing" and "is not loaded" in (state[1] or "")


def test_a_worker_clock_an_hour_ahead_evaluates_nothing_and_is_told(
        stack: Stack) -> None:
    stack.seed(0, {"payments": 3})
    def ahead() -> datetime:
        return datetime.now(UTC) + timedelta(hours=1)

    with pytest.raises(pipeline.StageFailed, match="1 h 0 m ahead of the warehouse"):
        pipeline.alert_cycle(lambda: stack.url, stack.cluster, stack.rules, build_channels,
                             EVERY, "http://grafana:3000", stack.outages, worker_clock=ahead)
    got = stack.received()
    assert got["webhook"] and got["webhook"][0].startswith(
        f"[FIRING] cluster {stack.cluster} (worker ")
    assert "groupscope cannot evaluate its alert rules" in got["webhook"][0]
    assert "CLOCK SKEW" in got["email"][0]
    # Nothing was judged: no incident, no evaluation time in the future.
    engine = warehouse.engine_for(stack.url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM ops.alert_incidents WHERE cluster = :c"),
                                {"c": stack.cluster}).scalar_one() == 0
    finally:
        engine.dispose()
    # Retention refuses too: with the clock 14 days ahead it would drop 13 of 14 days.
    with pytest.raises(pipeline.StageFailed, match="retention: nothing deleted"):
        pipeline.retention(stack.url, Settings().retention,
                           worker_clock=lambda: datetime.now(UTC) + timedelta(days=14))
    # A worker on time evaluates on the warehouse's clock.
    summary = pipeline.alert_cycle(lambda: stack.url, stack.cluster, stack.rules,
                                   build_channels, EVERY, "http://grafana:3000", stack.outages)
    assert abs(datetime.fromisoformat(summary["evaluated_at"]) - datetime.now(UTC)) \
        < timedelta(seconds=60)


TASK_FAILS = """
import sys
from types import SimpleNamespace

sys.path.insert(0, sys.argv[1])
from groupscope_airflow import GroupscopeAlertNotifier

ti = SimpleNamespace(dag_id="groupscope_live_x", task_id="live_marts", run_id="manual-1",
                     try_number=1)
GroupscopeAlertNotifier().notify({"ti": ti, "params": {"cluster": sys.argv[2]},
                                  "exception": RuntimeError("Spark Connect did not answer")})
"""


def test_a_task_failure_the_warehouse_cannot_record_is_told_straight_once(
        stack: Stack, own_postgres: LocalPostgres, tmp_path: Path) -> None:
    import subprocess
    import sys

    # The failure callback of a task, in a process of its own as Airflow runs it, while the
    # warehouse is read-only: ops.task_runs cannot take it, so nobody would hear it.
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "GROUPSCOPE_LANDING": str(tmp_path / "landing"),
           "GROUPSCOPE_ALERT_LOG": str(stack.outages / "alerts.log"),
           "GROUPSCOPE_ALERT_RULES": str(stack.rules),
           "AIRFLOW_CONN_GROUPSCOPE_WAREHOUSE": own_postgres.url}
    plugins = str(Path(__file__).resolve().parents[2] / "plugins")
    stack.seed(0, {"payments": 0})
    stack.evaluate(0)
    _set_read_only(own_postgres, True)
    try:
        for _ in range(2):  # two failures of the outage: told once
            subprocess.run([sys.executable, "-c", TASK_FAILS, plugins, stack.cluster],
                           env=env, check=True, timeout=120, capture_output=True)
        with pytest.raises(pipeline.StageFailed, match="read-only"):
            stack.evaluate(30, snapshot=False)  # the alert task fails too: already told
    finally:
        _set_read_only(own_postgres, False)
    got = stack.received()
    assert len(got["webhook"]) == 1 and len(got["email"]) == 1, got
    told = stack.webhook.texts[0]
    assert told.startswith(f"[FIRING] cluster {stack.cluster}: groupscope cannot use its "
                           "warehouse: it is read-only")
    assert "task groupscope_live_x.live_marts failed and could not be recorded: Spark Connect " \
        "did not answer" in told
    # Kept meanwhile (spooled beside the alert log), and recorded by the first evaluation that
    # reaches the warehouse: its task_failed incident fires then, not lost to the RESOLVED.
    stack.evaluate(60)
    after = stack.received()["webhook"][1:]
    assert after[0].startswith(f"[FIRING] cluster {stack.cluster}: 2 incidents") or any(
        "task groupscope_live_x.live_marts FAILED" in line for line in after), after
    assert any("task groupscope_live_x.live_marts FAILED" in t for t in stack.webhook.texts[1:])
    assert after[-1].startswith(
        f"[RESOLVED] cluster {stack.cluster}: groupscope evaluates its alert rules again")


def test_the_heartbeat_is_withheld_while_a_page_reaches_nobody(stack: Stack) -> None:
    # Incidents go to the webhook only; the heartbeat to e-mail (a dead man's switch). While
    # the webhook refuses, groupscope must not tell the outside watcher it is alive.
    stack.rules.write_text(stack.rules.read_text()
                           + "routes:\n  - {channels: [webhook], continue: false}\n"
                           "heartbeat: {channels: [email], every: 1m}\n")
    stack.seed(0, {"payments": 0})
    assert stack.evaluate(0)["heartbeat"] == {"email": "sent"}  # nothing owed: alive
    stack.webhook.answer = 500
    stack.seed(60, {"payments": 3})
    for seconds in (60, 120, 180):
        summary = stack.evaluate(seconds)
        assert summary["heartbeat"] == {
            "email": "withheld: a notification is owed that no channel has delivered"}
    stack.webhook.answer = 200
    stack.evaluate(300)  # past its backoff: delivered, so alive again
    assert stack.received()["webhook"] == [
        f"[FIRING] cluster {stack.cluster}, group payments: STOPPED."]
    beats = [str(m["Subject"]) for m in stack.mail.mails() if "HEARTBEAT" in str(m["Subject"])]
    assert len(beats) == 2, beats


def _lag(url: str, cluster: str, seconds: float, lag: int | None, unknown: int = 0,
         lower_bound: int | None = None) -> None:
    """The group billing's lag at the snapshot T0 + ``seconds`` (seeded), as the lag job
    writes it (``analyze.lag.rollups``): null with ``unknown`` partitions unread and the
    others' sum as ``lower_bound``; and the partitions' status rule that says it has no
    member (what group_empty_lag_growing reads)."""
    engine = warehouse.engine_for(url)
    try:
        with engine.begin() as conn:
            params = {"c": cluster, "t": T0 + timedelta(seconds=seconds), "lag": lag,
                      "unknown": unknown, "bound": lag if lower_bound is None else lower_bound}
            conn.execute(text(
                "UPDATE mart.group_lag SET lag = :lag, max_lag = :lag,"
                " beyond_retention_partitions = CASE WHEN :unknown = 0 THEN 0 END,"
                " max_time_lag_estimated_s = CASE WHEN :unknown = 0 THEN 12.0 END,"
                " lag_lower_bound = :bound, lag_unknown_partitions = :unknown"
                " WHERE cluster = :c AND snapshot_ts = :t AND group_id = 'billing'"), params)
            conn.execute(text(
                "INSERT INTO mart.partition_status SELECT :c, :t, 'billing', 'orders', p,"
                " 'STOP', 'group_empty', NULL, 'no member' FROM generate_series(0, 2) p"),
                params)
    finally:
        engine.dispose()


def test_a_lag_unknown_on_partial_snapshots_resolves_no_lag_incident(stack: Stack) -> None:
    """Issue 41: partition offsets not read (a leader down) make the group's lag unknown; its
    lag incidents (the critical group_empty_lag_growing among them) stay firing through
    snapshots whose known part alone is smaller, well past keep_firing_for (60 s), and
    resolve only on known values that clear. (The lag job's side, unknown when a partition
    is: tests/unit/test_analytics_lag.py; on a real cluster: test_alert_unknown.py.) The
    group's status is seeded OK, so that no STOP inhibits the lag rules' notifications."""
    stack.rules.write_text(stack.rules.read_text()
                           + "rules:\n  - {name: lag_records_high, threshold: 100, for: 0s}\n")
    # No member and its lag growing: 900, then 1000.
    for seconds, lag in ((0, 900), (30, 1000)):
        stack.seed(seconds, {"billing": 0})
        _lag(stack.url, stack.cluster, seconds, lag)
        stack.evaluate(seconds, snapshot=False)
    # A partition's high watermark not read, for two and a half minutes: the known part, 400
    # records, would read as a lag that fell (and grows no more).
    for seconds in (60, 90, 120, 150, 180):
        stack.seed(seconds, {"billing": 0})
        _lag(stack.url, stack.cluster, seconds, None, unknown=1, lower_bound=400)
        outcome = stack.evaluate(seconds, snapshot=False)
        assert outcome["unknown"] >= 3, outcome
    unknown = _lag_incidents(stack)
    assert [(r.rule, r.state) for r in unknown] == [("group_empty_lag_growing", "firing"),
                                                    ("lag_records_high", "firing")], unknown
    assert all(r.why == "lag of 1 partition(s) unknown (high watermark or log start not read:"
               " leader down, timeout or no access); the others' lag is 400 records, a lower"
               " bound" for r in unknown), unknown
    # Read again, and grown no more: unknown once more (the snapshot before is), then it
    # clears, and resolves after keep_firing_for.
    for seconds in (210, 240, 270, 300):
        stack.seed(seconds, {"billing": 0})
        _lag(stack.url, stack.cluster, seconds, 1000)
        stack.evaluate(seconds, snapshot=False)
    heard = [(i["notification"], i["rule"]) for body in list(stack.webhook.bodies)
             for i in body.get("incidents", []) if i.get("group") == "billing"
             and i.get("rule") != "group_err"]
    assert heard == [("firing", "lag_records_high"), ("firing", "group_empty_lag_growing"),
                     ("resolved", "group_empty_lag_growing")], heard
    by_rule = {r.rule: r for r in _lag_incidents(stack)}
    # Resolved at the first known value that cleared (240 s; it last held at 30 s, past
    # keep_firing_for), never on the unknown snapshots.
    assert by_rule["group_empty_lag_growing"].resolved_at == T0 + timedelta(seconds=240)
    assert by_rule["lag_records_high"].state == "firing"  # 1000 > 100: it holds again


def _lag_incidents(stack: Stack) -> list[Any]:
    engine = warehouse.engine_for(stack.url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(
                "SELECT rule, state, resolved_at, details->>'unknown_why' AS why"
                " FROM ops.alert_incidents WHERE cluster = :c AND group_id = 'billing'"
                " AND rule <> 'group_err' ORDER BY rule"), {"c": stack.cluster}))
    finally:
        engine.dispose()


def test_an_evaluation_that_waits_past_its_bound_for_another_is_skipped_not_killed(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    from groupscope.serve.alerting import evaluation

    # Another session holds the cluster's evaluation lock (an evaluation at work, or a worker
    # that died holding it): this one waits its bound, then says so and leaves the work.
    monkeypatch.setattr(evaluation, "LOCK_WAIT", timedelta(seconds=1))
    stack.seed(0, {"payments": 3})
    engine = warehouse.engine_for(stack.url)
    try:
        with engine.connect() as holder:
            holder.execute(text("SELECT pg_advisory_lock(hashtext(:key))"),
                           {"key": f"groupscope-alerts:{stack.cluster}"})
            holder.commit()
            summary = stack.evaluate(0)
            assert "held its lock" in summary["skipped"]
            assert stack.received()["webhook"] == []
    finally:
        engine.dispose()  # the holder's session ends, and its lock with it
    summary = stack.evaluate(30)
    assert summary["notifications"] == ["firing group_err payments"]
