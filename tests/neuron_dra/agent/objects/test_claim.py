"""The ResourceClaim decoder: the fields the agent reads, wrong types named by path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from consts import DRIVER_NAME
from neuron_dra.agent.objects.claim import (
    AllocatedConfig,
    DeviceResult,
    DeviceStatus,
    OpaqueConfig,
    decode,
)
from neuron_dra.agent.objects.fields import ObjectError
from tests.claim_objects import allocated_claim, opaque

UID = "0f8e2b8c-1111-4222-8333-944455556666"
PARAMETERS = {"apiVersion": "neuron.aws.com/v1", "kind": "NeuronConfig", "logicalNeuronCore": 1}


def full_claim() -> dict[str, Any]:
    claim = allocated_claim(
        UID,
        {"train": ["neurondevice0", "neurondevice1"]},
        config=[opaque(PARAMETERS, requests=["train"], source="FromClass")],
    )
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "cores"}
    claim["status"]["allocation"]["devices"]["results"][1]["adminAccess"] = True
    claim["status"]["devices"] = [{"driver": DRIVER_NAME, "pool": "node-a", "device": "d0"}]
    return claim


def test_a_claim_decodes_to_the_fields_the_agent_reads() -> None:
    claim = decode(full_claim())
    assert (claim.namespace, claim.name, claim.uid) == ("default", "claim", UID)
    assert claim.annotations == {"resource.kubernetes.io/pod-claim-name": "cores"}
    assert claim.allocation is not None
    assert claim.allocation.results == (
        DeviceResult("train", DRIVER_NAME, "node-a", "neurondevice0", admin_access=False),
        DeviceResult("train", DRIVER_NAME, "node-a", "neurondevice1", admin_access=True),
    )
    assert claim.allocation.config == (
        AllocatedConfig("FromClass", ("train",), OpaqueConfig(DRIVER_NAME, PARAMETERS)),
    )
    assert claim.devices == (DeviceStatus(DRIVER_NAME, "node-a", "d0"),)


def test_the_opaque_parameters_are_kept_as_given() -> None:
    """The config schema decodes them later; the decoder neither checks nor copies them."""
    obj = full_claim()
    claim = decode(obj)
    assert claim.allocation is not None
    opaque_config = claim.allocation.config[0].opaque
    assert opaque_config is not None
    assert (
        opaque_config.parameters
        is obj["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]
    )


@pytest.mark.parametrize("allocation", [None, {}, "absent"])
def test_a_claim_without_an_allocation_has_none(allocation: Any) -> None:
    obj = full_claim()
    if allocation == "absent":
        del obj["status"]["allocation"]
    else:
        obj["status"]["allocation"] = allocation
    assert decode(obj).allocation is None


def test_absent_fields_take_their_empty_values() -> None:
    claim = decode({"metadata": {"uid": UID}})
    assert (claim.namespace, claim.name, claim.uid) == ("", "", UID)
    assert claim.annotations == {} and claim.allocation is None and claim.devices == ()
    allocated = decode({"status": {"allocation": {"devices": {"results": [{}], "config": [{}]}}}})
    assert allocated.uid is None and allocated.allocation is not None
    assert allocated.allocation.results == (DeviceResult("", None, None, "", False),)
    assert allocated.allocation.config == (AllocatedConfig(None, (), None),)


def test_fields_the_model_does_not_name_are_ignored() -> None:
    """An API server of a newer release may add fields anywhere: none fails the decode."""
    obj = full_claim()
    extra = {"newField": [1, {"x": None}], "other": 7}
    obj.update(extra)
    obj["metadata"].update(extra)
    obj["status"].update(extra)
    obj["status"]["allocation"].update(extra)
    obj["status"]["allocation"]["devices"].update(extra)
    obj["status"]["allocation"]["devices"]["results"][0].update(
        extra, shareID="abc", consumedCapacity={"memory": "1Gi"}, tolerations=[]
    )
    obj["status"]["allocation"]["devices"]["config"][0].update(extra)
    obj["status"]["allocation"]["devices"]["config"][0]["opaque"].update(extra)
    obj["status"]["devices"][0].update(extra, conditions=[{"type": "Ready"}])
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u"}]
    assert decode(obj) == decode(full_claim())


Break = Callable[[dict[str, Any]], None]


def _devices(c: dict[str, Any]) -> dict[str, Any]:
    return c["status"]["allocation"]["devices"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("break_", "message"),
    [
        (lambda c: c.update(metadata="x"), "metadata is str, not an object"),
        (lambda c: c["metadata"].update(uid=7), "metadata.uid is int, not a string"),
        (lambda c: c["metadata"].update(name=["a"]), "metadata.name is list, not a string"),
        (
            lambda c: c["metadata"].update(namespace=1.5),
            "metadata.namespace is float, not a string",
        ),
        (
            lambda c: c["metadata"].update(annotations=[]),
            "metadata.annotations is list, not an object",
        ),
        (
            lambda c: c["metadata"].update(annotations={"a": 1}),
            "metadata.annotations['a'] is int, not a string",
        ),
        (lambda c: c.update(status=[]), "status is list, not an object"),
        (lambda c: c["status"].update(allocation="x"), "status.allocation is str, not an object"),
        (
            lambda c: c["status"]["allocation"].update(devices=1),
            "status.allocation.devices is int, not an object",
        ),
        (
            lambda c: _devices(c).update(results={}),
            "status.allocation.devices.results is dict, not a list",
        ),
        (
            lambda c: _devices(c)["results"].__setitem__(1, "x"),
            "status.allocation.devices.results[1] is str, not an object",
        ),
        *(
            (
                lambda c, key=key: _devices(c)["results"][0].update({key: 0}),
                f"status.allocation.devices.results[0].{key} is int, not a string",
            )
            for key in ("request", "driver", "pool", "device")
        ),
        (
            lambda c: _devices(c)["results"][0].update(adminAccess="y"),
            "status.allocation.devices.results[0].adminAccess is str, not a boolean",
        ),
        (
            lambda c: _devices(c).update(config="x"),
            "status.allocation.devices.config is str, not a list",
        ),
        (
            lambda c: _devices(c).update(config=[None]),
            r"status.allocation.devices.config[0] is null, not an object",
        ),
        (
            lambda c: _devices(c)["config"][0].update(source=True),
            "status.allocation.devices.config[0].source is bool, not a string",
        ),
        (
            lambda c: _devices(c)["config"][0].update(requests="train"),
            "status.allocation.devices.config[0].requests is str, not a list",
        ),
        (
            lambda c: _devices(c)["config"][0].update(requests=["train", 1]),
            "status.allocation.devices.config[0].requests[1] is int, not a string",
        ),
        (
            lambda c: _devices(c)["config"][0].update(opaque=[]),
            "status.allocation.devices.config[0].opaque is list, not an object",
        ),
        (
            lambda c: _devices(c)["config"][0]["opaque"].update(driver={}),
            "status.allocation.devices.config[0].opaque.driver is dict, not a string",
        ),
        (lambda c: c["status"].update(devices={}), "status.devices is dict, not a list"),
        (lambda c: c["status"]["devices"].append(3), r"status.devices[1] is int, not an object"),
        (
            lambda c: c["status"]["devices"][0].update(pool=False),
            "status.devices[0].pool is bool, not a string",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_named_by_its_path(break_: Break, message: str) -> None:
    obj = full_claim()
    break_(obj)
    with pytest.raises(ObjectError) as caught:
        decode(obj)
    assert str(caught.value) == message


@pytest.mark.parametrize(("obj", "found"), [(None, "null"), ([], "list"), ("claim", "str")])
def test_a_claim_that_is_no_object_is_refused(obj: Any, found: str) -> None:
    with pytest.raises(ObjectError, match=f"^the claim is {found}, not an object$"):
        decode(obj)


def test_decoding_leaves_the_object_as_it_was() -> None:
    obj = full_claim()
    before = copy.deepcopy(obj)
    decode(obj)
    assert obj == before
