"""Telemetry on a real control plane and the kubelet's own DRA manager and PodResources
server: which pod holds which device, per-device series, and driver 2.30's health files
as taints, on a node whose fake tree is written as driver 2.30.2.0 writes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from neuron_dra.hardware.fakenode import Counters
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import DEFAULT_RUNTIME_CONFIG, Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node
from neuron_dra_harness.processes import free_port
from neuron_dra_harness.scrape import Series, by_name
from neuron_dra_harness.workloads import claim_spec, submit
from tests.sysfs_tree import write

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
POLL_S = 0.2
DEVICE = "sys/devices/virtual/neuron_device/neuron{}"


@pytest.fixture(scope="module")
def telemetry(e2e_binaries: Binaries) -> Iterator[tuple[Cluster, SimulatedNode, int]]:
    gates = {"DRADeviceTaints": True}
    runtime = f"{DEFAULT_RUNTIME_CONFIG},resource.k8s.io/v1alpha3=true"
    with Cluster(e2e_binaries, feature_gates=gates, runtime_config=runtime) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        port = free_port()
        node = add_simulated_node(
            cluster,
            "tel",
            "trn2.48xlarge",
            driver_version="2.30.2.0",
            counters=Counters.READ,
            extra_args=[
                f"--health-interval={POLL_S}",
                f"--metrics-port={port}",
                "--metrics-auth=none",
                "--pod-resources-interval=0",
            ],  # the tests wait for the kubelet's changes
        )
        yield cluster, node, port


def scrape(port: int) -> Series:
    """Every sample's labels and value, by sample name."""
    return by_name(f"http://127.0.0.1:{port}/metrics")


def held_by(port: int, pod: str) -> list[tuple[str, str, str, str, str]]:
    return sorted(
        (s["namespace"], s["container"], s["claim"], s["device"], s["neuron_device"])
        for s in scrape(port).get("neuron_dra_device_allocation_info", [])
        if s["pod"] == pod
    )


def test_a_running_pods_devices_carry_its_labels_until_it_ends(
    telemetry: tuple[Cluster, SimulatedNode, int],
) -> None:
    cluster, node, port = telemetry
    pod = submit(cluster, claim_spec(4, group=4), node.name)
    cluster.wait_for_pod_running(pod, timeout=60)
    results = cluster.wait_for_claim_allocated(pod)["status"]["allocation"]["devices"]["results"]
    devices = sorted(r["device"] for r in results)
    expected = sorted(("default", "c", pod, d, d.removeprefix("neurondevice")) for d in devices)
    cluster.wait_for(
        "the pod's devices on the metrics endpoint", lambda: held_by(port, pod) == expected, 30
    )
    series = scrape(port)
    assert series["neuron_dra_pod_resources_up"] == [{"node": node.name, "value": "1.0"}]
    serials = {
        s["neuron_device"]: s["serial_number"] for s in series["neuron_dra_device_allocation_info"]
    }
    assert all(len(serial) == 16 for serial in serials.values())

    cluster.delete("v1", "Pod", pod, "default")
    cluster.wait_for_pod_gone(pod, timeout=60)
    cluster.wait_for(
        "the pod's devices gone from the endpoint", lambda: held_by(port, pod) == [], 30
    )


def test_per_device_series_read_what_the_driver_writes(
    telemetry: tuple[Cluster, SimulatedNode, int],
) -> None:
    _, node, port = telemetry
    write(
        node.sysfs,
        f"{DEVICE.format(2)}/stats/power/utilization",
        "POWER_STATUS_VALID,1764115260,10.00,80.00,42.50\n",
    )
    write(
        node.sysfs,
        f"{DEVICE.format(2)}/neuron_core3/stats/memory_usage/device_mem/total",
        f"{5 << 30}\n",
    )
    write(node.sysfs, f"{DEVICE.format(2)}/stats/hardware/mem_ecc_corrected", "7\n")
    series = scrape(port)

    def value(name: str, **labels: str) -> str:
        [found] = [
            s["value"]
            for s in series[name]
            if s["neuron_device"] == "2" and labels.items() <= s.items()
        ]
        return found

    assert value("neuron_dra_device_power_draw_ratio") == "0.425"
    assert value("neuron_dra_device_memory_used_bytes") == repr(float(5 << 30))
    assert value("neuron_dra_device_ecc_errors_total", memory="hbm", kind="corrected") == "7.0"
    assert value("neuron_dra_device_executions_total", status="success") == "0.0"
    assert value("neuron_dra_device_healthcheck_heartbeat") == "1.0"
    assert series["neuron_dra_unwatched_devices"] == [{"node": node.name, "value": "0.0"}]
    assert series["neuron_dra_registered"] == [{"value": "1.0"}]
    assert "neuron_dra_device_utilization_ratio" not in series


def test_unhealthy_components_taint_the_device_with_the_subsystem(
    telemetry: tuple[Cluster, SimulatedNode, int],
) -> None:
    cluster, node, port = telemetry
    components = f"{DEVICE.format(9)}/stats/hardware/health_status/unhealthy_components"

    def taints() -> list[tuple[str, str]]:
        return [
            (t["key"], t["value"])
            for d in node.devices()
            if d["name"] == "neurondevice9"
            for t in d.get("taints") or []
        ]

    write(node.sysfs, components, "hbm,link_efa\n")
    cluster.wait_for(
        "the taint", lambda: taints() == [("neuron.aws.com/unhealthy", "Hbm.LinkEfa")], 30
    )
    healthy = {s["neuron_device"]: s["value"] for s in scrape(port)["neuron_dra_device_healthy"]}
    assert healthy["9"] == "0.0" and healthy["8"] == "1.0"
    events = cluster.events_for(node.name)
    assert any(
        "neuron9: Hbm.LinkEfa (unhealthy components: hbm, link_efa)" in e["message"] for e in events
    )

    write(node.sysfs, components, "\n")  # the firmware says healthy again: no recovery wait
    cluster.wait_for("the taint gone", lambda: taints() == [], 30)


def test_rising_corrected_ecc_is_an_informational_taint_that_blocks_nothing(
    telemetry: tuple[Cluster, SimulatedNode, int],
) -> None:
    cluster, node, _ = telemetry

    def taints() -> list[tuple[str, str, str]]:
        return [
            (t["key"], t["value"], t["effect"])
            for d in node.devices()
            if d["name"] == "neurondevice4"
            for t in d.get("taints") or []
        ]

    write(node.sysfs, f"{DEVICE.format(4)}/stats/hardware/mem_ecc_corrected", "3\n")
    cluster.wait_for(
        "the informational taint",
        lambda: taints() == [("neuron.aws.com/corrected-ecc", "Hbm", "None")],
        30,
    )
    [stamp] = [
        t.get("timeAdded")
        for d in node.devices()
        if d["name"] == "neurondevice4"
        for t in d["taints"]
    ]
    assert stamp
    # No toleration: the device is allocated all the same.
    pod = submit(
        cluster, claim_spec(1, cel="device.attributes['neuron.aws.com'].deviceId == 4"), node.name
    )
    cluster.wait_for_pod_running(pod, timeout=60)
    write(node.sysfs, f"{DEVICE.format(4)}/stats/hardware/mem_ecc_corrected", "4\n")
    cluster.wait_for_pod_running(pod, timeout=5)  # still running: nothing evicted
    [again] = [
        t.get("timeAdded")
        for d in node.devices()
        if d["name"] == "neurondevice4"
        for t in d["taints"]
    ]
    assert again == stamp  # dated when first seen
    cluster.delete("v1", "Pod", pod, "default")
