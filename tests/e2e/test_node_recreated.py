"""A Node deleted and created again under the same name, under a running plugin."""

from __future__ import annotations

import pytest

from consts import LABEL_INSTANCE_TYPE
from tests.e2e.cluster import Cluster
from tests.e2e.nodes import SimulatedNode, add_simulated_node

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
