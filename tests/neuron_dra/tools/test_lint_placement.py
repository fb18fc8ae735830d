"""Lint knows the placement attributes: network layers from the Node, PCI placement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.tools.lint import Finding, lint_files
from neuron_dra.tools.published import node_specific, published

Json = dict[str, Any]
OWN = "device.attributes['neuron.aws.com']"
STANDARD = "device.attributes['resource.kubernetes.io']"


def lint_selector(tmp_path: Path, expression: str) -> list[Finding]:
    request = {
        "name": "neurons",
        "exactly": {
            "deviceClassName": "neuron.aws.com",
            "count": 1,
            "selectors": [{"cel": {"expression": expression}}],
        },
    }
    spec = {"spec": {"devices": {"requests": [request]}}}
    doc = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": spec,
    }
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(doc))
    return lint_files([path])


def test_every_layer_and_the_pci_placement_are_known_names() -> None:
    names = published().names
    assert {f"networkNodeLayer{n}" for n in (1, 2, 3, 4)} <= names["neuron.aws.com"]
    assert {"pcieRoot", "numaNode"} <= names["resource.kubernetes.io"]
    # Every instance type carries them: they come from the Node and the PCI bus, not the type.
    for instance_type, by_domain in published().names_by_type.items():
        assert "networkNodeLayer3" in by_domain["neuron.aws.com"], instance_type
        assert "pcieRoot" in by_domain["resource.kubernetes.io"], instance_type


@pytest.mark.parametrize(
    "expression",
    [
        f"{OWN}.networkNodeLayer3 == 'nn-0123456789abcdef0'",
        f"{OWN}.networkNodeLayer4 == 'nn-4' && {OWN}.instanceType == 'trn2.48xlarge'",
        f"{STANDARD}.pcieRoot == 'pci0000:00'",
        f"{STANDARD}.numaNode == 7",
    ],
)
def test_a_node_specific_value_is_not_said_to_match_nothing(
    tmp_path: Path, expression: str
) -> None:
    findings = lint_selector(tmp_path, expression)
    assert [f for f in findings if f.error] == []
    [warning] = findings
    assert "values each node publishes for itself" in warning.message
    assert "no device of any Neuron instance type" not in warning.message


def test_a_misspelt_layer_is_an_error_with_the_right_name(tmp_path: Path) -> None:
    [finding] = lint_selector(tmp_path, f"{OWN}.networkNodeLayer5 == 'nn-5'")
    assert finding.error
    assert "networkNodeLayer5 is never published" in finding.message
    assert "did you mean 'networkNodeLayer4'?" in finding.message


def test_a_layer_only_asked_to_exist_matches_every_type(tmp_path: Path) -> None:
    assert lint_selector(tmp_path, f"has({OWN}.networkNodeLayer3)") == []


def test_only_node_specific_attributes_are_node_specific() -> None:
    assert node_specific([f"{OWN}.networkNodeLayer1 == 'a'"])
    assert not node_specific([f"{OWN}.instanceType == 'trn2.48xlarge'"])
    assert not node_specific(["this is not CEL ("])
