"""The docs say what the code does: every setting, connection, `groupscope` subcommand and
option, DAG, built-in alert rule and `./run` option is documented where a reader looks for it,
nothing documented is gone from the code, and every relative link resolves inside the
repository. Pure and fast: the code is read (parsers, settings, rules, the DAG files' syntax),
no service is started.

Each failure names what is missing and the file (and table) to add it to."""

from __future__ import annotations

import argparse
import ast
import re
import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from groupscope.cli import build_parser
from groupscope.serve.alerting.rules import builtin_rules
from groupscope.settings import Settings, env_name
from groupscope_dev.__main__ import build_parser as build_stack_parser
from groupscope_dev.cli_reference import DOC as CLI_DOC
from groupscope_dev.cli_reference import generated_part, render
from groupscope_dev.runstatus import GroupNow, Sent, render_groups, render_notification

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
ARCHITECTURE = DOCS / "architecture.md"
ALERTS = DOCS / "alerts.md"
GETTING_STARTED = DOCS / "getting-started.md"
INDEX = DOCS / "index.md"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def table_rows(path: Path, heading: str, first_header: str) -> list[list[str]]:
    """The rows of the first table under ``heading`` (up to the next heading of its level or
    above) whose header's first cell is ``first_header``: each row a list of its cells."""
    text = path.read_text()
    level = heading.split(" ", 1)[0]
    match = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{len(level)}}} |\Z)", text,
                      re.M | re.S)
    assert match, f"{_rel(path)} has no section {heading!r}"
    rows: list[list[str]] = []
    in_table = False
    for line in match.group(1).splitlines():
        if not line.startswith("|"):
            if rows:
                break  # the first table so headed only
            in_table = False
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells[0] == first_header:
            in_table = True
        elif in_table and not set(cells[0]) <= set("-:"):
            rows.append(cells)
    assert rows, f"{_rel(path)}, section {heading!r}: no table headed {first_header!r}"
    return rows


def code_names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# -- settings and connections: docs/configuration.md ---------------------------------------------
def documented_default(name: str) -> str:
    """How the configuration table writes a setting's default."""
    field = Settings.model_fields[name]
    default = field.default
    if default is None or default == "":
        return "unset"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


def settings_table() -> dict[str, str]:
    rows = table_rows(CONFIGURATION, "## Settings", "variable")
    return {code_names(row[0])[0]: row[1] for row in rows}


def test_every_setting_is_in_the_configuration_table_with_its_default() -> None:
    table = settings_table()
    for name, field in Settings.model_fields.items():
        variable = env_name(name)
        assert variable in table, (
            f"setting {name} ({variable}) is not documented: add a row `{variable}` | its "
            f"default | what it sets to the table of {_rel(CONFIGURATION)}, '## Settings'")
        shown = table[variable]
        if field.default_factory is not None:
            # A default computed from the environment (a home folder): the cell names it.
            made = Path(str(field.default_factory()))  # type: ignore[call-arg]
            assert made.name in shown, (
                f"{variable}'s default ends in {made.name!r}, but {_rel(CONFIGURATION)} says "
                f"{shown!r}")
        else:
            want = documented_default(name)
            assert shown == want or shown.startswith(want + " "), (
                f"{variable}'s default is {want}, but {_rel(CONFIGURATION)}, '## Settings', "
                f"says {shown!r}: correct that row")


def test_every_row_of_the_configuration_table_is_a_setting() -> None:
    variables = {env_name(name) for name in Settings.model_fields}
    for documented in settings_table():
        assert documented in variables, (
            f"{_rel(CONFIGURATION)}, '## Settings', documents {documented}, which "
            "groupscope.settings.Settings does not have: remove the row, or add the setting "
            "(other variables go in the table below it)")


def connection_ids() -> set[str]:
    """Every Airflow connection id the code uses: the settings' defaults, the warehouse's (a
    constant of the Airflow plugin, read without importing Airflow) and the built-in alert
    channels'."""
    plugin = (ROOT / "plugins" / "groupscope_airflow.py").read_text()
    warehouse = re.search(r'^WAREHOUSE_CONN_ID = "([\w-]+)"', plugin, re.M)
    assert warehouse, "plugins/groupscope_airflow.py has no WAREHOUSE_CONN_ID"
    fields = Settings.model_fields
    return {"kafka_<cluster>", warehouse.group(1), str(fields["spark_conn_id"].default),
            str(fields["spark_connect_conn_id"].default),
            *(channel.connection for channel in builtin_rules().channels)}


def test_every_connection_is_in_the_connections_table() -> None:
    rows = table_rows(CONFIGURATION, "## Connections", "connection id")
    documented = {code_names(row[0])[0] for row in rows}
    missing = connection_ids() - documented
    assert not missing, (
        f"connections the code uses but {_rel(CONFIGURATION)}, '## Connections', does not "
        f"list: {sorted(missing)}: add a row (id | type | what | needed) for each")
    gone = documented - connection_ids()
    assert not gone, (f"{_rel(CONFIGURATION)}, '## Connections', lists {sorted(gone)}, which "
                      "the code does not use: remove them")


