"""Publishes the datasource, the folder, the dashboards and Grafana alerting (rules, contact
points, the groupscope branch of the notification policy) to a running Grafana, with
grafana-client (``GrafanaApi``). Everything goes by uid: an object that exists is compared and
updated only when it differs, so a second publish creates nothing.

The calls, in order (what ``tests/integration/test_grafana_publish.py`` checks)::

    GET  /api/health
    GET  /api/datasources/uid/<uid>          then POST /api/datasources or PUT .../uid/<uid>
    GET  /api/folders/<uid>                  then POST /api/folders or PUT /api/folders/<uid>
    GET  /api/dashboards/uid/<uid>           then POST /api/dashboards/db (overwrite, by uid)
    GET  /api/v1/provisioning/alert-rules/<uid>
                                             then POST .../alert-rules or PUT .../<uid>
    GET  /api/v1/provisioning/folder/<folder>/rule-groups/<group>
                                             then DELETE .../alert-rules/<uid> of rules no longer
                                             generated, PUT the group when its interval differs
    GET  /api/v1/provisioning/contact-points then POST, or PUT .../contact-points/<uid>
    GET  /api/v1/provisioning/policies       then PUT (the tree, groupscope's branch replaced)

Alert rules and contact points keep Grafana's provenance ("api"): Grafana's UI shows them as
provisioned and does not edit them; the rules file stays their one source.

The credentials come from the environment (``GRAFANA_TOKEN``, a service account token, or
``GRAFANA_USER`` and ``GRAFANA_PASSWORD``) and appear in no message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from groupscope.serve.alerting.rules import RuleSet
from groupscope.serve.grafana import (
    DATASOURCE_UID,
    FOLDER_TITLE,
    FOLDER_UID,
    READER_PASSWORD_ENV,
    alerting,
)
from groupscope.serve.grafana.provision import Warehouse, datasource

TOKEN_ENV = "GRAFANA_TOKEN"  # noqa: S105 - variable names
USER_ENV = "GRAFANA_USER"
PASSWORD_ENV = "GRAFANA_PASSWORD"  # noqa: S105
REDACTED = "[REDACTED]"


class PublishError(RuntimeError):
    """Publishing failed; the one-line message names the Grafana URL and what was refused."""


@dataclass(frozen=True)
class Credentials:
    """A token (``auth`` a string) or a user and password (a tuple); ``source`` names the
    environment variables they came from, for messages. Never printed."""

    auth: str | tuple[str, str] = field(repr=False)
    source: str


def credentials_from_env(environ: Mapping[str, str]) -> Credentials:
    token = environ.get(TOKEN_ENV, "").strip()
    if token:
        return Credentials(token, TOKEN_ENV)
    user, password = environ.get(USER_ENV, ""), environ.get(PASSWORD_ENV, "")
    if user and password:
        return Credentials((user, password), f"{USER_ENV}/{PASSWORD_ENV}")
    raise PublishError(f"no Grafana credentials: set {TOKEN_ENV} (a service account token with "
                       f"the Admin role) or {USER_ENV} and {PASSWORD_ENV}")


def check_url(url: str) -> str:
    """The Grafana base URL, refused when it is not http(s) or carries credentials (they would
    be in the shell history and in messages)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PublishError(f"not a Grafana URL: {url!r} (give http(s)://host:port)")
    if parts.username or parts.password:
        raise PublishError(f"the Grafana URL must not hold credentials: set {TOKEN_ENV} or "
                           f"{USER_ENV}/{PASSWORD_ENV} instead")
    return url.rstrip("/")


@dataclass(frozen=True)
class Outcome:
    kind: str  # datasource, folder, dashboard, alert rule, rule group, contact point, ...
    name: str
    action: str  # created, updated, unchanged, deleted, skipped
    note: str = ""

    def line(self) -> str:
        return f"{self.kind} {self.name}: {self.action}" + (f" ({self.note})" if self.note
                                                            else "")


