"""The examples under examples/specs, as a user applies them, on a real control plane.

Every manifest must be accepted by the API server exactly as written (server-side dry
run, strict field validation). The examples that tests/e2e/test_plugin.py does not
already run are then allocated by the real scheduler on simulated nodes with the real
plugin, and checked for the device set they promise, the exact container environment,
and that deleting them leaves no CDI spec or checkpoint entry behind.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
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
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import DEFAULT_CONTROLLERS, Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node, container_view, env_of
from neuron_dra_harness.patched import admin_skips_counters
from neuron_dra_harness.workloads import unschedulable_reason
from tests.e2e.test_cores import too_old as without_cores
from tests.e2e.test_cores import visible
from tests.e2e.test_extended_resources import check_and_delete, special_claim, too_old
from tests.e2e.test_plugin import (
    claim_of,
    cluster_of,
    create_in,
    delete_and_assert_released,
    expected_env,
    namespace,
    pod_using,
    run_and_check,
)

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "examples" / "specs"
EXAMPLE_FILES = sorted(p.relative_to(SPECS).as_posix() for p in SPECS.rglob("*.yaml"))
# PodGroups need APIs the release's default gates do not serve: test_gangs.py applies them.
DEFAULT_GATE_EXAMPLES = [f for f in EXAMPLE_FILES if not f.startswith("podgroup/")]
Obj = dict[str, Any]

ULTRASERVERS = ("us-a", "us-b")
LWS_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
    "spec": {
        "group": "leaderworkerset.x-k8s.io",
        "scope": "Namespaced",
        "names": {
            "kind": "LeaderWorkerSet",
            "listKind": "LeaderWorkerSetList",
            "plural": "leaderworkersets",
            "singular": "leaderworkerset",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def nodes(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    """The release's default feature gates (from 1.36: shared counters, so NeuronCores
    too, and trn2u nodes publish both kinds; before: only `neuronnode`) with two
    trn2.48xlarge, one inf2.48xlarge and two UltraServers of four
    trn2u.48xlarge nodes: us-4-node-config.yaml asks for two 4-node groups."""
    # Deployments too: specific-driver-version.yaml runs as written, replicas and all.
    controllers = (*DEFAULT_CONTROLLERS, "deployment-controller", "replicaset-controller")
    with Cluster(e2e_binaries, controllers=controllers) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        # Only the LeaderWorkerSet API, so that its documents apply as written; the LWS
        # controller is not run: the tests place the group's pods themselves.
        cluster.create(LWS_CRD)
        cluster.wait_for("the LeaderWorkerSet CRD to be established", _lws_established(cluster))
        found = {
            name: add_simulated_node(cluster, name, itype)
            for name, itype in (
                ("trn2-a", "trn2.48xlarge"),
                ("trn2-b", "trn2.48xlarge"),
                ("inf2-a", "inf2.48xlarge"),
            )
        }
        for server in ULTRASERVERS:
            for i in range(4):
                found[f"{server}-{i}"] = add_simulated_node(
                    cluster,
                    f"{server}-{i}",
                    "trn2u.48xlarge",
                    ultraserver=FakeUltraServer(server, i),
                )
        yield found


def _lws_established(cluster: Cluster) -> Callable[[], bool]:
    def check() -> bool:
        crd = cluster.get(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", LWS_CRD["metadata"]["name"]
        )
        # A new CRD's status.conditions is null until the controller first looks at it.
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    return check


def load(spec_file: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all((SPECS / spec_file).read_text()) if doc]


def pinned(docs: list[Obj], node: str) -> list[Obj]:
    """The example with its pod held to one node, to show it on a given instance type."""
    out = copy.deepcopy(docs)
    for doc in out:
        if doc["kind"] == "Pod":
            doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return out


def devices_of(claim: Obj) -> list[int]:
    results = claim["status"]["allocation"]["devices"]["results"]
    return sorted(int(r["device"].removeprefix("neurondevice")) for r in results)


def claims_by_pod_name(cluster: Cluster, ns: str, pod: Obj) -> dict[str, Obj]:
    """The pod's ResourceClaims keyed by the name the pod gives them."""
    return {
        s["name"]: cluster.get("resource.k8s.io/v1", "ResourceClaim", s["resourceClaimName"], ns)
        for s in pod["status"]["resourceClaimStatuses"]
    }


