"""A Node object changing under a running plugin: deleted and created again under the
same name, its UltraServer labels edited by another hand, or labelled with its place
in the EC2 network."""

from __future__ import annotations

from typing import Any

import pytest

from consts import (
    LABEL_INSTANCE_TYPE,
    LABEL_NETWORK_NODE_LAYER_PREFIX,
    LABEL_NEURON_PRESENT,
    LABEL_ULTRASERVER_MODE,
    LABEL_ULTRASERVER_NODE_ID_4,
    LABEL_ULTRASERVER_SERVER_ID_4,
)
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.resources.nodelabels import OWNED_LABELS
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node

Obj = dict[str, Any]

pytestmark = pytest.mark.e2e


def owners(node: SimulatedNode) -> set[str]:
    """The UIDs the node's slices name as their owners."""
    return {
        ref["uid"]
        for s in node.slices()
        for ref in s["metadata"].get("ownerReferences") or []
        if ref.get("kind") == "Node"
    }


def test_slices_follow_a_node_created_again_under_the_same_name(cluster: Cluster) -> None:
    node = add_simulated_node(cluster, "recreated", "inf2.48xlarge")
    try:
        old_uid = cluster.get("v1", "Node", node.name)["metadata"]["uid"]
        devices = node.device_names()
        assert owners(node) == {old_uid}

        cluster.delete("v1", "Node", node.name)
        cluster.wait_for(
            "the Node gone", lambda: cluster.get_or_none("v1", "Node", node.name) is None
        )
        labels = {LABEL_INSTANCE_TYPE: node.instance_type}
        new_uid = cluster.add_node(node.name, labels)["metadata"]["uid"]
        assert new_uid != old_uid

        # The garbage collector deletes the slices owned by the old UID; the plugin must
        # write them again owned by the new one, not the dead one.
        cluster.wait_for(
            "slices owned by the new Node",
            lambda: owners(node) == {new_uid} and node.device_names() == devices,
            timeout=60,
        )
    finally:
        node.stop_plugin()
        cluster.stop_kubelet_side(node.name)
        # Its slices go with it: nothing of this node is left for other tests to allocate.
        cluster.delete("v1", "Node", node.name)


def node_labels(cluster: Cluster, name: str) -> dict[str, str] | None:
    node = cluster.get_or_none("v1", "Node", name)
    return None if node is None else dict(node["metadata"].get("labels") or {})


def test_ultraserver_labels_heal(cluster: Cluster) -> None:
    """The labels the driver owns come back after a hand removes or changes one, after
    an API server outage, and after the Node is deleted and created again; a label it
    does not own is never touched."""
    node = add_simulated_node(
        cluster, "labelled", "trn2u.48xlarge", ultraserver=FakeUltraServer("us-heal", 2)
    )
    name = node.name

    def owned() -> dict[str, str]:
        return {k: v for k, v in (node_labels(cluster, name) or {}).items() if k in OWNED_LABELS}

    try:
        cluster.wait_for("the owned labels set", lambda: len(owned()) == 6)
        wanted = owned()
        assert wanted[LABEL_NEURON_PRESENT] == "true"  # what Neuron Observer selects
        assert wanted[LABEL_ULTRASERVER_SERVER_ID_4] == "us-heal"
        assert wanted[LABEL_ULTRASERVER_NODE_ID_4] == "2"
        assert wanted[LABEL_ULTRASERVER_MODE] == "1_2_4"
        cluster.patch("v1", "Node", name, {"metadata": {"labels": {"team": "vision"}}})

        cluster.patch(
            "v1", "Node", name, {"metadata": {"labels": {LABEL_ULTRASERVER_NODE_ID_4: None}}}
        )
        cluster.wait_for("a removed label set again", lambda: owned() == wanted)
        cluster.patch(
            "v1", "Node", name, {"metadata": {"labels": {LABEL_ULTRASERVER_SERVER_ID_4: "us-x"}}}
        )
        cluster.wait_for("a changed label set back", lambda: owned() == wanted)
        cluster.patch("v1", "Node", name, {"metadata": {"labels": {LABEL_NEURON_PRESENT: None}}})
        cluster.wait_for("Neuron Observer's label set again", lambda: owned() == wanted)

        # An outage, then the Node created again: the watch comes back by itself.
        cluster.stop_apiserver()
        cluster.start_apiserver()
        cluster.delete("v1", "Node", name)
        cluster.wait_for("the Node gone", lambda: node_labels(cluster, name) is None)
        cluster.add_node(name, {LABEL_INSTANCE_TYPE: node.instance_type, "team": "vision"})
        cluster.wait_for("the labels on the new Node", lambda: owned() == wanted, timeout=60)
        assert (node_labels(cluster, name) or {})["team"] == "vision"
    finally:
        node.stop_plugin()
        cluster.stop_kubelet_side(name)
        cluster.delete("v1", "Node", name)


