"""UltraServer jobs as gangs on the 1.37 scheduler: PodGroups with `gang.minCount` and a
topology constraint on the driver's UltraServer label, each pod claiming its node's
whole-node device (examples/specs/podgroup/).

The cluster runs kube-apiserver, kube-scheduler and kube-controller-manager 1.37 with
GenericWorkload and TopologyAwareWorkloadScheduling on and scheduling.k8s.io/v1beta1
served, over two UltraServers of four simulated trn2u.48xlarge nodes. Earlier releases
do not serve the API these tests need (DESIGN.md section 12): they skip.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from consts import (
    LABEL_ULTRASERVER_NODE_ID_2,
    LABEL_ULTRASERVER_NODE_ID_4,
    LABEL_ULTRASERVER_SERVER_ID_2,
    LABEL_ULTRASERVER_SERVER_ID_4,
)
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import DEFAULT_RUNTIME_CONFIG, Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node, env_of
from tests.e2e.test_plugin import create_in, namespace

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
PODGROUP = REPO / "examples" / "specs" / "podgroup"
GANG_FILES = sorted(p.name for p in PODGROUP.glob("*.yaml"))
ULTRASERVERS = ("us-g", "us-h")
GATES = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}
RUNTIME_CONFIG = f"{DEFAULT_RUNTIME_CONFIG},scheduling.k8s.io/v1beta1=true"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Fleet:
    cluster: Cluster
    nodes: dict[str, SimulatedNode]


@pytest.fixture(scope="module")
def fleet(e2e_binaries: Binaries) -> Iterator[Fleet]:
    if e2e_binaries.minor < 37:
        pytest.skip(f"gangs with topology need Kubernetes 1.37 (this is 1.{e2e_binaries.minor})")
    with Cluster(e2e_binaries, feature_gates=GATES, runtime_config=RUNTIME_CONFIG) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        nodes = {
            f"{server}-{i}": add_simulated_node(
                cluster, f"{server}-{i}", "trn2u.48xlarge", ultraserver=FakeUltraServer(server, i)
            )
            for server in ULTRASERVERS
            for i in range(4)
        }
        yield Fleet(cluster, nodes)


def load(name: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all((PODGROUP / name).read_text()) if d]


def pods_of(docs: list[Obj]) -> list[str]:
    return [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]


def node_labels(cluster: Cluster, node: str) -> dict[str, str]:
    return dict(cluster.get("v1", "Node", node)["metadata"]["labels"])


def refused(pod: Obj) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


def run_gang(cluster: Cluster, ns: str, docs: list[Obj]) -> dict[str, Obj]:
    create_in(cluster, ns, docs)
    return {name: cluster.wait_for_pod_running(name, ns, timeout=90) for name in pods_of(docs)}


def delete_gangs(fleet: Fleet, *gangs: tuple[str, list[Obj]]) -> None:
    """Delete the pods of every (namespace, documents); the nodes drop their claims' CDI
    specs."""
    cluster = fleet.cluster
    specs = set()
    for ns, docs in gangs:
        for name in pods_of(docs):
            pod = cluster.get("v1", "Pod", name, ns)
            for status in pod.get("status", {}).get("resourceClaimStatuses") or []:
                claim = cluster.get_or_none(
                    "resource.k8s.io/v1", "ResourceClaim", status["resourceClaimName"], ns
                )
                if claim is not None:
                    specs.add(f"neuron.aws.com-{claim['metadata']['uid']}.json")
            cluster.delete("v1", "Pod", name, ns)
    for ns, docs in gangs:
        for name in pods_of(docs):
            cluster.wait_for_pod_gone(name, ns, timeout=60)
    for node in fleet.nodes.values():
        cluster.wait_for(f"CDI specs on {node.name} removed", _none_of(node, specs))


def _none_of(node: SimulatedNode, specs: set[str]) -> Callable[[], bool]:
    return lambda: not specs & set(node.cdi_files())


@pytest.mark.parametrize("spec_file", GANG_FILES)
def test_example_is_accepted_by_the_api_server(fleet: Fleet, spec_file: str) -> None:
    cluster = fleet.cluster
    result = cluster.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-n",
        "default",
        f"--cache-dir={cluster.workdir / 'kubectl-cache'}",
        "-f",
        str(PODGROUP / spec_file),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    accepted = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(accepted) == len(load(spec_file)), result.stdout


def check_ranks(cluster: Cluster, running: dict[str, Obj], size: int, mode: str) -> str:
    """Every pod of the gang on one unit, pod i on its node i with NODE_ID i: the unit."""
    server_label = {4: LABEL_ULTRASERVER_SERVER_ID_4, 2: LABEL_ULTRASERVER_SERVER_ID_2}[size]
    node_label = {4: LABEL_ULTRASERVER_NODE_ID_4, 2: LABEL_ULTRASERVER_NODE_ID_2}[size]
    units = set()
    for name, pod in running.items():
        rank = name.rsplit("-", 1)[1]
        labels = node_labels(cluster, pod["spec"]["nodeName"])
        env = env_of(pod, "train")
        assert labels[node_label] == env["NEURON_RT_ULTRASERVER_NODE_ID"] == rank
        assert env["NEURON_RT_ULTRASERVER_SERVER_ID"] == labels[server_label]
        assert env["NEURON_RT_ULTRASERVER_MODE"] == mode
        units.add(labels[server_label])
    assert len(units) == 1, units
    return units.pop()


def test_a_4_node_gang_lands_whole_on_one_ultraserver(fleet: Fleet) -> None:
    cluster = fleet.cluster
    ns, docs = namespace(cluster), load("us-4-node-gang.yaml")
    running = run_gang(cluster, ns, docs)
    assert check_ranks(cluster, running, 4, "1") in ULTRASERVERS
    delete_gangs(fleet, (ns, docs))


def busy_pod(node: str) -> list[Obj]:
    """A pod holding one device of `node`: its whole-node device is out of reach."""
    template: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"busy-{node}"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "neurons",
                            "exactly": {
                                "deviceClassName": "neuron.aws.com",
                                "count": 1,
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": "device.attributes['neuron.aws.com']"
                                            ".resourceType == 'neuron_device'"
                                        }
                                    }
                                ],
                            },
                        }
                    ]
                }
            }
        },
    }
    source = {"name": "neurons", "resourceClaimTemplateName": f"busy-{node}"}
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"busy-{node}"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {"name": "c", "image": "none", "resources": {"claims": [{"name": "neurons"}]}}
            ],
            "resourceClaims": [source],
        },
    }
    return [template, pod]


def test_with_a_node_of_every_ultraserver_busy_nothing_binds_until_one_is_free(
    fleet: Fleet,
) -> None:
    """Rank 3 fits nowhere while the node 3 of both UltraServers is busy; without the
    gang ranks 0-2 would bind and hold three nodes each of them. With it none binds,
    and the whole gang lands once one UltraServer is free."""
    cluster = fleet.cluster
    ns = namespace(cluster)
    busy = {server: busy_pod(f"{server}-3") for server in ULTRASERVERS}
    for docs in busy.values():
        create_in(cluster, ns, docs)
    for docs in busy.values():
        cluster.wait_for_pod_running(docs[1]["metadata"]["name"], ns, timeout=60)

    # The same pods without their PodGroup: ranks 0-2 bind, rank 3 waits.
    loose = [d for d in load("us-4-node-gang.yaml") if d["kind"] != "PodGroup"]
    for doc in loose:
        doc["spec"].pop("schedulingGroup", None)
    loose_ns = namespace(cluster)
    create_in(cluster, loose_ns, loose)
    names = pods_of(loose)
    for name in names[:3]:
        cluster.wait_for_pod_running(name, loose_ns, timeout=60)
    cluster.wait_for_pod(names[3], loose_ns, refused, "refused by the scheduler", timeout=60)
    delete_gangs(fleet, (loose_ns, loose))

    gang = load("us-4-node-gang.yaml")
    create_in(cluster, ns, gang)
    for name in pods_of(gang):
        pod = cluster.wait_for_pod(name, ns, refused, "refused by the scheduler", timeout=60)
        assert not pod["spec"].get("nodeName"), f"{name} bound to {pod['spec']['nodeName']}"
    for claim in cluster.list_objects("resource.k8s.io/v1", "ResourceClaim", ns):
        if claim["metadata"]["name"].startswith("us-4-node-gang"):
            assert not claim.get("status", {}).get("allocation"), claim["metadata"]["name"]

    freed = ULTRASERVERS[1]
    cluster.delete("v1", "Pod", f"busy-{freed}-3", ns)
    running = {name: cluster.wait_for_pod_running(name, ns, timeout=90) for name in pods_of(gang)}
    assert check_ranks(cluster, running, 4, "1") == freed
    delete_gangs(fleet, (ns, gang + busy[ULTRASERVERS[0]]))


def test_2_node_gangs_take_half_ultraservers_in_the_mode_the_hardware_offers(
    fleet: Fleet,
) -> None:
    """Four 2-node gangs fill both UltraServers, each on one half; a healthy trn2u
    offers X2V for its pairs, so each pod runs in runtime mode 3."""
    cluster = fleet.cluster
    docs = load("us-2-node-gang.yaml")
    gangs = []
    for _ in range(4):
        ns = namespace(cluster)
        gangs.append((ns, docs, run_gang(cluster, ns, copy.deepcopy(docs))))
    units = [check_ranks(cluster, running, 2, "3") for _, _, running in gangs]
    assert sorted(units) == sorted(f"{s}-{half}" for s in ULTRASERVERS for half in (0, 1))
    delete_gangs(fleet, *((ns, gang) for ns, gang, _ in gangs))
