"""Logical NeuronCores as devices, end to end: claims for `neuroncore<N>` allocated by the
real scheduler, prepared by the real plugin through the kubelet's DRA manager.

Where the API server serves partitionable devices (shared counters; on by default from
1.36) each logical NeuronCore of a node is a device of its own, drawing on its Neuron
device's counter, so a core, its device and the UltraServer node device never go to two
claims. The container of a core claim gets the device node of each of its cores' devices
and `NEURON_RT_VISIBLE_CORES` naming exactly its cores. Where the server does not serve
them (1.34 and 1.35 by default, or the gate turned off) the driver publishes no cores and
says so once.

The main cluster runs with the release's default feature gates, so releases before 1.36
skip everything but the last test, which is what they show.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consts import CORE_NAME_PREFIX, DRIVER_NAME, NODE_DEVICE_NAME
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.kubeletside import KUBELETSIDE_ERROR_ANNOTATION
from neuron_dra_harness.nodes import (
    SimulatedNode,
    add_simulated_node,
    container_view,
    env_of,
    trn2_and_ultraserver,
)
from neuron_dra_harness.patched import admin_skips_counters
from neuron_dra_harness.workloads import unschedulable_reason
from tests.e2e.test_extended_resources import add_device_plugin_node
from tests.e2e.test_extended_resources import submit as submit_extended
from tests.e2e.test_plugin import cluster_of

pytestmark = [pytest.mark.e2e, pytest.mark.versions(check="NeuronCores")]

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]
CORES = "neuroncore.neuron.aws.com"
WHOLE = "neuron.aws.com"
NEURONCORE = "aws.amazon.com/neuroncore"
DEVICE_ID = f"{DRIVER_NAME}/deviceId"
REQUEST = "cores"
NODE_DEVICE = f"device.attributes['{DRIVER_NAME}'].resourceType == 'neuron_node'"
V1 = "neuron.aws.com/v1"
PER_DEVICE = 4  # trn2: 8 physical cores per device, LNC 2 by default
# From 1.38 the gate is GA and locked: an API server told to turn it off does not start.
PARTITIONS_LOCKED = 38
_names = (f"c{i}" for i in itertools.count())


def too_old(binaries: Binaries) -> str | None:
    """Why the release cannot publish cores with its default gates, if it cannot."""
    oldest = min(binaries.minor, binaries.kubelet_minor)
    if oldest < 36:
        return (
            f"NeuronCores need partitionable devices, on by default from 1.36 (this is 1.{oldest})"
        )
    return None


@pytest.fixture(scope="module")
def nodes(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    """One trn2.48xlarge (LNC 2) and one trn2u.48xlarge node, the release's default gates."""
    if too_old(e2e_binaries):
        yield {}
        return
    with trn2_and_ultraserver(e2e_binaries, "us-c") as nodes:
        yield nodes


@pytest.fixture(autouse=True)
def _skip_old_releases(
    request: pytest.FixtureRequest, e2e_binaries: Binaries, _versions_check: None
) -> None:
    # Here rather than in `nodes`: a module fixture that skips is set up before the
    # test's report names its compatibility-table row (_versions_check). The test of
    # a cluster without partitionable devices runs on every release.
    reason = too_old(e2e_binaries)
    if reason and "nodes" in request.fixturenames:
        pytest.skip(reason)
    if e2e_binaries.minor >= PARTITIONS_LOCKED and "unpartitioned" in request.fixturenames:
        pytest.skip(
            f"DRAPartitionableDevices is locked on from 1.{PARTITIONS_LOCKED}: "
            "every server keeps shared counters"
        )


# --- claims and pods ------------------------------------------------------------------


