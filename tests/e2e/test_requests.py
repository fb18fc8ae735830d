"""Requests of one claim in separate containers, through the kubelet's own DRA code.

A container that references one request of a claim gets the devices of that
request only, and must see exactly their NeuronCores; one that references the
whole claim gets every device and every core. The kubelet side resolves each
container's CDI ids with the CDI package runtimes use, so the environment
checked here is the one a container would start with. Device health then has
to reach the status of every container: the API server refuses a status that
names one resource twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node, container_view, env_of
from tests.e2e.test_plugin import create_in, expected_env, namespace
from tests.sysfs_tree import write

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]
DRIVER = "neuron.aws.com"
KIND = f"{DRIVER}/neuron"


@pytest.fixture(scope="module")
def node(e2e_binaries: Binaries) -> Iterator[SimulatedNode]:
    """One trn2.48xlarge, on a cluster of its own so no other test's pod lands on it.
    ResourceHealthStatus: alpha before 1.36, and the kubelet then lists each
    container's devices in its status."""
    with Cluster(e2e_binaries, feature_gates={"ResourceHealthStatus": True}) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        yield add_simulated_node(
            cluster, "trn2-a", "trn2.48xlarge", extra_args=["--health-interval=0.2"]
        )


def request(name: str, count: int) -> Obj:
    return {
        "name": name,
        "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count},
    }


def container(name: str, claim_request: str | None) -> Obj:
    reference = {"name": "split"} | ({"request": claim_request} if claim_request else {})
    return {"name": name, "image": "none", "resources": {"claims": [reference]}}


def results_by_request(claim: Obj) -> dict[str, list[int]]:
    """Device indexes of each request, in the order of the claim's results."""
    found: dict[str, list[int]] = {}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        index = int(result["device"].removeprefix("neurondevice"))
        found.setdefault(result["request"], []).append(index)
    return found


def health(pod: Obj, ctr: str) -> dict[str, str]:
    """Resource id -> health the kubelet reports for one container."""
    status = next(s for s in pod["status"].get("containerStatuses") or [] if s["name"] == ctr)
    return {
        r["resourceID"]: r.get("health", "")
        for s in status.get("allocatedResourcesStatus") or []
        for r in s.get("resources") or []
    }


def test_each_container_sees_the_cores_of_the_request_it_references(
    node: SimulatedNode,
) -> None:
    cluster = node.cluster
    ns = namespace(cluster)
    claim_obj: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "split"},
        "spec": {"devices": {"requests": [request("a", 2), request("b", 1)]}},
    }
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "split"},
        "spec": {
            "containers": [container("a", "a"), container("b", "b"), container("all", None)],
            # Named like the claim: the 1.34 kubelet finds a container's claims that way only.
            "resourceClaims": [{"name": "split", "resourceClaimName": "split"}],
        },
    }
    create_in(cluster, ns, [claim_obj, pod])
    running = cluster.wait_for_pod_running("split", ns, timeout=60)
    claim = cluster.get("resource.k8s.io/v1", "ResourceClaim", "split", ns)
    uid = claim["metadata"]["uid"]
    devices = results_by_request(claim)
    assert sorted(devices) == ["a", "b"] and len(devices["a"]) == 2
    assert not set(devices["a"]) & set(devices["b"])
    everything = devices["a"] + devices["b"]
    wanted = {"a": devices["a"], "b": devices["b"], "all": everything}

    for ctr, got in wanted.items():
        assert env_of(running, ctr) == expected_env(node.instance_type, got, None), ctr
        assert container_view(running, ctr)["deviceNodes"] == [f"/dev/neuron{d}" for d in got]
    for ctr in ("a", "b"):
        assert set(container_view(running, ctr)["cdiDevices"]) == {
            f"{KIND}={uid}-neurondevice{d}" for d in devices[ctr]
        } | {f"{KIND}={uid}.request.{ctr}", f"{DRIVER}/metadata={uid}_{ctr}"}

    broken = devices["b"][0]
    write(
        node.sysfs,
        f"sys/devices/virtual/neuron_device/neuron{broken}/stats/hardware/mem_ecc_uncorrected",
        "1\n",
    )
    broken_id = f"{KIND}={uid}-neurondevice{broken}"
    reported = cluster.wait_for_pod(
        "split", ns, lambda p: health(p, "b").get(broken_id) == "Unhealthy", "health", 60
    )
    # From 1.36 a container's status lists the devices it got; before, every device of
    # the claim. The whole claim's own entry shows up as one more resource.
    whole = {f"{KIND}={uid}-neurondevice{d}" for d in everything} | {f"{KIND}={uid}.claim"}
    for ctr, got in wanted.items():
        listed = {f"{KIND}={uid}-neurondevice{d}" for d in got}
        listed |= {f"{KIND}={uid}.claim"} if ctr == "all" else set()
        assert set(health(reported, ctr)) == (
            listed if cluster.binaries.kubelet_minor >= 36 else whole
        ), ctr

    cluster.delete("v1", "Pod", "split", ns)
    cluster.wait_for_pod_gone("split", ns, timeout=60)
    cluster.wait_for(f"CDI spec of {uid} removed", lambda: not node.cdi_files())
    assert uid not in node.checkpointed()
