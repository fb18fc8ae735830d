"""The topology design, proven with the real kube-scheduler's DRA allocator.

Slices come straight from the slice builder (no plugin), published by the
test; every assertion is on the ResourceClaim status the scheduler wrote.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer, build_fake_node
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.workloads import claim_spec, submit, unschedulable_reason

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "examples" / "specs"
Obj = dict[str, Any]
ROW_SETS = [set(range(i, i + 4)) for i in range(0, 16, 4)]
HALF_SETS = [set(range(0, 8)), set(range(8, 16))]

# name -> (instance type, driver version, UltraServer node id)
NODES: dict[str, tuple[str, str, int | None]] = {
    "pin-a": ("trn2.48xlarge", "2.20.0.0", None),
    "pin-b": ("trn2.48xlarge", "2.20.0.0", None),
    "pin-c": ("trn2.48xlarge", "2.20.0.0", None),
    "ver-a": ("trn2.48xlarge", "2.24.7.0", None),
    "ver-b": ("trn2.48xlarge", "2.26.1.0", None),
    "seed-a": ("trn2.48xlarge", "2.20.0.0", None),
    "seed-b": ("trn2.48xlarge", "2.20.0.0", None),
    "inf2-a": ("inf2.48xlarge", "2.20.0.0", None),
    "inf1-a": ("inf1.24xlarge", "2.20.0.0", None),
    **{f"us-{i}": ("trn2u.48xlarge", "2.20.0.0", i) for i in range(2)},
}


@pytest.fixture(scope="module")
def topo(e2e_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster serving shared counters, with slices for every node in NODES."""
    gates = {"DRAPartitionableDevices": True}
    with Cluster(e2e_binaries, feature_gates=gates) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        sysfs = tmp_path_factory.mktemp("sysfs")
        layout = cluster.counter_layout()
        for name, (instance_type, version, us_node) in NODES.items():
            node = cluster.add_node(name, {"node.kubernetes.io/instance-type": instance_type})
            ultraserver = FakeUltraServer("us-x", us_node) if us_node is not None else None
            root = build_fake_node(
                sysfs / name, instance_type, driver_version=version, ultraserver=ultraserver
            )
            options = SliceOptions(
                name, node["metadata"]["uid"], 1, UltraServerDevices.BOTH, counter_layout=layout
            )
            for obj in build_slices(discover(root).inventory, options):
                created = cluster.create(obj)
                assert created["spec"].get("sharedCounters") == obj["spec"].get("sharedCounters")
        yield cluster


def allocated(cluster: Cluster, claim: str) -> tuple[str, set[str]]:
    """(pool, device names) the scheduler allocated to `claim`."""
    status = cluster.wait_for_claim_allocated(claim)["status"]
    results = status["allocation"]["devices"]["results"]
    pools = {r["pool"] for r in results}
    assert len(pools) == 1 and {r["driver"] for r in results} == {"neuron.aws.com"}
    return pools.pop(), {r["device"] for r in results}


def indices(devices: set[str]) -> set[int]:
    return {int(d.removeprefix("neurondevice")) for d in devices}


def test_connected_sets_on_trn2(topo: Cluster) -> None:
    rows = [submit(topo, claim_spec(4, group=4), "pin-a") for _ in range(4)]
    got = [indices(allocated(topo, c)[1]) for c in rows]
    assert sorted(got, key=min) == ROW_SETS  # four claims, the four rows
    half = submit(topo, claim_spec(8, group=8), "pin-b")
    assert indices(allocated(topo, half)[1]) in HALF_SETS
    everything = submit(topo, claim_spec(16, group=16), "pin-c")
    assert indices(allocated(topo, everything)[1]) == set(range(16))


def test_allocation_mode_all_gets_every_device(topo: Cluster) -> None:
    claim = submit(
        topo,
        claim_spec(None, cel="device.attributes['neuron.aws.com'].instanceType == 'inf2.48xlarge'"),
    )
    pool, devices = allocated(topo, claim)
    assert pool == "inf2-a" and indices(devices) == set(range(12))


