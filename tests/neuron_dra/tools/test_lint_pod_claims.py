"""`lint` on containers naming two sources of NEURON_RT_VISIBLE_CORES, and its counted nouns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.tools.lint import Finding, lint_files

Json = dict[str, Any]
NEURON_DEVICE = "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'"


def template(name: str, device_class: str = "neuron.aws.com", requests: int = 1) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": f"r{i}",
                            "exactly": {
                                "deviceClassName": device_class,
                                "count": 1,
                                "selectors": [{"cel": {"expression": NEURON_DEVICE}}],
                            },
                        }
                        for i in range(requests)
                    ]
                }
            }
        },
    }


def pod(claims: list[Json], entries: list[tuple[str, str]], kind: str = "Pod") -> Json:
    spec = {
        "containers": [{"name": "c", "image": "x", "resources": {"claims": claims}}],
        "resourceClaims": [{"name": n, "resourceClaimTemplateName": t} for n, t in entries],
    }
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": spec}},
    }


def lint_docs(tmp_path: Path, *docs: Json) -> list[Finding]:
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return lint_files([path])


def cores_warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if "NEURON_RT_VISIBLE_CORES" in f.message]


@pytest.mark.parametrize("kind", ["Pod", "Deployment"])
def test_a_container_naming_two_neuron_claims_is_warned(tmp_path: Path, kind: str) -> None:
    docs = [
        template("a"),
        template("b"),
        pod([{"name": "x"}, {"name": "y"}], [("x", "a"), ("y", "b")], kind),
    ]
    [finding] = cores_warnings(lint_docs(tmp_path, *docs))
    lines = (tmp_path / "docs.yaml").read_text().splitlines()
    assert not finding.error
    assert finding.line == len(lines) - lines[::-1].index("---") + 1  # the pod's first line
    assert finding.where.startswith(f"{kind} p: ") and finding.where.endswith("container c")
    assert finding.message.startswith(
        "names claim x and claim y, each of which the driver gives its own "
        "NEURON_RT_VISIBLE_CORES: the container gets the devices of all of them but the "
        "runtime keeps one value"
    )


def test_a_container_naming_two_requests_of_one_claim_is_warned(tmp_path: Path) -> None:
    requests = [{"name": "x", "request": "r0"}, {"name": "x", "request": "r1"}]
    docs = [template("a", requests=2), pod(requests, [("x", "a")])]
    [finding] = cores_warnings(lint_docs(tmp_path, *docs))
    assert finding.message.startswith("names request r0 of claim x and request r1 of claim x")


@pytest.mark.parametrize(
    "claims",
    [
        [{"name": "x"}],  # one claim
        [{"name": "x"}, {"name": "x", "request": "r0"}],  # the whole claim covers its request
        [{"name": "x"}, {"name": "other"}],  # the other claim is of another driver
        [{"name": "x"}, {"name": "elsewhere"}],  # the other claim is not among the inputs
    ],
    ids=["one", "whole-and-request", "other-driver", "unknown"],
)
def test_one_source_of_the_cores_is_not_warned(tmp_path: Path, claims: list[Json]) -> None:
    other_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
    }
    docs = [
        other_class,
        template("a", requests=2),
        template("g", "gpu.example.com"),
        pod(claims, [("x", "a"), ("other", "g"), ("elsewhere", "not-in-the-inputs")]),
    ]
    assert cores_warnings(lint_docs(tmp_path, *docs)) == []


def test_counts_of_one_read_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pinned = "device.attributes['neuron.aws.com'].instanceType == 'trn2.3xlarge'"
    claim = template("a")
    request = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    request["count"] = 2
    request["selectors"] = [{"cel": {"expression": pinned}}]
    plugin_pod = pod([], [])
    plugin_pod["spec"]["containers"][0]["resources"] = {"limits": {"aws.amazon.com/neuron": 1}}
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump_all([claim, plugin_pod]))
    assert cli.main(["lint", str(path)]) == 1
    out = capsys.readouterr().out
    assert "count 2: trn2.3xlarge has only 1 device\n" in out
    assert "any 1 device of the node" in out
    assert out.endswith("\n1 error, 1 warning\n")
