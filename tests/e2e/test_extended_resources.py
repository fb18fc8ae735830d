"""Pods written for the Neuron device plugin (`limits: aws.amazon.com/neuron: N`, no
resourceClaims) on DRA nodes, through the DeviceClasses of deploy/deviceclass.yaml that
carry an `extendedResourceName`.

The scheduler makes a claim for such a pod and records it in
`pod.status.extendedResourceClaimStatus`; the kubelet's DRA manager prepares it and gives
each container the CDI devices of its request. The cluster runs with the release's
default feature gates: DRAExtendedResource is on by default from 1.36, so older releases
skip.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from consts import NODE_DEVICE_NAME
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, container_view, trn2_and_ultraserver
from neuron_dra_harness.workloads import unschedulable_reason
from tests.e2e.test_plugin import assert_container_got, cluster_of, delete_and_assert_released

pytestmark = [pytest.mark.e2e, pytest.mark.versions(check="extended resources")]

Obj = dict[str, Any]
NEURON = "aws.amazon.com/neuron"
NEURONDEVICE = "aws.amazon.com/neurondevice"
CLASS_OF = {
    NEURON: "extended-resource-neuron.neuron.aws.com",
    NEURONDEVICE: "extended-resource-neurondevice.neuron.aws.com",
}
_names = (f"x{i}" for i in itertools.count())


def too_old(binaries: Binaries) -> str | None:
    """Why the release cannot run these tests, if it cannot."""
    oldest = min(binaries.minor, binaries.kubelet_minor)
    if oldest < 36:
        return f"extended resources from DRA need Kubernetes 1.36+ (this is 1.{oldest})"
    return None


@pytest.fixture(scope="module")
def nodes(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    """One trn2.48xlarge and one trn2u.48xlarge node, DRA only (nothing advertises the
    device plugin's names in its allocatable); none where the release is too old."""
    if too_old(e2e_binaries):
        yield {}
        return
    with trn2_and_ultraserver(e2e_binaries, "us-x") as nodes:
        yield nodes


@pytest.fixture(autouse=True)
def _skip_old_releases(e2e_binaries: Binaries, _versions_check: None) -> None:
    # Here rather than in `nodes`: a module fixture that skips is set up before the
    # test's report names its compatibility-table row (_versions_check).
    reason = too_old(e2e_binaries)
    if reason:
        pytest.skip(reason)


def submit(cluster: Cluster, resource: str, count: int, node: str) -> str:
    """A device-plugin-style pod held to `node` by a nodeSelector, so that the scheduler
    still places it (a pod created with nodeName never passes through the scheduler)."""
    name = next(_names)
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "automountServiceAccountToken": False,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {"name": "ctr0", "image": "none", "resources": {"limits": {resource: count}}}
                ],
            },
        }
    )
    return name


def add_device_plugin_node(cluster: Cluster, name: str, resource: str, count: int) -> None:
    """A trn2.48xlarge as the device plugin makes it: `resource` in capacity and allocatable."""
    cluster.add_node(name, {"node.kubernetes.io/instance-type": "trn2.48xlarge"})
    advertised = {resource: str(count)}
    cluster.patch(
        "v1",
        "Node",
        name,
        {"status": {"capacity": advertised, "allocatable": advertised}},
        subresource="status",
    )


def special_claim(cluster: Cluster, pod: Obj) -> Obj:
    """The claim the scheduler made for the pod's extended resources."""
    status = pod["status"]["extendedResourceClaimStatus"]
    namespace = pod["metadata"]["namespace"]
    return cluster.get(
        "resource.k8s.io/v1", "ResourceClaim", status["resourceClaimName"], namespace
    )


def run_and_check(node: SimulatedNode, resource: str, count: int) -> list[int]:
    """Run a pod asking `count` of `resource` on `node`, check what its container got,
    delete it and check that nothing is left; returns the devices it was given."""
    return check_and_delete(node, submit(node.cluster, resource, count, node.name), "default")


