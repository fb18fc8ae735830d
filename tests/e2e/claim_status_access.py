"""What the plugin's service account may write of a claim's status, as the API server decides.

Shared by `test_install.py` and `test_helm.py`, as `plugin_access`: the plugin applies
`status.devices` entries of its own driver and pool on claims allocated on its own
node, and nothing else of a claim's status (RBAC, the granular status authorization
of 1.36+, and the `-claim-status` admission policy together).
"""

from __future__ import annotations

from typing import Any

from neuron_dra_harness.cluster import Cluster
from tests.e2e.plugin_access import PLUGIN_USER, Reply, as_plugin, can

Obj = dict[str, Any]
DRIVER = "neuron.aws.com"
OTHER_DRIVER = "gpu.example.com"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"


def allocated_claim(cluster: Cluster, ns: str, name: str, node: str, pools: list[str]) -> str:
    """A claim allocated on `node` by hand: a device of this driver in each of `pools`,
    and one of another driver; the path of its status."""
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "r", "exactly": {"deviceClassName": "neuron.aws.com"}},
                        {"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}},
                    ]
                }
            },
        }
    )
    results = [
        {"request": "r", "driver": DRIVER, "pool": pool, "device": f"neurondevice{i}"}
        for i, pool in enumerate(pools)
    ]
    results.append({"request": "g", "driver": OTHER_DRIVER, "pool": node, "device": "gpu0"})
    selector = {"key": "metadata.name", "operator": "In", "values": [node]}
    allocation = {
        "devices": {"results": results},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
    }
    cluster.patch(
        "resource.k8s.io/v1",
        "ResourceClaim",
        name,
        {"status": {"allocation": allocation}},
        ns,
        subresource="status",
    )
    return f"{CLAIMS.format(ns=ns)}/{name}/status"


def entry(device: str, pool: str, driver: str = DRIVER) -> Obj:
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Prepared",
        "message": "",
        "lastTransitionTime": "2026-11-28T10:00:00Z",
    }
    return {"driver": driver, "pool": pool, "device": device, "conditions": [ready]}


def apply(
    cluster: Cluster, path: str, entries: list[Obj], *, node: str | None, dry_run: bool = False
) -> Reply:
    """The agent's write: server-side apply as the driver's field manager."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": path.split("/")[-2], "namespace": path.split("/")[-4]},
        "status": {"devices": entries},
    }
    query = "?fieldManager=neuron.aws.com&force=true" + ("&dryRun=All" if dry_run else "")
    return as_plugin(
        cluster, "PATCH", path + query, body, node=node, content_type="application/apply-patch+yaml"
    )


def assert_refused(reply: Reply, policy: str) -> None:
    """Refused by the admission policy (1.34, 1.35) or, from 1.36, already by the
    server's own authorization of status.devices (Invalid, before admission runs)."""
    if reply.status == 422:
        assert 'requires resource="resourceclaims/' in reply.message, reply.message
    else:
        assert reply.status == 403, reply.message
        assert policy in reply.message


def check_rbac_for_claim_status(cluster: Cluster) -> None:
    """Granted: a patch of a claim's status and, for 1.36+, this driver's entries on its
    own node's claims; never another driver's, nor on any node's claims."""
    assert can(cluster, "patch", ("resource.k8s.io", "resourceclaims", "status", "someone"))
    assert not can(cluster, "update", ("resource.k8s.io", "resourceclaims", "status", "someone"))

    def driver(verb: str, name: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": PLUGIN_USER,
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "resourceAttributes": {
                    "verb": verb,
                    "group": "resource.k8s.io",
                    "resource": "resourceclaims",
                    "subresource": "driver",
                    "name": name,
                    "namespace": "someone",
                },
            },
        }
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        return bool(cluster.request("POST", path, review)["status"].get("allowed"))

    assert driver("associated-node:patch", DRIVER)
    assert not driver("associated-node:patch", OTHER_DRIVER)
    assert not driver("arbitrary-node:patch", DRIVER)
    assert not driver("associated-node:update", DRIVER)