def layers(node: SimulatedNode) -> dict[str, dict[str, str]]:
    """Each device's network layer attributes (its NeuronCores are devices too, from 1.36)."""
    return {
        d["name"]: {
            k: v["string"] for k, v in d["attributes"].items() if k.startswith("networkNodeLayer")
        }
        for d in node.devices()
    }


def on_each(node: SimulatedNode, wanted: dict[str, str]) -> bool:
    found = layers(node)
    return "neurondevice0" in found and all(v == wanted for v in found.values())


def test_network_layer_labels_become_attributes_a_selector_allocates_on(
    cluster: Cluster,
) -> None:
    # A class of its own: the session's cluster holds other tests' devices of this driver
    # and DeviceClasses, which the deploy/ classes would replace.
    cluster.create(LAYERS_CLASS)
    fast = ["--rediscover-interval=1"]
    layered = add_simulated_node(cluster, "layered", "inf2.xlarge", extra_args=fast, start=False)
    plain = add_simulated_node(cluster, "unlayered", "inf2.xlarge", extra_args=fast, start=False)
    label = {f"{LABEL_NETWORK_NODE_LAYER_PREFIX}{n}": f"nn-layered-{n}" for n in (1, 2, 3)}
    try:
        cluster.patch("v1", "Node", layered.name, {"metadata": {"labels": label}})
        layered.start_plugin()
        plain.start_plugin()
        expected = {f"networkNodeLayer{n}": f"nn-layered-{n}" for n in (1, 2, 3)}
        assert on_each(layered, expected), layers(layered)
        # The first write already carried them: no slice was written without.
        assert {s["spec"]["pool"]["generation"] for s in layered.slices()} == {1}
        assert on_each(plain, {}), layers(plain)

        cluster.create_namespace("layers")
        # Guarded: on a device without the attribute (the unlabelled node's) a bare
        # comparison is a CEL runtime error, which fails the pod's scheduling outright.
        layer3 = "device.attributes['neuron.aws.com'].networkNodeLayer3"
        selector = f"has({layer3}) && {layer3} == 'nn-layered-3'"
        cluster.create(claim("near", selector))
        cluster.create(pod("near", "near"))
        running = cluster.wait_for_pod_running("near", "layers", timeout=60)
        assert running["spec"]["nodeName"] == layered.name
        allocated = cluster.get("resource.k8s.io/v1", "ResourceClaim", "near", "layers")
        [result] = allocated["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == (layered.name, "neurondevice0")
        cluster.delete("v1", "Pod", "near", "layers")
        cluster.wait_for_pod_gone("near", "layers", timeout=60)

        # Moved (layer 3), and layer 1 no longer known: the slices follow the labels.
        moved = {
            f"{LABEL_NETWORK_NODE_LAYER_PREFIX}1": None,
            f"{LABEL_NETWORK_NODE_LAYER_PREFIX}3": "nn-moved-3",
        }
        cluster.patch("v1", "Node", layered.name, {"metadata": {"labels": moved}})
        now = {"networkNodeLayer2": "nn-layered-2", "networkNodeLayer3": "nn-moved-3"}
        cluster.wait_for("the new layers published", lambda: on_each(layered, now))
        assert on_each(plain, {}), layers(plain)
    finally:
        for node in (layered, plain):
            node.stop_plugin()
            cluster.stop_kubelet_side(node.name)
            cluster.delete("v1", "Node", node.name)
        cluster.delete("resource.k8s.io/v1", "DeviceClass", LAYERS_CLASS["metadata"]["name"])


LAYERS_CLASS: Obj = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "network-layers.neuron.aws.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'neuron.aws.com'"}}]},
}


def claim(name: str, expression: str) -> Obj:
    request = {
        "name": "neurons",
        "exactly": {
            "deviceClassName": LAYERS_CLASS["metadata"]["name"],
            "count": 1,
            "selectors": [{"cel": {"expression": expression}}],
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "layers"},
        "spec": {"devices": {"requests": [request]}},
    }


def pod(name: str, claim_name: str) -> Obj:
    container = {"name": "ctr0", "image": "none", "resources": {"claims": [{"name": "neurons"}]}}
    spec = {
        "automountServiceAccountToken": False,
        "containers": [container],
        "resourceClaims": [{"name": "neurons", "resourceClaimName": claim_name}],
    }
    metadata = {"name": name, "namespace": "layers"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
