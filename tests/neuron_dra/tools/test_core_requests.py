"""Device-plugin-style NeuronCore requests that no allowed type serves on DRA nodes:
`lint` warns of them as the chart's policy refuses them (the same cases run against
the policy on a real API server in tests/e2e/test_core_request_policy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from consts import LABEL_INSTANCE_TYPE
from neuron_dra.tools.core_requests import allowed_types, asked, mismatch, served
from neuron_dra.tools.lint import lint_document
from neuron_dra.tools.simulate import default_classes

CORES = "aws.amazon.com/neuroncore"


def spec(*asks: str, init: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "resources": {"limits": {CORES: n}}} for i, n in enumerate(asks)
        ],
        **extra,
    }
    if init is not None:
        body["initContainers"] = [{"name": "init", "resources": {"limits": {CORES: init}}}]
    return body


def on(instance_type: str) -> dict[str, Any]:
    return {"nodeSelector": {LABEL_INSTANCE_TYPE: instance_type}}


def affinity(operator: str, *types: str) -> dict[str, Any]:
    expression = {"key": LABEL_INSTANCE_TYPE, "operator": operator, "values": list(types)}
    terms = [{"matchExpressions": [expression]}]
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    return {"affinity": {"nodeAffinity": required}}


def test_a_trn2_3xlarge_serves_its_logical_cores() -> None:
    assert served()["trn2.3xlarge"] == 4 and served(lnc=1)["trn2.3xlarge"] == 8
    assert served()["trn2.48xlarge"] == 32  # 64 logical, but one claim holds 32
    assert served()["inf2.xlarge"] == 2  # no LNC: physical cores


def test_eight_cores_on_a_trn2_3xlarge() -> None:
    assert mismatch(spec("8", **on("trn2.3xlarge"))) == (
        "aws.amazon.com/neuroncore: 8 is more than DRA nodes of trn2.3xlarge serve (at most 4 "
        "logical NeuronCores at LNC 2, 32 a pod); Karpenter counts aws.amazon.com/neuroncore "
        "in physical NeuronCores (8 on it) and would launch a node that never runs the pod; "
        "the chart's core-request policy refuses it at creation"
    )
    assert mismatch(spec("8", **on("trn2.3xlarge")), lnc=1) is None
    assert mismatch(spec("4", **on("trn2.3xlarge"))) is None


@pytest.mark.parametrize(
    ("body", "most"),
    [
        (spec("4", "4", **on("trn2.3xlarge")), 4),
        (spec("1", init="8", **on("trn2.3xlarge")), 4),
        (spec("33"), 32),
        (spec("8", **affinity("In", "trn2.3xlarge", "inf2.xlarge")), 4),
        (spec("33", **affinity("NotIn", "trn2.3xlarge")), 32),
    ],
    ids=["two-containers", "init-container", "any-type", "affinity-in", "affinity-not-in"],
)
def test_what_no_allowed_type_serves(body: dict[str, Any], most: int) -> None:
    assert asked(body) > most
    why = mismatch(body)
    assert why is not None and f"(at most {most} logical NeuronCores" in why


def test_unknown_types_and_no_cores_are_let_through() -> None:
    assert allowed_types(on("p5.48xlarge")) == []
    assert mismatch(spec("8", **on("p5.48xlarge"))) is None
    assert mismatch({"containers": [{"name": "c"}]}) is None
    assert mismatch(spec("8", **affinity("In", "trn2.3xlarge", "trn2.48xlarge"))) is None


def test_lint_warns_once_per_pod() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": spec("8", **on("trn2.3xlarge")),
    }
    found = [
        f.message for f in lint_document("pod.yaml", pod, {c.name: c for c in default_classes()})
    ]
    assert sum("more than DRA nodes of trn2.3xlarge serve" in m for m in found) == 1, found