def delete_and_check_clean(
    cluster: Cluster, ns: str, pods: dict[str, SimulatedNode], uids: set[str]
) -> None:
    """Delete the pods; their nodes must drop every CDI spec and checkpoint entry."""
    for name in pods:
        cluster.delete("v1", "Pod", name, ns)
    wait_clean(cluster, ns, pods, uids)


def wait_clean(cluster: Cluster, ns: str, pods: dict[str, SimulatedNode], uids: set[str]) -> None:
    """Wait for the pods to be gone and their nodes to drop every CDI spec and checkpoint
    entry of the claims `uids`."""
    for name, node in pods.items():
        cluster.wait_for_pod_gone(name, ns, timeout=60)
        cluster.wait_for(f"CDI specs on {node.name} removed", _no_cdi_files(node))
        assert not uids & node.checkpointed()


def _no_cdi_files(node: SimulatedNode) -> Callable[[], bool]:
    return lambda: not node.cdi_files()


# --------------------------------------------------------------------- every manifest


@pytest.mark.parametrize("spec_file", DEFAULT_GATE_EXAMPLES)
def test_example_is_accepted_by_the_api_server(
    nodes: dict[str, SimulatedNode], spec_file: str
) -> None:
    cluster = cluster_of(nodes)
    docs = load(spec_file)
    # v1beta1/lnc-neurons.yaml names its namespace as published; users create it first.
    # admin-access.yaml makes its own, labelled as adminAccess needs: made here, since a
    # dry run of the file's Namespace leaves the claims nowhere to be checked.
    made = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Namespace"}
    for ns in {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]}:
        if cluster.get_or_none("v1", "Namespace", ns) is None:
            if ns in made:
                cluster.create(made[ns])
                cluster.wait_for_service_account(ns)
            else:
                cluster.create_namespace(ns)
    result = cluster.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        f"--cache-dir={cluster.workdir / 'kubectl-cache'}",
        "-f",
        str(SPECS / spec_file),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    accepted = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(accepted) == len(docs), result.stdout


def test_readme_lists_every_example() -> None:
    readme = (SPECS / "README.md").read_text()
    missing = [f for f in EXAMPLE_FILES if f"`{f}`" not in readme]
    assert not missing, f"examples/specs/README.md does not describe {missing}"


# --------------------------------------------------------------------- one claim, one container


@pytest.mark.parametrize("node", ["trn2-a", "inf2-a"])
def test_single_device(nodes: dict[str, SimulatedNode], node: str) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("single-device.yaml"), node))
    run_and_check(nodes, ns, "single-device", None, 1)


@pytest.mark.parametrize("node", ["trn2-a", "inf2-a"])
def test_all_devices_of_any_instance_type(nodes: dict[str, SimulatedNode], node: str) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("all-devices.yaml"), node))
    pod = cluster.wait_for_pod_running("all-devices", ns, timeout=60)
    assert devices_of(claim_of(cluster, ns, pod)) == list(
        range(INSTANCE_TYPES[nodes[node].instance_type].devices)
    )
    # count None: every device of the node; the env is checked at the node's default LNC.
    run_and_check(nodes, ns, "all-devices", None, None)