def check_own_nodes_claim_status(cluster: Cluster, own: str, other: str, ns: str) -> None:
    """status.devices entries of its own driver, on its own node's claims, and no more."""
    cluster.create_namespace(ns)
    mine = allocated_claim(cluster, ns, "mine", own, [own, other])
    theirs = allocated_claim(cluster, ns, "theirs", other, [other])

    # The policy reaches the admission chain through an informer: poll with dry runs.
    # Its own driver's device in another node's pool, which only the policy refuses in
    # every release, tells when the policy is in effect.
    in_other_pool = [entry("neurondevice1", other)]
    cluster.wait_for(
        "claim-status policy in effect",
        lambda: apply(cluster, mine, in_other_pool, node=own, dry_run=True).status == 403,
    )
    denied = apply(cluster, mine, in_other_pool, node=own)
    assert denied.status == 403, denied.message
    assert f"may write status.devices entries only of pool '{own}'" in denied.message

    # Nothing else of the status: not who the claim is reserved for.
    consumer = {"resource": "pods", "name": "p", "uid": "u-p"}
    denied = as_plugin(
        cluster,
        "PATCH",
        mine,
        {"status": {"reservedFor": [consumer]}},
        node=own,
        content_type="application/merge-patch+json",
    )
    assert_refused(denied, "may write only status.devices of a claim, not its allocation")

    denied = apply(cluster, theirs, [entry("neurondevice0", other)], node=own)
    assert_refused(
        denied,
        f"the plugin on node '{own}' may write the status only of claims allocated on its "
        f"node, not of a claim allocated on node '{other}'",
    )

    written = apply(cluster, mine, [entry("neurondevice0", own)], node=own)
    assert written.status == 200, written.message
    assert [e["device"] for e in written.body["status"]["devices"]] == ["neurondevice0"]

    # Another driver's entry, written by that driver, is not the plugin's to add or remove.
    gpu = [entry("gpu0", own, OTHER_DRIVER)]
    denied = apply(cluster, mine, [entry("neurondevice0", own), *gpu], node=own)
    assert_refused(denied, "may write only the status.devices entries of driver 'neuron.aws.com'")
    by_other_driver = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": ns},
        "status": {"devices": gpu},
    }
    cluster.request(
        "PATCH",
        f"{mine}?fieldManager={OTHER_DRIVER}",
        by_other_driver,
        content_type="application/apply-patch+yaml",
    )
    replaced = as_plugin(
        cluster,
        "PATCH",
        mine,
        {"status": {"devices": [entry("neurondevice0", own)]}},
        node=own,
        content_type="application/merge-patch+json",
    )
    assert_refused(replaced, "may write only the status.devices entries of driver")
    # Its own entries it writes beside them, and clears (an apply without them).
    written = apply(cluster, mine, [entry("neurondevice0", own)], node=own)
    assert written.status == 200, written.message
    assert {e["driver"] for e in written.body["status"]["devices"]} == {DRIVER, OTHER_DRIVER}

    # A token bound to no node writes nothing.
    denied = apply(cluster, mine, [entry("neurondevice0", own)], node=None)
    assert_refused(denied, "no node associated with this service account token")

    cleared = apply(cluster, mine, [], node=own)
    assert cleared.status == 200, cleared.message
    assert [e["driver"] for e in cleared.body["status"]["devices"]] == [OTHER_DRIVER]
    check_other_pools_entries_kept(cluster, mine, own, other)


def check_other_pools_entries_kept(cluster: Cluster, mine: str, own: str, other: str) -> None:
    """An entry of this driver in another node's pool (on a claim of its own node, written
    by an administrator): the plugin may not remove or change it, and writes its own
    entries beside it."""
    theirs = entry("neurondevice1", other)
    by_admin = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": mine.split("/")[-2], "namespace": mine.split("/")[-4]},
        "status": {"devices": [theirs]},
    }
    cluster.request(
        "PATCH",
        f"{mine}?fieldManager=cluster-admin",
        by_admin,
        content_type="application/apply-patch+yaml",
    )

    now = cluster_devices(cluster, mine)
    removed = [d for d in now if d["pool"] != other]
    changed = [d | {"data": {"spoofed": True}} if d["pool"] == other else d for d in now]
    refused = f"may write status.devices entries only of pool '{own}'"
    for devices in (removed, changed):
        denied = as_plugin(
            cluster,
            "PATCH",
            mine,
            {"status": {"devices": devices}},
            node=own,
            content_type="application/merge-patch+json",
        )
        assert denied.status == 403, denied.message
        assert refused in denied.message and "neither add, change nor remove" in denied.message
    written = apply(cluster, mine, [entry("neurondevice0", own)], node=own)
    assert written.status == 200, written.message
    assert {(e["driver"], e["pool"]) for e in written.body["status"]["devices"]} == {
        (DRIVER, own),
        (DRIVER, other),
        (OTHER_DRIVER, own),
    }
    cleared = apply(cluster, mine, [], node=own)
    assert cleared.status == 200, cleared.message
    assert {e["pool"] for e in cleared.body["status"]["devices"] if e["driver"] == DRIVER} == {
        other
    }


def cluster_devices(cluster: Cluster, path: str) -> list[Obj]:
    found: list[Obj] = cluster.request("GET", path)["status"].get("devices") or []
    return found
