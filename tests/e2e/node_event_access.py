"""What Events the plugin's service account may create, as the API server decides.

Shared by `test_install.py` and `test_helm.py`, as `plugin_access`: RBAC grants the
creation of Events in "default", where the kubelet's node Events go; the `-node-events`
admission policy lets a plugin's token create only Events about its own Node.
"""

from __future__ import annotations

from typing import Any

from neuron_dra_harness.cluster import Cluster
from tests.e2e.plugin_access import Reply, as_plugin

Obj = dict[str, Any]
EVENTS = "/api/v1/namespaces/default/events"


def event_about(involved: Obj, host: str) -> Obj:
    """A Warning Event as the agent writes one for a device taken out of service."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{host}.neuron-", "namespace": "default"},
        "involvedObject": involved,
        "reason": "NeuronDeviceUnhealthy",
        "message": "neuron3: SRAM_UNCORRECTABLE_ERROR (...); taken out of service",
        "type": "Warning",
        "source": {"component": "neuron.aws.com", "host": host},
        "firstTimestamp": "2026-11-28T10:00:00Z",
        "lastTimestamp": "2026-11-28T10:00:00Z",
        "count": 1,
    }


def node(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "name": name}


def create(cluster: Cluster, event: Obj, *, node: str | None, dry_run: bool = False) -> Reply:
    path = EVENTS + ("?dryRun=All" if dry_run else "")
    return as_plugin(cluster, "POST", path, event, node=node)


def check_own_nodes_events(cluster: Cluster, own: str, other: str) -> None:
    """Events about its own Node, and no other object's."""
    about_other = event_about(node(other), own)
    # The policy reaches the admission chain through an informer: poll with dry runs.
    cluster.wait_for(
        "node-events policy in effect",
        lambda: create(cluster, about_other, node=own, dry_run=True).status == 403,
    )
    created = create(cluster, event_about(node(own), own), node=own)
    assert created.status == 201, created.message
    assert created.body["involvedObject"]["name"] == own

    refused = f"the plugin on node '{own}' may create only Events about node '{own}'"
    denied = create(cluster, about_other, node=own)
    assert denied.status == 403, denied.message
    assert refused in denied.message
    pod = {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "default"}
    for involved in (pod, {**node(own), "kind": "Namespace"}):
        denied = create(cluster, event_about(involved, own), node=own)
        assert denied.status == 403, (involved, denied.message)
        assert refused in denied.message
    # Its own Node, but naming another object as related.
    related = event_about(node(own), own) | {"related": node(other)}
    denied = create(cluster, related, node=own)
    assert denied.status == 403 and refused in denied.message, denied.message
    # A token bound to no node creates none.
    denied = create(cluster, event_about(node(own), own), node=None)
    assert denied.status == 403, denied.message
    assert "no node associated with this service account token" in denied.message