def test_first_available_takes_the_half_when_the_whole_is_not_free(
    nodes: dict[str, SimulatedNode],
) -> None:
    """The real scheduler walks `firstAvailable` in order: the whole node while it is
    free; with one device held, the torus half without it."""
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("first-available.yaml"), "trn2-b"))
    pod = cluster.wait_for_pod_running("first-available", ns, timeout=60)
    [request] = {
        r["request"]
        for r in claim_of(cluster, ns, pod)["status"]["allocation"]["devices"]["results"]
    }
    assert request == "neurons/whole"
    delete_and_assert_released(
        nodes["trn2-b"], "first-available", ns, claim_of(cluster, ns, pod)["metadata"]["uid"]
    )

    holder = pinned(load("single-device.yaml"), "trn2-b")
    create_in(cluster, ns, holder)
    held_pod = cluster.wait_for_pod_running(holder[-1]["metadata"]["name"], ns, timeout=60)
    [held] = devices_of(claim_of(cluster, ns, held_pod))
    again = [d for d in pinned(load("first-available.yaml"), "trn2-b") if d["kind"] == "Pod"]
    create_in(cluster, ns, again)
    pod = cluster.wait_for_pod_running("first-available", ns, timeout=60)
    claim = claim_of(cluster, ns, pod)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["request"] for r in results} == {"neurons/half"}
    half = devices_of(claim)
    assert len(half) == 8 and held not in half and half in (list(range(8)), list(range(8, 16)))
    assert env_of(pod, "ctr0") == expected_env("trn2.48xlarge", half, None)
    assert container_view(pod, "ctr0")["deviceNodes"] == [f"/dev/neuron{d}" for d in half]
    cluster.delete("v1", "Pod", held_pod["metadata"]["name"], ns)
    delete_and_assert_released(nodes["trn2-b"], "first-available", ns, claim["metadata"]["uid"])


def test_every_device_on_nodes_of_a_driver_version(nodes: dict[str, SimulatedNode]) -> None:
    """Two replicas, each with every single device of a node of its own: an inf2.48xlarge
    and, where trn2u nodes publish single devices beside `neuronnode` (1.36+), a
    trn2u.48xlarge; elsewhere a trn2.48xlarge."""
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    second = "trn2-a" if too_old(cluster.binaries) else "us-b-0"
    template, deployment = load("specific-driver-version.yaml")
    deployment["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": ["inf2-a", second],
                            }
                        ]
                    }
                ]
            }
        }
    }
    deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] = False
    create_in(cluster, ns, [template, deployment])

    def running() -> list[Obj] | None:
        pods = cluster.list_objects("v1", "Pod", ns, label_selector="app=driver-version")
        ready = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return ready if len(ready) == 2 else None

    pods = cluster.wait_for("both replicas running", running, timeout=90)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(["inf2-a", second])
    uids = set()
    placed = {}
    for pod in pods:
        node = nodes[pod["spec"]["nodeName"]]
        claim = claim_of(cluster, ns, pod)
        everything = list(range(INSTANCE_TYPES[node.instance_type].devices))
        assert devices_of(claim) == everything
        assert env_of(pod, "ctr0") == expected_env(node.instance_type, everything, None)
        uids.add(claim["metadata"]["uid"])
        placed[pod["metadata"]["name"]] = node
    # The Deployment, not its pods: the ReplicaSet would make new ones.
    cluster.delete("apps/v1", "Deployment", "driver-version", ns)
    wait_clean(cluster, ns, placed, uids)


def skip_too_old(cluster: Cluster) -> None:
    """Skip on releases that serve neither extended resources nor NeuronCores (1.36+)."""
    reason = too_old(cluster.binaries)
    if reason:
        pytest.skip(reason)


def test_device_plugin_style_pod(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    skip_too_old(cluster)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("device-plugin-style-neuron.yaml"), "trn2-a"))
    assert len(check_and_delete(nodes["trn2-a"], "device-plugin-style", ns)) == 4


