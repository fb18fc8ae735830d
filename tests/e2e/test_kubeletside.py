"""kubeletside against a DRA plugin built on the upstream kubeletplugin helper.

This checks the kubelet stand-in itself (registration, prepare, CDI
resolution, pod status, the PodResources API, unprepare on deletion); the
project's own plugin is tested against it elsewhere.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from api.kubelet.podresources.v1 import api_pb2 as podresources
from api.kubelet.podresources.v1 import api_pb2_grpc as podresources_grpc
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.kubeletside import (
    KUBELETSIDE_CDI_ANNOTATION,
    KUBELETSIDE_ERROR_ANNOTATION,
    KubeletSide,
)
from neuron_dra_harness.manifests import DRIVER, claim_spec, device_class, pod
from neuron_dra_harness.processes import Component

pytestmark = pytest.mark.e2e

NODE = "stub-node"
NS = "stub"


@pytest.fixture(scope="module")
def stub_node(cluster: Cluster) -> Iterator[tuple[KubeletSide, Component]]:
    """A node with kubeletside and the stub plugin registered and publishing."""
    cluster.create_namespace(NS)
    cluster.add_node(NODE)
    side = cluster.start_kubelet_side(NODE)
    plugin = cluster.start_process(
        "drastub",
        [
            str(cluster.binaries.drastub),
            f"--kubeconfig={cluster.kubeconfig}",
            f"--node-name={NODE}",
            f"--driver={DRIVER}",
            f"--root-dir={side.root_dir}",
            f"--cdi-dir={side.cdi_dir}",
            "--fail-claim=refused",
            "--devices=4",
        ],
    )
    cluster.create(device_class("neuron-stub"))
    yield side, plugin
    cluster.stop_kubelet_side(NODE)


def test_registration_and_slices(
    cluster: Cluster, stub_node: tuple[KubeletSide, Component]
) -> None:
    side, _ = stub_node
    endpoint = side.wait_for_plugin(DRIVER)
    assert endpoint == str(side.plugins_dir / DRIVER / "dra.sock")
    slices = cluster.wait_for(
        "stub ResourceSlice",
        lambda: cluster.list_objects(
            "resource.k8s.io/v1", "ResourceSlice", field_selector=f"spec.nodeName={NODE}"
        ),
    )
    assert len(slices[0]["spec"]["devices"]) == 4
    assert side.report_events("plugin-registered")[0]["driver"] == DRIVER


def test_prepare_cdi_running_and_unprepare(
    cluster: Cluster, stub_node: tuple[KubeletSide, Component]
) -> None:
    side, _ = stub_node
    side.wait_for_plugin(DRIVER)
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "good", "namespace": NS},
            "spec": claim_spec("neuron-stub", count=2),
        }
    )
    cluster.create(pod("runner", NS, NODE, {"resourceClaimName": "good"}))
    running = cluster.wait_for_pod_running("runner", NS)

    ready = {c["type"]: c["status"] for c in running["status"]["conditions"]}
    assert ready["Ready"] == "True"
    assert running["status"]["containerStatuses"][0]["state"]["running"]
    devices = json.loads(running["metadata"]["annotations"][KUBELETSIDE_CDI_ANNOTATION])
    app = devices["app"]
    claim = cluster.get("resource.k8s.io/v1", "ResourceClaim", "good", NS)
    allocated = sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
    uid = claim["metadata"]["uid"]
    assert sorted(app["cdiDevices"]) == [f"neuron.test/device={uid}-{d}" for d in allocated]
    indexes = [d.removeprefix("neuron-") for d in allocated]
    assert sorted(app["env"]) == sorted(f"DRASTUB_DEVICE_{i}=neuron-{i}" for i in indexes)
    assert sorted(app["deviceNodes"]) == sorted(f"/dev/drastub{i}" for i in indexes)
    spec_file = side.cdi_dir / f"drastub-{uid}.json"
    assert spec_file.exists()
    # Reported right after the status update that made the pod Running.
    prepared = cluster.wait_for("prepare reported", lambda: side.report_events("prepared"))
    assert [e["pod"] for e in prepared] == ["runner"]
    assert prepared[0]["containers"] == devices

    cluster.delete("v1", "Pod", "runner", NS)
    cluster.wait_for_pod_gone("runner", NS)
    assert not spec_file.exists()
    assert [e["pod"] for e in side.report_events("unprepared")] == ["runner"]


def test_plugin_error_is_visible(
    cluster: Cluster, stub_node: tuple[KubeletSide, Component]
) -> None:
    side, _ = stub_node
    side.wait_for_plugin(DRIVER)
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "refused", "namespace": NS},
            "spec": claim_spec("neuron-stub", count=1),
        }
    )
    cluster.create(pod("refused-pod", NS, NODE, {"resourceClaimName": "refused"}))
    failed = cluster.wait_for_pod(
        "refused-pod",
        NS,
        lambda p: KUBELETSIDE_ERROR_ANNOTATION in p["metadata"].get("annotations", {}),
        "prepare error recorded",
    )
    assert (
        "drastub refuses claim refused"
        in failed["metadata"]["annotations"][KUBELETSIDE_ERROR_ANNOTATION]
    )
    assert failed["status"]["phase"] == "Pending"
    # Like the kubelet, kubeletside keeps retrying with backoff.
    cluster.wait_for("a retried prepare", lambda: len(side.report_events("prepare-error")) >= 2)
    cluster.delete("v1", "Pod", "refused-pod", NS)
    cluster.wait_for_pod_gone("refused-pod", NS)


def list_pod_resources(socket: Path) -> list[podresources.PodResources]:
    """One List call on the PodResources socket, as a node agent makes it."""

    async def ask() -> list[podresources.PodResources]:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            reply = await podresources_grpc.PodResourcesListerStub(channel).List(
                podresources.ListPodResourcesRequest(), timeout=5
            )
            return list(reply.pod_resources)

    return asyncio.run(ask())


def listed_pod(socket: Path, namespace: str, name: str) -> podresources.PodResources | None:
    for entry in list_pod_resources(socket):
        if (entry.namespace, entry.name) == (namespace, name):
            return entry
    return None


def test_pod_resources_lists_claim_devices(
    cluster: Cluster, stub_node: tuple[KubeletSide, Component]
) -> None:
    side, _ = stub_node
    side.wait_for_plugin(DRIVER)
    socket = side.pod_resources_socket
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "listed", "namespace": NS},
            "spec": claim_spec("neuron-stub", count=2),
        }
    )
    cluster.create(pod("lister", NS, NODE, {"resourceClaimName": "listed"}))
    cluster.wait_for_pod_running("lister", NS)
    claim = cluster.get("resource.k8s.io/v1", "ResourceClaim", "listed", NS)
    results = claim["status"]["allocation"]["devices"]["results"]

    entry = cluster.wait_for("lister in List", lambda: listed_pod(socket, NS, "lister"))
    (container,) = entry.containers
    assert container.name == "app"
    assert not container.devices and not container.cpu_ids and not container.memory
    if cluster.binaries.kubelet_minor < 34:
        # Feature gate KubeletPodResourcesDynamicResources: alpha, off by default.
        assert not container.dynamic_resources
    else:
        (dynamic,) = container.dynamic_resources
        assert (dynamic.claim_namespace, dynamic.claim_name) == (NS, "listed")
        listed = [(r.driver_name, r.pool_name, r.device_name) for r in dynamic.claim_resources]
        assert listed == [(r["driver"], r["pool"], r["device"]) for r in results]
        # As on a real kubelet, each device also lists the CDI devices of the
        # devices before it (the kubelet does not reset its list per device).
        own = [f"neuron.test/device={claim['metadata']['uid']}-{r['device']}" for r in results]
        for i, resource in enumerate(dynamic.claim_resources):
            assert [c.name for c in resource.cdi_devices] == own[: i + 1]

    cluster.delete("v1", "Pod", "lister", NS)
    cluster.wait_for_pod_gone("lister", NS)
    cluster.wait_for("lister gone from List", lambda: listed_pod(socket, NS, "lister") is None)


def test_plugin_stop_deregisters(
    cluster: Cluster, stub_node: tuple[KubeletSide, Component]
) -> None:
    side, plugin = stub_node
    side.wait_for_plugin(DRIVER)
    cluster.stop_process(plugin)
    cluster.wait_for("plugin deregistered", lambda: DRIVER not in side.registered_plugins())
    assert side.report_events("plugin-deregistered")
