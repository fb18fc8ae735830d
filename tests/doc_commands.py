"""The commands in the docs' code blocks, and the test that runs each.

Every ```sh block of the README, CONTRIBUTING, `docs/` and the examples' README is read
line by line (a trailing backslash continues a line; comments are dropped).
A command runs in the test its program names (`runner`): the offline ones in
`tests/test_docs.py`, the others against a real API server in the end-to-end
test that has what they need installed. `<placeholders>` are filled in by the
test that runs the command (`fill`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = (
    REPO / "README.md",
    REPO / "CONTRIBUTING.md",
    *sorted((REPO / "docs").rglob("*.md")),
    REPO / "examples/specs/README.md",
)
_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)

OFFLINE = "tests/test_docs.py::test_the_offline_commands_run"
MAKE = "tests/test_docs.py::test_the_make_targets_exist"
CLUSTER = "tests/e2e/test_install.py::test_the_documented_cluster_commands_run"
SCRIPT = "tests/e2e/test_install.py::test_the_documented_script_commands_run"
HELM = "tests/e2e/test_helm.py::test_the_documented_helm_commands_run"
# `helm test` runs a pod that needs a device, and `kubectl exec` a running container:
# on the real node only.
HELM_TEST = "tests/e2e/test_realnode.py::test_the_helm_chart_installs_the_same_driver"
EXEC = "tests/e2e/test_realnode.py::test_the_documented_exec_commands_run_in_the_plugin_pod"
DOCTOR = "tests/e2e/test_realnode.py::test_doctor_in_the_plugin_pod_on_a_sound_node"
RELEASE = "tests/e2e/test_release.py::test_the_documented_release_commands_run"
IMAGE = "tests/test_docs.py::test_the_image_build_command_is_the_one_the_real_node_runs"
PROMTOOL = "tests/e2e/test_monitoring.py::test_the_documented_promtool_commands_run"
VERIFY = "tests/test_release_workflow.py::test_the_verification_commands_match_the_signer"
ATTESTED = "tests/test_release_supply_chain.py::test_the_attestation_commands_name_what_is_attested"
HARNESS = "tests/test_harness_standins.py::test_the_documented_harness_commands_run"


@dataclass(frozen=True)
class DocCommand:
    page: str  # relative to the repository
    line: int
    text: str  # continuation lines joined, the comment dropped

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def commands(pages: tuple[Path, ...] = PAGES) -> list[DocCommand]:
    found = []
    for page in pages:
        text = page.read_text()
        for block in _BLOCK.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            pending, start = "", 0
            for offset, raw in enumerate(block.group(1).splitlines()):
                line = raw.strip()
                if not pending:
                    start = first + offset
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                joined = " ".join(shlex.split(pending + line, comments=True))
                pending = ""
                if joined:
                    name = page.relative_to(REPO) if page.is_relative_to(REPO) else page
                    found.append(DocCommand(str(name), start, joined))
    return found


def runner(command: DocCommand) -> str:
    """The test that runs `command` (ValueError: none does)."""
    argv = command.argv
    program = argv[1] if argv[0] == "sudo" else argv[0]
    if program == "make":
        return MAKE
    if program == "neuron-dra" or argv[:2] == ["source", "<(neuron-dra"]:
        return CLUSTER if "--kubeconfig" in argv else OFFLINE
    if program == "kubectl":
        if argv[1] != "exec":
            return CLUSTER
        return DOCTOR if "doctor" in argv else EXEC
    if program == "helm":
        return HELM_TEST if argv[1] == "test" else HELM
    if program == "scripts/install-dra-driver.sh":
        return SCRIPT
    if program in ("scripts/release.sh", "cd"):
        return RELEASE
    if program == "scripts/build-image.sh":
        return IMAGE
    if program == "promtool":
        return PROMTOOL
    if program == "cosign":
        return VERIFY
    if argv[:3] == ["gh", "attestation", "verify"]:
        return ATTESTED
    if program.endswith("/python") and argv[1:3] == ["-m", "neuron_dra_harness.build"]:
        return HARNESS
    raise ValueError(f"{command}: no test runs {program!r}")


def run_by(test: str) -> list[DocCommand]:
    return [c for c in commands() if runner(c) == test]


def fill(text: str, **values: str) -> str:
    """`text` with each `<name>` replaced by values[name] (KeyError: not given)."""
    return re.sub(r"<([\w-]+)>", lambda m: values[m.group(1).replace("-", "_")], text)