def check_and_delete(node: SimulatedNode, name: str, namespace: str) -> list[int]:
    """Wait for the device-plugin-style pod `name` to run on `node`, check that its one
    container got exactly the devices of the claim made for it, delete it and check that
    nothing is left; returns the devices."""
    cluster = node.cluster
    pod = cluster.wait_for_pod_running(name, namespace, timeout=60)
    assert pod["spec"]["nodeName"] == node.name
    assert not pod["spec"].get("resourceClaims")
    [container] = pod["spec"]["containers"]
    [(resource, count)] = container["resources"]["limits"].items()
    [mapping] = pod["status"]["extendedResourceClaimStatus"]["requestMappings"]
    assert (mapping["containerName"], mapping["resourceName"]) == (container["name"], resource)
    claim = special_claim(cluster, pod)
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == CLASS_OF[resource]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {(r["pool"], r["request"]) for r in results} == {(node.name, request["name"])}
    names = [r["device"] for r in results]
    assert NODE_DEVICE_NAME not in names
    devices = sorted(int(n.removeprefix("neurondevice")) for n in names)
    assert len(devices) == int(count)

    uid = claim["metadata"]["uid"]
    assert_container_got(node, pod, container["name"], devices, uid)
    delete_and_assert_released(node, name, namespace, uid)
    claim_name = claim["metadata"]["name"]
    cluster.wait_for(
        f"claim {claim_name} deleted",
        lambda: (
            cluster.get_or_none("resource.k8s.io/v1", "ResourceClaim", claim_name, namespace)
            is None
        ),
        timeout=60,
    )
    return devices


@pytest.mark.parametrize(("resource", "count"), [(NEURON, 4), (NEURONDEVICE, 2)])
def test_device_plugin_style_pod_runs_on_a_dra_node(
    nodes: dict[str, SimulatedNode], resource: str, count: int, record_property: Any
) -> None:
    run_and_check(nodes["trn2"], resource, count)
    record_property("detail", f"kubelet 1.{cluster_of(nodes).binaries.kubelet_minor} prepares")


def test_an_ultraserver_node_gives_whole_devices_never_its_node_device(
    nodes: dict[str, SimulatedNode],
) -> None:
    node = nodes["us-0"]
    assert NODE_DEVICE_NAME in node.device_names(), "the node device is not there to avoid"
    devices = run_and_check(node, NEURON, INSTANCE_TYPES[node.instance_type].devices)
    assert devices == list(range(16))


def test_device_plugin_nodes_and_dra_nodes_serve_side_by_side(
    nodes: dict[str, SimulatedNode],
) -> None:
    cluster = cluster_of(nodes)
    add_device_plugin_node(cluster, "dp-0", NEURON, 16)
    on_plugin = submit(cluster, NEURON, 4, "dp-0")
    on_dra = submit(cluster, NEURON, 4, "trn2")
    try:
        bound = cluster.wait_for_pod_scheduled(on_plugin, timeout=60)
        assert bound["spec"]["nodeName"] == "dp-0"
        # Served by the node's allocatable as before: no claim is made for it.
        assert not bound.get("status", {}).get("extendedResourceClaimStatus")
        running = cluster.wait_for_pod_running(on_dra, timeout=60)
        assert running["spec"]["nodeName"] == "trn2"
        assert special_claim(cluster, running)["status"]["allocation"]
        assert len(container_view(running, "ctr0")["deviceNodes"]) == 4
    finally:
        # No kubelet finishes a graceful deletion on dp-0.
        cluster.delete("v1", "Pod", on_plugin, "default", grace_period=0)
        cluster.delete("v1", "Pod", on_dra, "default")
        cluster.delete("v1", "Node", "dp-0")
    cluster.wait_for_pod_gone(on_dra, timeout=60)
    cluster.wait_for("CDI specs on trn2 removed", lambda: not nodes["trn2"].cdi_files())


def test_more_devices_than_the_node_has_stays_pending(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    name = submit(cluster, NEURON, 17, "trn2")
    reason = unschedulable_reason(cluster, name)
    assert "cannot allocate all claims" in reason, reason
    assert not nodes["trn2"].cdi_files()
    cluster.delete("v1", "Pod", name, "default")
    cluster.wait_for_pod_gone(name, timeout=60)
