from __future__ import annotations

from dataclasses import replace

from consts import LABEL_NEURON_PRESENT, LABEL_ULTRASERVER_MODE
from neuron_dra.hardware.discovery import discover
from neuron_dra.resources.nodelabels import OWNED_LABELS, label_patch, owned_labels
from tests.sysfs_tree import FakeNode


def test_a_neuron_node_is_labelled_present_for_neuron_observer(fake_node: FakeNode) -> None:
    labels = owned_labels(discover(fake_node("inf2.xlarge")).inventory)
    assert set(labels) == set(OWNED_LABELS)
    assert labels[LABEL_NEURON_PRESENT] == "true"
    assert labels[LABEL_ULTRASERVER_MODE] is None  # not an UltraServer


def test_a_node_without_devices_loses_the_label(fake_node: FakeNode) -> None:
    inventory = replace(discover(fake_node("trn2.48xlarge")).inventory, devices=())
    labels = owned_labels(inventory)
    assert labels[LABEL_NEURON_PRESENT] is None
    current = {LABEL_NEURON_PRESENT: "true", "team": "vision"}
    assert label_patch(labels, current) == {LABEL_NEURON_PRESENT: None}  # never `team`