def core_spec(
    count: int,
    *,
    device_class: str = CORES,
    cel: str | None = None,
    same_device: bool = False,
    config: Obj | None = None,
) -> Obj:
    exactly: Obj = {"deviceClassName": device_class, "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    devices: Obj = {"requests": [{"name": REQUEST, "exactly": exactly}]}
    if same_device:
        devices["constraints"] = [{"requests": [REQUEST], "matchAttribute": DEVICE_ID}]
    if config:
        devices["config"] = [{"opaque": {"driver": DRIVER_NAME, "parameters": config}}]
    return {"devices": devices}


def on_device(index: int) -> str:
    return f"device.attributes['{DRIVER_NAME}'].deviceId == {index}"


def submit(cluster: Cluster, spec: Obj, node: str) -> str:
    """A pod whose one container uses a claim made from a ResourceClaimTemplate with
    `spec`, held to `node` by a nodeSelector (so the scheduler still places it)."""
    name = next(_names)
    metadata = {"name": name, "namespace": "default"}
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": metadata,
            "spec": {"spec": spec},
        }
    )
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "automountServiceAccountToken": False,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "ctr0",
                        "image": "none",
                        "resources": {"claims": [{"name": "neurons"}]},
                    }
                ],
                "resourceClaims": [{"name": "neurons", "resourceClaimTemplateName": name}],
            },
        }
    )
    return name


def claim_of(cluster: Cluster, pod: Obj) -> Obj:
    """The claim made for the pod: from its template, or for its extended resources."""
    status = pod.get("status", {})
    extended = status.get("extendedResourceClaimStatus")
    if extended:
        name = extended["resourceClaimName"]
    else:
        name = status["resourceClaimStatuses"][0]["resourceClaimName"]
    return cluster.get("resource.k8s.io/v1", "ResourceClaim", name, pod["metadata"]["namespace"])


def claim_of_pending(cluster: Cluster, pod_name: str) -> Obj:
    """The claim generated for a pod that may not be scheduled yet."""
    pod = cluster.wait_for_pod(
        pod_name,
        predicate=lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
        what="its claim generated",
    )
    return claim_of(cluster, pod)


def allocated(claim: Obj) -> list[str]:
    return sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])


def visible(cores: list[int]) -> str:
    """NEURON_RT_VISIBLE_CORES as the Neuron runtime reads it, written out independently
    of the driver: `12-13` for a contiguous run, `12,14` otherwise, `12` for one."""
    cores = sorted(cores)
    if len(cores) > 1 and cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def published_cores(node: SimulatedNode) -> dict[str, tuple[int, int]]:
    """core device name -> (deviceId, coreId), as the node's slices publish them."""
    return published_cores_of(node.devices())


def published_cores_of(devices: list[Obj]) -> dict[str, tuple[int, int]]:
    found = {}
    for device in devices:
        attributes = device.get("attributes") or {}
        if attributes.get("resourceType", {}).get("string") == "neuron_core":
            found[device["name"]] = (attributes["deviceId"]["int"], attributes["coreId"]["int"])
    return found


def cores_of(node: SimulatedNode, claim: Obj) -> tuple[list[int], list[int]]:
    """The Neuron devices and the logical core numbers of a claim of cores, checked
    against what the node publishes and the runtime's numbering."""
    published = published_cores(node)
    names = allocated(claim)
    assert all(n.startswith(CORE_NAME_PREFIX) for n in names), names
    pairs = [published[n] for n in names]
    for name, (device, core) in zip(names, pairs, strict=True):
        assert core == int(name.removeprefix(CORE_NAME_PREFIX))
        assert core // PER_DEVICE == device, (name, device)  # device k owns 4k..4k+3
    return sorted({d for d, _ in pairs}), sorted(c for _, c in pairs)


def assert_cores_got(node: SimulatedNode, pod: Obj, claim: Obj) -> tuple[list[int], list[int]]:
    """The container got the device node of each of its cores' devices, exactly its
    cores' numbers and nothing else; the claim is prepared. Returns (devices, cores)."""
    assert pod["spec"]["nodeName"] == node.name
    devices, cores = cores_of(node, claim)
    assert env_of(pod, "ctr0") == {"NEURON_RT_VISIBLE_CORES": visible(cores)}
    assert container_view(pod, "ctr0")["deviceNodes"] == [f"/dev/neuron{d}" for d in devices]
    uid = claim["metadata"]["uid"]
    assert f"neuron.aws.com-{uid}.json" in node.cdi_files()
    assert uid in node.checkpointed()
    return devices, cores


def run(node: SimulatedNode, spec: Obj) -> tuple[str, Obj, Obj]:
    """Submit a pod for `spec` on `node` and wait for it to run: (name, pod, claim)."""
    cluster = node.cluster
    name = submit(cluster, spec, node.name)
    pod = cluster.wait_for_pod_running(name, timeout=60)
    return name, pod, claim_of(cluster, pod)


