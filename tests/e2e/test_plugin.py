"""`neuron-dra run` on simulated nodes, driven by the kubelet's own DRA code.

Each example is applied, allocated by the real scheduler, prepared through the
kubelet's DRA manager, resolved by the CDI package, checked for the exact
container environment, deleted, and checked to leave nothing behind.
"""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from consts import LABEL_ULTRASERVER_NODE_ID_4, LABEL_ULTRASERVER_SERVER_ID_4
from neuron_dra.agent.claims.preparer import Step
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.distribution import TOOL_MODULES
from neuron_dra_harness.kubeletside import KUBELETSIDE_ERROR_ANNOTATION
from neuron_dra_harness.nodes import (
    SimulatedNode,
    add_simulated_node,
    container_view,
    env_of,
)

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "examples" / "specs"
Obj = dict[str, Any]
STEPS: tuple[Step, ...] = (
    "after-plan",
    "after-cdi-write",
    "after-metadata-write",
    "after-checkpoint",
)


@pytest.fixture(scope="module")
def nodes(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    """A cluster as Kubernetes 1.34 ships it (no shared counters) with running plugins."""
    with Cluster(e2e_binaries) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        found = {
            name: add_simulated_node(cluster, name, "trn2.48xlarge")
            for name in ("trn2-a", "trn2-b", "trn2-c")
        }
        found["inf2-a"] = add_simulated_node(cluster, "inf2-a", "inf2.48xlarge")
        for i in range(4):
            found[f"us-{i}"] = add_simulated_node(
                cluster, f"us-{i}", "trn2u.48xlarge", ultraserver=FakeUltraServer("us-a", i)
            )
        yield found


def cluster_of(nodes: dict[str, SimulatedNode]) -> Cluster:
    return next(iter(nodes.values())).cluster


_namespaces = (f"t{i}" for i in itertools.count())


def namespace(cluster: Cluster) -> str:
    name = next(_namespaces)
    cluster.create_namespace(name)
    return name


def pod_using(name: str, template: str, node: str | None = None, *, claim: bool = False) -> Obj:
    source = {"resourceClaimName": template} if claim else {"resourceClaimTemplateName": template}
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "ctr0", "image": "none", "resources": {"claims": [{"name": "neurons"}]}}
            ],
            "resourceClaims": [{"name": "neurons", **source}],
        },
    }
    if node:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def create_in(cluster: Cluster, ns: str, docs: list[Obj]) -> None:
    for original in docs:
        doc = copy.deepcopy(original)
        doc["metadata"]["namespace"] = ns
        if doc["kind"] == "Pod":
            doc["spec"]["automountServiceAccountToken"] = False
        cluster.create(doc)


def claim_of(cluster: Cluster, ns: str, pod: Obj) -> Obj:
    name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    return cluster.get("resource.k8s.io/v1", "ResourceClaim", name, ns)


def expected_env(instance_type: str, devices: list[int], lnc: int | None) -> dict[str, str]:
    spec = INSTANCE_TYPES[instance_type]
    default = 2 if spec.has_lnc else 1
    per_device = spec.cores_per_device // (lnc or default)
    cores = sorted(c for d in devices for c in range(d * per_device, (d + 1) * per_device))
    contiguous = cores == list(range(cores[0], cores[-1] + 1))
    visible = f"{cores[0]}-{cores[-1]}" if contiguous else ",".join(map(str, cores))
    env = {"NEURON_RT_VISIBLE_CORES": visible}
    if lnc:
        env["NEURON_LOGICAL_NC_CONFIG"] = str(lnc)
    return env


def run_and_check(
    nodes: dict[str, SimulatedNode], ns: str, pod_name: str, lnc: int | None, count: int | None
) -> None:
    """Wait for the pod, check what its container got, delete it, check nothing is left."""
    cluster = cluster_of(nodes)
    pod = cluster.wait_for_pod_running(pod_name, ns, timeout=60)
    node = nodes[pod["spec"]["nodeName"]]
    claim = claim_of(cluster, ns, pod)
    uid = claim["metadata"]["uid"]
    results = claim["status"]["allocation"]["devices"]["results"]
    devices = sorted(int(r["device"].removeprefix("neurondevice")) for r in results)
    assert len(devices) == (count or INSTANCE_TYPES[node.instance_type].devices)
    assert_container_got(node, pod, "ctr0", devices, uid, lnc=lnc)
    delete_and_assert_released(node, pod_name, ns, uid)


