"""Device metadata files: the bytes the Go helper writes, where, and their removal."""

from __future__ import annotations

import json

import pytest

from consts import DRIVER_NAME
from neuron_dra.agent.claims import metadata as md

UID = "0b7c4c1e-5c1f-4f7e-9a57-2f6b1d2e3c4d"
DEVICES = (
    md.MetadataDevice(
        pool="node-a",
        name="neuron-0",
        attributes={
            "coreIds": {"string": "0-7"},
            "lnc": {"int": 2},
            "ultraserver.aws.com/serverId": {"string": "us<1>&x"},
            "healthy": {"bool": True},
            "driverVersion": {"version": "2.19.0"},
        },
    ),
    md.MetadataDevice(pool="node-a", name="neuron-1", attributes={}),
)
PLAIN = md.MetadataClaim(namespace="ns", name="train", uid=UID, pod_claim_name=None)
TEMPLATED = md.MetadataClaim(namespace="ns", name="pod-x-abcde", uid=UID, pod_claim_name="cores")


def test_metadata_format() -> None:
    data = md.encode_metadata(TEMPLATED, "gpus", DEVICES)
    obj = json.loads(data)
    assert data.endswith(b"}\n")
    assert obj["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    assert obj["kind"] == "DeviceMetadata"
    assert obj["metadata"] == {
        "name": "pod-x-abcde",
        "namespace": "ns",
        "uid": UID,
        "generation": 1,
    }
    assert obj["podClaimName"] == "cores"
    devs = obj["requests"][0]["devices"]
    assert devs[0]["attributes"]["lnc"] == {"int": 2}
    assert "attributes" not in devs[1]
    assert b"\\u003c1\\u003e\\u0026x" in data
    assert "podClaimName" not in json.loads(md.encode_metadata(PLAIN, "gpus", DEVICES))


def test_bad_attribute_is_refused() -> None:
    bad = md.MetadataDevice(pool="p", name="d", attributes={"x": {"int": 1, "string": "a"}})
    with pytest.raises(ValueError, match="must have one of"):
        md.encode_metadata(PLAIN, "r", [bad])


def test_container_paths() -> None:
    assert md.container_path(PLAIN, "r") == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train/r/{DRIVER_NAME}-metadata.json"
    )
    assert md.container_path(TEMPLATED, "r").startswith(
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/cores/r/"
    )


def test_cached_devices_read_as_the_whole_object_would() -> None:
    """Devices are encoded once and spliced in: the bytes are those of encoding the
    whole object at once, for more than ten devices too (placeholders 1 and 10)."""
    devices = [
        md.MetadataDevice(
            "node-a", f"neurondevice{i}", {"deviceId": {"int": i}, "x": {"string": "<&>"}}
        )
        for i in range(12)
    ] + list(DEVICES)
    whole = {
        "kind": md.KIND,
        "apiVersion": md.API_VERSION,
        "metadata": {"name": "pod-x-abcde", "namespace": "ns", "uid": UID, "generation": 1},
        "podClaimName": "cores",
        "requests": [
            {
                "name": "gpus/large",
                "devices": [
                    {"driver": DRIVER_NAME, "pool": d.pool, "name": d.name}
                    | ({"attributes": dict(sorted(d.attributes.items()))} if d.attributes else {})
                    for d in devices
                ],
            }
        ],
    }
    for _ in range(2):  # the second time from the cache
        assert md.encode_metadata(TEMPLATED, "gpus/large", devices) == md.go_json(whole) + b"\n"