def test_taken_devices_leave_free_rows_and_impossible_claims_wait(topo: Cluster) -> None:
    node = "ver-b"
    for taken in (1, 6):
        single = submit(
            topo,
            claim_spec(1, cel=f"device.attributes['neuron.aws.com'].deviceId == {taken}"),
            node,
        )
        assert indices(allocated(topo, single)[1]) == {taken}
    row = submit(topo, claim_spec(4, group=4), node)
    assert indices(allocated(topo, row)[1]) in ROW_SETS[2:]
    other_row = submit(topo, claim_spec(4, group=4), node)
    assert indices(allocated(topo, other_row)[1]) in ROW_SETS[2:]
    # Rows 0 and 1 each lost a device, rows 2 and 3 are taken: no row of 4 is left,
    # although 6 devices are free.
    impossible = submit(topo, claim_spec(4, group=4), node)
    assert "cannot allocate all claims" in unschedulable_reason(topo, impossible)


def test_driver_version_selector_picks_only_matching_nodes(topo: Cluster) -> None:
    text = (SPECS / "2.26-driver-trn2.yaml").read_text()
    [template] = list(yaml.safe_load_all(text))
    claims = [submit(topo, copy.deepcopy(template["spec"]["spec"])) for _ in range(3)]
    pools = [allocated(topo, c)[0] for c in claims[:2]]
    assert pools == ["ver-a", "ver-a"]  # the only node with driver 2.24.7.0, two halves
    assert "cannot allocate all claims" in unschedulable_reason(topo, claims[2])


def test_instance_type_selector(topo: Cluster) -> None:
    inf1 = "device.attributes['neuron.aws.com'].instanceType == 'inf1.24xlarge'"
    claim = submit(topo, claim_spec(2, group=2, cel=inf1))
    pool, devices = allocated(topo, claim)
    assert pool == "inf1-a" and indices(devices) in [{i, i + 1} for i in range(0, 16, 2)]


def test_whole_node_device_excludes_the_nodes_devices(topo: Cluster) -> None:
    node_device = "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'"
    one_device = "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'"
    whole = submit(topo, claim_spec(1, cel=node_device), "us-0")
    assert allocated(topo, whole) == ("us-0", {"neuronnode"})
    assert "cannot allocate all claims" in unschedulable_reason(
        topo, submit(topo, claim_spec(1, cel=one_device), "us-0")
    )
    # The reverse on the other node: one device taken, the whole node is not available.
    single = submit(topo, claim_spec(1, cel=one_device), "us-1")
    assert allocated(topo, single)[0] == "us-1"
    assert "cannot allocate all claims" in unschedulable_reason(
        topo, submit(topo, claim_spec(1, cel=node_device), "us-1")
    )


@pytest.mark.parametrize(
    "spec_file", ["1x4-connected-devices.yaml", "v1beta1/1x4-connected-devices.yaml"]
)
def test_seed_template_as_written(topo: Cluster, spec_file: str) -> None:
    namespace = "seed-" + spec_file.replace("/", "-").replace(".yaml", "").replace(".", "-")[:40]
    topo.create_namespace(namespace)
    docs = list(yaml.safe_load_all((SPECS / spec_file).read_text()))
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "Pod":
            doc["spec"]["automountServiceAccountToken"] = False
        topo.create(doc)
    pod = topo.wait_for_pod(
        "pod0",
        namespace,
        lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
        "claim created",
    )
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = topo.wait_for_claim_allocated(status["resourceClaimName"], namespace)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert indices({r["device"] for r in results}) in ROW_SETS
    trn2_nodes = {
        n for n, (instance_type, _, _) in NODES.items() if instance_type == "trn2.48xlarge"
    }
    assert {r["pool"] for r in results} <= trn2_nodes
