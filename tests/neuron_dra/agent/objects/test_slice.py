"""The ResourceSlice decoder: the fields the publisher reads, wrong types named by path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from neuron_dra.agent.objects.fields import ObjectError
from neuron_dra.agent.objects.slice import Device, Taint, decode

TAINT = {"key": "neuron.aws.com/unhealthy", "value": "Ecc", "effect": "NoExecute"}


def stored() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": "node-a-neuron.aws.com-0-x7k2p",
            "generateName": "node-a-neuron.aws.com-0-",
            "resourceVersion": "7",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-a"}],
        },
        "spec": {
            "driver": "neuron.aws.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "neuron-node", "counters": {}}],
            "devices": [
                {
                    "name": "neurondevice0",
                    "attributes": {"deviceId": {"int": 0}},
                    "taints": [dict(TAINT, timeAdded="T0")],
                    "consumesCounters": [{"counterSet": "neuron-node", "counters": {}}],
                },
                {"name": "neurondevice1"},
            ],
        },
    }


def test_a_slice_decodes_to_the_fields_the_publisher_reads() -> None:
    obj = stored()
    piece = decode(obj)
    assert (piece.name, piece.generate_name) == (
        "node-a-neuron.aws.com-0-x7k2p",
        "node-a-neuron.aws.com-0-",
    )
    assert (piece.pool, piece.generation) == ("node-a", 3)
    assert piece.owner_references == ({"apiVersion": "v1", "kind": "Node", "name": "node-a"},)
    assert piece.shared_counters == ("neuron-node",)
    assert piece.devices == (
        Device(
            "neurondevice0",
            (Taint("neuron.aws.com/unhealthy", "Ecc", "NoExecute", "T0"),),
            ("neuron-node",),
        ),
        Device("neurondevice1", (), ()),
    )
    # Compared and updated whole: kept as answered, not copied.
    assert piece.spec is obj["spec"] and piece.metadata is obj["metadata"]


def test_absent_fields_take_their_empty_values() -> None:
    piece = decode({})
    assert (piece.name, piece.generate_name, piece.pool, piece.generation) == ("", None, "", 0)
    assert piece.owner_references == () and piece.devices == () and piece.shared_counters == ()
    assert decode({"spec": {"devices": [{"taints": [{}]}]}}).devices == (
        Device("", (Taint(None, None, None, None),), ()),
    )


def test_fields_the_model_does_not_name_are_ignored() -> None:
    obj = stored()
    obj["spec"]["perDeviceNodeSelection"] = False
    obj["spec"]["newField"] = {"x": [1]}
    obj["spec"]["devices"][0].update(bindsToNode=True, newField=[None])
    obj["spec"]["devices"][0]["taints"][0]["newField"] = 1
    obj["metadata"]["managedFields"] = [{"manager": "neuron-dra"}]
    piece, before = decode(obj), decode(stored())
    assert (piece.name, piece.pool, piece.generation, piece.devices) == (
        before.name,
        before.pool,
        before.generation,
        before.devices,
    )


def _device(s: dict[str, Any]) -> dict[str, Any]:
    return s["spec"]["devices"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("break_", "message"),
    [
        (lambda s: s["metadata"].update(name=1), "metadata.name is int, not a string"),
        (
            lambda s: s["metadata"].update(generateName=[]),
            "metadata.generateName is list, not a string",
        ),
        (
            lambda s: s["metadata"].update(ownerReferences=["node-a"]),
            "metadata.ownerReferences[0] is str, not an object",
        ),
        (lambda s: s.update(spec=[]), "spec is list, not an object"),
        (lambda s: s["spec"].update(pool="node-a"), "spec.pool is str, not an object"),
        (
            lambda s: s["spec"]["pool"].update(name=5),
            "spec.pool.name is int, not a string",
        ),
        (
            lambda s: s["spec"]["pool"].update(generation="3"),
            "spec.pool.generation is str, not an integer",
        ),
        (
            lambda s: s["spec"]["pool"].update(generation=True),
            "spec.pool.generation is bool, not an integer",
        ),
        (
            lambda s: s["spec"]["sharedCounters"][0].update(name=2),
            "spec.sharedCounters[0].name is int, not a string",
        ),
        (lambda s: s["spec"].update(devices={}), "spec.devices is dict, not a list"),
        (lambda s: _device(s).update(name=0), "spec.devices[0].name is int, not a string"),
        (
            lambda s: _device(s)["taints"][0].update(effect=1),
            "spec.devices[0].taints[0].effect is int, not a string",
        ),
        (
            lambda s: _device(s)["taints"][0].update(timeAdded={}),
            "spec.devices[0].taints[0].timeAdded is dict, not a string",
        ),
        (
            lambda s: _device(s)["consumesCounters"][0].update(counterSet=[]),
            "spec.devices[0].consumesCounters[0].counterSet is list, not a string",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_named_by_its_path(
    break_: Callable[[dict[str, Any]], object], message: str
) -> None:
    obj = stored()
    break_(obj)
    with pytest.raises(ObjectError) as caught:
        decode(obj)
    assert str(caught.value) == message
