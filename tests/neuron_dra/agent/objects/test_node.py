"""The Node decoder: the fields the agent reads, wrong types named by path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from neuron_dra.agent.objects.fields import ObjectError
from neuron_dra.agent.objects.node import Node, decode


def full_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "labels": {"topology.k8s.aws/network-node-layer-1": "nn-1"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"providerID": "aws:///us-east-1a/i-0"},
        "status": {"allocatable": {"cpu": "8", "aws.amazon.com/neuron": "16"}},
    }


def test_a_node_decodes_to_the_fields_the_agent_reads() -> None:
    assert decode(full_node()) == Node(
        name="n1",
        uid="u1",
        labels={"topology.k8s.aws/network-node-layer-1": "nn-1"},
        allocatable={"cpu": "8", "aws.amazon.com/neuron": "16"},
    )


def test_absent_fields_take_their_empty_values() -> None:
    assert decode({}) == Node("", "", {}, {})
    assert decode({"metadata": None, "status": {"allocatable": None}}) == Node("", "", {}, {})


def test_fields_the_model_does_not_name_are_ignored() -> None:
    obj = full_node()
    obj["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {}}]
    obj["status"].update(capacity={"cpu": 8}, conditions=[{"type": "Ready"}], newField=1)
    obj["newField"] = {"x": [1]}
    assert decode(obj) == decode(full_node())


@pytest.mark.parametrize(
    ("break_", "message"),
    [
        (lambda n: n.update(metadata=[]), "metadata is list, not an object"),
        (lambda n: n["metadata"].update(name=1), "metadata.name is int, not a string"),
        (lambda n: n["metadata"].update(uid=True), "metadata.uid is bool, not a string"),
        (lambda n: n["metadata"].update(labels="a=b"), "metadata.labels is str, not an object"),
        (
            lambda n: n["metadata"]["labels"].update(zone=None),
            "metadata.labels['zone'] is null, not a string",
        ),
        (lambda n: n.update(status="Ready"), "status is str, not an object"),
        (
            lambda n: n["status"]["allocatable"].update(cpu=8),
            "status.allocatable['cpu'] is int, not a string",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_named_by_its_path(
    break_: Callable[[dict[str, Any]], None], message: str
) -> None:
    obj = full_node()
    break_(obj)
    with pytest.raises(ObjectError) as caught:
        decode(obj)
    assert str(caught.value) == message


def test_a_node_that_is_no_object_is_refused() -> None:
    with pytest.raises(ObjectError, match=r"^the Node is list, not an object$"):
        decode([])