# -- the groupscope command: docs/cli.md ---------------------------------------------------------
def test_the_cli_reference_is_what_the_parser_says() -> None:
    committed = generated_part(CLI_DOC.read_text())
    assert committed == render(build_parser()).removesuffix("\n"), (
        f"{_rel(CLI_DOC)}'s reference differs from the `groupscope` parser (a subcommand or "
        "option added, changed or removed): regenerate it with "
        "`PYTHONPATH=src:dev .venv/bin/python -m groupscope_dev.cli_reference` and commit it")


def test_the_cli_reference_names_every_subcommand_and_option() -> None:
    # What the generated reference must hold, said independently of how it is rendered.
    text = CLI_DOC.read_text()

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.option_strings and "--help" not in action.option_strings:
                assert f"### `{path}`" in text, f"{_rel(CLI_DOC)} has no section for `{path}`"
                section = text.split(f"### `{path}`\n", 1)[1].split("\n### ", 1)[0]
                assert f"`{action.option_strings[-1]}" in section or \
                    f", {action.option_strings[-1]}" in section, (
                        f"`{path} {action.option_strings[-1]}` is not in {_rel(CLI_DOC)}")

    walk(build_parser(), "groupscope")


# -- the DAGs: docs/architecture.md --------------------------------------------------------------
def dag_ids() -> dict[str, str]:
    """Every DAG id of dags/ (``{cluster}`` written ``<cluster>``), and the file defining it:
    read from the ``dag_id=`` arguments, without importing Airflow."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "dags").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "dag_id":
                parts = [p.value if isinstance(p, ast.Constant) else f"<{ast.unparse(p.value)}>"
                         for p in (node.value.values if isinstance(node.value, ast.JoinedStr)
                                   else [node.value])
                         if isinstance(p, ast.Constant | ast.FormattedValue)]
                found["".join(str(p) for p in parts)] = path.name
    assert found, "no dag_id in dags/"
    return found


def test_every_dag_is_in_the_dag_table() -> None:
    documented = {code_names(row[0])[0]
                  for row in table_rows(ARCHITECTURE, "## The DAGs", "DAG")}
    for dag, file in dag_ids().items():
        assert dag in documented, (
            f"DAG `{dag}` (dags/{file}) is not documented: add a row `{dag}` | schedule | "
            f"tasks to the table of {_rel(ARCHITECTURE)}, '## The DAGs'")
    gone = documented - set(dag_ids())
    assert not gone, f"{_rel(ARCHITECTURE)}, '## The DAGs', lists DAGs dags/ lacks: {gone}"


def test_the_number_of_dags_is_said_right() -> None:
    count = len(dag_ids())
    words = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}
    for path in (ROOT / "README.md", ARCHITECTURE):
        text = path.read_text().lower()
        said = set(re.findall(r"\b(\w+) dags per watched cluster|own (\w+) dags", text))
        said = {word for pair in said for word in pair if word}
        assert said <= {words.get(count, str(count)), str(count)}, (
            f"{_rel(path)} says {said} DAGs per watched cluster; dags/ defines {count}")


# -- the built-in alert rules: docs/alerts.md ----------------------------------------------------
def shown_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def test_every_builtin_rule_is_in_the_alerts_doc() -> None:
    rows = {code_names(row[0])[0]: row
            for row in table_rows(ALERTS, "### Built-in rules", "rule")}
    for rule in builtin_rules().rules:
        assert rule.name in rows, (
            f"built-in rule {rule.name} (serve/alerting/default_rules.yaml) is not documented: "
            f"add a row to the table of {_rel(ALERTS)}, '### Built-in rules'")
        _, condition, severity, threshold, for_, _runbook = rows[rule.name]
        want = (rule.condition, rule.severity, f"{rule.threshold:g}", shown_duration(rule.for_))
        got = (code_names(condition)[0], severity, threshold, for_)
        assert got == want, (f"{_rel(ALERTS)}, '### Built-in rules', row {rule.name}: "
                             f"(condition, severity, threshold, for) is {got}, the rule {want}")
    gone = set(rows) - {rule.name for rule in builtin_rules().rules}
    assert not gone, f"{_rel(ALERTS)} documents built-in rules that do not exist: {gone}"


# -- ./run: docs/getting-started.md --------------------------------------------------------------
def run_parser() -> argparse.ArgumentParser:
    stack = build_stack_parser()
    action = next(a for a in stack._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = action.choices["run"]
    return parser


def test_every_run_option_is_in_getting_started() -> None:
    rows = table_rows(GETTING_STARTED, "## Options", "option")
    documented = {name.split()[0] for row in rows for name in code_names(row[0])}
    for action in run_parser()._actions:
        option = action.option_strings[-1] if action.option_strings else None
        if option is None or option == "--help":
            continue
        assert option in documented, (
            f"./run option {option} is not documented: add it to the table of "
            f"{_rel(GETTING_STARTED)}, '## Options'")


# -- links ---------------------------------------------------------------------------------------
def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    kept = "".join(c for c in text.lower()
                   if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def prose(path: Path) -> str:
    """The text without its fenced code blocks (no link lives there)."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", prose(path), re.M):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def links(path: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", prose(path))


@pytest.mark.parametrize("doc", documents(), ids=lambda p: _rel(p))
def test_every_relative_link_resolves(doc: Path) -> None:
    for link in links(doc):
        if re.match(r"^[a-z]+:", link):
            continue  # http(s), mailto: outside by design, not checked here
        target_text, _, anchor = link.partition("#")
        target = (doc.parent / target_text).resolve() if target_text else doc
        assert target.is_relative_to(ROOT), (
            f"{_rel(doc)} links to {link}, outside the repository")
        assert target.exists(), f"{_rel(doc)} links to {link}, which does not exist"
        if anchor and target.suffix == ".md":
            assert anchor in anchors(target), (
                f"{_rel(doc)} links to {link}: {_rel(target)} has no heading whose anchor is "
                f"#{anchor} (its anchors: {sorted(anchors(target))})")


def test_no_document_points_outside_the_repository() -> None:
    for doc in documents():
        text = doc.read_text()
        for outside in ("../shared", "DESIGN.md"):
            assert outside not in text, f"{_rel(doc)} mentions {outside}, not in the repository"


def test_the_index_lists_every_page() -> None:
    listed = {link.partition("#")[0] for link in links(INDEX)}
    for page in sorted(DOCS.glob("*.md")):
        if page != INDEX:
            assert page.name in listed, f"{_rel(page)} is not linked from {_rel(INDEX)}"
    assert "docs/index.md" in {link.partition("#")[0] for link in links(ROOT / "README.md")}


def test_the_readme_stays_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 220, (f"README.md has {lines} lines: keep it to the user's first tasks "
                          "and move the rest to docs/ (about 200 lines)")


# -- the README's excerpt of ./run: what the code prints -----------------------------------------
def test_the_readme_excerpt_is_what_run_prints() -> None:
    """The group table and the notification line of the README are rendered by the code that
    prints them under ./run, from the rows they show (its figures are an example; its form is
    not)."""
    at = datetime(2026, 11, 26, 10, 53, 30, tzinfo=UTC)
    five_before = datetime(2026, 11, 26, 10, 52, 18, tzinfo=UTC)

    def group(group_id: str, **fields: object) -> GroupNow:
        values: dict[str, object] = {"snapshot_ts": at, "state": "Stable", "status": "OK",
                                     "time_lag_exact": True}
        return GroupNow(group_id=group_id, **(values | fields))  # type: ignore[arg-type]

    table = render_groups([
        group("demo-empty", state="Empty", members=0, partitions=4, lag=0, time_lag_s=0.0,
              empty_since=datetime(2026, 11, 26, 10, 50, 2, tzinfo=UTC)),
        group("demo-range", members=3, partitions=12, lag=30, time_lag_s=1.0),
        group("demo-roundrobin", state="Empty", members=0, partitions=10, lag=2905,
              time_lag_s=73.0, time_lag_exact=False, status="ERR", stop_partitions=10,
              behind=10, earlier_lag=37, earlier_ts=five_before,
              empty_since=datetime(2026, 11, 26, 10, 52, 52, tzinfo=UTC)),
        group("demo-slow", members=1, partitions=4, lag=1089, time_lag_s=54.0,
              time_lag_exact=False, status="WARN", warn_partitions=4, behind=4,
              earlier_lag=10, earlier_ts=five_before),
    ])
    fired = render_notification(
        Sent("i1", "firing", datetime(2026, 11, 26, 10, 53, 2, tzinfo=UTC), "demo-roundrobin",
             "local", "STOPPED", (("email", "sent", None), ("webhook", "sent", None))),
        {"email": "dev/.stack/mail/", "webhook": "dev/.stack/webhook/webhook.log"})
    for doc in (ROOT / "README.md", GETTING_STARTED):
        shown = doc.read_text()
        for line in [fired, *table.splitlines()]:
            assert f"\n{line}\n" in shown, (
                f"{_rel(doc)}'s excerpt of ./run lacks, as groupscope_dev.runstatus prints "
                f"it:\n{line}")


@pytest.mark.parametrize("doc", [ROOT / "README.md", GETTING_STARTED], ids=_rel)
def test_the_demo_timeline_shown_is_the_one_run_plays(doc: Path) -> None:
    from groupscope_dev.demo import Demo

    played = Demo("127.0.0.1:9092", ROOT).describe()
    assert played in doc.read_text(), (
        f"{_rel(doc)}: the demo timeline block is not what ./run prints; replace it with the "
        f"output of Demo(...).describe() (dev/groupscope_dev/demo.py):\n{played}")
