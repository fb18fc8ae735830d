"""Manifests shared by the end-to-end tests."""

from __future__ import annotations

from tests.e2e.cluster_api import Obj

DRIVER = "neuron.aws.com"


def resource_slice(node: str, devices: int = 4) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"neuron-{i}", "attributes": {"index": {"int": i}}} for i in range(devices)
            ],
        },
    }


def device_class(name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def claim_spec(device_class_name: str, count: int = 2) -> Obj:
    return {
        "devices": {
            "requests": [
                {
                    "name": "neuron",
                    "exactly": {
                        "deviceClassName": device_class_name,
                        "count": count,
                        "selectors": [
                            {"cel": {"expression": (f'device.attributes["{DRIVER}"].index >= 1')}}
                        ],
                    },
                }
            ]
        }
    }


def pod(name: str, namespace: str, node: str, claim: Obj) -> Obj:
    """A pod pinned to ``node`` that uses one claim in its only container.
    ``claim`` is the PodResourceClaim source (resourceClaimName or
    resourceClaimTemplateName)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "resources": {"claims": [{"name": "neuron"}]},
                }
            ],
            "resourceClaims": [{"name": "neuron", **claim}],
        },
    }


def allocated_devices(claim: Obj) -> list[Obj]:
    return list(claim["status"]["allocation"]["devices"]["results"])
