"""Device health on a real control plane: taints the scheduler obeys, health the kubelet
receives, events, and metrics that count what happened."""

from __future__ import annotations

import asyncio
import calendar
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.kube import Kube
from neuron_dra.agent.slices import features
from neuron_dra_harness import scrape
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import DEFAULT_RUNTIME_CONFIG, Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node
from neuron_dra_harness.processes import free_port
from neuron_dra_harness.workloads import claim_spec, submit, unschedulable_reason
from tests.e2e.publisher_log import handled, new_watch, start_logging_passes
from tests.sysfs_tree import write

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]
POLL_S = 0.2
DEVICE_4 = "device.attributes['neuron.aws.com'].deviceId == 4"
DEVICE_9 = "device.attributes['neuron.aws.com'].deviceId == 9"
DEVICE_6 = "device.attributes['neuron.aws.com'].deviceId == 6"
PUBLISHES = ("neuron_dra_slice_publishes_total", ())


@pytest.fixture(scope="module")
def health(e2e_binaries: Binaries) -> Iterator[tuple[Cluster, SimulatedNode, SimulatedNode, int]]:
    gates = {"DRADeviceTaints": True, "ResourceHealthStatus": True}
    # With device taints on, the scheduler also watches DeviceTaintRules (v1alpha3).
    runtime = f"{DEFAULT_RUNTIME_CONFIG},resource.k8s.io/v1alpha3=true"
    with Cluster(e2e_binaries, feature_gates=gates, runtime_config=runtime) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        port = free_port()
        ecc_node = add_simulated_node(
            cluster,
            "ecc",
            "trn2.48xlarge",
            extra_args=[
                f"--health-interval={POLL_S}",
                f"--metrics-port={port}",
                "--metrics-auth=none",
            ],
        )
        kmsg_node = add_simulated_node(
            cluster,
            "kmsg",
            "trn2.48xlarge",
            extra_args=[f"--health-interval={POLL_S}", "--health-recovery=2"],
        )
        yield cluster, ecc_node, kmsg_node, port


def devices_of(cluster: Cluster, claim: str) -> set[int]:
    status = cluster.wait_for_claim_allocated(claim)["status"]
    results = status["allocation"]["devices"]["results"]
    return {int(r["device"].removeprefix("neurondevice")) for r in results}


def taint_of(node: SimulatedNode, device: str) -> list[Obj] | None:
    for found in node.devices():
        if found["name"] == device:
            return list(found.get("taints") or [])
    return None


def break_device(node: SimulatedNode, device: int) -> None:
    """An uncorrectable memory error on one device."""
    write(
        node.sysfs,
        f"sys/devices/virtual/neuron_device/neuron{device}/stats/hardware/mem_ecc_uncorrected",
        "1\n",
    )


def taint_time(node: SimulatedNode, device: int) -> str | None:
    taints = taint_of(node, f"neurondevice{device}")
    return str(taints[0]["timeAdded"]) if taints else None


def seconds(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in scrape.samples(f"http://127.0.0.1:{port}/metrics")
    }