def check_cores(node: SimulatedNode, pod: Obj, claim: Obj, count: int) -> list[int]:
    """The pod's one container got the device nodes and exactly the numbers of the claim's
    `count` cores; returns the devices they are on."""
    results = claim["status"]["allocation"]["devices"]["results"]
    cores = sorted(int(r["device"].removeprefix("neuroncore")) for r in results)
    assert len(cores) == count and all(r["device"].startswith("neuroncore") for r in results)
    spec = INSTANCE_TYPES[node.instance_type]
    per_device = spec.cores_per_device // (2 if spec.has_lnc else 1)
    devices = sorted({c // per_device for c in cores})
    [container] = pod["spec"]["containers"]
    assert env_of(pod, container["name"]) == {"NEURON_RT_VISIBLE_CORES": visible(cores)}
    view = container_view(pod, container["name"])
    assert view["deviceNodes"] == [f"/dev/neuron{d}" for d in devices]
    return devices


@pytest.mark.parametrize("node", ["trn2-a", "inf2-a"])
@pytest.mark.parametrize(
    ("spec_file", "pod_name", "count"),
    [
        ("single-core.yaml", "single-core", 1),
        ("cores-of-one-device.yaml", "cores-of-one-device", 2),
    ],
)
def test_cores(
    nodes: dict[str, SimulatedNode], node: str, spec_file: str, pod_name: str, count: int
) -> None:
    cluster = cluster_of(nodes)
    skip_too_old(cluster)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load(spec_file), node))
    pod = cluster.wait_for_pod_running(pod_name, ns, timeout=60)
    claim = claim_of(cluster, ns, pod)
    assert len(check_cores(nodes[node], pod, claim, count)) == 1  # one device either way
    delete_and_assert_released(nodes[node], pod_name, ns, claim["metadata"]["uid"])


def test_device_plugin_style_cores(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    skip_too_old(cluster)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("device-plugin-style-neuroncore.yaml"), "inf2-a"))
    pod = cluster.wait_for_pod_running("device-plugin-style-cores", ns, timeout=60)
    assert not pod["spec"].get("resourceClaims")
    claim = special_claim(cluster, pod)
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "extended-resource-neuroncore.neuron.aws.com"
    check_cores(nodes["inf2-a"], pod, claim, 2)
    delete_and_assert_released(
        nodes["inf2-a"], "device-plugin-style-cores", ns, claim["metadata"]["uid"]
    )


def test_inf2_connected_pair(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    create_in(cluster, ns, load("inf2-2-connected.yaml"))  # its selector picks inf2-a
    pod = cluster.wait_for_pod_running("inf2-pair", ns, timeout=60)
    assert pod["spec"]["nodeName"] == "inf2-a"
    first, second = devices_of(claim_of(cluster, ns, pod))
    assert first % 2 == 0 and second == first + 1, "not an aligned pair of the ring"
    run_and_check(nodes, ns, "inf2-pair", None, 2)


# --------------------------------------------------------------------- claims and containers


@pytest.mark.parametrize("node", ["trn2-a", "inf2-a"])
def test_shared_claim_gives_both_containers_the_same_devices(
    nodes: dict[str, SimulatedNode], node: str
) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("shared-claim.yaml"), node))
    pod = cluster.wait_for_pod_running("shared-claim", ns, timeout=60)
    [claim] = claims_by_pod_name(cluster, ns, pod).values()
    devices = devices_of(claim)
    assert devices == list(range(devices[0], devices[0] + 4)) and devices[0] % 4 == 0
    for container in ("workload", "monitor"):
        assert env_of(pod, container) == expected_env(nodes[node].instance_type, devices, None)
        assert container_view(pod, container)["deviceNodes"] == [f"/dev/neuron{d}" for d in devices]
    uid = claim["metadata"]["uid"]
    assert nodes[node].cdi_files() == [f"neuron.aws.com-{uid}.json"]
    assert uid in nodes[node].checkpointed()
    delete_and_check_clean(cluster, ns, {"shared-claim": nodes[node]}, {uid})


