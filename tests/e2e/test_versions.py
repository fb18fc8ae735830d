"""What differs between Kubernetes releases, checked on each one the driver supports.

The cluster runs with the feature gates the release ships on by default; the one
exception is ResourceHealthStatus, alpha (off) in 1.34 and 1.35, turned on so that
device health can reach pod status there too. `make test-versions` runs this module
(and the other tests marked `versions`) on every release in `neuron_dra_harness.build` and
writes the compatibility table in docs/operators/kubernetes-releases.md; each test's
`check` names its row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consts import (
    DEVICE_NAME_PREFIX,
    DRIVER_NAME,
    LABEL_NEURON_PRESENT,
    NODE_DEVICE_NAME,
    RESOURCE_TYPE_NODE,
    TAINT_UNWATCHED,
)
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.resources import limits
from neuron_dra.resources.limits import CounterLayout
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node
from neuron_dra_harness.processes import free_port
from neuron_dra_harness.scrape import Series, by_name
from neuron_dra_harness.workloads import claim_spec, submit, unschedulable_reason
from tests.e2e.test_plugin import cluster_of
from tests.sysfs_tree import write

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]
POLL_S = 0.2
WHOLE = f"device.attributes['{DRIVER_NAME}'].resourceType == '{RESOURCE_TYPE_NODE}'"

# Real nodes, one per shape of topology: (name, instance type, UltraServer node id).
NODES = (
    ("inf1", "inf1.24xlarge", None),
    ("inf2", "inf2.48xlarge", None),
    ("trn1", "trn1.32xlarge", None),
    ("trn2s", "trn2.3xlarge", None),
    ("trn2", "trn2.48xlarge", None),
    ("us-0", "trn2u.48xlarge", 0),
    ("us-1", "trn2u.48xlarge", 1),
)


pytestmark = pytest.mark.e2e
# The node whose metrics endpoint the attribution check reads.
METRICS_PORTS = {"trn1": free_port()}


@pytest.fixture(scope="module")
def release(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    gates = {"ResourceHealthStatus": True} if e2e_binaries.minor < 36 else {}
    with Cluster(e2e_binaries, feature_gates=gates) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        found = {}
        for name, instance_type, us_node in NODES:
            ultraserver = FakeUltraServer("us-v", us_node) if us_node is not None else None
            # The kubelet's answer is not kept between scrapes: the tests wait for its changes.
            metrics = (
                [
                    f"--metrics-port={METRICS_PORTS[name]}",
                    "--metrics-auth=none",
                    "--pod-resources-interval=0",
                ]
                if name in METRICS_PORTS
                else []
            )
            found[name] = add_simulated_node(
                cluster,
                name,
                instance_type,
                ultraserver=ultraserver,
                extra_args=[f"--health-interval={POLL_S}", *metrics],
            )
        yield found


def layout_of(slices: list[Obj]) -> CounterLayout:
    apart = any(s["spec"].get("sharedCounters") and not s["spec"].get("devices") for s in slices)
    return CounterLayout.OWN_SLICE if apart else CounterLayout.BESIDE_DEVICES


def counters_served(nodes: dict[str, SimulatedNode]) -> bool:
    return any(d.get("consumesCounters") for d in nodes["us-0"].devices())


@pytest.mark.versions(check="registration")
def test_every_plugin_registers_with_the_kubelet(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    for node in release.values():
        [entry] = node.side.report_events("plugin-registered")
        assert entry["driver"] == DRIVER_NAME
    # A 1.33 kubelet speaks v1beta1 only: every prepare below went through it.
    kubelet = release["trn2"].cluster.binaries.kubelet_minor
    record_property("detail", "DRA gRPC v1beta1" if kubelet < 34 else "DRA gRPC v1")


@pytest.mark.versions(check="slices")
def test_slices_are_published_valid_and_complete(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    for name, instance_type, _ in NODES:
        node = release[name]
        slices = node.slices()
        pool = {s["spec"]["pool"]["resourceSliceCount"] for s in slices}
        assert pool == {len(slices)}, f"{name}: pool of {len(slices)} slices says {pool}"
        # Checked by the rules of the layout this release accepted.
        assert limits.validate_pool(slices, layout_of(slices)) == [], (name, instance_type)
        names = [d["name"] for d in node.devices()]
        assert len(names) == len(set(names))
    us = [d["name"] for d in release["us-0"].devices()]
    counter_slices = [s for s in release["us-0"].slices() if s["spec"].get("sharedCounters")]
    if counters_served(release):
        # Every device, the whole node and each logical core (LNC 2: 4 a device),
        # exclusive through shared counters.
        assert sorted(us) == sorted(
            [
                *(f"neurondevice{i}" for i in range(16)),
                NODE_DEVICE_NAME,
                *(f"neuroncore{i}" for i in range(64)),
            ]
        )
        assert counter_slices
        record_property("detail", f"counters {layout_of(release['us-0'].slices())}, cores")
    else:
        assert us == [NODE_DEVICE_NAME]
        record_property("detail", "no counters served: UltraServer publishes neuronnode only")


@pytest.mark.versions(check="node-exclusive")
def test_neuronnode_and_its_devices_never_go_to_two_claims(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    cluster = cluster_of(release)
    node = release["us-1"]
    whole = claim_spec(1, cel=WHOLE)
    holder = submit(cluster, whole, node.name)
    cluster.wait_for_pod_running(holder, timeout=60)
    refused = submit(cluster, claim_spec(1), node.name)
    assert "cannot allocate all claims" in unschedulable_reason(cluster, refused)
    cluster.delete("v1", "Pod", holder, "default")
    cluster.wait_for_pod_gone(holder, timeout=60)
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", holder, "default")
    if counters_served(release):
        # The device claim gets a device now, and the whole node is refused in turn.
        cluster.wait_for_pod_running(refused, timeout=60)
        assert "cannot allocate all claims" in unschedulable_reason(
            cluster, submit(cluster, whole, node.name)
        )
    record_property("detail", "shared counters" if counters_served(release) else "neuronnode only")


def break_device(node: SimulatedNode, device: int) -> None:
    write(
        node.sysfs,
        f"sys/devices/virtual/neuron_device/neuron{device}/stats/hardware/mem_ecc_uncorrected",
        "1\n",
    )


@pytest.mark.versions(check="taint")
def test_an_unhealthy_device_is_never_allocated(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    cluster, node = cluster_of(release), release["trn2"]
    break_device(node, 7)

    def out_of_service() -> str | None:
        found = [d for d in node.devices() if d["name"] == "neurondevice7"]
        if not found:
            return "withdrawn"
        return "tainted" if found[0].get("taints") else None

    how = cluster.wait_for("neurondevice7 out of service", out_of_service, 10)
    pick = f"device.attributes['{DRIVER_NAME}'].deviceId == 7"
    assert "cannot allocate all claims" in unschedulable_reason(
        cluster, submit(cluster, claim_spec(1, cel=pick), node.name)
    )
    record_property("detail", how)


@pytest.mark.versions(check="informational taints")
def test_unwatched_devices_carry_an_informational_taint_where_served(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    """Inferentia (1) devices have no health file: a taint of effect None says so where the
    server keeps it (DRADeviceTaints on by default from 1.36; 1.34 refuses the effect),
    and blocks nothing either way."""
    cluster, node = cluster_of(release), release["inf1"]
    served = cluster.binaries.minor >= 36
    expected = [(TAINT_UNWATCHED, "NoHealthSource", "None")] if served else []

    def taints() -> list[list[tuple[str, str, str]]]:
        return [
            [(t["key"], t["value"], t["effect"]) for t in d.get("taints") or []]
            for d in node.devices()
            if d["name"].startswith(DEVICE_NAME_PREFIX)
        ]

    cluster.wait_for("the informational taints", lambda: taints() == [expected] * 16, 30)
    assert all(t.get("timeAdded") for d in node.devices() for t in d.get("taints") or [])
    pod = submit(cluster, claim_spec(1), node.name)  # no toleration
    cluster.wait_for_pod_running(pod, timeout=60)
    assert node.plugin is not None
    said = node.plugin.log_path.read_text().count("informational device taints")
    assert said == (0 if served else 1)  # off: said once
    cluster.delete("v1", "Pod", pod, "default")
    record_property("detail", "effect None" if served else "not published: the server drops them")


@pytest.mark.versions(check="Observer label")
def test_every_neuron_node_is_labelled_for_neuron_observer(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    """Neuron Observer's DaemonSet selects `neuron.amazonaws.com/present: "true"`."""
    cluster = cluster_of(release)

    def labelled() -> list[str]:
        return [
            name
            for name, node in release.items()
            if cluster.get("v1", "Node", node.name)["metadata"]
            .get("labels", {})
            .get(LABEL_NEURON_PRESENT)
            == "true"
        ]

    cluster.wait_for("every node labelled", lambda: sorted(labelled()) == sorted(release), 30)
    record_property("detail", f"{LABEL_NEURON_PRESENT}=true")