def release(node: SimulatedNode, name: str, claim: Obj, *, cores: bool = True) -> None:
    """Delete the pod; its claim is unprepared: CDI spec and checkpoint entry gone, and
    (`cores`: where the node publishes them) the cores of the devices it held whole
    published again.

    test_plugin.delete_and_assert_released waits for the node to have no CDI spec at all,
    which never comes while another pod on it holds cores; this waits for this claim's.
    """
    uid = claim["metadata"]["uid"]
    cluster = node.cluster
    cluster.delete("v1", "Pod", name, "default")
    cluster.wait_for_pod_gone(name, timeout=60)
    spec = f"neuron.aws.com-{uid}.json"
    cluster.wait_for(f"CDI spec of {uid} removed", lambda: spec not in node.cdi_files())
    assert uid not in node.checkpointed()
    whole = [d for d in allocated(claim) if not d.startswith(CORE_NAME_PREFIX)]
    if whole and cores:
        cluster.wait_for(
            f"cores of {', '.join(whole)} published again",
            lambda: set(cores_held_by(whole)) <= set(published_now(node) or ()),
        )


def published_now(node: SimulatedNode) -> dict[str, tuple[int, int]] | None:
    """`published_cores` of the node's whole pool; None while it is being rewritten."""
    pool = node.pool()
    if pool is None:
        return None
    return published_cores_of([d for s in pool for d in s["spec"].get("devices") or []])


def cores_held_by(whole: list[str]) -> list[str]:
    """The core device names of the whole devices (or the node device) `whole` names."""
    indexes = (
        range(16)
        if NODE_DEVICE_NAME in whole
        else [int(d.removeprefix("neurondevice")) for d in whole]
    )
    return [f"{CORE_NAME_PREFIX}{i * PER_DEVICE + c}" for i in indexes for c in range(PER_DEVICE)]


def assert_nothing_prepared(node: SimulatedNode, name: str, claim: Obj | None = None) -> None:
    assert not node.cdi_files()
    assert all(e.get("pod") != name for e in node.side.report_events("prepared"))
    if claim is not None:
        assert claim["metadata"]["uid"] not in node.checkpointed()


def delete_pending(cluster: Cluster, name: str) -> None:
    cluster.delete("v1", "Pod", name, "default")
    cluster.wait_for_pod_gone(name, timeout=60)


# --- tests ----------------------------------------------------------------------------


