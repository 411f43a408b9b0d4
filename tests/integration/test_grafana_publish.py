"""``groupscope grafana publish`` with the real grafana-client against a local HTTP server acting
as Grafana (stdlib http.server in a thread): the endpoints grafana-client calls, objects stored
by uid, every request recorded (method, path, Authorization header).

Checked: the documented API calls are made; a second publish creates nothing (updates and
unchanged only); the token is sent on every call and printed nowhere; a rejected token, an
unreachable URL and a refused object each end in one clear line.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from groupscope.cli import main
from groupscope.serve.alerting.rules import load_rules
from groupscope.serve.grafana import DASHBOARDS, DATASOURCE_UID, FOLDER_UID, READER_ROLE
from groupscope.serve.grafana.alerting import RULE_LABEL, api_rules, is_groupscope_route

TOKEN = "glsa_test-token-4f9c2e"
READER_PASSWORD = "reader-pw-71ab"
SLACK_URL = "https://hooks.slack.example/T0/B0/secret-slack-path"
WEBHOOK_URL = "https://hooks.example/groupscope-secret-hook"
REDACTED = "[REDACTED]"
SECURE_SETTINGS = {"slack": {"url"}}

RULES_FILE = """
channels:
  - {name: webhook, kind: webhook, connection: groupscope_alerts}
  - {name: team-slack, kind: slack, connection: groupscope_slack}
  - {name: ops-mail, kind: email, connection: groupscope_smtp, to: [ops@example.com]}
routes:
  - {severities: [critical], channels: [webhook, ops-mail]}
  - {labels: {team: payments}, channels: [team-slack], continue: false}
rules:
  - name: lag_records_high
    overrides:
      - {group: 'payments-.*', threshold: 1000, labels: {team: payments}}