@pytest.mark.versions(check="health")
def test_device_health_reaches_pod_status(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    cluster = cluster_of(release)
    if cluster.binaries.kubelet_minor < 34:
        pytest.skip("the 1.33 kubelet reports no DRA device health")
    node, us = release["trn2"], release["us-0"]
    pick = f"device.attributes['{DRIVER_NAME}'].deviceId == 3"
    # Each kubelet finds a pod's claims its own way (docs/operators/kubernetes-releases.md):
    # 1.34 only by a reference named like the claim, 1.35 only through a template, 1.36+ either.
    template = cluster.binaries.kubelet_minor >= 35
    holder = submit(cluster, claim_spec(1, cel=pick), node.name, template=template)
    whole = claim_spec(1, cel=WHOLE)
    us_holder = submit(cluster, whole, us.name, template=template)
    for pod in (holder, us_holder):
        cluster.wait_for_pod_running(pod, timeout=60)
    break_device(node, 3)

    def health(pod: Obj) -> list[tuple[str, str]]:
        statuses = pod["status"].get("containerStatuses") or [{}]
        return [
            (r["resourceID"].rsplit("-", 1)[-1], r.get("health", ""))
            for s in statuses[0].get("allocatedResourcesStatus") or []
            for r in s.get("resources") or []
        ]

    found = cluster.wait_for_pod(
        holder,
        predicate=lambda p: ("neurondevice3", "Unhealthy") in health(p),
        what="neurondevice3 Unhealthy in pod status",
        timeout=60,
    )
    assert health(found) == [("neurondevice3", "Unhealthy")]
    # The whole-node device has a status of its own, not Unknown.
    found = cluster.wait_for_pod(
        us_holder,
        predicate=lambda p: health(p) == [("neuronnode", "Healthy")],
        what="neuronnode Healthy in pod status",
        timeout=60,
    )
    claims = "claims from templates" if template else "claims by name"
    record_property("detail", f"{health_service(node)}, {claims}")


def health_service(node: SimulatedNode) -> str:
    """The health service the kubelet chose, as the plugin logged it."""
    assert node.plugin is not None
    found = re.findall(r"kubelet watches device health api=(\S+)", node.plugin.log_path.read_text())
    assert found, "the kubelet never opened a health stream"
    return str(found[-1])


@pytest.mark.versions(check="attribution")
def test_a_pods_devices_are_attributed_through_the_kubelet(
    release: dict[str, SimulatedNode], record_property: Any
) -> None:
    """The kubelet's PodResources API names the pod and container holding each device;
    its dynamic-resources part is on by default from 1.34 (alpha, off, in 1.33)."""
    cluster, node = cluster_of(release), release["trn1"]
    url = f"http://127.0.0.1:{METRICS_PORTS['trn1']}/metrics"
    pod = submit(cluster, claim_spec(4, group=4), node.name)  # trn1 groups: 4, 8, 16
    cluster.wait_for_pod_running(pod, timeout=60)

    def scrape() -> Series:
        return by_name(url)

    def held() -> list[tuple[str, str, str]]:
        return sorted(
            (s["namespace"], s["container"], s["device"])
            for s in scrape().get("neuron_dra_device_allocation_info", [])
            if s["pod"] == pod
        )

    answering = [{"node": node.name, "value": "1.0"}]
    cluster.wait_for(
        "the PodResources API", lambda: scrape().get("neuron_dra_pod_resources_up") == answering
    )
    if cluster.binaries.kubelet_minor < 34:
        assert not held()  # the 1.33 kubelet lists no dynamic resources by default
        record_property("detail", "PodResources lists no DRA devices: its gate is off in 1.33")
        return
    results = cluster.wait_for_claim_allocated(pod)["status"]["allocation"]["devices"]["results"]
    expected = sorted(("default", "c", r["device"]) for r in results)
    cluster.wait_for("the pod's devices attributed", lambda: held() == expected, 30)
    cluster.delete("v1", "Pod", pod, "default")
    cluster.wait_for_pod_gone(pod, timeout=60)
    cluster.wait_for("the pod's devices released", lambda: not held(), 30)
    record_property("detail", "namespace, pod, container and claim per device")