def test_the_nodes_publish_each_logical_core(nodes: dict[str, SimulatedNode]) -> None:
    for node, devices in (("trn2", 16), ("us-0", 16)):
        published = published_cores(nodes[node])
        assert sorted(published.values()) == [
            (c // PER_DEVICE, c) for c in range(devices * PER_DEVICE)
        ], node
    assert NODE_DEVICE_NAME in nodes["us-0"].device_names()


def test_one_core(nodes: dict[str, SimulatedNode]) -> None:
    node = nodes["trn2"]
    name, pod, claim = run(node, core_spec(1))
    [core_name] = allocated(claim)
    devices, cores = assert_cores_got(node, pod, claim)
    assert cores == [int(core_name.removeprefix(CORE_NAME_PREFIX))]
    assert len(devices) == 1
    release(node, name, claim)


def test_three_cores_of_one_device(nodes: dict[str, SimulatedNode]) -> None:
    node = nodes["trn2"]
    # Two of device 0's four cores taken: the first three free cores would span devices
    # 0 and 1, so only the constraint keeps the three on one device.
    holder, _, held = run(node, core_spec(2, cel=on_device(0)))
    name, pod, claim = run(node, core_spec(3, same_device=True))
    devices, cores = assert_cores_got(node, pod, claim)
    [device] = devices
    assert device != 0
    assert len(cores) == 3
    assert set(cores) <= set(range(device * PER_DEVICE, (device + 1) * PER_DEVICE))
    release(node, name, claim)
    release(node, holder, held)


def test_two_pods_share_a_device_with_disjoint_cores(nodes: dict[str, SimulatedNode]) -> None:
    node = nodes["trn2"]
    first, pod_a, claim_a = run(node, core_spec(2, cel=on_device(5)))
    second, pod_b, claim_b = run(node, core_spec(2, cel=on_device(5)))
    devices_a, cores_a = assert_cores_got(node, pod_a, claim_a)
    devices_b, cores_b = assert_cores_got(node, pod_b, claim_b)
    assert devices_a == devices_b == [5]
    assert not set(cores_a) & set(cores_b)
    assert sorted(cores_a + cores_b) == [20, 21, 22, 23]
    assert len(node.cdi_files()) == 2
    release(node, first, claim_a)
    release(node, second, claim_b)


@pytest.mark.parametrize(
    ("node_name", "core_cel", "whole_cel"),
    [
        ("trn2", on_device(5), on_device(5)),
        ("us-0", on_device(9), NODE_DEVICE),
    ],
    ids=["neurondevice5", "neuronnode"],
)
def test_a_core_and_what_contains_it_never_go_to_two_claims(
    nodes: dict[str, SimulatedNode], node_name: str, core_cel: str, whole_cel: str
) -> None:
    node = nodes[node_name]
    cluster = node.cluster
    holder, pod, core_claim = run(node, core_spec(1, cel=core_cel))
    assert_cores_got(node, pod, core_claim)
    whole = submit(cluster, core_spec(1, device_class=WHOLE, cel=whole_cel), node.name)
    reason = unschedulable_reason(cluster, whole)
    assert "cannot allocate all claims" in reason, reason
    # It stays so: the scheduler tried and the core is still held.
    pending_claim = claim_of_pending(cluster, whole)
    assert not pending_claim.get("status", {}).get("allocation")
    assert node.cdi_files() == [f"neuron.aws.com-{core_claim['metadata']['uid']}.json"]

    release(node, holder, core_claim)
    running = cluster.wait_for_pod_running(whole, timeout=90)
    whole_claim = claim_of(cluster, running)
    [device] = allocated(whole_claim)
    assert device == (NODE_DEVICE_NAME if node_name == "us-0" else "neurondevice5")
    assert container_view(running, "ctr0")["deviceNodes"] == (
        [f"/dev/neuron{d}" for d in range(16)] if node_name == "us-0" else ["/dev/neuron5"]
    )
    release(node, whole, whole_claim)


def test_a_device_held_whole_withdraws_its_cores_until_released(
    nodes: dict[str, SimulatedNode],
) -> None:
    """Cores of a device a claim holds whole cannot be allocated (the device holds their
    counter), yet each would cost the scheduler a selector evaluation on every pod it
    places: once the claim is prepared they are withdrawn, and published again when it
    is unprepared. The device itself stays published as it was, drawing on its counter
    (allocated, so skipped cheaply)."""
    node = nodes["trn2"]
    cluster = node.cluster
    name, _, claim = run(node, core_spec(1, device_class=WHOLE, cel=on_device(3)))
    assert allocated(claim) == ["neurondevice3"]
    held = set(cores_held_by(["neurondevice3"]))
    cluster.wait_for(
        "device 3's cores withdrawn",
        lambda: (found := published_now(node)) is not None and not held & set(found),
    )
    published = published_now(node)
    assert published is not None and len(published) == 15 * PER_DEVICE
    [device] = [d for d in node.devices() if d["name"] == "neurondevice3"]
    assert device["consumesCounters"][0]["counters"] == {"neurondevice3": {"value": "4"}}
    # Other devices' cores still go to core claims, never device 3's.
    core, core_pod, core_claim = run(node, core_spec(PER_DEVICE, same_device=True))
    devices, _ = assert_cores_got(node, core_pod, core_claim)
    assert devices != [3]
    release(node, core, core_claim)
    release(node, name, claim)
    assert len(published_now(node) or ()) == 16 * PER_DEVICE


@pytest.mark.parametrize(
    ("node_name", "cel", "device"),
    [
        ("trn2", on_device(6), "neurondevice6"),
        ("us-0", on_device(6), "neurondevice6"),
        ("us-0", NODE_DEVICE, NODE_DEVICE_NAME),
    ],
    ids=["device", "ultraserver-device", "ultraserver-node"],
)
def test_an_admin_claim_waits_for_a_device_in_use_with_counters(
    nodes: dict[str, SimulatedNode], node_name: str, cel: str, device: str, record_property: Any
) -> None:
    """A monitoring pod (adminAccess) asking for a device another pod holds, with cores
    (and on an UltraServer node, the node device) published. The held device keeps
    drawing on its counters, and the allocator checks an admin request against shared
    counters (kubernetes/kubernetes#140729): the pod waits, with the allocator's reason,
    until the holder is gone. Where the allocator exempts admin requests from counters
    (NEURON_DRA_SCHEDULER_PATCH=counters-fail-closed), it runs beside the holder."""
    node = nodes[node_name]
    cluster = node.cluster
    holder, _, held = run(node, core_spec(1, device_class=WHOLE, cel=cel))
    cluster.wait_for(f"what shares a counter with {device} withdrawn", lambda: alone(node, device))
    name = submit_admin(node, core_spec(1, device_class=WHOLE, cel=cel))
    if admin_skips_counters():
        pod = cluster.wait_for_pod_running(name, ADMIN_NAMESPACE, timeout=60)
    else:
        reason = unschedulable_reason(cluster, name, ADMIN_NAMESPACE)
        assert "cannot allocate all claims" in reason, reason
        record_property("detail", "admin requests charged for counters")
        release(node, holder, held)
        pod = cluster.wait_for_pod_running(name, ADMIN_NAMESPACE, timeout=60)
    claim = cluster.get("resource.k8s.io/v1", "ResourceClaim", name, ADMIN_NAMESPACE)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result.get("adminAccess")) == (device, True)
    every = [f"/dev/neuron{d}" for d in range(16)]
    seen = every if device == NODE_DEVICE_NAME else ["/dev/neuron6"]
    assert container_view(pod, "ctr0")["deviceNodes"] == seen
    delete_admin(node, name)
    if admin_skips_counters():
        release(node, holder, held)