def assert_container_got(
    node: SimulatedNode,
    pod: Obj,
    container: str,
    devices: list[int],
    uid: str,
    *,
    lnc: int | None = None,
) -> None:
    """The container sees exactly `devices`, with their environment; the claim is prepared."""
    assert env_of(pod, container) == expected_env(node.instance_type, devices, lnc)
    assert container_view(pod, container)["deviceNodes"] == [f"/dev/neuron{d}" for d in devices]
    assert node.cdi_files() == [f"neuron.aws.com-{uid}.json"]
    assert uid in node.checkpointed()
    assert_metadata_mounted(pod, container, uid, devices)


def assert_metadata_mounted(pod: Obj, container: str, uid: str, devices: list[int]) -> None:
    """The container gets the claim's device metadata file (KEP-5304) read-only at the
    path the pod spec names, and it lists exactly `devices` with their attributes."""
    mounts = [m.split(":") for m in container_view(pod, container)["mounts"]]
    assert len(mounts) == 1, mounts
    host, path = mounts[0]
    [spec] = [c for c in pod["spec"]["containers"] if c["name"] == container]
    used = spec.get("resources", {}).get("claims")
    if not used:
        # Extended resources: the scheduler's claim, named by nothing in the pod spec.
        kind, name = "resourceclaims", path.split("/")[6]
    else:
        [pod_claim] = [c for c in pod["spec"]["resourceClaims"] if c["name"] == used[0]["name"]]
        if "resourceClaimTemplateName" in pod_claim:
            kind, name = "resourceclaimtemplates", pod_claim["name"]
        else:
            kind, name = "resourceclaims", pod_claim["resourceClaimName"]
    assert path.startswith(f"/var/run/kubernetes.io/dra-device-attributes/{kind}/{name}/")
    assert path.endswith("/neuron.aws.com-metadata.json")
    metadata = json.loads(Path(host).read_bytes())
    assert metadata["metadata"]["uid"] == uid
    listed = [d for r in metadata["requests"] for d in r["devices"]]
    assert [d["name"] for d in listed] == [f"neurondevice{d}" for d in devices]
    assert [d["attributes"]["deviceId"] for d in listed] == [{"int": d} for d in devices]


def delete_and_assert_released(node: SimulatedNode, pod_name: str, ns: str, uid: str) -> None:
    """Delete the pod; its claim is unprepared: CDI specs, device metadata files and
    checkpoint entry gone."""
    node.cluster.delete("v1", "Pod", pod_name, ns)
    node.cluster.wait_for_pod_gone(pod_name, ns, timeout=60)
    node.cluster.wait_for(f"CDI spec of {uid} removed", lambda: not node.cdi_files())
    assert uid not in node.checkpointed()
    # Unprepare removes the device metadata files and specs before the claim's spec.
    assert node.metadata_files() == []


V1BETA1 = "resource.k8s.io/v1beta1"
V1BETA1_REMOVED = 38
"""The first minor whose API server serves no resource.k8s.io/v1beta1 resource."""


def as_applied(cluster: Cluster, spec_file: str, record_property: Any) -> list[Obj]:
    """An example's documents as its user applies them: as written, where the release
    serves the version they are written in. On a release that removed it, the server
    refuses the file as written (`kubectl create`), and the documents are those
    `neuron-dra convert` writes."""
    path = SPECS / spec_file
    docs = list(yaml.safe_load_all(path.read_text()))
    if cluster.binaries.minor < V1BETA1_REMOVED or all(d["apiVersion"] != V1BETA1 for d in docs):
        return docs
    refused = cluster.kubectl("create", "--dry-run=server", "-f", str(path), check=False)
    assert refused.returncode != 0, refused.stdout
    assert 'no matches for kind "ResourceClaim' in refused.stderr, refused.stderr
    assert f'in version "{V1BETA1}"' in refused.stderr, refused.stderr
    convert = [sys.executable, "-m", "neuron_dra", "convert", str(path)]
    done = subprocess.run(convert, capture_output=True, text=True, check=True, cwd=REPO)
    record_property("detail", f"{V1BETA1} refused as written, run as converted to v1")
    converted = list(yaml.safe_load_all(done.stdout))
    assert [d["apiVersion"] for d in converted] == [
        "resource.k8s.io/v1" if d["apiVersion"] == V1BETA1 else d["apiVersion"] for d in docs
    ]
    return converted


