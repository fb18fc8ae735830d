"""The docs' tables against what they describe: every chart value of values.yaml is in the
install page's table, every flag of `neuron-dra run` in the configuration page's, and every
chart value the docs name (in a table, in a `--set` of a helm command) is one the chart's
schema takes."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.cli import parser
from tests.doc_commands import PAGES, REPO, commands

CHART = REPO / "deploy/helm/neuron-dra"
OPERATORS = REPO / "docs/operators"
VALUES_TABLE = OPERATORS / "install.md"  # "Every value:"
VALUE_TABLES = (VALUES_TABLE, OPERATORS / "dashboards-and-alerts.md")
FLAG_TABLE = OPERATORS / "configuration.md"
MIGRATION = OPERATORS / "migration.md"
# The release every helm command of the docs installs this chart as ("..." in prose).
RELEASES = ("neuron-dra", "...")

_CODE = re.compile(r"`([^`]+)`")
_CELL_BORDER = re.compile(r"\|(?=(?:[^`]*`[^`]*`)*[^`]*$)")  # a | outside code spans


def schema() -> dict[str, Any]:
    found: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return found


def values() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return found


LABEL_SELECTOR = "#/$defs/labelSelector"


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """`node`, or the definition its local `$ref` names."""
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), f"only local references are read here: {ref}"
        node = schema()
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def leaves(value: Any, node: dict[str, Any], path: str = "") -> Iterator[str]:
    """The values one sets: values.yaml's paths down to a scalar, a list, or a map whose
    keys are the user's (the schema names no properties) or that is empty by default."""
    node = resolve(node)
    if isinstance(value, dict) and value and "properties" in node:
        for name, child in value.items():
            yield from leaves(child, node["properties"][name], f"{path}{name}.")
    else:
        yield path.removesuffix(".")


def schema_node(path: str) -> dict[str, Any] | None:
    """The schema's node for the value at `path`, unresolved (None: no such value, or a key
    inside a map of the user's)."""
    node: dict[str, Any] = {"properties": schema()["properties"]}
    for name in re.split(r"(?<!\\)\.", path):
        properties = resolve(node).get("properties", {})
        if name not in properties:
            return None
        node = properties[name]
    return node


def takes(path: str) -> bool:
    """Whether the schema takes a value at `path` (a map of the user's takes any key)."""
    node = schema()
    for name in re.split(r"(?<!\\)\.", path):
        node = resolve(node)
        if "properties" in node:
            if name not in node["properties"]:
                return False
            node = node["properties"][name]
        else:
            return node.get("type") == "object" and not node.get("properties")
    return True


def documents_inside(name: str) -> bool:
    """Whether a row naming `name` documents the values inside it too: a label selector,
    or a map whose keys are the user's."""
    node = schema_node(name)
    if node is None:
        return False
    if node.get("$ref") == LABEL_SELECTOR:
        return True
    node = resolve(node)
    return node.get("type") == "object" and not node.get("properties")


def undocumented(paths: Iterator[str] | list[str], documented: set[str]) -> list[str]:
    """The value paths no row names: by its own path, or inside a row's selector or map."""
    return [
        path
        for path in paths
        if path not in documented
        and not any(path.startswith(f"{name}.") and documents_inside(name) for name in documented)
    ]


def tables(page: Path, header: str) -> Iterator[list[str]]:
    """The cells of each row of every table of `page` whose first cell is `header`."""
    rows: list[str] = []
    for line in [*page.read_text().splitlines(), ""]:
        if line.startswith("|"):
            rows.append(line)
            continue
        if rows and cells(rows[0])[0] == header:
            yield from (cells(row) for row in rows[2:])
        rows = []


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in _CELL_BORDER.split(row.strip().strip("|"))]


def names(cell: str) -> list[str]:
    """The value paths of a table's first cell: `image.repository`, `.tag` (a sibling of
    the previous one), `a.{b,c}` (a.b and a.c)."""
    found: list[str] = []
    parent = ""
    for span in _CODE.findall(cell):
        name = parent + span if span.startswith(".") else span
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        if braces := re.fullmatch(r"(.*)\{([^}]*)\}", name):
            found += [braces[1] + part for part in braces[2].split(",")]
        else:
            found.append(name)
    return found


def documented_values(page: Path) -> list[str]:
    return [name for row in tables(page, "value") for name in names(row[0])]


def test_every_chart_value_is_in_the_values_table() -> None:
    documented = set(documented_values(VALUES_TABLE))
    missing = undocumented(leaves(values(), schema()), documented)
    assert not missing, f"{VALUES_TABLE.relative_to(REPO)} lacks rows for {missing}"