@pytest.fixture
def plain(nodes: dict[str, SimulatedNode]) -> SimulatedNode:
    """A trn2.48xlarge publishing whole devices only (--neuron-cores=off): nothing on it
    draws on a counter. Per test, so that `_skip_old_releases` (autouse, so first among
    the test's own fixtures) skips it on a release too old for `nodes` before this runs."""
    return add_simulated_node(
        nodes["trn2"].cluster, "plain", "trn2.48xlarge", extra_args=["--neuron-cores=off"]
    )


def test_an_admin_claim_has_a_device_in_use_that_draws_on_no_counter(
    plain: SimulatedNode,
) -> None:
    """Admin access over a device in use works on every allocator where the device
    draws on no counter: on a node publishing whole devices only, the monitoring pod
    gets the device another pod holds, and the holder keeps it."""
    node = plain
    cluster = node.cluster
    assert not any("consumesCounters" in d for d in node.devices())
    holder, _, held = run(node, core_spec(1, device_class=WHOLE, cel=on_device(6)))
    name = submit_admin(node, core_spec(1, device_class=WHOLE, cel=on_device(6)))
    pod = cluster.wait_for_pod_running(name, ADMIN_NAMESPACE, timeout=60)
    claim = cluster.get("resource.k8s.io/v1", "ResourceClaim", name, ADMIN_NAMESPACE)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result.get("adminAccess")) == ("neurondevice6", True)
    assert container_view(pod, "ctr0")["deviceNodes"] == ["/dev/neuron6"]
    assert allocated(held) == ["neurondevice6"]
    assert held["metadata"]["uid"] in node.checkpointed()
    delete_admin(node, name)
    release(node, holder, held, cores=False)


ADMIN_NAMESPACE = "monitoring"


def alone(node: SimulatedNode, device: str) -> bool:
    """Whether the node's whole pool publishes `device`, with its counters, and nothing
    else drawing on one of them."""
    pool = node.pool()
    if pool is None:
        return False
    devices = {d["name"]: d for s in pool for d in s["spec"].get("devices") or []}

    def counters(name: str) -> set[tuple[str, str]]:
        consumed = devices[name].get("consumesCounters") or []
        return {(c["counterSet"], counter) for c in consumed for counter in c["counters"]}

    mine = counters(device)
    return bool(mine) and not any(counters(n) & mine for n in devices if n != device)