@pytest.mark.versions(check="seed examples")
@pytest.mark.parametrize(
    ("spec_file", "lnc", "count"),
    [
        ("1x4-connected-devices.yaml", None, 4),
        ("v1beta1/1x4-connected-devices.yaml", None, 4),
        ("lnc-setting-trn2.yaml", 1, None),
        ("v1beta1/lnc-setting-trn2.yaml", 1, None),
    ],
)
def test_example_with_a_pod(
    nodes: dict[str, SimulatedNode],
    spec_file: str,
    lnc: int | None,
    count: int | None,
    record_property: Any,
) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    create_in(cluster, ns, as_applied(cluster, spec_file, record_property))
    run_and_check(nodes, ns, "pod0", lnc, count)


@pytest.mark.versions(check="seed examples")
@pytest.mark.parametrize(
    ("spec_file", "lnc", "count"),
    [
        ("xl-trn2.yaml", None, 16),
        ("v1beta1/xl-trn2.yaml", None, 16),
        ("l-trn2.yaml", None, 8),
        ("v1beta1/l-trn2.yaml", None, 8),
        ("2.26-driver-trn2.yaml", None, 8),
        ("v1beta1/2.26-driver-trn2.yaml", None, 8),
        ("v1beta1/lnc-neurons.yaml", 1, None),
    ],
)
def test_template_example(
    nodes: dict[str, SimulatedNode],
    spec_file: str,
    lnc: int | None,
    count: int | None,
    record_property: Any,
) -> None:
    cluster = cluster_of(nodes)
    [template] = as_applied(cluster, spec_file, record_property)
    ns = template["metadata"].get("namespace")
    if ns is None:
        ns = namespace(cluster)
    elif cluster.get_or_none("v1", "Namespace", ns) is None:
        cluster.create_namespace(ns)
    create_in(cluster, ns, [template, pod_using("user", template["metadata"]["name"])])
    run_and_check(nodes, ns, "user", lnc, count)


@pytest.mark.versions(check="seed examples")
def test_ultraserver_four_node_unit(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    [template, _] = list(yaml.safe_load_all((SPECS / "us-4-node-config.yaml").read_text()))
    create_in(cluster, ns, [template])
    for i in range(4):
        node = cluster.get("v1", "Node", f"us-{i}")
        assert node["metadata"]["labels"][LABEL_ULTRASERVER_SERVER_ID_4] == "us-a"
        assert node["metadata"]["labels"][LABEL_ULTRASERVER_NODE_ID_4] == str(i)
        # What LeaderWorkerSet's exclusive placement does: one pod per node of the unit.
        create_in(cluster, ns, [pod_using(f"w{i}", "us-4-node-config", f"us-{i}")])
    for i in range(4):
        pod = cluster.wait_for_pod_running(f"w{i}", ns, timeout=60)
        claim = claim_of(cluster, ns, pod)
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == (f"us-{i}", "neuronnode")
        assert env_of(pod, "ctr0") == {
            "NEURON_RT_VISIBLE_CORES": "0-63",
            "NEURON_RT_ULTRASERVER_MODE": "1",
            "NEURON_RT_ULTRASERVER_SERVER_ID": "us-a",
            "NEURON_RT_ULTRASERVER_NODE_ID": str(i),
        }
        assert container_view(pod, "ctr0")["deviceNodes"] == [f"/dev/neuron{d}" for d in range(16)]
    for i in range(4):
        cluster.delete("v1", "Pod", f"w{i}", ns)
    for i in range(4):
        cluster.wait_for_pod_gone(f"w{i}", ns, timeout=60)
        assert not nodes[f"us-{i}"].cdi_files()


V1 = "neuron.aws.com/v1"


@pytest.mark.parametrize(
    ("node", "parameters", "message"),
    [
        (
            "trn2-b",
            {"apiVersion": V1, "kind": "NeuronConfig", "lnc": 1},
            "unknown field 'lnc' (known fields: apiVersion, kind, logicalNeuronCore)",
        ),
        (
            "trn2-b",
            {"apiVersion": V1, "kind": "GpuConfig"},
            "kind 'GpuConfig' is not one of NeuronConfig, UltraServerConfig",
        ),
        (
            "trn2-b",
            {"apiVersion": V1, "kind": "NeuronConfig", "logicalNeuronCore": 3},
            "field 'logicalNeuronCore': 3 is not allowed; allowed values: 1, 2",
        ),
        (
            "inf2-a",
            {"apiVersion": V1, "kind": "NeuronConfig", "logicalNeuronCore": 1},
            "but inf2.48xlarge has no logical NeuronCores",
        ),
        (
            "trn2-b",
            {"apiVersion": V1, "kind": "UltraServerConfig", "ultraserverMode": 4},
            "it is only valid for the neuronnode device",
        ),
    ],
)
def test_bad_config_keeps_the_pod_pending_and_says_why(
    nodes: dict[str, SimulatedNode], node: str, parameters: Obj, message: str
) -> None:
    cluster = cluster_of(nodes)
    ns = namespace(cluster)
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {
            "devices": {
                "requests": [{"name": "neurons", "exactly": {"deviceClassName": "neuron.aws.com"}}],
                "config": [{"opaque": {"driver": "neuron.aws.com", "parameters": parameters}}],
            }
        },
    }
    cluster.create(claim)
    create_in(cluster, ns, [pod_using("p", "bad", node, claim=True)])
    pod = cluster.wait_for_pod(
        "p",
        ns,
        lambda p: KUBELETSIDE_ERROR_ANNOTATION in p["metadata"].get("annotations", {}),
        "an error",
    )
    error = pod["metadata"]["annotations"][KUBELETSIDE_ERROR_ANNOTATION]
    assert message in error and f"claim {ns}/bad (" in error
    assert pod["status"].get("phase") == "Pending"
    assert not nodes[node].cdi_files()
    cluster.delete("v1", "Pod", "p", ns)
    cluster.wait_for_pod_gone("p", ns, timeout=60)