@pytest.mark.parametrize("node", ["trn2-a", "inf2-a"])
def test_two_claims_give_each_container_its_own_devices(
    nodes: dict[str, SimulatedNode], node: str
) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("two-claims-one-pod.yaml"), node))
    pod = cluster.wait_for_pod_running("two-claims", ns, timeout=60)
    claims = claims_by_pod_name(cluster, ns, pod)
    assert sorted(claims) == ["neurons0", "neurons1"]
    taken: set[int] = set()
    for container, claim_name in (("worker0", "neurons0"), ("worker1", "neurons1")):
        devices = devices_of(claims[claim_name])
        # One published set of 4: an aligned block (a torus row, a quarter of the ring).
        assert devices == list(range(devices[0], devices[0] + 4)) and devices[0] % 4 == 0
        assert not taken & set(devices), "the two claims share a device"
        taken |= set(devices)
        assert env_of(pod, container) == expected_env(nodes[node].instance_type, devices, None)
        assert container_view(pod, container)["deviceNodes"] == [f"/dev/neuron{d}" for d in devices]
    uids = {c["metadata"]["uid"] for c in claims.values()}
    assert nodes[node].cdi_files() == sorted(f"neuron.aws.com-{u}.json" for u in uids)
    assert uids <= nodes[node].checkpointed()
    delete_and_check_clean(cluster, ns, {"two-claims": nodes[node]}, uids)


def test_one_claim_shared_by_two_pods(nodes: dict[str, SimulatedNode]) -> None:
    """The second pod, not pinned, goes where the claim is; both see its devices; the claim
    stays prepared until the last of them ends."""
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    node = nodes["trn2-b"]
    docs = load("claim-shared-by-pods.yaml")
    sidecar = [d for d in docs if d["metadata"]["name"] == "shared-sidecar"]
    create_in(cluster, ns, pinned([d for d in docs if d not in sidecar], node.name))
    create_in(cluster, ns, sidecar)
    pods = {
        name: cluster.wait_for_pod_running(name, ns, timeout=60)
        for name in ("shared-server", "shared-sidecar")
    }
    assert {pod["spec"]["nodeName"] for pod in pods.values()} == {node.name}
    claim = cluster.get("resource.k8s.io/v1", "ResourceClaim", "shared-neurons", ns)
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == sorted(pods)
    devices = devices_of(claim)
    assert devices == list(range(devices[0], devices[0] + 4)) and devices[0] % 4 == 0
    for pod in pods.values():
        assert env_of(pod, "ctr0") == expected_env(node.instance_type, devices, None)
        assert container_view(pod, "ctr0")["deviceNodes"] == [f"/dev/neuron{d}" for d in devices]
    uid = claim["metadata"]["uid"]
    assert node.cdi_files() == [f"neuron.aws.com-{uid}.json"]
    cluster.delete("v1", "Pod", "shared-server", ns)
    cluster.wait_for_pod_gone("shared-server", ns, timeout=60)
    assert node.cdi_files() == [f"neuron.aws.com-{uid}.json"] and uid in node.checkpointed()
    delete_and_check_clean(cluster, ns, {"shared-sidecar": node}, {uid})


