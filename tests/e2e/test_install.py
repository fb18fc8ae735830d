"""`scripts/install-dra-driver.sh` and the deploy/ manifests against a real API server.

The cluster runs the DaemonSet controller too, so a rollout is a real one: a
Neuron node's plugin pod is created by the controller, bound by the scheduler
and reported Ready by the kubelet stand-in. The plugin's permissions are
checked as the API server sees them: SubjectAccessReviews for the exact RBAC
verbs, and impersonated requests carrying a pod-bound token's node name for the
admission policies.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import ssl
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from neuron_dra.agent import features
from neuron_dra.agent.kube import ApiConfig, Kube
from neuron_dra.agent.publisher import SlicePublisher
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from tests.e2e.build import Binaries
from tests.e2e.cluster import DEFAULT_CONTROLLERS, Cluster
from tests.e2e.processes import free_port
from tests.sysfs_tree import FakeNode

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install-dra-driver.sh"
DEPLOY = REPO / "deploy"
IMAGE = "registry.invalid/neuron-dra:1.0.0"
NAMESPACE = "neuron-dra"
PLUGIN_USER = "system:serviceaccount:neuron-dra:neuron-dra"
PLUGIN_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:neuron-dra",
                 "system:authenticated")  # fmt: skip
NODE_NAME_EXTRA = "authentication.kubernetes.io%2Fnode-name"
Obj = dict[str, Any]
Key = tuple[str, str, str, str | None]  # apiVersion, kind, name, namespace


def manifest_objects() -> list[Obj]:
    return [
        doc
        for path in sorted(DEPLOY.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


KEYS = [key(obj) for obj in manifest_objects()]


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    """Its own control plane: the DaemonSet controller runs, and uninstall empties it."""
    controllers = (*DEFAULT_CONTROLLERS, "daemonset-controller")
    with Cluster(e2e_binaries, controllers=controllers) as running:
        yield running


def run_script(
    cluster: Cluster, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        "PATH": os.environ["PATH"],
        "KUBECTL": str(cluster.binaries.kubectl),
        "KUBECONFIG": str(cluster.kubeconfig),
        "HOME": str(cluster.workdir),  # kubectl's discovery cache stays out of the checkout
        **(env or {}),
    }
    return subprocess.run(
        [str(SCRIPT), *args], check=False, env=environ, capture_output=True, text=True, timeout=180
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def state(cluster: Cluster) -> dict[Key, tuple[str, int] | None]:
    """resourceVersion and generation of every manifest object; None when absent."""
    found: dict[Key, tuple[str, int] | None] = {}
    for k in KEYS:
        obj = cluster.get_or_none(*k)
        meta = obj["metadata"] if obj else None
        found[k] = (meta["resourceVersion"], meta.get("generation", 0)) if meta else None
    return found


def daemonset(cluster: Cluster) -> Obj:
    return cluster.get("apps/v1", "DaemonSet", "neuron-dra", NAMESPACE)


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> str:
    """The driver installed once by the script, waiting for the rollout; its output."""
    return ok(run_script(cluster, IMAGE, "--timeout=60s"))


# --------------------------------------------------------------------- errors


def test_missing_image_is_a_usage_error(cluster: Cluster) -> None:
    result = run_script(cluster)
    assert result.returncode == 2
    assert "error: missing IMAGE" in result.stderr
    assert "Usage:" in result.stderr
    result = run_script(cluster, IMAGE, "--bogus")
    assert (result.returncode, "unknown option --bogus" in result.stderr) == (2, True)
    result = run_script(cluster, "bad image;rm")
    assert (result.returncode, "is not an image reference" in result.stderr) == (2, True)


def test_missing_kubectl(cluster: Cluster, tmp_path: Path) -> None:
    result = run_script(cluster, IMAGE, env={"KUBECTL": "/nonexistent"})
    assert result.returncode == 3
    assert "KUBECTL=/nonexistent is not an executable kubectl" in result.stderr
    # Without KUBECTL the script looks on PATH, here a directory without kubectl.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "basename", "sed", "grep", "paste"):
        found = subprocess.run(["which", tool], capture_output=True, text=True, check=True)
        (bin_dir / tool).symlink_to(found.stdout.strip())
    environ = {"PATH": str(bin_dir), "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(bin_dir / "bash"), str(SCRIPT), IMAGE],
        check=False,
        env=environ,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 3
    assert "kubectl not found on PATH; install it or set KUBECTL" in result.stderr


def test_unreachable_cluster(cluster: Cluster, tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "gone", "cluster": {"server": f"https://127.0.0.1:{closed}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    result = run_script(cluster, IMAGE, env={"KUBECONFIG": str(kubeconfig)})
    assert result.returncode == 3
    assert "cannot reach the cluster of context 'gone'" in result.stderr
    assert f"127.0.0.1:{closed}" in result.stderr


# --------------------------------------------------------------------- install


def test_dry_run_changes_nothing(cluster: Cluster) -> None:
    """Before the install (nothing to create) and after it (nothing to change)."""
    before = state(cluster)
    output = ok(run_script(cluster, IMAGE, "--dry-run"))
    assert state(cluster) == before
    if before[("v1", "Namespace", NAMESPACE, None)] is None:
        assert all(found is None for found in before.values())
        assert "checking its objects in namespace default" in output
        assert "serviceaccount/neuron-dra serverside-applied (server dry run)" in output
        assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in output


def test_runs_through_a_symlink(cluster: Cluster, tmp_path: Path) -> None:
    """As examples/scripts/install-dra-driver.sh would: the manifests are still found."""
    link = tmp_path / "examples" / "scripts" / "install-dra-driver.sh"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(SCRIPT, link.parent))
    before = state(cluster)
    result = subprocess.run(
        [str(link), IMAGE, "--dry-run"],
        check=False, capture_output=True, text=True,
        env={"PATH": os.environ["PATH"], "KUBECTL": str(cluster.binaries.kubectl),
             "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(tmp_path)},
    )  # fmt: skip
    assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in ok(result)
    assert state(cluster) == before


def test_install_applies_every_manifest(cluster: Cluster, installed: str) -> None:
    assert "v1beta1" not in installed  # served here: the seed's spellings apply
    assert all(state(cluster).values()), state(cluster)
    assert {k[1] for k in KEYS} >= {
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "DaemonSet",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass",
    }  # fmt: skip
    spec = daemonset(cluster)["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == IMAGE
    affinity = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    values = affinity["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert sorted(values) == sorted(INSTANCE_TYPES)
    # No Neuron node yet: the rollout is complete with no pod, and the script says so.
    assert "no node runs the plugin" in installed
    for name in ("neuron-dra-resourceslices", "neuron-dra-node-labels"):
        policy = cluster.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", name)
        assert not policy.get("status", {}).get("typeChecking", {}).get("expressionWarnings")


def test_second_install_changes_nothing(cluster: Cluster, installed: str) -> None:
    before = state(cluster)
    ok(run_script(cluster, IMAGE, "--no-wait"))
    assert state(cluster) == before
    # A dry run of an upgrade is checked by the server and changes nothing either.
    output = ok(run_script(cluster, "registry.invalid/neuron-dra:2.0.0", "--dry-run"))
    assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in output
    assert state(cluster) == before


def test_new_image_rolls_the_daemonset(cluster: Cluster, installed: str) -> None:
    before = state(cluster)
    ok(run_script(cluster, "registry.invalid/neuron-dra:1.0.1", "--no-wait"))
    after = state(cluster)
    ds_key = ("apps/v1", "DaemonSet", "neuron-dra", NAMESPACE)
    assert {k for k in KEYS if after[k] != before[k]} == {ds_key}
    assert cast(tuple[str, int], after[ds_key])[1] == cast(tuple[str, int], before[ds_key])[1] + 1
    assert daemonset(cluster)["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.invalid/neuron-dra:1.0.1"
    )
    ok(run_script(cluster, IMAGE, "--no-wait"))


def test_rollout_on_a_neuron_node(cluster: Cluster, installed: str) -> None:
    """A trn2 node gets a plugin pod; the script waits for it and tries its logs."""
    cluster.add_node("trn2-install", labels={"node.kubernetes.io/instance-type": "trn2.48xlarge"})
    cluster.start_kubelet_side("trn2-install")
    output = ok(run_script(cluster, IMAGE, "--timeout=60s"))
    assert "the plugin runs on 1 node(s)" in output
    pods = cluster.list_objects("v1", "Pod", NAMESPACE)
    assert [p["spec"]["nodeName"] for p in pods] == ["trn2-install"]
    assert pods[0]["spec"]["priorityClassName"] == "system-node-critical"
    env = {e["name"]: e for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # The stand-in kubelet serves no container logs: the script reports it and succeeds.
    assert "logs not available" in output


# --------------------------------------------------------------- permissions


Target = tuple[str, str, str, str]  # group, resource, subresource, namespace ("" cluster scope)


def can(cluster: Cluster, verb: str, target: Target) -> bool:
    group, resource, sub, namespace = target
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": PLUGIN_USER,
            "groups": list(PLUGIN_GROUPS),
            "resourceAttributes": {
                "verb": verb, "group": group, "resource": resource, "subresource": sub,
                "namespace": namespace,
            },
        },
    }  # fmt: skip
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    return bool(cast(Obj, cluster.request("POST", path, review))["status"].get("allowed"))


VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# Claims are read in every namespace; Events are written only next to the kubelet's node
# events, in "default".
GRANTED: dict[Target, set[str]] = {
    ("resource.k8s.io", "resourceslices", "", ""): {"list", "watch", "create", "update", "delete"},
    ("resource.k8s.io", "resourceclaims", "", "someone"): {"get"},
    ("", "nodes", "", ""): {"get", "patch"},
    ("", "events", "", "default"): {"create"},
}
CHECKED: list[Target] = [
    *GRANTED,
    ("resource.k8s.io", "resourceclaims", "status", "someone"),
    ("resource.k8s.io", "deviceclasses", "", ""),
    ("resource.k8s.io", "resourceclaimtemplates", "", "someone"),
    ("", "nodes", "status", ""),
    ("", "events", "", "someone"),
    ("", "pods", "", "someone"),
    ("", "secrets", "", NAMESPACE),
]


def test_rbac_grants_exactly_what_the_plugin_calls(cluster: Cluster, installed: str) -> None:
    allowed = {k: {v for v in VERBS if can(cluster, v, k)} for k in CHECKED}
    assert allowed == {k: GRANTED.get(k, set()) for k in CHECKED}


class Reply:
    def __init__(self, status: int, body: Obj) -> None:
        self.status = status
        self.body = body

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


def as_plugin(
    cluster: Cluster,
    method: str,
    path: str,
    body: Obj | None = None,
    *,
    node: str | None,
    content_type: str = "application/json",
) -> Reply:
    """A request as the plugin's service account, with its token's node claim if `node`."""
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", cluster.apiserver_port, context=context)
    try:
        conn.putrequest(method, path)
        conn.putheader("Authorization", f"Bearer {cluster.token}")
        conn.putheader("Impersonate-User", PLUGIN_USER)
        for group in PLUGIN_GROUPS:  # one header line per group
            conn.putheader("Impersonate-Group", group)
        if node is not None:
            conn.putheader(f"Impersonate-Extra-{NODE_NAME_EXTRA}", node)
        data = json.dumps(body).encode() if body is not None else b""
        conn.putheader("Content-Type", content_type)
        conn.putheader("Accept", "application/json")
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        response = conn.getresponse()
        raw = response.read()
        return Reply(response.status, json.loads(raw) if raw else {})
    finally:
        conn.close()


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def slice_for(node: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-neuron.aws.com-"},
        "spec": {
            "driver": "neuron.aws.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


@pytest.fixture(scope="module")
def policy_nodes(cluster: Cluster, installed: str) -> tuple[str, str]:
    """Two nodes, once the API server enforces the just created admission policies."""
    own, other = "policy-a", "policy-b"
    for name in (own, other):
        cluster.add_node(name)

    # Policies reach the admission chain through an informer: poll with dry runs.
    def enforced() -> bool:
        slice_ = as_plugin(cluster, "POST", f"{SLICES}?dryRun=All", slice_for(other), node=own)
        label = as_plugin(
            cluster, "PATCH", f"/api/v1/nodes/{other}?dryRun=All",
            {"metadata": {"labels": {"x": "y"}}}, node=own,
            content_type="application/merge-patch+json",
        )  # fmt: skip
        return slice_.status == 403 and label.status == 403

    cluster.wait_for("admission policies in effect", enforced)
    return own, other


def test_plugin_writes_only_its_own_nodes_slices(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    own, other = policy_nodes
    created = as_plugin(cluster, "POST", SLICES, slice_for(own), node=own)
    assert created.status == 201, created.message
    name = created.body["metadata"]["name"]
    created.body["spec"]["pool"]["generation"] = 2
    replaced = as_plugin(cluster, "PUT", f"{SLICES}/{name}", created.body, node=own)
    assert replaced.status == 200, replaced.message
    listed = as_plugin(cluster, "GET", f"{SLICES}?fieldSelector=spec.nodeName%3D{own}", node=own)
    assert [s["metadata"]["name"] for s in listed.body["items"]] == [name]

    denied = as_plugin(cluster, "POST", SLICES, slice_for(other), node=own)
    assert denied.status == 403, denied.message
    assert (
        f"the plugin on node '{own}' may not modify ResourceSlices of node '{other}'"
        in denied.message
    )
    # A delete is judged by the slice being deleted.
    foreign = cluster.create(slice_for(other))["metadata"]["name"]
    denied = as_plugin(cluster, "DELETE", f"{SLICES}/{foreign}", node=own)
    assert denied.status == 403, denied.message
    assert f"may not modify ResourceSlices of node '{other}'" in denied.message
    assert cluster.get_or_none("resource.k8s.io/v1", "ResourceSlice", foreign) is not None
    # A token that is not bound to a pod on a node may write nothing.
    denied = as_plugin(cluster, "POST", SLICES, slice_for(own), node=None)
    assert denied.status == 403, denied.message
    assert "no node associated with this service account token" in denied.message
    # Slices are never read one by one, so that is not granted either.
    assert as_plugin(cluster, "GET", f"{SLICES}/{name}", node=own).status == 403

    deleted = as_plugin(cluster, "DELETE", f"{SLICES}/{name}", node=own)
    assert deleted.status == 200, deleted.message
    cluster.delete("resource.k8s.io/v1", "ResourceSlice", foreign)


def test_plugin_writes_only_its_own_nodes_pool_of_its_own_driver(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    """A pool is named after its node: the device-taint eviction controller keys pools by
    (driver, pool name) alone, so a slice of node A in pool B could evict B's pods."""
    own, other = policy_nodes
    into_other_pool = slice_for(own)
    into_other_pool["spec"]["pool"]["name"] = other
    denied = as_plugin(cluster, "POST", SLICES, into_other_pool, node=own)
    assert denied.status == 403, denied.message
    assert (
        f"the plugin on node '{own}' may publish only into pool '{own}', not '{other}'"
        in denied.message
    )
    of_other_driver = slice_for(own)
    of_other_driver["spec"]["driver"] = "gpu.example.com"
    denied = as_plugin(cluster, "POST", SLICES, of_other_driver, node=own)
    assert denied.status == 403, denied.message
    assert (
        "the plugin may modify only ResourceSlices of driver 'neuron.aws.com', "
        "not 'gpu.example.com'" in denied.message
    )
    # No update moves a slice into another pool: the server refuses pool name changes.

    # Another driver's slice on the same node is not the plugin's to delete.
    theirs = cluster.create(of_other_driver)["metadata"]["name"]
    denied = as_plugin(cluster, "DELETE", f"{SLICES}/{theirs}", node=own)
    assert denied.status == 403, denied.message
    assert "may modify only ResourceSlices of driver 'neuron.aws.com'" in denied.message
    assert cluster.get_or_none("resource.k8s.io/v1", "ResourceSlice", theirs) is not None
    # A stray slice of its own node and driver, whatever its pool, it may clean up.
    stray = cluster.create(into_other_pool)["metadata"]["name"]
    deleted = as_plugin(cluster, "DELETE", f"{SLICES}/{stray}", node=own)
    assert deleted.status == 200, deleted.message
    cluster.delete("resource.k8s.io/v1", "ResourceSlice", theirs)


