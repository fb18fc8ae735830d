"""Device health on a real control plane: taints the scheduler obeys, health the kubelet
receives, events, and metrics that count what happened."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.build import Binaries
from tests.e2e.cluster import DEFAULT_RUNTIME_CONFIG, Cluster
from tests.e2e.nodes import SimulatedNode, add_simulated_node
from tests.e2e.processes import free_port
from tests.e2e.workloads import claim_spec, submit, unschedulable_reason
from tests.sysfs_tree import write

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]
POLL_S = 0.2
DEVICE_4 = "device.attributes['neuron.aws.com'].deviceId == 4"
DEVICE_9 = "device.attributes['neuron.aws.com'].deviceId == 9"


@pytest.fixture(scope="module")
def health(e2e_binaries: Binaries) -> Iterator[tuple[Cluster, SimulatedNode, SimulatedNode, int]]:
    gates = {"DRADeviceTaints": True, "ResourceHealthStatus": True}
    # With device taints on, the scheduler also watches DeviceTaintRules (v1alpha3).
    runtime = f"{DEFAULT_RUNTIME_CONFIG},resource.k8s.io/v1alpha3=true"
    with Cluster(e2e_binaries, feature_gates=gates, runtime_config=runtime) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        port = free_port()
        ecc_node = add_simulated_node(
            cluster, "ecc", "trn2.48xlarge",
            extra_args=[f"--health-interval={POLL_S}", f"--metrics-port={port}"],
        )  # fmt: skip
        kmsg_node = add_simulated_node(
            cluster, "kmsg", "trn2.48xlarge",
            extra_args=[f"--health-interval={POLL_S}", "--health-recovery=2"],
        )  # fmt: skip
        yield cluster, ecc_node, kmsg_node, port


def devices_of(cluster: Cluster, claim: str) -> set[int]:
    status = cluster.wait_for_claim_allocated(claim)["status"]
    results = status["allocation"]["devices"]["results"]
    return {int(r["device"].removeprefix("neurondevice")) for r in results}


def taint_of(node: SimulatedNode, device: str) -> list[Obj] | None:
    for obj in node.slices():
        for found in obj["spec"]["devices"]:
            if found["name"] == device:
                return list(found.get("taints") or [])
    return None


def metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_ecc_error_taints_one_device_and_the_rest_keep_working(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    cluster, node, _, port = health
    holder = submit(cluster, claim_spec(1, cel=DEVICE_4), node.name)
    cluster.wait_for_pod_running(holder, timeout=60)

    write(node.sysfs, "sys/devices/virtual/neuron_device/neuron4/stats/hardware/"
                      "mem_ecc_uncorrected", "1\n")  # fmt: skip
    started = time.monotonic()
    taints = cluster.wait_for("taint on neurondevice4", lambda: taint_of(node, "neurondevice4"), 10)
    assert time.monotonic() - started < 10 * POLL_S + 2  # a poll, a publish, a list
    assert [(t["key"], t["value"], t["effect"]) for t in taints] == [
        ("neuron.aws.com/unhealthy", "MemEccUncorrected", "NoSchedule")
    ]
    assert [d for d in range(16) if taint_of(node, f"neurondevice{d}")] == [4]

    # The kubelet receives UNHEALTHY for exactly that device.
    def reported(pod: Obj) -> bool:
        statuses = pod["status"].get("containerStatuses") or [{}]
        resources = [r for s in statuses[0].get("allocatedResourcesStatus") or []
                     for r in s.get("resources") or []]  # fmt: skip
        return any(r.get("health") == "Unhealthy" for r in resources)

    pod = cluster.wait_for_pod(holder, predicate=reported, what="device health", timeout=60)
    [status] = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    claim_uid = cluster.get("resource.k8s.io/v1", "ResourceClaim", holder, "default")["metadata"][
        "uid"
    ]
    # The kubelet names a device by its CDI id.
    assert [(r["resourceID"], r["health"]) for r in status["resources"]] == [
        (f"neuron.aws.com/neuron={claim_uid}-neurondevice4", "Unhealthy")
    ]
    events = cluster.events_for(node.name)
    assert any(e["reason"] == "NeuronDeviceUnhealthy" and "neuron4" in e["message"]
               for e in events)  # fmt: skip

    cluster.delete("v1", "Pod", holder, "default")
    cluster.wait_for_pod_gone(holder, timeout=60)
    # Device 4 is free now but tainted: nobody gets it, while whole rows still go out.
    assert "cannot allocate all claims" in unschedulable_reason(
        cluster, submit(cluster, claim_spec(1, cel=DEVICE_4), node.name)
    )
    row_claims = [submit(cluster, claim_spec(4, group=4), node.name) for _ in range(3)]
    assert sorted(min(devices_of(cluster, c)) for c in row_claims) == [0, 8, 12]
    for claim in row_claims:
        cluster.wait_for_pod_running(claim, timeout=60)
    assert "cannot allocate all claims" in unschedulable_reason(
        cluster, submit(cluster, claim_spec(4, group=4), node.name)
    )

    found = metrics(port)
    assert found[("neuron_dra_health_events_total", (("kind", "MemEccUncorrected"),))] == 1
    unhealthy = sum(
        v
        for (name, labels), v in found.items()
        if name == "neuron_dra_devices" and ("health", "unhealthy") in labels
    )
    assert unhealthy == 1
    prepared = len(node.side.report_events("prepared"))
    assert found[("neuron_dra_prepare_duration_seconds_count", ())] == prepared == 4
    assert found[("neuron_dra_prepared_claims", ())] == 3


def test_kernel_error_line_and_recovery(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    cluster, _, node, _ = health
    with (node.sysfs / "dev/kmsg").open("a") as kmsg:
        kmsg.write("3,812,9912,-;neuron: neuron9: NEURON_HW_ERR=HBM_UE sq 3\n")
    taints = cluster.wait_for("taint on neurondevice9", lambda: taint_of(node, "neurondevice9"), 10)
    assert [t["value"] for t in taints] == ["HBM_UE"]
    assert "cannot allocate all claims" in unschedulable_reason(
        cluster, submit(cluster, claim_spec(1, cel=DEVICE_9), node.name)
    )
    cluster.wait_for("taint removed after recovery",
                     lambda: taint_of(node, "neurondevice9") == [], 20)  # fmt: skip


@pytest.mark.versions(check="taint")
def test_without_device_taints_the_device_is_withdrawn(e2e_binaries: Binaries) -> None:
    if e2e_binaries.minor >= 37:
        pytest.skip("DRADeviceTaints is GA from 1.37: taints are always served")
    # Needs the gate off: it is on by default from 1.36.
    with Cluster(e2e_binaries, feature_gates={"DRADeviceTaints": False}) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        node = add_simulated_node(cluster, "withdraw", "inf2.48xlarge",
                                  extra_args=[f"--health-interval={POLL_S}"])  # fmt: skip
        (node.sysfs / "dev/neuron3").unlink()
        cluster.wait_for("neurondevice3 withdrawn", lambda: node.slices() and
                         taint_of(node, "neurondevice3") is None, 10)  # fmt: skip
        assert len(node.slices()[0]["spec"]["devices"]) == 11
