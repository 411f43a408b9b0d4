"""The dashboards as code (groupscope.serve.grafana.dashboards): structure, uids, links,
variables and the SQL's use of Grafana's macros, and the committed JSON equals the generated.

Pure: no Grafana, no warehouse (the integration tests run every query against real data).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from groupscope.serve.grafana import DASHBOARDS, DATASOURCE_TYPE, DATASOURCE_UID
from groupscope.serve.grafana.dashboards import build_all, render

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "dashboards"
REGENERATE = "python -m groupscope.serve.grafana.dashboards dashboards"

# The only `$` constructs the SQL may contain: what the integration tests expand, exactly as
# Grafana does. Macro arguments cannot contain ')'.
ALLOWED_MACROS = re.compile(
    r"\$__timeFilter\([A-Za-z_][\w.]*\)"
    r"|\$__timeGroupAlias\([A-Za-z_][\w.]*,'\d+[smhd]'\)"
    r"|\$__timeFrom\(\)|\$__timeTo\(\)"
    r"|\$\{(?P<var>[A-Za-z_]\w*):sqlstring\}"
)
VARIABLES = {"cluster", "group", "topic"}
TIME_PANELS = {"timeseries", "state-timeline", "status-history"}


@pytest.fixture(scope="module")
def dashboards() -> dict[str, dict[str, Any]]:
    return build_all()


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = dashboard["panels"]
    return panels


def _sql(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, SQL) of every panel target and variable query."""
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} target {target['refId']}", target["rawSql"]
    for variable in dashboard["templating"]["list"]:
        yield f"variable {variable['name']}", variable["query"]


def _urls(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "url" and isinstance(value, str):
                yield value
            else:
                yield from _urls(value)
    elif isinstance(node, list):
        for item in node:
            yield from _urls(item)


def test_the_shared_dashboards_are_built_with_their_uids(
        dashboards: dict[str, dict[str, Any]]) -> None:
    assert set(dashboards) == set(DASHBOARDS)
    uids = [d["uid"] for d in dashboards.values()]
    assert len(set(uids)) == len(uids)
    for uid, dashboard in dashboards.items():
        assert dashboard["uid"] == uid
        assert dashboard["title"]
        assert dashboard["schemaVersion"] == 42
        assert "id" not in dashboard  # provisioning and publishing go by uid


def test_panels_have_unique_ids_and_fit_the_grid(dashboards: dict[str, dict[str, Any]]) -> None:
    for uid, dashboard in dashboards.items():
        panels = _panels(dashboard)
        assert panels, uid
        ids = [p["id"] for p in panels]
        assert len(set(ids)) == len(ids), f"{uid}: duplicate panel ids"
        cells: set[tuple[int, int]] = set()
        for panel in panels:
            assert panel["title"] and panel["type"], panel
            grid = panel["gridPos"]
            assert {"h", "w", "x", "y"} <= set(grid), panel["title"]
            assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
            here = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                    for y in range(grid["y"], grid["y"] + grid["h"])}
            assert not here & cells, f"{uid}: {panel['title']!r} overlaps another panel"
            cells |= here


def test_every_target_is_raw_sql_on_the_warehouse_datasource(
        dashboards: dict[str, dict[str, Any]]) -> None:
    for uid, dashboard in dashboards.items():
        for panel in _panels(dashboard):
            assert panel["datasource"] == {"type": DATASOURCE_TYPE, "uid": DATASOURCE_UID}
            targets = panel.get("targets", [])
            assert targets, f"{uid}: {panel['title']!r} has no query"
            refs = [t["refId"] for t in targets]
            assert len(set(refs)) == len(refs)
            for target in targets:
                assert target["refId"] and target["rawSql"].strip()
                assert target["datasource"]["uid"] == DATASOURCE_UID
                assert target["datasource"]["type"] == DATASOURCE_TYPE
                assert target["format"] in ("table", "time_series")
                assert target["rawQuery"] is True and target["editorMode"] == "code"


def test_variables_are_query_variables_without_custom_values(
        dashboards: dict[str, dict[str, Any]]) -> None:
    for uid, dashboard in dashboards.items():
        variables = dashboard["templating"]["list"]
        names = [v["name"] for v in variables]
        assert names and names[0] == "cluster", uid
        assert set(names) <= VARIABLES
        for variable in variables:
            assert variable["type"] == "query"
            assert variable["allowCustomValue"] is False
            assert variable["datasource"]["uid"] == DATASOURCE_UID
            assert variable["query"].strip()
            # An "All" that is not every option quoted by :sqlstring would break the SQL.
            assert not variable.get("allValue"), variable["name"]
    assert [v["name"] for v in dashboards["groupscope-group"]["templating"]["list"]] == [
        "cluster", "group", "topic"]