"""


@dataclass
class FakeGrafana:
    """Grafana's HTTP API, the part publish uses, in memory."""

    token: str
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    datasources: dict[str, dict[str, Any]] = field(default_factory=dict)
    folders: dict[str, dict[str, Any]] = field(default_factory=dict)
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_intervals: dict[tuple[str, str], int] = field(default_factory=dict)
    contact_points: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=lambda: {
        "receiver": "grafana-default-email", "group_by": ["grafana_folder", "alertname"],
        "routes": [{"receiver": "team-x", "object_matchers": [["team", "=", "x"]]}]})
    refuse: dict[str, tuple[int, str]] = field(default_factory=dict)  # path regex -> status
    next_id: int = 1

    def handle(self, method: str, path: str, auth: str | None,
               body: Any) -> tuple[int, Any]:
        self.requests.append((method, path, auth))
        if path == "/api/health":
            return 200, {"database": "ok", "version": "12.3.0"}
        if auth != f"Bearer {self.token}":
            return 401, {"message": "invalid API key"}
        for pattern, (status, message) in self.refuse.items():
            if re.fullmatch(pattern, f"{method} {path}"):
                return status, {"message": message}
        return self._route(method, path, body)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "datasources"]:
            if method == "POST" and len(parts) == 2:
                stored = {**body, "id": self._id(), "version": 1}
                self.datasources[body["uid"]] = stored
                return 200, {"datasource": stored, "message": "Datasource added"}
            if parts[2:3] == ["uid"]:
                ds_uid = parts[3]
                if method == "GET":
                    if ds_uid not in self.datasources:
                        return 404, {"message": "Data source not found"}
                    shown = {k: v for k, v in self.datasources[ds_uid].items()
                             if k != "secureJsonData"}
                    shown["secureJsonFields"] = {
                        k: True for k in self.datasources[ds_uid].get("secureJsonData", {})}
                    return 200, shown
                if method == "PUT":
                    old = self.datasources[ds_uid]
                    secure = body.get("secureJsonData") or old.get("secureJsonData", {})
                    self.datasources[ds_uid] = {**body, "id": old["id"], "secureJsonData": secure,
                                                "version": old["version"] + 1}
                    return 200, {"message": "Datasource updated"}
        if parts[:2] == ["api", "folders"]:
            if method == "POST":
                self.folders[body["uid"]] = {**body, "id": self._id(), "version": 1}
                return 200, self.folders[body["uid"]]
            folder_uid = parts[2]
            if method == "GET":
                if folder_uid not in self.folders:
                    return 404, {"message": "folder not found"}
                return 200, self.folders[folder_uid]
            if method == "PUT":
                self.folders[folder_uid].update(title=body["title"])
                return 200, self.folders[folder_uid]
        if parts[:3] == ["api", "dashboards", "uid"] and method == "GET":
            if parts[3] not in self.dashboards:
                return 404, {"message": "Dashboard not found"}
            return 200, self.dashboards[parts[3]]
        if parts[:3] == ["api", "dashboards", "db"] and method == "POST":
            dashboard = body["dashboard"]
            old = self.dashboards.get(dashboard["uid"])
            version = old["dashboard"]["version"] + 1 if old else 1
            ident = old["dashboard"]["id"] if old else self._id()
            self.dashboards[dashboard["uid"]] = {
                "dashboard": {**dashboard, "id": ident, "version": version},
                "meta": {"folderUid": body.get("folderUid")}}
            return 200, {"uid": dashboard["uid"], "status": "success", "version": version}
        if parts[:3] == ["api", "v1", "provisioning"]:
            return self._alerting(method, parts[3:], body)
        return 404, {"message": f"no route {method} {path}"}

    def _alerting(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        if parts[0] == "alert-rules":
            if method == "POST":
                self.rules[body["uid"]] = {**body, "id": self._id(), "provenance": "api"}
                self.group_intervals.setdefault((body["folderUID"], body["ruleGroup"]), 60)
                return 201, self.rules[body["uid"]]
            rule_uid = parts[1]
            if rule_uid not in self.rules:
                return 404, {"message": "rule not found"}
            if method == "GET":
                return 200, self.rules[rule_uid]
            if method == "PUT":
                self.rules[rule_uid] = {**body, "id": self.rules[rule_uid]["id"],
                                        "provenance": "api"}
                return 200, self.rules[rule_uid]
            if method == "DELETE":
                del self.rules[rule_uid]
                return 204, None
        if parts[0] == "folder":  # folder/<uid>/rule-groups/<group>
            key = (parts[1], parts[3])
            if key not in self.group_intervals:
                return 404, {"message": "rule group not found"}
            if method == "PUT":
                self.group_intervals[key] = body["interval"]
            rules = [r for r in self.rules.values()
                     if (r["folderUID"], r["ruleGroup"]) == key]
            return 200, {"title": key[1], "folderUid": key[0],
                         "interval": self.group_intervals[key], "rules": rules}
        if parts[0] == "contact-points":
            if method == "GET":
                shown = []
                for point in self.contact_points.values():
                    secure = SECURE_SETTINGS.get(point["type"], set())
                    shown.append({**point, "settings": {
                        k: REDACTED if k in secure else v for k, v in point["settings"].items()}})
                return 200, shown
            if method == "POST":
                self.contact_points[body["uid"]] = body
                return 202, body
            if method == "PUT":
                self.contact_points[parts[1]] = body
                return 202, {"message": "contactpoint updated"}
        if parts[0] == "policies":
            if method == "GET":
                return 200, self.policy
            self.policy = body
            return 202, {"message": "policies updated"}
        return 404, {"message": "not found"}


def _server(fake: FakeGrafana) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            status, answer = fake.handle(self.command, self.path.split("?")[0],
                                         self.headers.get("Authorization"), body)
            data = b"" if answer is None else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def grafana() -> Iterator[tuple[FakeGrafana, str]]:
    fake = FakeGrafana(TOKEN)
    server = _server(fake)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("WAREHOUSE_URL", "GROUPSCOPE_ALERT_RULES", "GROUPSCOPE_GRAFANA_ALERTING",
                 "GRAFANA_USER", "GRAFANA_PASSWORD", "GROUPSCOPE_ALERT_WEBHOOK_URL",
                 "GROUPSCOPE_ALERT_TEAM_SLACK_URL", "GROUPSCOPE_SNAPSHOT_EVERY_S"):
        monkeypatch.delenv(name, raising=False)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_FILE, encoding="utf-8")
    monkeypatch.setenv("GROUPSCOPE_ALERT_RULES", str(rules))
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    monkeypatch.setenv("GROUPSCOPE_READER_PASSWORD", READER_PASSWORD)
    monkeypatch.setenv("GROUPSCOPE_ALERT_WEBHOOK_URL", WEBHOOK_URL)
    monkeypatch.setenv("GROUPSCOPE_ALERT_TEAM_SLACK_URL", SLACK_URL)
    monkeypatch.setenv("GROUPSCOPE_SNAPSHOT_EVERY_S", "30")
    return rules


