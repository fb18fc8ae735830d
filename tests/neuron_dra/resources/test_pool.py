"""The agent never sends a pool the API server would refuse whole."""

from __future__ import annotations

from dataclasses import replace

import pytest

from neuron_dra.hardware.discovery import discover
from neuron_dra.resources.limits import CounterLayout, validate_pool
from neuron_dra.resources.pool import InvalidPoolError, publishable_pool
from neuron_dra.resources.slices import SliceOptions
from tests.sysfs_tree import FakeNode

OPTIONS = SliceOptions("n1", counter_layout=CounterLayout.OWN_SLICE, cores=True)


def test_the_full_layout_when_it_keeps_the_limits(fake_node: FakeNode) -> None:
    pool = publishable_pool(discover(fake_node("trn2.48xlarge")).inventory, OPTIONS)
    assert pool.problems == ()
    assert sum(len(s["spec"].get("devices") or []) for s in pool.slices) == 16 + 64


def test_the_devices_alone_when_their_cores_break_a_limit(fake_node: FakeNode) -> None:
    """Cores numbered from a count one device disagrees on (discovery no longer lets
    that through; a caller might): duplicate core names, so the devices go alone."""
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    odd = [replace(d, cores=4) if d.index == 12 else d for d in inventory.devices]
    pool = publishable_pool(replace(inventory, devices=tuple(odd)), OPTIONS)
    assert any("neuroncore24" in p for p in pool.problems), pool.problems
    names = [d["name"] for s in pool.slices for d in s["spec"].get("devices") or []]
    assert names == [f"neurondevice{i}" for i in range(16)]
    assert validate_pool(pool.slices, OPTIONS.counter_layout) == []


def test_nothing_when_even_the_devices_break_one(fake_node: FakeNode) -> None:
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    twice = (*inventory.devices, inventory.devices[0])
    with pytest.raises(InvalidPoolError, match="neurondevice0"):
        publishable_pool(replace(inventory, devices=twice), OPTIONS)