def test_admin_access_has_devices_in_use_and_holds_none(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    node = nodes["trn2-b"]
    ns = namespace(cluster)
    create_in(cluster, ns, pinned(load("1x4-connected-devices.yaml"), node.name))
    row = devices_of(claim_of(cluster, ns, cluster.wait_for_pod_running("pod0", ns, timeout=60)))
    admin = "neuron-admin"  # the example's namespace, labelled for admin access
    for doc in pinned(load("admin-access.yaml"), node.name):
        if doc["kind"] == "Pod":
            doc["spec"]["automountServiceAccountToken"] = False
        if doc["kind"] != "Namespace":
            cluster.create(doc)
        elif cluster.get_or_none("v1", "Namespace", admin) is None:  # made by the dry run's test
            cluster.create(doc)
            cluster.wait_for_service_account(admin, 30)
    using = {"pod0": node}
    if not admin_skips_counters():
        # The node publishes cores, so every device draws on a counter, and the allocator
        # checks admin requests against counters: the row's devices wait until it is gone.
        reason = unschedulable_reason(cluster, "neuron-monitor", admin)
        assert "cannot allocate all claims" in reason, reason
        cluster.delete("v1", "Pod", "pod0", ns)
        cluster.wait_for_pod_gone("pod0", ns, timeout=60)
        using = {}
    monitor = cluster.wait_for_pod_running("neuron-monitor", admin, timeout=60)
    claim = claim_of(cluster, admin, monitor)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert devices_of(claim) == list(range(16)) and all(r["adminAccess"] for r in results)
    assert set(row) < set(devices_of(claim))
    assert container_view(monitor, "ctr0")["deviceNodes"] == [f"/dev/neuron{d}" for d in range(16)]
    # It holds none of them: a half of the node still goes to an ordinary claim.
    create_in(cluster, ns, load("l-trn2.yaml"))
    create_in(cluster, ns, [pod_using("half", "l-trn2", node.name)])
    half = devices_of(claim_of(cluster, ns, cluster.wait_for_pod_running("half", ns, timeout=60)))
    assert len(half) == 8 and (using == {} or not set(half) & set(row))
    cluster.delete("v1", "Pod", "neuron-monitor", admin)
    delete_and_check_clean(cluster, ns, {**using, "half": node}, set())
    wait_clean(cluster, admin, {"neuron-monitor": node}, {claim["metadata"]["uid"]})


EFA_CLASS = "efa.networking.k8s.aws"


def test_neurons_and_efa(nodes: dict[str, SimulatedNode]) -> None:
    """The real scheduler gives the Neuron devices and the EFA interfaces of one device
    group, with the EFA driver's devices stood in for by a slice of the values it publishes
    (its devicegroup ids are this driver's on EFA instance types)."""
    node = nodes["trn2-b"]
    group = "resource.aws.com/devicegroup4_id"
    groups = {
        int(d["name"].removeprefix("neurondevice")): d["attributes"][group]["string"]
        for d in node.devices()
        if d["name"].startswith("neurondevice")
    }
    assert len(groups) == 16 and len(set(groups.values())) == 4
    given = allocated_beside_efa(nodes, node, "efa-and-neuron.yaml", group, groups)
    by_request = {
        request: [int(d.removeprefix("neurondevice").removeprefix("efa")) for d in devices]
        for request, devices in given.items()
    }
    assert sorted(by_request) == ["efa", "neurons"]
    assert len({groups[i] for i in by_request["neurons"] + by_request["efa"]}) == 1
    assert len(by_request["neurons"]) == len(by_request["efa"]) == 4


def test_cores_and_efa(nodes: dict[str, SimulatedNode]) -> None:
    """The real scheduler gives 2 NeuronCores and the EFA interface next to their device:
    each core carries its device's devicegroup1_id, the EFA driver's interface (stood in
    for by a slice, as above) the same value."""
    node = nodes["trn2-b"]
    group = "resource.aws.com/devicegroup1_id"
    if (reason := without_cores(node.cluster.binaries)) is not None:
        pytest.skip(reason)

    def every_core_published() -> list[Obj] | None:
        # A claim of an earlier test on this node may have held devices, whose cores are
        # withdrawn until the agent publishes the release of that claim: wait until each
        # device has its cores again.
        found = node.devices()
        groups = {
            prefix: {
                d["attributes"][group]["string"] for d in found if d["name"].startswith(prefix)
            }
            for prefix in ("neurondevice", "neuroncore")
        }
        return found if groups["neurondevice"] == groups["neuroncore"] else None

    published = node.cluster.wait_for("every core of trn2-b published", every_core_published)
    devices = {
        int(d["name"].removeprefix("neurondevice")): d["attributes"][group]["string"]
        for d in published
        if d["name"].startswith("neurondevice")
    }
    cores = {
        d["name"]: d["attributes"][group]["string"]
        for d in published
        if d["name"].startswith("neuroncore")
    }
    if not cores:
        pytest.skip("this release publishes no NeuronCores")
    assert len(set(devices.values())) == 16 and set(cores.values()) == set(devices.values())
    given = allocated_beside_efa(nodes, node, "cores-and-efa.yaml", group, devices)
    assert sorted(given) == ["cores", "efa"] and len(given["cores"]) == 2
    [efa] = given["efa"]
    values = {cores[c] for c in given["cores"]} | {devices[int(efa.removeprefix("efa"))]}
    assert len(values) == 1, given


def allocated_beside_efa(
    nodes: dict[str, SimulatedNode],
    node: SimulatedNode,
    example: str,
    group: str,
    values: dict[int, str],
) -> dict[str, list[str]]:
    """The devices, by request, that the real scheduler allocates to `example`'s pod on
    `node`, with the EFA driver's DeviceClass and a slice of its interfaces (`efa<i>`
    carrying `values[i]` as `group`) standing in for it. Nothing runs without the EFA
    driver's plugin: the pod is deleted once its claim is allocated, which frees the
    claim, and the stand-ins go with it."""
    cluster = cluster_of(nodes)
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": EFA_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{EFA_CLASS}'"}}]},
        }
    )
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node.name}-efa"},
            "spec": {
                "driver": EFA_CLASS,
                "nodeName": node.name,
                "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"efa{i}", "attributes": {group: {"string": value}}}
                    for i, value in sorted(values.items())
                ],
            },
        }
    )
    ns = namespace(cluster)
    docs = pinned(load(example), node.name)
    [pod_name] = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]
    create_in(cluster, ns, docs)
    pod = cluster.wait_for_pod(
        pod_name,
        ns,
        lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
        "claim made",
        timeout=30,
    )
    name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = cluster.wait_for_claim_allocated(name, ns, timeout=60)
    given: dict[str, list[str]] = {}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        given.setdefault(result["request"], []).append(result["device"])
    cluster.delete("v1", "Pod", pod_name, ns)
    wait_clean(cluster, ns, {pod_name: node}, {claim["metadata"]["uid"]})
    cluster.delete("resource.k8s.io/v1", "ResourceSlice", f"{node.name}-efa")
    cluster.delete("resource.k8s.io/v1", "DeviceClass", EFA_CLASS)
    return given


