"""Gangs: the simulator against the real 1.37 kube-scheduler, on the same slices.

Each case runs on a control plane of its own (as tests/e2e/test_gangs.py sets it up:
GenericWorkload and TopologyAwareWorkloadScheduling on, scheduling.k8s.io/v1beta1
served) over one UltraServer of four trn2u.48xlarge nodes whose slices and labels
are those the simulator uses. The 4-node gang of examples/specs/podgroup/ fits, and
both place each rank on its node; with node 3's whole-node device out of reach (a
pod holds one of its devices) the gang is one member short, and neither places any
of it, nor does the simulator reading the cluster's PodGroup and claims. Earlier
releases do not serve PodGroups: they skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer, build_fake_node
from neuron_dra.resources.nodelabels import owned_labels
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from neuron_dra.tools.simulate import Cluster as SimCluster
from neuron_dra.tools.simulate import (
    SimNode,
    live_cluster,
    load_documents,
    node_from_slices,
    simulate,
    simulate_documents,
    take_allocated,
)
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from tests.e2e.test_gangs import GATES, RUNTIME_CONFIG, busy_pod, refused
from tests.e2e.test_plugin import create_in, namespace

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GANG = REPO / "examples" / "specs" / "podgroup" / "us-4-node-gang.yaml"
Obj = dict[str, Any]


@pytest.fixture
def real(e2e_binaries: Binaries) -> Iterator[Cluster]:
    if e2e_binaries.minor < 37:
        pytest.skip(f"PodGroups need Kubernetes 1.37 (this is 1.{e2e_binaries.minor})")
    with Cluster(e2e_binaries, feature_gates=GATES, runtime_config=RUNTIME_CONFIG) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        yield cluster


def ultraserver(real: Cluster, tmp_path: Path) -> list[SimNode]:
    """Four trn2u.48xlarge nodes of one UltraServer: Node objects with the labels the
    driver keeps on them, their slices on the server and in the simulator."""
    layout = real.counter_layout()
    nodes = []
    for i in range(4):
        name = f"us-s-{i}"
        root = build_fake_node(
            tmp_path / name, "trn2u.48xlarge", ultraserver=FakeUltraServer("us-s", i)
        )
        inventory = discover(root).inventory
        labels = {k: v for k, v in owned_labels(inventory).items() if v is not None}
        labels["node.kubernetes.io/instance-type"] = "trn2u.48xlarge"
        node = real.add_node(name, labels)
        options = SliceOptions(
            name, node["metadata"]["uid"], 1, UltraServerDevices.BOTH, counter_layout=layout
        )
        slices = build_slices(inventory, options)
        for obj in slices:
            real.create(obj)
        nodes.append(node_from_slices(name, slices, labels=labels, inventory=inventory))
    return nodes


def gang_docs() -> list[Obj]:
    return [d for d in yaml.safe_load_all(GANG.read_text()) if d]


def pods_of(docs: list[Obj]) -> list[str]:
    return [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]


def scheduled(pod: Obj) -> bool:
    return bool(pod["spec"].get("nodeName"))


def test_a_gang_that_fits_is_placed_as_the_scheduler_places_it(
    real: Cluster, tmp_path: Path
) -> None:
    nodes = ultraserver(real, tmp_path)
    outcomes = simulate([GANG], SimCluster(nodes, {}))
    simulated = {o.claim.pod.split("/")[1]: o.node for o in outcomes if o.claim.pod}
    assert simulated == {f"us-4-node-gang-{i}": f"us-s-{i}" for i in range(4)}

    ns = namespace(real)
    docs = gang_docs()
    create_in(real, ns, docs)
    placed = {
        name: real.wait_for_pod(name, ns, scheduled, "scheduled", timeout=60)["spec"]["nodeName"]
        for name in pods_of(docs)
    }
    assert placed == simulated


def test_a_gang_one_member_short_is_placed_by_neither(real: Cluster, tmp_path: Path) -> None:
    nodes = ultraserver(real, tmp_path)
    busy = busy_pod("us-s-3")
    path = tmp_path / "busy-then-gang.yaml"
    path.write_text(yaml.safe_dump_all([*busy, *gang_docs()]))
    outcomes = simulate([path], SimCluster(nodes, {}))
    assert outcomes[0].node == "us-s-3"  # the busy pod's device
    assert [o.allocated for o in outcomes[1:]] == [False] * 4
    assert outcomes[1].reasons[0] == (
        "PodGroup default/us-4-node-gang (gang.minCount 4): at most 3 of its 4 pods fit at "
        "once on nodes sharing neuron.amazonaws.com/ultraserver-server-id-4, so none is placed"
    )

    ns = namespace(real)
    create_in(real, ns, busy)
    real.wait_for_pod(busy[1]["metadata"]["name"], ns, scheduled, "scheduled", timeout=60)
    docs = gang_docs()
    create_in(real, ns, docs)
    for name in pods_of(docs):
        pod = real.wait_for_pod(name, ns, refused, "refused by the scheduler", timeout=60)
        assert not scheduled(pod), f"{name} bound to {pod['spec']['nodeName']}"
    for claim in real.list_objects("resource.k8s.io/v1", "ResourceClaim", ns):
        if claim["metadata"]["name"].startswith("us-4-node-gang"):
            assert not claim.get("status", {}).get("allocation"), claim["metadata"]["name"]

    # Read from the live cluster: its PodGroup, and the busy pod's device taken.
    live = live_cluster(real.kubeconfig)
    [group] = [g for g in live.pod_groups if g["metadata"]["namespace"] == ns]
    assert group["kind"] == "PodGroup"
    from_server = SimCluster(live.nodes, live.classes)
    take_allocated(from_server, live.claims)
    pods = [d for d in docs if d["kind"] != "PodGroup"]
    for doc in pods:
        doc["metadata"]["namespace"] = ns
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump_all(pods))
    outcomes = simulate_documents([("cluster", group), *load_documents([path])], from_server)
    assert [o.allocated for o in outcomes] == [False] * 4
    assert outcomes[0].reasons[0].startswith(f"PodGroup {ns}/us-4-node-gang (gang.minCount 4)")
