"""What the plugin's service account may do, as the API server decides it.

Checked the same way for every install path (``scripts/install-dra-driver.sh``
and the Helm chart): SubjectAccessReviews for the exact RBAC verbs, and
requests impersonating the service account with a pod-bound token's node name
for the admission policies. ``object_state`` tells whether an operation
changed any of the installed objects.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.kube import ApiConfig, Kube
from neuron_dra.agent.slices import features
from neuron_dra.agent.slices.publisher import SlicePublisher
from neuron_dra.hardware.discovery import discover
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from neuron_dra.tools.doctor.clusterchecks import POLICIES
from neuron_dra_harness.cluster import Cluster

NAMESPACE = "neuron-dra"
PLUGIN_USER = "system:serviceaccount:neuron-dra:neuron-dra"
PLUGIN_GROUPS = (
    "system:serviceaccounts",
    "system:serviceaccounts:neuron-dra",
    "system:authenticated",
)
NODE_NAME_EXTRA = "authentication.kubernetes.io%2Fnode-name"
Obj = dict[str, Any]
Key = tuple[str, str, str, str | None]  # apiVersion, kind, name, namespace


def key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


def object_state(cluster: Cluster, keys: list[Key]) -> dict[Key, tuple[str, int] | None]:
    """resourceVersion and generation of each object; None when absent. Equal before and
    after an operation: it changed nothing."""
    found: dict[Key, tuple[str, int] | None] = {}
    for k in keys:
        obj = cluster.get_or_none(*k)
        meta = obj["metadata"] if obj else None
        found[k] = (meta["resourceVersion"], meta.get("generation", 0)) if meta else None
    return found


Target = tuple[str, str, str, str]  # group, resource, subresource, namespace ("" cluster scope)


def can(cluster: Cluster, verb: str, target: Target, name: str = "") -> bool:
    group, resource, sub, namespace = target
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": PLUGIN_USER,
            "groups": list(PLUGIN_GROUPS),
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": sub,
                "namespace": namespace,
                "name": name,
            },
        },
    }
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    return bool(cast(Obj, cluster.request("POST", path, review))["status"].get("allowed"))


VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# Claims are read in every namespace, their status.devices applied (the entries the
# driver may change: `claim_status_access`); Events are written only next to the kubelet's node
# events, in "default".
GRANTED: dict[Target, set[str]] = {
    ("resource.k8s.io", "resourceslices", "", ""): {"list", "watch", "create", "update", "delete"},
    ("resource.k8s.io", "resourceclaims", "", "someone"): {"get"},
    ("resource.k8s.io", "resourceclaims", "status", "someone"): {"patch"},
    ("", "nodes", "", ""): {"get", "list", "watch", "patch"},
    ("", "events", "", "default"): {"create"},
}
CHECKED: list[Target] = [
    *GRANTED,
    ("resource.k8s.io", "deviceclasses", "", ""),
    ("resource.k8s.io", "resourceclaimtemplates", "", "someone"),
    ("", "nodes", "status", ""),
    ("", "events", "", "someone"),
    ("", "pods", "", "someone"),
    ("", "secrets", "", NAMESPACE),
]


# What `neuron-dra doctor --in-cluster` reads in the plugin's pod, each object by name.
NAMED_READS: dict[Target, tuple[str, ...]] = {
    ("resource.k8s.io", "deviceclasses", "", ""): (DRIVER_NAME, f"neuroncore.{DRIVER_NAME}"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies", "", ""): POLICIES,
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", ""): POLICIES,
}


def check_rbac(cluster: Cluster) -> None:
    """The ClusterRole and Role grant exactly the calls the plugin makes, and the
    reads of doctor run in its pod: get of those objects, by name, nothing else."""
    allowed = {k: {v for v in VERBS if can(cluster, v, k)} for k in CHECKED}
    assert allowed == {k: GRANTED.get(k, set()) for k in CHECKED}
    for target, names in NAMED_READS.items():
        for name in (*names, "someone-elses"):
            verbs = {v for v in VERBS if can(cluster, v, target, name)}
            assert verbs == ({"get"} if name in names else set()), (target, name, verbs)


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


def add_policy_nodes(cluster: Cluster, own: str, other: str) -> None:
    """Two nodes, once the API server enforces the admission policies just created."""
    for name in (own, other):
        cluster.add_node(name)

    # Policies reach the admission chain through an informer: poll with dry runs.
    def enforced() -> bool:
        slice_ = as_plugin(cluster, "POST", f"{SLICES}?dryRun=All", slice_for(other), node=own)
        label = as_plugin(
            cluster,
            "PATCH",
            f"/api/v1/nodes/{other}?dryRun=All",
            {"metadata": {"labels": {"x": "y"}}},
            node=own,
            content_type="application/merge-patch+json",
        )
        return slice_.status == 403 and label.status == 403

    cluster.wait_for("admission policies in effect", enforced)


def check_own_nodes_slices(cluster: Cluster, own: str, other: str) -> None:
    """The plugin writes only its own node's slices."""
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


def check_own_nodes_pool_of_its_own_driver(cluster: Cluster, own: str, other: str) -> None:
    """A pool is named after its node: the device-taint eviction controller keys pools by
    (driver, pool name) alone, so a slice of node A in pool B could evict B's pods."""
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
    return Kube(
        ApiConfig(
            server=cluster.server,
            ca_file=str(cluster.ca_file),
            authorization=lambda: authorization,
            headers=headers,
        )
    )