def submit_admin(node: SimulatedNode, spec: Obj) -> str:
    """A pod in a namespace open to admin access, on `node`, its one claim for `spec`
    with adminAccess."""
    cluster = node.cluster
    if cluster.get_or_none("v1", "Namespace", ADMIN_NAMESPACE) is None:
        cluster.create_namespace(ADMIN_NAMESPACE)
        admin = {"resource.kubernetes.io/admin-access": "true"}
        cluster.patch("v1", "Namespace", ADMIN_NAMESPACE, {"metadata": {"labels": admin}})
    spec["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    name = next(_names)
    metadata = {"name": name, "namespace": ADMIN_NAMESPACE}
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": metadata,
            "spec": spec,
        }
    )
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "automountServiceAccountToken": False,
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "containers": [
                    {
                        "name": "ctr0",
                        "image": "none",
                        "resources": {"claims": [{"name": "neurons"}]},
                    }
                ],
                "resourceClaims": [{"name": "neurons", "resourceClaimName": name}],
            },
        }
    )
    return name


def delete_admin(node: SimulatedNode, name: str) -> None:
    cluster = node.cluster
    cluster.delete("v1", "Pod", name, ADMIN_NAMESPACE)
    cluster.wait_for_pod_gone(name, ADMIN_NAMESPACE, timeout=60)
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", name, ADMIN_NAMESPACE)


def test_the_allocator_meets_whole_devices_before_cores(nodes: dict[str, SimulatedNode]) -> None:
    """The allocator walks a pool's slices in name order and takes the first devices that
    fit: the slice holding the whole devices sorts before every slice of cores, so a
    whole-device claim never walks past a core."""
    for node in nodes.values():
        pool = node.pool()
        assert pool is not None
        walk = [
            d["name"]
            for s in sorted(pool, key=lambda s: s["metadata"]["name"])
            for d in s["spec"].get("devices") or []
        ]
        first_core = next(i for i, n in enumerate(walk) if n.startswith(CORE_NAME_PREFIX))
        assert not any(n.startswith(CORE_NAME_PREFIX) for n in walk[:first_core])
        assert all(n.startswith(CORE_NAME_PREFIX) for n in walk[first_core:]), walk


def test_lnc_config_on_a_core_is_refused_at_prepare(nodes: dict[str, SimulatedNode]) -> None:
    node = nodes["trn2"]
    cluster = node.cluster
    config = {"apiVersion": V1, "kind": "NeuronConfig", "logicalNeuronCore": 1}
    name = submit(cluster, core_spec(1, config=config), node.name)
    pod = cluster.wait_for_pod(
        name,
        predicate=lambda p: KUBELETSIDE_ERROR_ANNOTATION in p["metadata"].get("annotations", {}),
        what="a prepare error",
        timeout=60,
    )
    claim = claim_of(cluster, pod)
    [core] = allocated(claim)
    device = cores_of(node, claim)[0][0]
    expected = (
        f"claim default/{claim['metadata']['name']} ({claim['metadata']['uid']}): "
        f"NeuronConfig.logicalNeuronCore is set for request '{REQUEST}', whose device {core} is "
        f"one logical NeuronCore of neurondevice{device}; a core is as large as the node's "
        "LNC (2), fixed when the node boots"
    )
    error = pod["metadata"]["annotations"][KUBELETSIDE_ERROR_ANNOTATION]
    assert expected in error, error
    events = cluster.wait_for(
        "the FailedPrepareDynamicResources event",
        lambda: [
            e
            for e in cluster.events_for(name)
            if e.get("reason") == "FailedPrepareDynamicResources"
        ],
    )
    assert expected in events[0]["message"]
    assert pod["status"].get("phase") == "Pending"
    assert_nothing_prepared(node, name, claim)
    delete_pending(cluster, name)
    assert not node.cdi_files()


def test_more_cores_of_one_device_than_it_has_stay_pending(
    nodes: dict[str, SimulatedNode],
) -> None:
    node = nodes["trn2"]
    cluster = node.cluster
    name = submit(cluster, core_spec(PER_DEVICE + 1, same_device=True), node.name)
    reason = unschedulable_reason(cluster, name)
    assert "cannot allocate all claims" in reason, reason
    claim = claim_of_pending(cluster, name)
    assert not claim.get("status", {}).get("allocation")
    assert_nothing_prepared(node, name, claim)
    delete_pending(cluster, name)