def test_parameters_that_are_not_an_object_are_refused(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "not-an-object", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "neurons", "exactly": {"deviceClassName": "neuron.aws.com"}}],
                "config": [{"opaque": {"driver": "neuron.aws.com", "parameters": [1, 2]}}],
            }
        },
    }
    with pytest.raises(Exception, match="parameters"):
        cluster.create(claim)


@pytest.mark.parametrize("step", STEPS)
def test_killed_mid_prepare_the_retry_succeeds(nodes: dict[str, SimulatedNode], step: Step) -> None:
    cluster = cluster_of(nodes)
    node = nodes["trn2-c"]
    node.stop_plugin()
    crashing = node.start_plugin(crash_after=step)
    ns = namespace(cluster)
    docs = list(yaml.safe_load_all((SPECS / "1x4-connected-devices.yaml").read_text()))
    docs[1]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node.name}
    create_in(cluster, ns, docs)
    cluster.wait_for("the plugin to be killed after " + step, lambda: not crashing.alive(), 60)
    assert crashing.process.returncode == -9
    cluster.stop_process(crashing)
    node.start_plugin()
    run_and_check(nodes, ns, "pod0", None, 4)
    assert not node.checkpointed()


def test_the_agent_loads_no_tool_in_its_whole_life(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    node = nodes["trn2-b"]
    node.stop_plugin()
    plugin = node.start_plugin(python_options=["-X", "importtime"])
    ns = namespace(cluster)
    docs = list(yaml.safe_load_all((SPECS / "1x4-connected-devices.yaml").read_text()))
    docs[1]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node.name}
    create_in(cluster, ns, docs)
    run_and_check(nodes, ns, "pod0", None, 4)  # prepared, then unprepared
    node.stop_plugin()  # SIGTERM: start to clean exit, every import on the way
    node.start_plugin()
    assert plugin.process.returncode == 0
    # `-X importtime` lines: "import time: self [us] | cumulative | module", nested by indent.
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in plugin.log_path.read_text().splitlines()
        if line.startswith("import time:") and "[us]" not in line
    }
    assert {
        "neuron_dra.agent.claims.preparer",
        "neuron_dra.agent.slices.publisher",
        "grpc",
    } <= loaded
    assert sorted(m for m in loaded if m.startswith(TOOL_MODULES)) == []


