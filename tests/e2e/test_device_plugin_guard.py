"""A node the Neuron device plugin serves too: the agent publishes no device there
while the plugin's resources are allocatable, and its devices again once they are
gone, so that no device can be given to two pods."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import DEVICE_CLASSES, SimulatedNode, add_simulated_node

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def node(e2e_binaries: Binaries) -> Iterator[SimulatedNode]:
    with Cluster(e2e_binaries) as cluster:
        cluster.apply_yaml(DEVICE_CLASSES.read_text())
        yield add_simulated_node(cluster, "both", "inf2.xlarge")


def advertise(node: SimulatedNode, count: str) -> None:
    """The device plugin's resource in the Node's status, as the kubelet writes it."""
    advertised = {"aws.amazon.com/neuron": count}
    node.cluster.patch(
        "v1",
        "Node",
        node.name,
        {"status": {"capacity": advertised, "allocatable": advertised}},
        subresource="status",
    )


def test_the_driver_steps_back_while_the_device_plugin_serves_the_node(
    node: SimulatedNode,
) -> None:
    assert "neurondevice0" in [d["name"] for d in node.devices()]
    advertise(node, "1")
    node.cluster.wait_for("no device published", lambda: not node.devices(), 30)
    assert node.plugin is not None
    assert "the Neuron device plugin serves this node" in node.plugin.log_path.read_text()
    advertise(node, "0")
    node.cluster.wait_for("the device published again", node.devices, 30)
