"""The import contracts in pyproject.toml catch what they promise to catch.

Each case adds one import that breaks a layer to a copy of the packages and
runs `lint-imports` on the copy: a contract that no longer matches the tree (a
package renamed, a layer misspelt) would let it pass.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# Contracts by the words before the colon in their names.
LAYERS, TOOLS, CEL, SIMULATOR = "Driver layers", "Tools", "CEL", "Simulator"
PACKAGES, HARDWARE, AGENT, ROOMS = "Packages", "Hardware", "Agent", "Agent rooms"
CLIENT, DOCTOR = "Agent client", "Doctor"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, check=False
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for package in ("neuron_dra", "api", "consts"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout
    assert ", 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        (
            "neuron_dra/hardware/topology.py",
            "import neuron_dra.resources.slices",
            [LAYERS, HARDWARE],
        ),
        ("neuron_dra/hardware/efa.py", "import api.config", [HARDWARE]),
        ("neuron_dra/resources/limits.py", "import neuron_dra.agent.apiclient.kube", [LAYERS]),
        # lint reaches the agent's claim plan through the simulator: up the rooms too.
        (
            "neuron_dra/agent/files/dirs.py",
            "from neuron_dra.tools import lint",
            [LAYERS, ROOMS, AGENT],
        ),
        ("neuron_dra/agent/claims/cdi.py", "import celpy", [AGENT]),
        # Only the kubeconfig loader may reach the kubernetes package (for exec plugins).
        ("neuron_dra/agent/slices/publisher.py", "import kubernetes.client", [CLIENT]),
        ("neuron_dra/agent/apiclient/kube.py", "import aiohttp", [CLIENT]),
        ("neuron_dra/tools/lint.py", "import neuron_dra.cli", [LAYERS, TOOLS]),  # via cli.tools
        ("neuron_dra/tools/picture.py", "from neuron_dra.tools import lint", [TOOLS]),
        ("neuron_dra/tools/doctor/verdicts.py", "from neuron_dra.tools import lint", [DOCTOR]),
        ("neuron_dra/tools/doctor/nodechecks.py", "import celpy", [DOCTOR]),
        ("neuron_dra/tools/cel/device.py", "from neuron_dra.tools.cel import fast", [CEL]),
        (
            "neuron_dra/tools/simulate/nodes.py",
            "import neuron_dra.tools.simulate.search",
            [SIMULATOR],
        ),
        ("api/config.py", "import neuron_dra.agent.claims.plan", [PACKAGES]),
        # The agent's rooms: siblings apart, nothing up.
        ("neuron_dra/agent/claims/cdi.py", "import neuron_dra.agent.slices.leader", [ROOMS]),
        ("neuron_dra/agent/telemetry/health.py", "import neuron_dra.agent.apiclient.kube", [ROOMS]),
        (
            "neuron_dra/agent/apiclient/kube.py",
            "import neuron_dra.agent.telemetry.metrics",
            [ROOMS],
        ),
        ("neuron_dra/agent/files/dirs.py", "import neuron_dra.agent.node", [ROOMS]),
        # The decoded objects sit below every room that reads them.
        ("neuron_dra/agent/objects/claim.py", "import neuron_dra.agent.apiclient.kube", [ROOMS]),
    ],
)
def test_an_upward_import_breaks_its_contract(
    tree: Path, module: str, added: str, broken: list[str]
) -> None:
    with (tree / module).open("a") as source:
        source.write(f"\n{added}\n")
    result = lint_imports(tree)
    assert result.returncode == 1
    # "<name>: <description> BROKEN", with " (n ignored imports)" after it for some.
    found = [line.split(":")[0] for line in result.stdout.splitlines() if " BROKEN" in line]
    assert found == broken
    assert f"{module.removesuffix('.py').replace('/', '.')} -> " in result.stdout


def test_no_module_imports_another_modules_private_name() -> None:
    """What two modules share is public in the one that defines it: in the driver's
    packages and in the harness that builds and runs it."""
    ours = ("neuron_dra", "api", "consts", "neuron_dra_harness")
    folders = [REPO / "neuron_dra", REPO / "api", REPO / "consts", REPO / "harness"]
    found = []
    for path in sorted(p for folder in folders for p in folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ours:
                names = [a.name for a in node.names if a.name.startswith("_")]
                found += [f"{path.relative_to(REPO)}: {node.module}.{n}" for n in names]
    assert found == []