# --------------------------------------------------------------------- UltraServer units


def test_ultraserver_labels_name_the_units(nodes: dict[str, SimulatedNode]) -> None:
    """The labels LeaderWorkerSet's exclusive placement keys on, as the plugin sets them."""
    cluster = cluster_of(nodes)
    for server in ULTRASERVERS:
        for i in range(4):
            labels = cluster.get("v1", "Node", f"{server}-{i}")["metadata"]["labels"]
            assert labels[LABEL_ULTRASERVER_SERVER_ID_4] == server
            assert labels[LABEL_ULTRASERVER_NODE_ID_4] == str(i)
            assert labels[LABEL_ULTRASERVER_SERVER_ID_2] == f"{server}-{i // 2}"
            assert labels[LABEL_ULTRASERVER_NODE_ID_2] == str(i % 2)


def lws_group(lws: Obj, group: int, unit_label: str, unit: str) -> list[Obj]:
    """The pods LeaderWorkerSet creates for one group, held to one UltraServer unit.

    The controller names the leader `<lws>-<group>` and the workers
    `<lws>-<group>-<index>`, builds them from the leader and worker templates, and with
    the exclusive-topology annotation keeps the group on nodes sharing one value of the
    label; a nodeSelector on that label has the same effect on where the pods may go.
    The one `neuronnode` device per node then spreads them one per node.
    """
    template = lws["spec"]["leaderWorkerTemplate"]
    name = lws["metadata"]["name"]
    pods = []
    for index in range(template["size"]):
        source = template["leaderTemplate"] if index == 0 else template["workerTemplate"]
        spec = copy.deepcopy(source["spec"])
        spec["nodeSelector"] = {unit_label: unit}
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{group}" if index == 0 else f"{name}-{group}-{index}",
                    "labels": dict(source.get("metadata", {}).get("labels", {})),
                },
                "spec": spec,
            }
        )
    return pods