def _publish(url: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["grafana", "publish", "--url", url, "--db-host", "db.internal", *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_publish_makes_the_documented_calls_and_a_second_one_creates_nothing(
        grafana: tuple[FakeGrafana, str], environment: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake, url = grafana
    code, output = _publish(url, capsys)
    assert code == 0, output
    rules = api_rules(load_rules(environment))
    calls = [(method, path) for method, path, _ in fake.requests]

    # The documented calls, in order.
    assert calls[0] == ("GET", "/api/health")
    assert calls[1:4] == [("GET", f"/api/datasources/uid/{DATASOURCE_UID}"),
                          ("POST", "/api/datasources"), ("GET", f"/api/folders/{FOLDER_UID}")]
    assert ("POST", "/api/folders") in calls
    for dashboard_uid in DASHBOARDS:
        assert ("GET", f"/api/dashboards/uid/{dashboard_uid}") in calls
    assert calls.count(("POST", "/api/dashboards/db")) == len(DASHBOARDS)
    for rule in rules:
        assert ("GET", f"/api/v1/provisioning/alert-rules/{rule['uid']}") in calls
    assert calls.count(("POST", "/api/v1/provisioning/alert-rules")) == len(rules)
    group = f"/api/v1/provisioning/folder/{FOLDER_UID}/rule-groups/groupscope"
    assert ("GET", group) in calls and ("PUT", group) in calls  # the 30 s interval
    assert ("GET", "/api/v1/provisioning/contact-points") in calls
    assert ("GET", "/api/v1/provisioning/policies") in calls
    assert calls[-1] == ("PUT", "/api/v1/provisioning/policies")

    # The token on every call but the health check; in no output.
    assert all(auth == f"Bearer {TOKEN}" for method, path, auth in fake.requests
               if path != "/api/health")
    for secret in (TOKEN, READER_PASSWORD, SLACK_URL, WEBHOOK_URL):
        assert secret not in output

    # What Grafana holds.
    source = fake.datasources[DATASOURCE_UID]
    assert source["user"] == READER_ROLE and source["url"] == "db.internal:5432"
    assert source["secureJsonData"] == {"password": READER_PASSWORD}
    assert source["jsonData"]["database"] == "groupscope"
    assert {d["meta"]["folderUid"] for d in fake.dashboards.values()} == {FOLDER_UID}
    assert set(fake.dashboards) == set(DASHBOARDS)
    assert set(fake.rules) == {r["uid"] for r in rules}
    assert all(r["isPaused"] for r in fake.rules.values())  # Grafana alerting off by default
    assert fake.group_intervals[(FOLDER_UID, "groupscope")] == 30
    payments = [r for r in fake.rules.values() if r["labels"].get("team") == "payments"]
    assert len(payments) == 1 and payments[0]["title"] == "lag_records_high (override 1)"
    points = fake.contact_points.values()
    assert {(p["name"], p["type"]) for p in points} >= {
        ("groupscope-webhook", "webhook"), ("groupscope-team-slack", "slack"),
        ("groupscope-ops-mail", "email"), ("groupscope", "webhook")}
    assert next(p for p in points if p["uid"] == "groupscope-webhook")["settings"]["url"] == \
        WEBHOOK_URL
    first, *others = fake.policy["routes"]
    assert is_groupscope_route(first) and first["repeat_interval"] == "4h"
    assert others == [{"receiver": "team-x", "object_matchers": [["team", "=", "x"]]}]
    assert fake.policy["receiver"] == "grafana-default-email"  # the user's tree is kept

    # Again: everything found by uid, nothing created.
    fake.requests.clear()
    code, output = _publish(url, capsys)
    assert code == 0, output
    assert "created" not in output and "deleted" not in output
    assert not [c for c in fake.requests if c[0] in ("POST", "DELETE")]
    assert "dashboard groupscope-overview: unchanged" in output
    assert f"alert rule {rules[0]['uid']}: unchanged" in output
    assert "notification policy groupscope branch: unchanged" in output
    assert "folder groupscope: unchanged" in output
    assert re.search(r"published to .*: \d+ unchanged, \d+ updated", output)
    assert [r for r in fake.policy["routes"] if is_groupscope_route(r)] == [first]
    assert len(fake.rules) == len(rules) and len(fake.dashboards) == len(DASHBOARDS)


def test_a_rule_gone_from_the_rules_file_is_deleted_and_alerting_can_be_switched_on(
        grafana: tuple[FakeGrafana, str], environment: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake, url = grafana
    assert _publish(url, capsys)[0] == 0
    override = ("    overrides:\n"
                "      - {group: 'payments-.*', threshold: 1000, labels: {team: payments}}\n")
    environment.write_text(RULES_FILE.replace(override, "    threshold: 200000\n")
                           + "  - {name: rebalance_storm, enabled: false}\n", encoding="utf-8")
    code, output = _publish(url, capsys, "--grafana-alerting")
    assert code == 0, output
    assert "alert rule groupscope-lag_records_high-o1: deleted" in output
    assert "alert rule groupscope-rebalance_storm: deleted" in output
    assert "alert rule groupscope-group_err: updated" in output  # unpaused
    assert not any(r["isPaused"] for r in fake.rules.values())
    assert all(r["labels"][RULE_LABEL] != "rebalance_storm" for r in fake.rules.values())


def test_a_rejected_token_is_one_clear_line(
        grafana: tuple[FakeGrafana, str], environment: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake, url = grafana
    monkeypatch.setenv("GRAFANA_TOKEN", "glsa_wrong-token-0000")
    code, output = _publish(url, capsys)
    assert code == 3
    assert output.strip() == (f"groupscope: error: Grafana at {url} rejected the credentials "
                              "in GRAFANA_TOKEN (401 Unauthorized, reading the datasource)")
    assert "glsa_wrong" not in output and TOKEN not in output
    assert not fake.datasources


def test_a_refused_object_names_what_and_grafanas_message(
        grafana: tuple[FakeGrafana, str], environment: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake, url = grafana
    fake.refuse[r"POST /api/dashboards/db"] = (400, "Dashboard title cannot be empty")
    code, output = _publish(url, capsys)
    assert code == 3
    assert (f"Grafana at {url} refused saving dashboard groupscope-coordinators (HTTP 400): "
            "Dashboard title cannot be empty") in output
    fake.refuse = {r"GET /api/folders/.*": (403, "You'll need additional permissions")}
    code, output = _publish(url, capsys)
    assert code == 3
    assert "lack the permission (403: You'll need additional permissions)" in output
    assert "GRAFANA_TOKEN" in output and TOKEN not in output


def test_an_unreachable_grafana_is_named(environment: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    code, output = _publish(url, capsys, "--timeout", "3")
    assert code == 3
    assert f"cannot reach Grafana at {url} (the health check)" in output


def test_credentials_in_the_url_or_none_at_all_are_refused(
        environment: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, output = _publish("http://admin:hunter2@127.0.0.1:1", capsys)
    assert code == 3 and "must not hold credentials" in output and "hunter2" not in output
    monkeypatch.delenv("GRAFANA_TOKEN")
    code, output = _publish("http://127.0.0.1:1", capsys)
    assert code == 3 and "set GRAFANA_TOKEN" in output


@pytest.mark.integration
def test_create_reader_then_every_alert_query_runs_as_the_reader_as_python_matches(
        postgres: Any, warehouse_engine: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``groupscope warehouse create-reader`` (the dev stack's reader password, so the other
    tests' role is unchanged), then each Grafana rule's SQL of a rules file with overrides, as
    grafana_reader: it runs with the columns alert conditions need, and PostgreSQL's reading of
    each override regex (as exported) agrees with Python's fullmatch."""
    from sqlalchemy import create_engine, text

    from groupscope.serve.grafana.alerting import grafana_rules, pg_regex, sql_literal
    from groupscope_dev.postgres import READER_PASSWORD as DEV_READER_PASSWORD

    monkeypatch.setenv("GROUPSCOPE_READER_PASSWORD", DEV_READER_PASSWORD)
    monkeypatch.delenv("WAREHOUSE_ADMIN_URL", raising=False)
    code = main(["warehouse", "create-reader", "--admin-url", postgres.superuser_url()])
    output = capsys.readouterr()
    assert code == 0, output.err
    assert "grafana_reader created or updated" in output.out
    assert DEV_READER_PASSWORD not in output.out + output.err
    code = main(["warehouse", "create-reader", "--admin-url",
                 "postgresql://postgres:pw-in-flag@127.0.0.1/x"])
    assert code == 2 and "pw-in-flag" not in capsys.readouterr().err

    path = tmp_path / "rules.yaml"
    path.write_text(RULES_FILE + """
  - name: collector_stale
    overrides:
      - {cluster: '(?i)PROD-.*', threshold: 2}
  - name: quoted
    severity: warning
    condition: lag_records
    threshold: 1
    overrides:
      - {group: "o'reilly\\\\d+|caf\u00e9-[a-z]{2}", threshold: 5}
      - {group: '(?!payments-).*', enabled: false}
""", encoding="utf-8")
    rules = load_rules(path)
    reader = create_engine(postgres.reader_url.replace("postgresql://",
                                                       "postgresql+psycopg://"))
    subjects = ["payments-eu", "old-payments-eu", "o'reilly42", "café-ab", "prod-EU", "", "x"]
    try:
        with reader.connect() as conn:
            for grafana_rule in grafana_rules(rules):
                sql = grafana_rule.data[0]["model"]["rawSql"]
                result = conn.execute(text(sql.replace(":", r"\:")))
                assert list(result.keys()) == ["time", "cluster", "group_id", "value"], sql
            for rule in rules.rules:
                for override in rule.overrides:
                    for regex in (override.cluster, override.group):
                        if regex is None:
                            continue
                        literal = sql_literal(pg_regex(regex.pattern, rule.name))
                        for subject in subjects:
                            matched = conn.execute(
                                text(f"SELECT :s ~ {literal.replace(':', chr(92) + ':')}"),
                                {"s": subject}).scalar_one()
                            assert matched == (regex.fullmatch(subject) is not None), (
                                regex.pattern, subject)
    finally:
        reader.dispose()
