"""`lint --kubernetes-version`: on a given release only what applies there, and
`--warnings-as-errors` for CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_dra.cli import main
from neuron_dra.tools.lint import Finding, lint_files

REPO = Path(__file__).resolve().parents[3]
SPECS = REPO / "examples" / "specs"
TOP = sorted(SPECS.glob("*.yaml"))  # as the docs run it: examples/specs/*.yaml


def said(findings: list[Finding]) -> list[tuple[str, bool, str]]:
    return [(Path(f.file).name, f.error, f.message) for f in findings]


def test_every_release_is_warned_of_when_none_is_given() -> None:
    findings = lint_files(TOP)
    assert not any(f.error for f in findings)
    about_releases = [f for f in findings if "Kubernetes 1.3" in f.message]
    assert len(about_releases) == 5, said(findings)


def test_a_release_serving_cores_and_extended_resources_hears_nothing_of_releases() -> None:
    findings = lint_files(TOP, release=(1, 37))
    assert not any("Kubernetes" in f.message for f in findings), said(findings)
    assert not any("NeuronCores, which the driver publishes" in f.message for f in findings)
    # What holds everywhere stays: the EFA class, the extended resources' missing constraint.
    assert sorted(Path(f.file).name for f in findings) == [
        "cores-and-efa.yaml",
        "device-plugin-style-neuron.yaml",
        "device-plugin-style-neuroncore.yaml",
        "efa-and-neuron.yaml",
    ]


def test_on_1_34_cores_never_come_and_extended_resources_are_the_plugins() -> None:
    by_file: dict[str, list[Finding]] = {}
    for finding in lint_files(TOP, release=(1, 34)):
        by_file.setdefault(Path(finding.file).name, []).append(finding)
    [core] = by_file["single-core.yaml"]
    assert core.error
    assert core.message.endswith("Kubernetes 1.34 never does: the claim stays pending")
    [plugin] = by_file["device-plugin-style-neuron.yaml"]
    assert not plugin.error
    assert "Kubernetes 1.34 does not serve extended resources from DRA drivers" in plugin.message


def test_on_1_35_cores_need_the_feature_gate() -> None:
    [finding] = lint_files([SPECS / "single-core.yaml"], release=(1, 35))
    assert not finding.error
    assert "Kubernetes 1.35 serves them only with the DRAPartitionableDevices" in finding.message


def test_a_beta_version_is_an_error_from_the_release_that_removes_it() -> None:
    beta = [SPECS / "v1beta1" / "xl-trn2.yaml"]
    [before] = lint_files(beta, release=(1, 37))
    [after] = lint_files(beta, release=(1, 38))
    assert (before.error, after.error) == (False, True)
    assert after.message.startswith("Kubernetes 1.38 no longer serves resource.k8s.io/v1beta1")


def test_the_command_takes_the_release_and_fails_on_warnings_if_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = [str(p) for p in TOP]
    assert main(["lint", *files]) == 0
    assert capsys.readouterr().out.strip().endswith("0 errors, 7 warnings")
    assert main(["lint", "--kubernetes-version", "1.37", *files]) == 0
    assert capsys.readouterr().out.strip().endswith("0 errors, 4 warnings")
    assert main(["lint", "--kubernetes-version", "1.37", "--warnings-as-errors", *files]) == 1
    clean = str(SPECS / "single-device.yaml")
    assert main(["lint", "--warnings-as-errors", clean]) == 0
    assert main(["lint", "--kubernetes-version", "1.2", clean]) == 2
    assert "the driver needs Kubernetes 1.34+" in capsys.readouterr().err