@pytest.mark.parametrize(
    ("spec_file", "unit_label", "node_id_label", "runtime_mode", "lnc"),
    [
        # The v1 us-4-node-config.yaml runs in test_plugin.py; its beta twin runs here.
        (
            "v1beta1/us-4-node-config.yaml",
            LABEL_ULTRASERVER_SERVER_ID_4,
            LABEL_ULTRASERVER_NODE_ID_4,
            "1",
            None,
        ),
        # 2 nodes: X2V (3), what a healthy trn2u offers.
        (
            "us-2-node-config.yaml",
            LABEL_ULTRASERVER_SERVER_ID_2,
            LABEL_ULTRASERVER_NODE_ID_2,
            "3",
            None,
        ),
        # Both configs on one request: both environments.
        (
            "us-and-lnc-config.yaml",
            LABEL_ULTRASERVER_SERVER_ID_2,
            LABEL_ULTRASERVER_NODE_ID_2,
            "3",
            1,
        ),
    ],
)
def test_ultraserver_units_with_leaderworkerset_placement(  # noqa: PLR0917
    nodes: dict[str, SimulatedNode],
    spec_file: str,
    unit_label: str,
    node_id_label: str,
    runtime_mode: str,
    lnc: int | None,
) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    template, lws = load(spec_file)
    assert lws["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] == (
        unit_label
    )
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    node_objs = {n: cluster.get("v1", "Node", n)["metadata"]["labels"] for n in nodes}
    units = sorted({labels[unit_label] for labels in node_objs.values() if unit_label in labels})
    assert len(units) >= lws["spec"]["replicas"], "too few UltraServer units for the example"
    create_in(cluster, ns, [template])
    placed: dict[str, str] = {}  # pod -> its unit
    for group, unit in enumerate(units[: lws["spec"]["replicas"]]):
        members = [n for n, labels in node_objs.items() if labels.get(unit_label) == unit]
        assert len(members) == size, f"unit {unit} has nodes {members}, the group needs {size}"
        pods = lws_group(lws, group, unit_label, unit)
        create_in(cluster, ns, pods)
        placed |= {p["metadata"]["name"]: unit for p in pods}

    used: dict[str, SimulatedNode] = {}
    uids: set[str] = set()
    for name, unit in placed.items():
        pod = cluster.wait_for_pod_running(name, ns, timeout=60)
        node = nodes[pod["spec"]["nodeName"]]
        assert node_objs[node.name][unit_label] == unit
        assert node.name not in {n.name for n in used.values()}, "two pods on one node"
        used[name] = node
        [claim] = claims_by_pod_name(cluster, ns, pod).values()
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == (node.name, "neuronnode")
        uids.add(claim["metadata"]["uid"])
        [container] = (c["name"] for c in pod["spec"]["containers"])
        assert env_of(pod, container) == {
            **expected_env(node.instance_type, list(range(16)), lnc),
            "NEURON_RT_ULTRASERVER_MODE": runtime_mode,
            "NEURON_RT_ULTRASERVER_SERVER_ID": unit,
            "NEURON_RT_ULTRASERVER_NODE_ID": node_objs[node.name][node_id_label],
        }
        assert container_view(pod, container)["deviceNodes"] == [
            f"/dev/neuron{d}" for d in range(16)
        ]
        assert node.cdi_files() == [f"neuron.aws.com-{claim['metadata']['uid']}.json"]
    # Each group holds every node position of its unit once.
    for unit in set(placed.values()):
        ids = sorted(node_objs[used[p].name][node_id_label] for p, u in placed.items() if u == unit)
        assert ids == [str(i) for i in range(size)]
    checkpointed = {uid for n in used.values() for uid in n.checkpointed()}
    assert uids <= checkpointed
    delete_and_check_clean(cluster, ns, used, uids)