def test_ecc_error_taints_one_device_and_the_rest_keep_working(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    cluster, node, _, port = health
    holder = submit(cluster, claim_spec(1, cel=DEVICE_4), node.name)
    cluster.wait_for_pod_running(holder, timeout=60)

    write(
        node.sysfs,
        "sys/devices/virtual/neuron_device/neuron4/stats/hardware/mem_ecc_uncorrected",
        "1\n",
    )
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
        resources = [
            r
            for s in statuses[0].get("allocatedResourcesStatus") or []
            for r in s.get("resources") or []
        ]
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
    assert any(e["reason"] == "NeuronDeviceUnhealthy" and "neuron4" in e["message"] for e in events)

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


def test_the_tolerations_example_has_a_tainted_device(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    """examples/specs/tolerations.yaml's request, held to one tainted device: given it,
    while the same request without its tolerations is refused."""
    cluster, node, _, _ = health
    [template] = [
        d
        for d in yaml.safe_load_all((REPO / "examples/specs/tolerations.yaml").read_text())
        if d["kind"] != "Pod"
    ]
    spec = template["spec"]["spec"]
    request = spec["devices"]["requests"][0]["exactly"]
    request["selectors"].append({"cel": {"expression": DEVICE_6}})
    break_device(node, 6)
    cluster.wait_for("taint on neurondevice6", lambda: taint_of(node, "neurondevice6"), 10)
    tolerant = submit(cluster, spec, node.name)
    cluster.wait_for_pod_running(tolerant, timeout=60)
    assert devices_of(cluster, tolerant) == {6}
    cluster.delete("v1", "Pod", tolerant, "default")
    cluster.wait_for_pod_gone(tolerant, timeout=60)
    del request["tolerations"]
    assert "cannot allocate all claims" in unschedulable_reason(
        cluster, submit(cluster, spec, node.name)
    )


def test_kernel_error_line_and_recovery(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    cluster, _, node, _ = health
    device = node.sysfs / "sys/devices/virtual/neuron_device/neuron9"
    serial = (device / "info/serial_number").read_text().strip()
    with (node.sysfs / "dev/kmsg").open("a") as kmsg:
        # As the Neuron runtime writes it through the driver, naming the device by serial.
        kmsg.write(
            f"3,812,9912,-;NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR nd-id=9 nc-id=0 "
            f"serial-num={serial} action=TERMINATE_INSTANCE\n"
        )
    taints = cluster.wait_for("taint on neurondevice9", lambda: taint_of(node, "neurondevice9"), 10)
    assert [t["value"] for t in taints] == ["HBM_UNCORRECTABLE_ERROR"]
    assert "cannot allocate all claims" in unschedulable_reason(
        cluster, submit(cluster, claim_spec(1, cel=DEVICE_9), node.name)
    )
    cluster.wait_for(
        "taint removed after recovery", lambda: taint_of(node, "neurondevice9") == [], 20
    )


@pytest.mark.versions(check="taint")
def test_without_device_taints_the_device_is_withdrawn(e2e_binaries: Binaries) -> None:
    if e2e_binaries.minor >= 37:
        pytest.skip("DRADeviceTaints is GA from 1.37: taints are always served")
    # Needs the gate off: it is on by default from 1.36.
    with Cluster(e2e_binaries, feature_gates={"DRADeviceTaints": False}) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        node = add_simulated_node(
            cluster, "withdraw", "inf2.48xlarge", extra_args=[f"--health-interval={POLL_S}"]
        )
        (node.sysfs / "dev/neuron3").unlink()
        cluster.wait_for(
            "neurondevice3 withdrawn",
            lambda: node.slices() and taint_of(node, "neurondevice3") is None,
            10,
        )
        names = node.device_names()
        assert len([n for n in names if n.startswith("neurondevice")]) == 11
        # Its cores (where the release publishes cores) go with it: inf2 has 2 a device.
        assert not {"neuroncore6", "neuroncore7"} & set(names)


def test_the_informational_taint_probe_knows_the_release(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    """With DRADeviceTaints on, 1.34 refuses effect None (422) and 1.35+ keep it."""
    cluster, node, _, _ = health
    kube = Kube.connect(cluster.kubeconfig)
    served = asyncio.run(features.probe_informational_taints(kube, node.name))
    assert served is (cluster.binaries.minor >= 35)
    # Its plugin said what it decided, once, and the refusal's detail only at debug level.
    assert node.plugin is not None
    said = node.plugin.log_path.read_text().count("informational device taints")
    assert said == (0 if served else 1)


def test_a_taint_is_dated_when_the_problem_was_first_seen(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    cluster = health[0]
    node = add_simulated_node(
        cluster, "dated", "trn2.48xlarge", start=False, extra_args=[f"--health-interval={POLL_S}"]
    )
    lock = node.side.plugins_dir / DRIVER_NAME / "publisher.lock"
    lock.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    with lock.open("a") as held:
        # Another plugin holds the node's slices: this one finds the problem but cannot
        # publish it until the lock is released, seconds later.
        fcntl.flock(held, fcntl.LOCK_EX)
        plugin = node.start_plugin(wait=False)
        node.side.wait_for_plugin(DRIVER_NAME)
        # The plugin registers before its agent reads the counters it then watches from:
        # wait for the agent's first decision about the pool (its NeuronCores), which follows.
        cluster.wait_for("the agent's start", lambda: "NeuronCore" in plugin.log_path.read_text())
        before = int(time.time())
        break_device(node, 3)
        event = cluster.wait_for(
            "the unhealthy event",
            lambda: next(
                (
                    e
                    for e in cluster.events_for(node.name)
                    if e["reason"] == "NeuronDeviceUnhealthy"
                ),
                None,
            ),
        )
        reported = seconds(event["firstTimestamp"])
        # Wait for the wall clock, not for the plugin: a write stamped now differs.
        cluster.wait_for("two seconds after the report", lambda: time.time() >= reported + 2, 5)
        assert node.slices() == []
    stamp = cluster.wait_for("neurondevice3 tainted", lambda: taint_time(node, 3), 10)
    assert before <= seconds(stamp) <= reported, (stamp, before, reported)


def test_wakes_that_change_nothing_write_nothing(
    health: tuple[Cluster, SimulatedNode, SimulatedNode, int],
) -> None:
    cluster = health[0]
    port = free_port()
    # Whole devices only: a pool of one slice, so that every write shows on it.
    node = add_simulated_node(
        cluster,
        "steady",
        "trn2.48xlarge",
        start=False,
        extra_args=[
            f"--health-interval={POLL_S}",
            f"--metrics-port={port}",
            "--metrics-auth=none",
            "--neuron-cores=off",
        ],
    )
    start_logging_passes(node)
    break_device(node, 3)
    stamp = cluster.wait_for("neurondevice3 tainted", lambda: taint_time(node, 3), 10)
    [tainted] = node.slices()
    name, generation = tainted["metadata"]["name"], tainted["spec"]["pool"]["generation"]
    # A rewrite now would carry a later time.
    cluster.wait_for("a second after the taint", lambda: time.time() >= seconds(stamp) + 2, 5)

    def unchanged() -> Obj:
        [now] = node.slices()
        assert now["metadata"]["name"] == name
        assert now["spec"]["pool"]["generation"] == generation
        assert taint_time(node, 3) == stamp
        return now

    def label(team: str) -> None:
        """An edit of the slice that is no business of the driver's."""
        patch = {"metadata": {"labels": {"team": team}}}
        cluster.patch("resource.k8s.io/v1", "ResourceSlice", name, patch)

    handled(node, lambda: label("ml"))
    unchanged()

    # The watch ends (every 5 minutes, or here with the server): list and compare again.
    handled(node, lambda: new_watch(node))
    before = unchanged()

    # Another device fails: one write, and the first taint keeps its time.
    handled(node, lambda: break_device(node, 7))
    cluster.wait_for("neurondevice7 tainted", lambda: taint_time(node, 7), 10)
    [after] = node.slices()
    assert after["metadata"]["name"] == name
    assert after["spec"]["pool"]["generation"] == generation + 1
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert taint_time(node, 3) == stamp
    assert after["metadata"]["labels"] == {"team": "ml"}  # the update kept the edit

    # Every write changed the slice's spec, which moves its metadata.generation: one
    # create, then one update per change. Read after one more pass, which comes after
    # the counting of every earlier write.
    handled(node, lambda: label("ml2"))
    [last] = node.slices()
    assert last["metadata"]["generation"] == after["metadata"]["generation"]
    assert metrics(port).get(PUBLISHES) == last["metadata"]["generation"]