def _normal(value: Any) -> Any:
    """For comparing what Grafana returns with what is sent: empty and false values dropped
    (Grafana leaves them out), recursively."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if v not in (None, False, [], {}, "")}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _covers(remote: Mapping[str, Any], mine: Mapping[str, Any]) -> bool:
    """Whether ``remote`` has every field of ``mine`` with the same value (normalised)."""
    return all(_normal(remote.get(k)) == _normal(v) for k, v in mine.items())


class _Publisher:
    def __init__(self, url: str, credentials: Credentials, timeout: float,
                 report: Callable[[str], None]) -> None:
        from grafana_client import GrafanaApi  # type: ignore[import-untyped]

        self.url = url
        self.credentials = credentials
        self.api = GrafanaApi.from_url(url, credential=credentials.auth, timeout=timeout)
        self.report = report
        self.outcomes: list[Outcome] = []

    def done(self, kind: str, name: str, action: str, note: str = "") -> None:
        outcome = Outcome(kind, name, action, note)
        self.outcomes.append(outcome)
        self.report(outcome.line())

    def call(self, what: str, function: Callable[..., Any], *args: Any,
             missing_ok: bool = False, **kwargs: Any) -> Any:
        """One API call; a failure becomes a PublishError naming the URL and ``what``; with
        ``missing_ok`` a 404 is None."""
        import requests
        from grafana_client.client import (  # type: ignore[import-untyped]
            GrafanaClientError,
            GrafanaServerError,
            GrafanaUnauthorizedError,
        )

        try:
            return function(*args, **kwargs)
        except requests.exceptions.RequestException as exc:
            reason = type(exc).__name__
            if isinstance(exc, requests.exceptions.ConnectionError):
                reason = "connection refused or host unknown"
            elif isinstance(exc, requests.exceptions.Timeout):
                reason = "timed out"
            raise PublishError(f"cannot reach Grafana at {self.url} ({what}): {reason}") \
                from None
        except GrafanaUnauthorizedError:
            raise PublishError(f"Grafana at {self.url} rejected the credentials in "
                               f"{self.credentials.source} (401 Unauthorized, {what})") from None
        except GrafanaClientError as exc:
            if exc.status_code == 404 and missing_ok:
                return None
            message = _message(exc)
            if exc.status_code == 403:
                raise PublishError(
                    f"Grafana at {self.url} refused {what}: the credentials in "
                    f"{self.credentials.source} lack the permission (403: {message}); "
                    "publishing needs the Admin role") from None
            raise PublishError(f"Grafana at {self.url} refused {what} "
                               f"(HTTP {exc.status_code}): {message}") from None
        except GrafanaServerError as exc:
            raise PublishError(f"Grafana at {self.url} failed {what} "
                               f"(HTTP {exc.status_code}): {_message(exc)}") from None


def _message(exc: Any) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and response.get("message"):
        return str(response["message"])
    return str(response or exc)[:300]


def publish(url: str, rules: RuleSet, *, credentials: Credentials,
            warehouse: Warehouse, environ: Mapping[str, str],
            reader_password_env: str = READER_PASSWORD_ENV,
            grafana_alerting: bool = False,
            snapshot_every: timedelta = timedelta(seconds=60),
            dashboards: Mapping[str, dict[str, Any]] | None = None,
            timeout: float = 10.0,
            report: Callable[[str], None] = print) -> list[Outcome]:
    """Pushes everything to the Grafana at ``url``; ``report`` gets one line per object."""
    url = check_url(url)
    if dashboards is None:
        from groupscope.serve.grafana.dashboards import build_all

        dashboards = build_all()
    grafana_rules = alerting.api_rules(rules, enabled=grafana_alerting,
                                       snapshot_every=snapshot_every)
    found, skipped = alerting.destinations(rules, environ)
    publisher = _Publisher(url, credentials, timeout, report)
    publisher.call("the health check", publisher.api.health.check)
    _datasource(publisher, warehouse, environ.get(reader_password_env) or None,
                reader_password_env)
    _folder(publisher)
    for dashboard_uid, dashboard in sorted(dashboards.items()):
        _dashboard(publisher, dashboard_uid, dashboard)
    _rules(publisher, grafana_rules, snapshot_every)
    for name, why in skipped.items():
        publisher.done("contact point", alerting.receiver_name(
            next(c for c in rules.channels if c.name == name)), "skipped", why)
    if found:
        _contact_points(publisher, alerting.api_contact_points(found, environ))
        _policy(publisher, alerting.api_policy_route(rules, found))
    else:
        publisher.done("notification policy", "groupscope", "skipped",
                       "no channel has a Grafana destination")
    return publisher.outcomes


def _datasource(p: _Publisher, warehouse: Warehouse, password: str | None,
                password_env: str) -> None:
    api = p.api.datasource
    mine = datasource(warehouse)
    remote = p.call("reading the datasource", api.get_datasource_by_uid, DATASOURCE_UID,
                    missing_ok=True)
    secret = {"secureJsonData": {"password": password}} if password else {}
    if remote is None:
        if not password:
            raise PublishError(f"the datasource {DATASOURCE_UID} does not exist in Grafana yet: "
                               f"set {password_env} (grafana_reader's password) to create it")
        p.call("creating the datasource", api.create_datasource, {**mine, **secret})
        p.done("datasource", DATASOURCE_UID, "created")
        return
    has_password = bool((remote.get("secureJsonFields") or {}).get("password"))
    if _covers(remote, mine) and has_password and not password:
        p.done("datasource", DATASOURCE_UID, "unchanged")
        return
    if not password and not has_password:
        raise PublishError(f"the datasource {DATASOURCE_UID} has no password in Grafana: set "
                           f"{password_env} (grafana_reader's password)")
    p.call("updating the datasource", api.update_datasource_by_uid, DATASOURCE_UID,
           {**mine, **secret})
    p.done("datasource", DATASOURCE_UID, "updated", "password set" if password else "")


def _folder(p: _Publisher) -> None:
    api = p.api.folder
    remote = p.call("reading the folder", api.get_folder, FOLDER_UID, missing_ok=True)
    if remote is None:
        p.call("creating the folder", api.create_folder, FOLDER_TITLE, uid=FOLDER_UID)
        p.done("folder", FOLDER_UID, "created")
    elif remote.get("title") == FOLDER_TITLE:
        p.done("folder", FOLDER_UID, "unchanged")
    else:
        p.call("renaming the folder", api.update_folder, FOLDER_UID, title=FOLDER_TITLE,
               overwrite=True)
        p.done("folder", FOLDER_UID, "updated")


def _dashboard(p: _Publisher, dashboard_uid: str, dashboard: dict[str, Any]) -> None:
    api = p.api.dashboard
    remote = p.call(f"reading dashboard {dashboard_uid}", api.get_dashboard, dashboard_uid,
                    missing_ok=True)
    if remote is not None:
        stored = {k: v for k, v in (remote.get("dashboard") or {}).items()
                  if k not in ("id", "version")}
        if stored == dashboard and (remote.get("meta") or {}).get("folderUid") == FOLDER_UID:
            p.done("dashboard", dashboard_uid, "unchanged")
            return
    p.call(f"saving dashboard {dashboard_uid}", api.update_dashboard,
           {"dashboard": dashboard, "folderUid": FOLDER_UID, "overwrite": True,
            "message": "groupscope grafana publish"})
    p.done("dashboard", dashboard_uid, "created" if remote is None else "updated")


def _rules(p: _Publisher, rules: list[dict[str, Any]], snapshot_every: timedelta) -> None:
    api = p.api.alertingprovisioning
    for rule in rules:
        rule_uid = rule["uid"]
        remote = p.call(f"reading alert rule {rule_uid}", api.get_alertrule, rule_uid,
                        missing_ok=True)
        if remote is None:
            p.call(f"creating alert rule {rule_uid}", api.create_alertrule, rule)
            p.done("alert rule", rule_uid, "created")
        elif _covers(remote, rule):
            p.done("alert rule", rule_uid, "unchanged")
        else:
            p.call(f"updating alert rule {rule_uid}", api.update_alertrule, rule_uid, rule)
            p.done("alert rule", rule_uid, "updated")
    group = p.call("reading the rule group", api.get_rule_group, FOLDER_UID,
                   alerting.RULE_GROUP, missing_ok=True)
    if group is None:
        return
    mine = {r["uid"] for r in rules}
    kept = []
    for rule in group.get("rules") or []:
        if rule.get("uid") in mine:
            kept.append(rule)
            continue
        p.call(f"deleting alert rule {rule.get('uid')}", api.delete_alertrule, rule.get("uid"))
        p.done("alert rule", str(rule.get("uid")), "deleted", "no longer in the rules file")
    interval = int(_seconds(alerting.group_interval(snapshot_every)))
    name = f"{FOLDER_UID}/{alerting.RULE_GROUP}"
    if not kept:
        return
    if group.get("interval") == interval:
        p.done("rule group", name, "unchanged", f"every {interval}s")
        return
    p.call("setting the rule group's interval", api.update_rule_group, FOLDER_UID,
           alerting.RULE_GROUP, {"title": alerting.RULE_GROUP, "folderUid": FOLDER_UID,
                                 "interval": interval, "rules": kept})
    p.done("rule group", name, "updated", f"every {interval}s")


def _seconds(text: str) -> float:
    total, number = 0.0, ""
    for char in text:
        if char.isdigit():
            number += char
        else:
            total += int(number) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[char]
            number = ""
    return total


def _contact_points(p: _Publisher, points: list[dict[str, Any]]) -> None:
    api = p.api.alertingprovisioning
    remote = p.call("reading the contact points", api.get_contactpoints) or []
    by_uid = {c.get("uid"): c for c in remote if isinstance(c, dict)}
    for point in points:
        existing = by_uid.get(point["uid"])
        label = f"{point['name']} [{point['type']} {point['uid']}]"
        if existing is None:
            p.call(f"creating contact point {point['uid']}", api.create_contactpoint, point)
            p.done("contact point", label, "created")
            continue
        settings = existing.get("settings") or {}
        # A secret comes back redacted: it cannot be compared, so it is sent again.
        redacted = any(settings.get(k) == REDACTED for k in point["settings"])
        if not redacted and _covers(existing, point):
            p.done("contact point", label, "unchanged")
            continue
        p.call(f"updating contact point {point['uid']}", api.update_contactpoint,
               point["uid"], point)
        p.done("contact point", label, "updated")


def _policy(p: _Publisher, branch: dict[str, Any]) -> None:
    api = p.api.alertingprovisioning
    tree = p.call("reading the notification policy", api.get_notification_policy_tree) or {}
    merged = alerting.merge_policy(tree, branch)
    if _normal(merged) == _normal(tree):
        p.done("notification policy", "groupscope branch", "unchanged")
        return
    p.call("saving the notification policy", api.set_notification_policy_tree, merged)
    existed = any(alerting.is_groupscope_route(r) for r in tree.get("routes") or [])
    p.done("notification policy", "groupscope branch", "updated" if existed else "created")
