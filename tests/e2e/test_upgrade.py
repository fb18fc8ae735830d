"""A control-plane upgrade under running drivers, and the downgrade back.

The cluster starts at 1.34.4 with DRAPartitionableDevices on, so an UltraServer
node publishes its devices and `neuronnode` with shared counters in the 1.34 layout
(counters beside the devices). The API server is then stopped and started from a
1.35+ release on the same etcd (`NEURON_DRA_UPGRADE_TO`, default the newest
release; `make test-versions` uses v1.36.3): there the stored pool is invalid, and
the driver must re-lay it (counters in a slice of their own) without a restart,
while a claim prepared before the upgrade stays prepared.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consts import DRIVER_NAME, NODE_DEVICE_NAME, RESOURCE_TYPE_NODE
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra_harness.build import RELEASES, Binaries, build_release
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node
from neuron_dra_harness.workloads import claim_spec, submit

pytestmark = [pytest.mark.e2e, pytest.mark.versions(check="upgrade and downgrade")]

REPO = Path(__file__).resolve().parents[2]
FROM = RELEASES[0]
RELAY_BOUND_S = 30.0  # API server ready -> the UltraServer's devices allocatable again
# A node's kubelet meets both outages with client-go's reflector backoff (0.8 s
# doubling to 30 s, jitter up to twice, reset after two quiet minutes): its pod watch
# may come back a minute after the API server, whatever the driver does.
KUBELET_BACK_S = 90.0
WHOLE = f"device.attributes['{DRIVER_NAME}'].resourceType == '{RESOURCE_TYPE_NODE}'"


def target() -> str:
    return os.environ.get("NEURON_DRA_UPGRADE_TO", RELEASES[-1])


@pytest.fixture
def cluster_at_oldest(e2e_binaries: Binaries) -> Iterator[tuple[Cluster, dict[str, SimulatedNode]]]:
    if e2e_binaries.version != FROM or e2e_binaries.kubelet_release != FROM:
        pytest.skip(f"run once, from {FROM} with its own kubelet")
    with Cluster(e2e_binaries, feature_gates={"DRAPartitionableDevices": True}) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        nodes = {
            "trn2": add_simulated_node(cluster, "trn2", "trn2.48xlarge"),
            "us-0": add_simulated_node(
                cluster, "us-0", "trn2u.48xlarge", ultraserver=FakeUltraServer("us-u", 0)
            ),
        }
        yield cluster, nodes


def layout(node: SimulatedNode) -> str:
    slices = node.slices()
    counters = [s for s in slices if s["spec"].get("sharedCounters")]
    if not counters:
        return "none"
    return "own slice" if not counters[0]["spec"].get("devices") else "beside devices"


def wait_allocatable(cluster: Cluster, node: SimulatedNode) -> float:
    """Seconds until one device of `node` is allocated again (the driver's part: the
    pool re-laid, the scheduler takes it); then that pod and one given the whole
    node run."""
    started = time.monotonic()
    one = submit(cluster, claim_spec(1), node.name)
    cluster.wait_for_pod_scheduled(one, timeout=RELAY_BOUND_S + 30)
    took = time.monotonic() - started
    cluster.wait_for_pod_running(one, timeout=KUBELET_BACK_S)
    cluster.delete("v1", "Pod", one, "default")
    cluster.wait_for_pod_gone(one, timeout=60)
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", one, "default")
    whole = submit(cluster, claim_spec(1, cel=WHOLE), node.name)
    pod = cluster.wait_for_pod_running(whole, timeout=60)
    [result] = cluster.get("resource.k8s.io/v1", "ResourceClaim", whole, "default")["status"][
        "allocation"
    ]["devices"]["results"]
    assert result["device"] == NODE_DEVICE_NAME, pod
    cluster.delete("v1", "Pod", whole, "default")
    cluster.wait_for_pod_gone(whole, timeout=60)
    return took


def test_upgrade_relays_the_pool_and_keeps_prepared_claims(
    cluster_at_oldest: tuple[Cluster, dict[str, SimulatedNode]], record_property: Any
) -> None:
    cluster, nodes = cluster_at_oldest
    us, trn2 = nodes["us-0"], nodes["trn2"]
    assert layout(us) == "beside devices"
    wait_allocatable(cluster, us)
    held = submit(cluster, claim_spec(2), trn2.name)
    cluster.wait_for_pod_running(held, timeout=60)
    prepared = trn2.cdi_files()

    newer = build_release(target())
    cluster.upgrade(newer)
    took = wait_allocatable(cluster, us)
    assert took < RELAY_BOUND_S, f"UltraServer allocatable {took:.1f}s after the upgrade"
    assert layout(us) == "own slice"
    assert us.plugin is not None and "re-laying pool" in us.plugin.log_path.read_text()
    # Nothing prepared before the upgrade was lost, and it still unprepares cleanly.
    assert cluster.get("v1", "Pod", held, "default")["status"]["phase"] == "Running"
    assert trn2.cdi_files() == prepared

    older = build_release(FROM)
    cluster.upgrade(older, feature_gates={"DRAPartitionableDevices": True})
    back = wait_allocatable(cluster, us)
    assert back < RELAY_BOUND_S, f"UltraServer allocatable {back:.1f}s after the downgrade"
    assert layout(us) == "beside devices"
    cluster.delete("v1", "Pod", held, "default")
    cluster.wait_for_pod_gone(held, timeout=60)
    cluster.wait_for("CDI spec removed", lambda: not trn2.cdi_files())
    record_property("detail", f"to {target()}: allocatable in {took:.1f}s, back in {back:.1f}s")