def published(slices: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """A pool's counter sets and devices, whichever slice holds them."""
    counters = [c for s in slices for c in s["spec"].get("sharedCounters") or []]
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    return counters, sorted(devices, key=lambda d: d["name"])


def generation(slices: list[Obj]) -> int:
    return int(slices[0]["spec"]["pool"]["generation"])


def test_slices_deleted_by_hand_come_back(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    node = nodes["inf2-a"]
    before = node.pool()
    assert before is not None
    victim = next(s["metadata"]["name"] for s in before if s["spec"].get("devices"))
    cluster.delete("resource.k8s.io/v1", "ResourceSlice", victim)
    started = time.monotonic()

    def back() -> list[Obj] | None:
        pool = node.pool()
        gone = pool is not None and victim not in {s["metadata"]["name"] for s in pool}
        return pool if gone and pool is not None and generation(pool) > generation(before) else None

    after = cluster.wait_for("slice re-created", back, timeout=5)
    assert time.monotonic() - started < 2.0
    assert published(after) == published(before)


def test_kubelet_restart_wipes_slices_and_the_plugin_restores_them(
    nodes: dict[str, SimulatedNode],
) -> None:
    cluster = cluster_of(nodes)
    node = nodes["inf2-a"]
    before = node.pool()
    assert before is not None
    cluster.stop_kubelet_side(node.name)
    node.side = cluster.start_kubelet_side(node.name)  # wipes the node's slices at start
    node.side.wait_for_plugin("neuron.aws.com")
    after = cluster.wait_for("slices restored", node.pool, timeout=10)
    assert published(after) == published(before)
    assert any(e["event"] == "slices-wiped" for e in node.side.report())


def test_api_server_outage_is_survived(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    node = nodes["inf2-a"]
    plugin = node.plugin
    assert plugin is not None
    logged = len(plugin.log_path.read_text())
    cluster.stop_apiserver()
    cluster.wait_for(
        "the plugin to notice the outage",
        lambda: "retrying" in plugin.log_path.read_text()[logged:],
        timeout=60,
    )
    cluster.start_apiserver()
    assert plugin.alive()
    # The watch is back: a deleted slice is re-created.
    before = cluster.wait_for("slices listed", node.pool, timeout=30)
    victim = next(s["metadata"]["name"] for s in before if s["spec"].get("devices"))
    cluster.delete("resource.k8s.io/v1", "ResourceSlice", victim)

    def back() -> list[Obj] | None:
        pool = node.pool()
        return pool if pool and victim not in {s["metadata"]["name"] for s in pool} else None

    after = cluster.wait_for("slice re-created", back, timeout=30)
    assert published(after) == published(before)


def test_sigterm_stops_cleanly(nodes: dict[str, SimulatedNode]) -> None:
    node = nodes["trn2-a"]
    plugin = node.plugin
    assert plugin is not None
    node.stop_plugin()  # SIGTERM, then waits
    assert plugin.process.returncode == 0
    assert not list(node.side.registry_dir.glob("*.sock"))
    assert not list((node.side.plugins_dir / "neuron.aws.com").glob("*.sock"))
    assert "stopping" in plugin.tail()
    node.start_plugin()


def test_a_plugin_started_during_an_outage_publishes_when_it_ends(
    nodes: dict[str, SimulatedNode],
) -> None:
    cluster = cluster_of(nodes)
    node = nodes["us-3"]
    before = node.device_names()
    node.stop_plugin()
    cluster.stop_apiserver()
    try:
        plugin = node.start_plugin(wait=False)
        cluster.wait_for(
            "the plugin to wait for the API server",
            lambda: "retrying" in plugin.log_path.read_text(),
            timeout=60,
        )
    finally:
        cluster.start_apiserver()
    # The feature probes ran only once the server answered, so they came to the decision
    # a plugin started with the server up made (which depends on the release's gates),
    # not to "no shared counters" from a probe that got no answer.
    published = cluster.wait_for(
        "slices published", lambda: node.device_names() == before or None, 30
    )
    assert published and before
    node.side.wait_for_plugin("neuron.aws.com")


def test_a_slice_of_another_pool_on_the_node_is_deleted(nodes: dict[str, SimulatedNode]) -> None:
    cluster = cluster_of(nodes)
    node = nodes["us-2"]

    def by_name() -> list[Obj]:
        return sorted(node.slices(), key=lambda s: str(s["metadata"]["name"]))

    def leave_behind(name: str) -> None:
        """What an older driver, or a test by hand, leaves: the node's slice in another pool."""
        cluster.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": "neuron.aws.com",
                    "nodeName": node.name,
                    "pool": {"name": f"{node.name}-old", "generation": 7, "resourceSliceCount": 1},
                    "devices": [{"name": "neurondevice0"}],
                },
            }
        )

    def gone(name: str) -> bool:
        return cluster.get_or_none("resource.k8s.io/v1", "ResourceSlice", name) is None

    pool = by_name()
    # Named to list ahead of the driver's own slices.
    leave_behind(f"{node.name}-a-leftover")
    cluster.wait_for("the leftover deleted", lambda: gone(f"{node.name}-a-leftover"), 10)
    # The pool needed no write: the same slices, at the same generation.
    assert by_name() == pool

    # Left by the driver version this one replaces.
    node.stop_plugin()
    leave_behind(f"{node.name}-a-older")
    plugin = node.start_plugin()
    cluster.wait_for("the older slice deleted", lambda: gone(f"{node.name}-a-older"), 10)
    assert by_name() == pool
    assert "refuses to update" not in plugin.log_path.read_text()