def test_sql_uses_only_the_allowed_macros_and_defined_variables(
        dashboards: dict[str, dict[str, Any]]) -> None:
    for uid, dashboard in dashboards.items():
        defined = {v["name"] for v in dashboard["templating"]["list"]}
        for where, sql in _sql(dashboard):
            for match in ALLOWED_MACROS.finditer(sql):
                if match["var"]:
                    assert match["var"] in defined, f"{uid} {where}: ${match['var']} undefined"
            rest = ALLOWED_MACROS.sub("", sql)
            assert "$" not in rest, f"{uid} {where}: a $ construct Grafana's tests do not " \
                                    f"expand: {rest[rest.index('$'):][:40]!r}"


def test_sql_reads_only_the_serve_schema(dashboards: dict[str, dict[str, Any]]) -> None:
    relation = re.compile(r"\b(?:FROM|JOIN)\s+(?!\()([\w.\"]+)", re.IGNORECASE)
    for uid, dashboard in dashboards.items():
        for where, sql in _sql(dashboard):
            names = relation.findall(sql)
            assert names, f"{uid} {where}: reads nothing?"
            for name in names:
                assert name.startswith("serve."), f"{uid} {where}: reads {name}"


def test_time_panels_return_a_time_column(dashboards: dict[str, dict[str, Any]]) -> None:
    for dashboard in dashboards.values():
        for panel in _panels(dashboard):
            if panel["type"] not in TIME_PANELS:
                continue
            for target in panel["targets"]:
                sql = target["rawSql"]
                assert re.match(r"SELECT time\b", sql) or "$__timeGroupAlias(" in sql, \
                    panel["title"]
                assert "$__timeFilter(time)" in sql or panel["type"] != "timeseries"
                assert sql.rstrip().endswith("ORDER BY 1"), panel["title"]


def test_links_point_at_existing_dashboards(dashboards: dict[str, dict[str, Any]]) -> None:
    seen = 0
    for uid, dashboard in dashboards.items():
        for url in _urls(_panels(dashboard)):
            if "/d/" not in url:
                continue
            seen += 1
            parts = urlsplit(url)
            _, _, target, slug = parts.path.split("/", 3)
            assert target in DASHBOARDS, f"{uid}: link to unknown dashboard {target}"
            assert slug == DASHBOARDS[target]
            for name in parse_qs(parts.query):
                assert name.removeprefix("var-") in VARIABLES, f"{uid}: {url}"
    assert seen


def test_overview_tables_link_to_group_detail_with_cluster_and_group(
        dashboards: dict[str, dict[str, Any]]) -> None:
    expected = ("/d/groupscope-group/group-detail"
                "?var-cluster=${__data.fields.cluster:percentencode}"
                "&var-group=${__data.fields.group_id:percentencode}")
    linked = []
    for panel in _panels(dashboards["groupscope-overview"]):
        if panel["type"] == "table" and any(u.startswith(expected) for u in _urls(panel)):
            # The row carries both fields the link reads.
            sql = panel["targets"][0]["rawSql"]
            assert "cluster" in sql and "group_id" in sql
            linked.append(panel["title"])
    assert {"Groups", "Top lagging groups, in records", "Top lagging groups, in seconds",
            "Open alert incidents"} <= set(linked)


def test_status_is_coloured_ok_warn_err(dashboards: dict[str, dict[str, Any]]) -> None:
    rendered = render(dashboards["groupscope-overview"])
    for status, colour in (("OK", "green"), ("WARN", "orange"), ("ERR", "red")):
        assert re.search(rf'"{status}": \{{\s*"color": "{colour}"', rendered), status


def test_committed_json_equals_the_generated(dashboards: dict[str, dict[str, Any]]) -> None:
    stale = []
    for uid, dashboard in dashboards.items():
        path = COMMITTED / f"{DASHBOARDS[uid]}.json"
        if not path.exists() or path.read_text(encoding="utf-8") != render(dashboard):
            stale.append(path.name)
    assert not stale, (f"dashboards/{', '.join(stale)} differ from the code: run `{REGENERATE}` "
                       "and commit the result")


def test_the_cli_does_not_import_the_sdk() -> None:
    probe = ("import sys, groupscope.cli; "
             "print(any(m.startswith('grafana_foundation_sdk') for m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert result.stdout.strip() == "False"