def test_device_plugin_style_pod_gets_cores(nodes: dict[str, SimulatedNode]) -> None:
    node = nodes["trn2"]
    cluster = node.cluster
    # Hold core 0..2 of device 0 so the scheduler's six may well span devices.
    holder, _, held = run(node, core_spec(3, cel=on_device(0)))
    name = submit_extended(cluster, NEURONCORE, 6, node.name)
    pod = cluster.wait_for_pod_running(name, timeout=60)
    assert not pod["spec"].get("resourceClaims")
    [mapping] = pod["status"]["extendedResourceClaimStatus"]["requestMappings"]
    assert (mapping["containerName"], mapping["resourceName"]) == ("ctr0", NEURONCORE)
    claim = claim_of(cluster, pod)
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == f"extended-resource-{CORES}"
    _, held_cores = cores_of(node, held)
    _, cores = assert_cores_got(node, pod, claim)
    assert len(cores) == 6
    assert not set(cores) & set(held_cores)
    release(node, name, claim)
    release(node, holder, held)


def test_device_plugin_nodes_and_dra_nodes_serve_cores_side_by_side(
    nodes: dict[str, SimulatedNode],
) -> None:
    cluster = cluster_of(nodes)
    add_device_plugin_node(cluster, "dp-core", NEURONCORE, 64)
    on_plugin = submit_extended(cluster, NEURONCORE, 4, "dp-core")
    on_dra = submit_extended(cluster, NEURONCORE, 4, "trn2")
    try:
        bound = cluster.wait_for_pod_scheduled(on_plugin, timeout=60)
        assert bound["spec"]["nodeName"] == "dp-core"
        # Served by the node's allocatable as before: no claim is made for it.
        assert not bound.get("status", {}).get("extendedResourceClaimStatus")
        running = cluster.wait_for_pod_running(on_dra, timeout=60)
        claim = claim_of(cluster, running)
        _, cores = assert_cores_got(nodes["trn2"], running, claim)
        assert len(cores) == 4
    finally:
        # No kubelet finishes a graceful deletion on dp-core.
        cluster.delete("v1", "Pod", on_plugin, "default", grace_period=0)
        cluster.delete("v1", "Pod", on_dra, "default")
        cluster.delete("v1", "Node", "dp-core")
    cluster.wait_for_pod_gone(on_dra, timeout=60)
    cluster.wait_for("CDI specs on trn2 removed", lambda: not nodes["trn2"].cdi_files())


# --- without partitionable devices ------------------------------------------------------


@pytest.fixture
def unpartitioned(e2e_binaries: Binaries) -> Iterator[SimulatedNode]:
    """A trn2 node on a server without partitionable devices: the release's default
    before 1.36, the gate turned off in 1.36 and 1.37 (locked on from 1.38). Per test,
    so that `_skip_old_releases` (autouse) skips it from 1.38 before a server that would
    refuse the gate is started."""
    gates = {} if e2e_binaries.minor < 36 else {"DRAPartitionableDevices": False}
    with Cluster(e2e_binaries, feature_gates=gates) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        yield add_simulated_node(cluster, "trn2-np", "trn2.48xlarge")


def test_without_partitionable_devices_no_core_is_published(
    unpartitioned: SimulatedNode, record_property: Any
) -> None:
    node = unpartitioned
    cluster = node.cluster
    names = node.device_names()
    assert names == sorted(f"neurondevice{i}" for i in range(16))
    assert node.plugin is not None
    lines = node.plugin.log_path.read_text().splitlines()
    said = [line for line in lines if "NeuronCores are not published as devices" in line]
    assert len(said) == 1, said
    name = submit(cluster, core_spec(1), node.name)
    reason = unschedulable_reason(cluster, name)
    assert "cannot allocate all claims" in reason, reason
    assert_nothing_prepared(node, name)
    delete_pending(cluster, name)
    if too_old(cluster.binaries):
        record_property("detail", "whole devices only: the server drops shared counters")