def test_a_row_naming_a_parent_does_not_document_its_values() -> None:
    """Only a label selector or a map of the user's keys covers what is inside it."""
    assert undocumented(["metrics.port", "metrics.enabled"], {"metrics"}) == [
        "metrics.port",
        "metrics.enabled",
    ]
    selector = "metrics.networkPolicy.namespaceSelector"
    assert schema_node(selector) == {"$ref": LABEL_SELECTOR}
    assert undocumented([f"{selector}.matchLabels"], {selector}) == []
    assert undocumented([f"{selector}.matchLabels"], {"metrics.networkPolicy"}) == [
        f"{selector}.matchLabels"
    ]
    assert takes(f"{selector}.matchLabels.team") and not takes(f"{selector}.matchLabelz")


@pytest.mark.parametrize("page", VALUE_TABLES, ids=lambda p: p.name)
def test_every_value_of_a_table_is_the_charts(page: Path) -> None:
    documented = documented_values(page)
    assert len(documented) >= 10, documented
    unknown = [name for name in documented if not takes(name)]
    assert not unknown, f"{page.relative_to(REPO)} names values the chart refuses: {unknown}"


def helm_set_values(text: str) -> Iterator[str]:
    """The value paths a helm install or upgrade of this chart sets in `text`."""
    argv = shlex.split(text)
    if argv[:2] not in (["helm", "install"], ["helm", "upgrade"]):
        return
    if argv[2] == "--install":
        argv.pop(2)
    if argv[2] not in RELEASES:
        return  # another chart (the AWS driver's)
    for flag, argument in itertools.pairwise(argv):
        if flag in ("--set", "--set-string", "--set-json", "--set-file"):
            for assignment in re.split(r"(?<!\\),", argument):
                yield assignment.split("=", 1)[0]


def helm_commands() -> Iterator[tuple[str, str]]:
    """Every helm command of the docs: in code blocks, and in prose's code spans."""
    for command in commands():
        yield str(command), command.text
    for page in PAGES:
        for span in _CODE.findall(page.read_text()):
            if span.startswith("helm "):
                yield f"{page.relative_to(REPO)}: {span}", span


def test_every_value_a_helm_command_sets_is_the_charts() -> None:
    checked = []
    for where, text in helm_commands():
        for path in helm_set_values(text):
            if not path.startswith("<"):
                assert takes(path), f"{where}: the chart has no value {path}"
                checked.append(path)
    assert len(checked) >= 6, checked


def test_no_upgrade_keeps_the_old_charts_defaults() -> None:
    """`--reuse-values` takes the old chart's defaults for the new chart's: a value the new
    chart adds is missing. `--reset-then-reuse-values` keeps only what the user set."""
    upgrades = [(w, t) for w, t in helm_commands() if t.startswith("helm upgrade")]
    assert len(upgrades) >= 3, upgrades
    for where, text in upgrades:
        assert "--reuse-values" not in shlex.split(text), where


def test_the_migration_tables_values_are_the_charts() -> None:
    """The rows that map the AWS chart's values to this chart's: what the last column
    names (outside its parentheses) is a value of this chart."""
    rows = [row for row in tables(MIGRATION, "") if "`draDriver." in row[1]]
    assert len(rows) >= 4, rows
    for row in rows:
        ours = _CODE.findall(re.sub(r"\([^)]*\)", "", row[2]))
        for name in ours:
            assert takes(name.removesuffix(".*")), f"{MIGRATION.name}: {row[0]}: no value {name}"


def run_flags() -> set[str]:
    """`neuron-dra run`'s flags, and the global ones it is started with."""
    command_line = parser(only_run=True)
    [commands_action] = [
        a for a in command_line._actions if isinstance(a, argparse._SubParsersAction)
    ]
    run = commands_action.choices["run"]
    found = {o for a in [*run._actions, *command_line._actions] for o in a.option_strings}
    return found - {"-h", "--help", "--version"}


def test_every_run_flag_is_in_the_flag_table() -> None:
    documented = {
        span
        for row in tables(FLAG_TABLE, "flag")
        for span in _CODE.findall(row[0])
        if span.startswith("--")
    }
    assert run_flags() - documented == set(), f"{FLAG_TABLE.relative_to(REPO)} lacks rows"
    assert documented - run_flags() == set(), "the table names flags `run` does not take"


def test_the_chart_readme_is_generated_from_the_values_table() -> None:
    """deploy/helm/neuron-dra/README.md is scripts/chart_readme.py's output: the table
    checked above, as the chart carries it."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/chart_readme.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    readme = (REPO / "deploy/helm/neuron-dra/README.md").read_text()
    assert "| `serviceAccount.create`, `.name`, `.annotations` |" in readme
