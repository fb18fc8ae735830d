"""A prepared claim's `status.devices` (KEP-4817), as the API server keeps it.

The real scheduler allocates, the kubelet stand-in prepares through the agent, and
the agent's entries appear on the claim: one per device, Ready, with the serial
numbers and NeuronCores the container got. An unprepare clears them while the claim
is still allocated (a consumer other than the pod keeps it so), so the clearing is
the agent's and not the server's own at deallocation. A write the API server refuses
delays no pod and is retried; a server that does not serve the field is named once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from consts import DRIVER_NAME
from neuron_dra.hardware.discovery import discover
from neuron_dra_harness import manifests, scrape
from neuron_dra_harness.build import RELEASES, build_release
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import DEVICE_CLASSES, SimulatedNode, add_simulated_node
from neuron_dra_harness.processes import free_port

pytestmark = pytest.mark.e2e

NODE = "status-a"
NS = "claim-status"
Obj = dict[str, Any]
NOT_SERVED = "the API server does not serve ResourceClaim status.devices"


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[SimulatedNode]:
    """A trn2 node whose plugin serves its metrics on `metrics_port(node)`."""
    cluster.apply_yaml(DEVICE_CLASSES.read_text())
    cluster.create_namespace(NS)
    port = free_port()
    found = add_simulated_node(
        cluster, NODE, "trn2.48xlarge", extra_args=[f"--metrics-port={port}", "--metrics-auth=none"]
    )
    yield found
    if found.plugin is not None:
        cluster.stop_process(found.plugin)
    cluster.stop_kubelet_side(NODE)


def metrics_port(node: SimulatedNode) -> int:
    [flag] = [a for a in node.extra_args if a.startswith("--metrics-port=")]
    return int(flag.partition("=")[2])


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
    return manifests.pod(name, NS, NODE, {"resourceClaimName": claim_name})


def status_errors(node: SimulatedNode, reason: str) -> float:
    url = f"http://127.0.0.1:{metrics_port(node)}/metrics"
    return sum(
        s.value
        for s in scrape.samples(url)
        if s.name == "neuron_dra_claim_status_errors_total" and s.labels["reason"] == reason
    )


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
    assert other in after["status"]["reservedFor"]  # so never deallocated
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", "two", NS)


@pytest.mark.parametrize("restart", [False, True], ids=["retried", "after-a-restart"])
def test_a_refused_write_delays_no_pod_and_is_tried_again(
    cluster: Cluster, node: SimulatedNode, restart: bool
) -> None:
    """While an admission policy refuses every change of the claim's status.devices the
    pod runs all the same; the write succeeds once the policy is gone: retried, or by a
    plugin started again after the one that failed stopped."""
    name, probe = ("again", "probe-again") if restart else ("refused", "probe")
    policy: Obj = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"refuse-{name}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["resourceclaims/status"],
                    }
                ]
            },
            # `probe` tells when the policy is in effect: any status write is refused.
            # Of `name`, only changes of status.devices: the scheduler's allocation passes.
            "matchConditions": [
                {"name": "claims", "expression": f'object.metadata.name in ["{name}", "{probe}"]'}
            ],
            "validations": [
                {
                    "expression": f'object.metadata.name != "{probe}" && '
                    "object.status.?devices.orValue([]) == "
                    "oldObject.status.?devices.orValue([])",
                    "message": "refused for this test",
                }
            ],
        },
    }
    binding: Obj = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"refuse-{name}"},
        "spec": {"policyName": f"refuse-{name}", "validationActions": ["Deny"]},
    }
    cluster.create(policy)
    cluster.create(binding)
    refused = cluster.create(claim(name, 1))
    cluster.create(claim(probe, 1))
    path = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{probe}/status"

    def in_effect() -> bool:
        try:
            cluster.request(
                "PATCH",
                path,
                {"status": {}},
                query={"dryRun": "All"},
                content_type="application/merge-patch+json",
            )
        except Exception as err:
            return "refused for this test" in str(err)
        return False

    cluster.wait_for("the refusing policy in effect", in_effect)
    before = status_errors(node, "refused")
    cluster.create(pod(f"{name}-user", name))
    cluster.wait_for_pod_running(f"{name}-user", NS, timeout=60)
    cluster.wait_for("a refused write counted", lambda: status_errors(node, "refused") > before)
    assert ours(cluster.get("resource.k8s.io/v1", "ResourceClaim", name, NS)) == []
    if restart:
        node.stop_plugin()

    admission = "admissionregistration.k8s.io/v1"
    cluster.delete(admission, "ValidatingAdmissionPolicyBinding", f"refuse-{name}")
    cluster.delete(admission, "ValidatingAdmissionPolicy", f"refuse-{name}")
    if restart:
        node.start_plugin()
    written = cluster.wait_for(
        "status.devices written once allowed",
        lambda: ours(cluster.get("resource.k8s.io/v1", "ResourceClaim", name, NS)),
        timeout=90,
    )
    assert [e["conditions"][0]["type"] for e in written] == ["Ready"]
    assert refused["metadata"]["uid"] in node.checkpointed()
    cluster.delete("v1", "Pod", f"{name}-user", NS)
    cluster.wait_for_pod_gone(f"{name}-user", NS, timeout=60)
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", name, NS)
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", probe, NS)


def test_a_server_without_the_field_is_named_once() -> None:
    """1.34 with DRAResourceClaimDeviceStatus off drops status.devices: two claims are
    prepared, the plugin says so once and writes nothing."""
    with Cluster(
        build_release(RELEASES[0]), feature_gates={"DRAResourceClaimDeviceStatus": False}
    ) as cluster:
        cluster.apply_yaml(DEVICE_CLASSES.read_text())
        cluster.create_namespace(NS)
        port = free_port()
        off = add_simulated_node(
            cluster,
            NODE,
            "trn2.48xlarge",
            extra_args=[f"--metrics-port={port}", "--metrics-auth=none"],
        )
        url = f"http://127.0.0.1:{port}/metrics"
        for name in ("first", "second"):
            cluster.create(claim(name, 1))
            cluster.create(pod(name, name))
            cluster.wait_for_pod_running(name, NS, timeout=60)
            # Handed to the writer before the kubelet had its answer; done once none waits.
            cluster.wait_for(
                f"{name}'s status write handled",
                lambda: scrape.by_name(url)["neuron_dra_claim_status_pending"][0]["value"] == "0.0",
            )
            assert ours(cluster.get("resource.k8s.io/v1", "ResourceClaim", name, NS)) == []
        assert off.plugin is not None
        assert off.plugin.log_path.read_text().count(NOT_SERVED) == 1
