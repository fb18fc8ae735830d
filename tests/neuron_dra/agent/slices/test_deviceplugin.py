"""The agent's view of the Neuron device plugin on its node."""

from __future__ import annotations

from neuron_dra.agent.objects.node import Node, decode
from neuron_dra.agent.slices.deviceplugin import DevicePluginGuard, plugin_resources


def node(**allocatable: str) -> Node:
    return decode({"status": {"allocatable": {"cpu": "8", **allocatable}}})


def test_only_nonzero_neuron_resources_count() -> None:
    assert plugin_resources(node()) == {}
    assert plugin_resources(node(**{"aws.amazon.com/neuron": "0"})) == {}
    assert plugin_resources(node(**{"aws.amazon.com/neuroncore": "32"})) == {
        "aws.amazon.com/neuroncore": "32"
    }
    assert plugin_resources(None) == {}
    assert plugin_resources(decode({"status": None})) == {}


def test_the_guard_reports_changes_of_standing_only() -> None:
    guard = DevicePluginGuard("n1")
    assert not guard.seen(node())
    assert guard.seen(node(**{"aws.amazon.com/neuron": "16"}))
    assert guard.active
    assert guard.samples()[0].value == 1.0
    assert not guard.seen(node(**{"aws.amazon.com/neuron": "15"}))  # still served
    assert guard.seen(node(**{"aws.amazon.com/neuron": "0"}))
    assert not guard.active
    assert guard.samples()[0].value == 0.0
