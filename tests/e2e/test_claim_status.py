"""A prepared claim's `status.devices` (KEP-4817), as the API server keeps it.

The real scheduler allocates, the kubelet stand-in prepares through the agent, and
the agent's entries appear on the claim: one per device, Ready, with the serial
numbers and NeuronCores the container got. An unprepare clears them while the claim
is still allocated (a consumer other than the pod keeps it so), so the clearing is
the agent's and not the server's own at deallocation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from consts import DRIVER_NAME
from neuron_dra.hardware.discovery import discover
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import DEVICE_CLASSES, SimulatedNode, add_simulated_node

pytestmark = pytest.mark.e2e

NODE = "status-a"
NS = "claim-status"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[SimulatedNode]:
    cluster.apply_yaml(DEVICE_CLASSES.read_text())
    cluster.create_namespace(NS)
    found = add_simulated_node(cluster, NODE, "trn2.48xlarge")
    yield found
    if found.plugin is not None:
        cluster.stop_process(found.plugin)
    cluster.stop_kubelet_side(NODE)


def claim(name: str, count: int) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "neurons",
                        "exactly": {"deviceClassName": "neuron.aws.com", "count": count},
                    }
                ]
            }
        },
    }


def pod(name: str, claim_name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [
                {"name": "ctr0", "image": "none", "resources": {"claims": [{"name": "neurons"}]}}
            ],
            "resourceClaims": [{"name": "neurons", "resourceClaimName": claim_name}],
        },
    }


def ours(obj: Obj) -> list[Obj]:
    devices = (obj.get("status") or {}).get("devices") or []
    return [d for d in devices if d["driver"] == DRIVER_NAME]


@pytest.mark.versions(check="claim device status")
def test_prepare_writes_status_devices_and_unprepare_clears_them(
    cluster: Cluster, node: SimulatedNode
) -> None:
    cluster.create(claim("two", 2))
    cluster.create(pod("user", "two"))
    cluster.wait_for_pod_running("user", NS, timeout=60)
    allocated = cluster.get("resource.k8s.io/v1", "ResourceClaim", "two", NS)
    results = allocated["status"]["allocation"]["devices"]["results"]
    devices = sorted(r["device"] for r in results)

    written = cluster.wait_for(
        "status.devices written",
        lambda: ours(cluster.get("resource.k8s.io/v1", "ResourceClaim", "two", NS)),
    )
    assert sorted(e["device"] for e in written) == devices
    serials = {d.name: d.serial_number for d in discover(node.sysfs).inventory.devices}
    for entry in written:
        assert entry["pool"] == NODE
        [ready] = entry["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
        index = int(entry["device"].removeprefix("neurondevice"))
        assert entry["data"] == {
            "neuronDevices": [
                {
                    "index": index,
                    "path": f"/dev/neuron{index}",
                    "serialNumber": serials[entry["device"]],
                }
            ],
            # trn2: 8 physical cores a device, 4 logical ones at the default LNC of 2.
            "neuronCores": f"{index * 4}-{index * 4 + 3}",
            "logicalNeuronCoreSize": 2,
        }
    managers = {
        (m["manager"], m.get("subresource"))
        for m in cluster.get("resource.k8s.io/v1", "ResourceClaim", "two", NS)["metadata"][
            "managedFields"
        ]
    }
    assert (DRIVER_NAME, "status") in managers

    # Another consumer keeps the claim allocated once the pod is gone.
    other = {"resource": "jobs", "apiGroup": "batch", "name": "keeper", "uid": "u-keeper"}
    reserved = [*allocated["status"]["reservedFor"], other]
    cluster.patch(
        "resource.k8s.io/v1",
        "ResourceClaim",
        "two",
        {"status": {"reservedFor": reserved}},
        NS,
        subresource="status",
    )
    cluster.delete("v1", "Pod", "user", NS)
    cluster.wait_for_pod_gone("user", NS, timeout=60)
    cluster.wait_for("CDI spec removed", lambda: not node.cdi_files())

    cluster.wait_for(
        "status.devices cleared",
        lambda: not ours(cluster.get("resource.k8s.io/v1", "ResourceClaim", "two", NS)),
    )
    after = cluster.get("resource.k8s.io/v1", "ResourceClaim", "two", NS)
    assert after["status"]["allocation"] == allocated["status"]["allocation"]
    assert after["status"]["reservedFor"] == [other]
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", "two", NS)