def plugin_kube(cluster: Cluster, node: str) -> Kube:
    """The agent's own API client, as the plugin's service account with a node claim."""
    # Headers hold one value per name: one group, as the policies ignore groups.
    headers = {
        "Impersonate-User": PLUGIN_USER,
        "Impersonate-Group": "system:authenticated",
        f"Impersonate-Extra-{NODE_NAME_EXTRA}": node,
    }
    authorization = f"Bearer {cluster.token}"
    return Kube(ApiConfig(
        server=cluster.server, ca_file=str(cluster.ca_file),
        authorization=lambda: authorization, headers=headers,
    ))  # fmt: skip


def test_the_plugins_probes_and_writes_pass_the_policy(
    cluster: Cluster,
    policy_nodes: tuple[str, str],
    fake_node: FakeNode,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The feature probes dry-run creates through admission: the plugin must get the
    answers the server gives anyone, and its publisher must write, rewrite and delete."""
    own, _ = policy_nodes
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-policy", 0))
    inventory = discover(root).inventory
    node_uid = cluster.get("v1", "Node", own)["metadata"]["uid"]

    def slices(
        layout: CounterLayout,
        generation: int = 1,
        kinds: UltraServerDevices = UltraServerDevices.BOTH,
    ) -> list[Obj]:
        options = SliceOptions(own, node_uid, generation, kinds, counter_layout=layout)
        return build_slices(inventory, options)

    def on_node() -> list[Obj]:
        path = f"spec.nodeName={own}"
        return cluster.list_objects("resource.k8s.io/v1", "ResourceSlice", field_selector=path)

    async def probe(kube: Kube) -> tuple[bool, dict[CounterLayout, features.Answer]]:
        taints = await features.probe_taints(kube, own)
        return taints, await features.probe_counter_layout(kube, slices)

    plugin, admin = plugin_kube(cluster, own), Kube.connect(cluster.kubeconfig)
    caplog.set_level(logging.INFO, logger="neuron_dra.agent.features")
    try:
        assert asyncio.run(probe(plugin)) == asyncio.run(probe(admin))
        forbidden = [r.getMessage() for r in caplog.records if "403: " in r.getMessage()]
        assert forbidden == []

        layout = cluster.counter_layout()
        publisher = SlicePublisher(plugin, own, lambda g, _: slices(layout, g))
        asyncio.run(publisher.reconcile(node_uid))
        published = on_node()
        assert len(published) == len(slices(layout))
        assert {s["spec"]["pool"]["name"] for s in published} == {own}
        # Devices only, in one slice: a published slice rewritten, any other deleted.
        publisher.refresh(lambda g, _: slices(layout, g, UltraServerDevices.DEVICES))
        asyncio.run(publisher.reconcile(node_uid))
        [rewritten] = on_node()
        assert rewritten["metadata"]["name"] in {s["metadata"]["name"] for s in published}
        assert "neuronnode" not in {d["name"] for d in rewritten["spec"]["devices"]}
        publisher.refresh(lambda g, _: [])
        asyncio.run(publisher.reconcile(node_uid))
        assert on_node() == []
    finally:
        plugin.close()
        admin.close()


def test_plugin_reads_the_server_version_without_a_rule(cluster: Cluster, installed: str) -> None:
    """What the publisher reads to notice a control-plane upgrade or downgrade."""
    version = as_plugin(cluster, "GET", "/version", node="policy-a")
    assert version.status == 200, version.message
    assert version.body["gitVersion"] == cluster.binaries.version


def test_plugin_cannot_create_device_classes(cluster: Cluster, installed: str) -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "stolen.neuron.aws.com"},
        "spec": {},
    }
    denied = as_plugin(
        cluster, "POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class, node="policy-a"
    )
    assert denied.status == 403, denied.message
    assert f'User "{PLUGIN_USER}" cannot create resource "deviceclasses"' in denied.message


def test_plugin_reads_claims_but_cannot_write_them(cluster: Cluster, installed: str) -> None:
    cluster.create_namespace("install-claims")
    claim = cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "install-claims"},
            "spec": {
                "devices": {
                    "requests": [{"name": "r", "exactly": {"deviceClassName": "neuron.aws.com"}}]
                }
            },
        }
    )
    path = "/apis/resource.k8s.io/v1/namespaces/install-claims/resourceclaims/c"
    got = as_plugin(cluster, "GET", path, node="policy-a")
    assert (got.status, got.body["metadata"]["uid"]) == (200, claim["metadata"]["uid"])
    denied = as_plugin(cluster, "PUT", f"{path}/status", got.body, node="policy-a")
    assert denied.status == 403, denied.message
    assert f'User "{PLUGIN_USER}" cannot update resource "resourceclaims/status"' in (
        denied.message
    )


def test_plugin_patches_only_its_own_nodes_ultraserver_labels(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    own, other = policy_nodes
    label = "neuron.amazonaws.com/ultraserver-server-id-4"

    def patch(node: str, labels: Mapping[str, str | None]) -> Reply:
        body = {"metadata": {"labels": dict(labels)}}
        return as_plugin(
            cluster, "PATCH", f"/api/v1/nodes/{node}", body, node=own,
            content_type="application/merge-patch+json",
        )  # fmt: skip

    assert as_plugin(cluster, "GET", f"/api/v1/nodes/{own}", node=own).status == 200
    patched = patch(own, {label: "us-1"})
    assert patched.status == 200, patched.message
    assert cluster.get("v1", "Node", own)["metadata"]["labels"][label] == "us-1"
    assert patch(own, {label: None}).status == 200

    denied = patch(other, {label: "us-1"})
    assert denied.status == 403, denied.message
    assert f"the plugin on node '{own}' may not modify node '{other}'" in denied.message
    denied = patch(own, {"node-role.kubernetes.io/control-plane": ""})
    assert denied.status == 403, denied.message
    assert "may change only the neuron.amazonaws.com/ultraserver-* labels" in denied.message


# --------------------------------------------------------------------- uninstall


def test_uninstall_removes_everything(cluster: Cluster, installed: str) -> None:
    before = state(cluster)
    ok(run_script(cluster, "--uninstall", "--dry-run"))
    assert state(cluster) == before

    output = ok(run_script(cluster, "--uninstall", "--timeout=60s"))
    assert state(cluster) == dict.fromkeys(KEYS)
    assert "ResourceSlices the plugins published are deleted by each node's kubelet" in output
    assert cluster.list_objects("v1", "Pod", NAMESPACE) == []
    # Nothing left to delete is not an error.
    ok(run_script(cluster, "--uninstall"))


# ------------------------------------------------------------- old clusters


def test_cluster_without_v1beta1_says_so_in_one_line(e2e_binaries: Binaries) -> None:
    """resource.k8s.io/v1beta1 off, as every release ships it. The install goes on."""
    gates = "resource.k8s.io/v1beta1=false"
    with Cluster(
        e2e_binaries, controllers=["serviceaccount-controller"], runtime_config=gates
    ) as shipped:
        output = ok(run_script(shipped, IMAGE, "--dry-run"))
    [note] = [line for line in output.splitlines() if "v1beta1" in line]
    assert note.startswith("note: resource.k8s.io/v1beta1 is not served here"), note


def test_cluster_without_resource_v1(e2e_binaries: Binaries) -> None:
    """A control plane serving DRA only in beta, as before 1.34."""
    with Cluster(
        e2e_binaries,
        controllers=["serviceaccount-controller"],
        runtime_config="resource.k8s.io/v1=false,resource.k8s.io/v1beta1=true",
    ) as old:
        result = run_script(old, IMAGE)
    assert result.returncode == 3, result.stderr
    assert "serves only resource.k8s.io/v1beta1 of Dynamic Resource Allocation" in result.stderr
    assert "older than Kubernetes 1.34" in result.stderr