def check_probes_and_writes(
    cluster: Cluster, own: str, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The feature probes dry-run creates through admission: the plugin must get the
    answers the server gives anyone, and its publisher must write, rewrite and delete."""
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

    async def probe(kube: Kube) -> tuple[bool, bool, dict[CounterLayout, features.Answer]]:
        taints = await features.probe_taints(kube, own)
        notices = await features.probe_informational_taints(kube, own)
        return taints, notices, await features.probe_counter_layout(kube, slices)

    plugin, admin = plugin_kube(cluster, own), Kube.connect(cluster.kubeconfig)
    caplog.set_level(logging.INFO, logger="neuron_dra.agent.slices.features")
    try:
        assert asyncio.run(probe(plugin)) == asyncio.run(probe(admin))
        forbidden = [r.getMessage() for r in caplog.records if "403: " in r.getMessage()]
        assert forbidden == []

        layout = cluster.counter_layout()
        # What the publisher builds, the last of these: the layout, then devices only,
        # then nothing.
        builds: list[Callable[[int], list[Obj]]] = [lambda g: slices(layout, g)]
        publisher = SlicePublisher(plugin, own, lambda g, _: builds[-1](g))
        asyncio.run(publisher.reconcile(node_uid))
        published = on_node()
        assert len(published) == len(slices(layout))
        assert {s["spec"]["pool"]["name"] for s in published} == {own}
        # Devices only, in one slice: a published slice rewritten, any other deleted.
        builds.append(lambda g: slices(layout, g, UltraServerDevices.DEVICES))
        publisher.refresh()
        asyncio.run(publisher.reconcile(node_uid))
        [rewritten] = on_node()
        assert rewritten["metadata"]["name"] in {s["metadata"]["name"] for s in published}
        assert "neuronnode" not in {d["name"] for d in rewritten["spec"]["devices"]}
        builds.append(lambda g: [])
        publisher.refresh()
        asyncio.run(publisher.reconcile(node_uid))
        assert on_node() == []
    finally:
        plugin.close()
        admin.close()


def check_server_version(cluster: Cluster, node: str) -> None:
    """What the publisher reads to notice a control-plane upgrade or downgrade."""
    version = as_plugin(cluster, "GET", "/version", node=node)
    assert version.status == 200, version.message
    assert version.body["gitVersion"] == cluster.binaries.version


def check_no_device_classes(cluster: Cluster, node: str) -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "stolen.neuron.aws.com"},
        "spec": {},
    }
    denied = as_plugin(
        cluster, "POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class, node=node
    )
    assert denied.status == 403, denied.message
    assert f'User "{PLUGIN_USER}" cannot create resource "deviceclasses"' in denied.message


def check_claims_read_only(cluster: Cluster, node: str, namespace: str) -> None:
    cluster.create_namespace(namespace)
    claim = cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": namespace},
            "spec": {
                "devices": {
                    "requests": [{"name": "r", "exactly": {"deviceClassName": "neuron.aws.com"}}]
                }
            },
        }
    )
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/c"
    got = as_plugin(cluster, "GET", path, node=node)
    assert (got.status, got.body["metadata"]["uid"]) == (200, claim["metadata"]["uid"])
    denied = as_plugin(cluster, "PUT", f"{path}/status", got.body, node=node)
    assert denied.status == 403, denied.message
    assert f'User "{PLUGIN_USER}" cannot update resource "resourceclaims/status"' in (
        denied.message
    )


def check_own_nodes_ultraserver_labels(cluster: Cluster, own: str, other: str) -> None:
    label = "neuron.amazonaws.com/ultraserver-server-id-4"

    def patch(node: str, labels: Mapping[str, str | None]) -> Reply:
        body = {"metadata": {"labels": dict(labels)}}
        return as_plugin(
            cluster,
            "PATCH",
            f"/api/v1/nodes/{node}",
            body,
            node=own,
            content_type="application/merge-patch+json",
        )

    assert as_plugin(cluster, "GET", f"/api/v1/nodes/{own}", node=own).status == 200
    # What the agent lists (then watches) to follow its own Node.
    listed = f"/api/v1/nodes?fieldSelector=metadata.name%3D{own}"
    assert as_plugin(cluster, "GET", listed, node=own).status == 200
    patched = patch(own, {label: "us-1"})
    assert patched.status == 200, patched.message
    assert cluster.get("v1", "Node", own)["metadata"]["labels"][label] == "us-1"
    assert patch(own, {label: None}).status == 200
    # Neuron Observer's label: "true" or gone, nothing else.
    present = "neuron.amazonaws.com/present"
    assert patch(own, {present: "true"}).status == 200
    assert cluster.get("v1", "Node", own)["metadata"]["labels"][present] == "true"
    denied = patch(own, {present: "false"})
    assert denied.status == 403, denied.message
    assert 'neuron.amazonaws.com/present (to "true")' in denied.message
    assert patch(own, {present: None}).status == 200

    denied = patch(other, {label: "us-1"})
    assert denied.status == 403, denied.message
    assert f"the plugin on node '{own}' may not modify node '{other}'" in denied.message
    denied = patch(own, {"node-role.kubernetes.io/control-plane": ""})
    assert denied.status == 403, denied.message
    assert "may change only the neuron.amazonaws.com/ultraserver-* labels" in denied.message
    # Nor what would have the Node garbage-collected, or stuck in deletion.
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "x",
        "uid": "00000000-0000-4000-8000-000000000000",
    }
    for metadata in ({"ownerReferences": [owner]}, {"finalizers": ["example.com/hold"]}):
        denied = as_plugin(
            cluster,
            "PATCH",
            f"/api/v1/nodes/{own}",
            {"metadata": metadata},
            node=own,
            content_type="application/merge-patch+json",
        )
        assert denied.status == 403, (metadata, denied.message)
        assert "may change only the neuron.amazonaws.com/ultraserver-* labels" in denied.message
