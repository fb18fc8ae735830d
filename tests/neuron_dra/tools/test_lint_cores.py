"""Lint of requests for NeuronCores: where they are published, LNC, counts, the classes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.tools.lint import Finding, lint_files
from neuron_dra.tools.published import published

Json = dict[str, Any]
CORES = "neuroncore.neuron.aws.com"
DEVICE_ID = "neuron.aws.com/deviceId"
NOTE = (
    "request cores asks for NeuronCores, which the driver publishes only where the API server "
    "serves partitionable devices (Kubernetes 1.36+ by default, 1.35 with the "
    "DRAPartitionableDevices feature gate, not 1.34); elsewhere the claim stays pending"
)
HEAD = f"with matchAttribute {DEVICE_ID}: the cores must all be of one Neuron device"


def claim(
    count: int,
    *selectors: str,
    device_class: str = CORES,
    match: str | None = None,
    lnc: int | None = None,
    name: str = "cores",
) -> Json:
    exactly: Json = {
        "deviceClassName": device_class,
        "count": count,
        "selectors": [{"cel": {"expression": e}} for e in selectors],
    }
    devices: Json = {"requests": [{"name": name, "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"requests": [name], "matchAttribute": match}]
    if lnc is not None:
        devices["config"] = [
            {
                "requests": [name],
                "opaque": {
                    "driver": "neuron.aws.com",
                    "parameters": {
                        "apiVersion": "neuron.aws.com/v1",
                        "kind": "NeuronConfig",
                        "logicalNeuronCore": lnc,
                    },
                },
            }
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": devices}},
    }


def lint(tmp_path: Path, *docs: Json, instance_types: Sequence[str] = ()) -> list[Finding]:
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return lint_files([path], instance_types)


def found(findings: list[Finding]) -> list[tuple[bool, str, str]]:
    return [(f.error, f.where, f.message) for f in findings]


def on(instance_type: str) -> str:
    return f"device.attributes['neuron.aws.com'].instanceType == '{instance_type}'"


def test_lint_knows_the_cores_the_driver_publishes() -> None:
    assert "coreId" in published().names["neuron.aws.com"]


def test_a_claim_for_cores_notes_where_cores_are_published(tmp_path: Path) -> None:
    assert found(lint(tmp_path, claim(2))) == [(False, "ResourceClaimTemplate t", NOTE)]


def test_a_selector_for_cores_asks_for_cores_too(tmp_path: Path) -> None:
    everything = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "any-neuron"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'neuron.aws.com'"}}]},
    }
    core = "device.attributes['neuron.aws.com'].resourceType == 'neuron_core'"
    findings = lint(tmp_path, everything, claim(2, core, device_class="any-neuron"))
    assert found(findings) == [(False, "ResourceClaimTemplate t", NOTE)]


def test_whole_devices_get_no_note(tmp_path: Path) -> None:
    assert lint(tmp_path, claim(1, device_class="neuron.aws.com")) == []


def test_the_device_class_for_devices_never_hands_out_cores(tmp_path: Path) -> None:
    core = "device.attributes['neuron.aws.com'].resourceType == 'neuron_core'"
    findings = lint(tmp_path, claim(1, core, device_class="neuron.aws.com"))
    assert found(findings) == [
        (
            True,
            "ResourceClaimTemplate t: request cores",
            "DeviceClass neuron.aws.com never hands out NeuronCores (its selectors exclude "
            "resourceType 'neuron_core'), yet the request's selectors ask for them, so no device "
            f"matches; use deviceClassName {CORES}",
        )
    ]


def test_lnc_for_cores_is_an_error(tmp_path: Path) -> None:
    findings = lint(tmp_path, claim(1, on("trn2.48xlarge"), lnc=1))
    assert found(findings) == [
        (False, "ResourceClaimTemplate t", NOTE),
        (
            True,
            "ResourceClaimTemplate t: request cores",
            "NeuronConfig.logicalNeuronCore is set, but the request asks for NeuronCores: a core "
            "is as large as the node's LNC, fixed when the node boots, so the driver refuses to "
            "prepare it; set LNC on whole devices (DeviceClass neuron.aws.com) instead",
        ),
    ]


def test_lnc_of_a_class_of_cores_is_an_error(tmp_path: Path) -> None:
    config = {
        "opaque": {
            "driver": "neuron.aws.com",
            "parameters": {
                "apiVersion": "neuron.aws.com/v1",
                "kind": "NeuronConfig",
                "logicalNeuronCore": 1,
            },
        }
    }
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "lnc1-cores"},
        "spec": {
            "config": [config],
            "selectors": [
                {
                    "cel": {
                        "expression": "device.attributes['neuron.aws.com'].resourceType "
                        "== 'neuron_core'"
                    }
                }
            ],
        },
    }
    [error] = [f for f in lint(tmp_path, cls) if f.error]
    assert error.where == "DeviceClass lnc1-cores"
    assert error.message.startswith(
        "NeuronConfig.logicalNeuronCore is set, but the class selects NeuronCores: a core is "
    )


def test_more_than_32_is_never_allocated(tmp_path: Path) -> None:
    findings = lint(tmp_path, claim(33))
    assert (
        True,
        "ResourceClaimTemplate t: request cores",
        "count 33: a claim holds at most 32 devices (resource.k8s.io AllocationResultsMaxSize), "
        "so the scheduler never allocates it; split the request over several claims",
    ) in found(findings)
    two = claim(20)
    two["spec"]["spec"]["devices"]["requests"].append(
        {"name": "more", "exactly": {"deviceClassName": CORES, "count": 20}}
    )
    errors = [(f.where, f.message) for f in lint(tmp_path, two) if f.error]
    assert errors == [
        (
            "ResourceClaimTemplate t",
            "the requests ask for 40 devices together: a claim holds at most 32 "
            "(resource.k8s.io AllocationResultsMaxSize), so the scheduler never allocates it; "
            "split them over several claims",
        )
    ]


def test_more_cores_than_any_device_has(tmp_path: Path) -> None:
    [_, error] = found(lint(tmp_path, claim(9, match=DEVICE_ID)))
    assert error == (
        True,
        "ResourceClaimTemplate t: request cores",
        f"count 9 {HEAD}, and no Neuron device has more than 8 logical NeuronCores (trn2 and trn3: "
        "4 at LNC 2, 8 at LNC 1; inf1: 4; inf2 and trn1: 2)",
    )
    assert [f for f in lint(tmp_path, claim(8, match=DEVICE_ID)) if f.error] == []


def test_more_cores_than_the_pinned_device_has(tmp_path: Path) -> None:
    [_, error] = found(lint(tmp_path, claim(3, on("trn1.32xlarge"), match=DEVICE_ID)))
    assert error == (
        True,
        "ResourceClaimTemplate t: request cores",
        f"count 3 {HEAD}, and each trn1.32xlarge device has 2 logical NeuronCores",
    )
    flagged = lint(tmp_path, claim(5, match=DEVICE_ID), instance_types=["inf1.24xlarge"])
    assert [f.message for f in flagged if f.error] == [
        f"count 5 {HEAD}, and each inf1.24xlarge device has 4 logical NeuronCores"
    ]


def test_cores_of_one_trn2_device_depend_on_the_lnc(tmp_path: Path) -> None:
    [_, warning] = found(lint(tmp_path, claim(5, on("trn2.48xlarge"), match=DEVICE_ID)))
    assert warning == (
        False,
        "ResourceClaimTemplate t: request cores",
        f"count 5 {HEAD}, and each trn2.48xlarge device has 4 logical NeuronCores at LNC 2, 8 "
        "at LNC 1: only nodes at LNC 1 fit it; elsewhere the claim stays pending",
    )
    lnc2 = "device.attributes['neuron.aws.com'].logicalNeuronCore == 2"
    [_, error] = found(lint(tmp_path, claim(5, on("trn2.48xlarge"), lnc2, match=DEVICE_ID)))
    assert error == (
        True,
        "ResourceClaimTemplate t: request cores",
        f"count 5 {HEAD}, and each trn2.48xlarge device has 4 logical NeuronCores at LNC 2",
    )


def test_core_counts_follow_no_device_rules(tmp_path: Path) -> None:
    # 7 is no connected set of trn1 devices, nor more than the cores of the node: only the note.
    assert found(lint(tmp_path, claim(7, on("trn1.32xlarge")))) == [
        (False, "ResourceClaimTemplate t", NOTE)
    ]
    [_, error] = found(lint(tmp_path, claim(9, on("trn2.3xlarge"))))
    assert error == (
        True,
        "ResourceClaimTemplate t: request cores",
        "count 9: trn2.3xlarge has only 4 logical NeuronCores at LNC 2, 8 at LNC 1",
    )


def pod(amount: object) -> Json:
    container = {"name": "c", "resources": {"limits": {"aws.amazon.com/neuroncore": amount}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [container]},
    }


def test_pods_asking_neuroncores_warn_that_cores_may_span_devices(tmp_path: Path) -> None:
    assert found(lint(tmp_path, pod(2))) == [
        (
            False,
            "Pod p: container c",
            "aws.amazon.com/neuroncore: 2 is served through extended resources on Kubernetes 1.36+ "
            "(DRA nodes) and carries no constraint: any 2 NeuronCores of the node, which may span "
            f"Neuron devices; for cores of one device use a ResourceClaimTemplate of DeviceClass "
            f"{CORES} with a {DEVICE_ID} matchAttribute",
        )
    ]


@pytest.mark.parametrize("amount", [40, "40"])
def test_pods_asking_more_than_32_neuroncores(tmp_path: Path, amount: object) -> None:
    findings = found(lint(tmp_path, pod(amount)))
    assert len(findings) == 2
    assert findings[1] == (
        False,
        "Pod p: container c",
        "aws.amazon.com/neuroncore: 40 is more than DRA nodes ever allocate: the scheduler's "
        "claim for the pod holds at most 32 devices, one per NeuronCore; only nodes running the "
        "Neuron device plugin can serve it",
    )
