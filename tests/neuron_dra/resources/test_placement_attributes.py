"""Placement attributes on every kind of device, and the worst case node in the limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from consts import LABEL_NETWORK_NODE_LAYER_PREFIX
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.limits import MAX_ATTRIBUTES_AND_CAPACITIES, CounterLayout, validate_pool
from neuron_dra.resources.nodetopology import NodeTopology, from_labels
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from tests.sysfs_tree import FakeNode

Json = dict[str, Any]
LAYERS = ("networkNodeLayer1", "networkNodeLayer2", "networkNodeLayer3", "networkNodeLayer4")
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
# The longest values the sources allow: 63-character labels.
WIDEST = from_labels({f"{LABEL_NETWORK_NODE_LAYER_PREFIX}{n}": "n" * 63 for n in (1, 2, 3, 4)})[0]


def pool(root: Path, topology: NodeTopology, **options: Any) -> list[Json]:
    opts = SliceOptions("node-a", "uid-1", topology=topology, **options)
    return build_slices(discover(root).inventory, opts)


def by_kind(slices: list[Json]) -> dict[str, list[Json]]:
    found: dict[str, list[Json]] = {}
    for s in slices:
        for device in s["spec"].get("devices") or []:
            kind = device["attributes"]["resourceType"]["string"]
            found.setdefault(kind, []).append(device)
    return found


def worst_case(fake_node: FakeNode) -> Path:
    return fake_node(
        "trn2u.48xlarge", lnc=1, ultraserver=FakeUltraServer("us-0", 2), pci_parents=True
    )


def test_network_layers_are_on_every_kind_of_device(fake_node: FakeNode) -> None:
    topology, _ = from_labels(
        {f"{LABEL_NETWORK_NODE_LAYER_PREFIX}{n}": f"nn-{n}" for n in (1, 2, 3)}
    )
    kinds = by_kind(
        pool(worst_case(fake_node), topology, counter_layout=CounterLayout.OWN_SLICE, cores=True)
    )
    assert sorted(kinds) == ["neuron_core", "neuron_device", "neuron_node"]
    for devices in kinds.values():
        for device in devices:
            layers = {k: v for k, v in device["attributes"].items() if k in LAYERS}
            assert layers == {f"networkNodeLayer{n}": {"string": f"nn-{n}"} for n in (1, 2, 3)}


def test_without_labels_no_device_has_a_layer(fake_node: FakeNode) -> None:
    slices = pool(worst_case(fake_node), NodeTopology(), cores=True)
    assert not any(
        name in LAYERS for s in slices for d in s["spec"]["devices"] for name in d["attributes"]
    )


def test_pci_placement_is_on_devices_and_their_cores_not_the_node(fake_node: FakeNode) -> None:
    kinds = by_kind(
        pool(
            worst_case(fake_node),
            NodeTopology(),
            counter_layout=CounterLayout.OWN_SLICE,
            cores=True,
        )
    )
    [node] = kinds["neuron_node"]
    assert PCIE_ROOT not in node["attributes"] and NUMA_NODE not in node["attributes"]
    devices = {d["attributes"]["deviceId"]["int"]: d for d in kinds["neuron_device"]}
    assert devices[0]["attributes"][PCIE_ROOT] == {"string": "pci0000:10"}
    assert devices[0]["attributes"][NUMA_NODE] == {"int": 0}
    assert devices[13]["attributes"][PCIE_ROOT] == {"string": "pci0000:40"}
    assert devices[13]["attributes"][NUMA_NODE] == {"int": 1}
    for core in kinds["neuron_core"]:
        device = devices[core["attributes"]["deviceId"]["int"]]
        assert core["attributes"][PCIE_ROOT] == device["attributes"][PCIE_ROOT]
        assert core["attributes"][NUMA_NODE] == device["attributes"][NUMA_NODE]


def test_the_default_tree_publishes_no_pci_placement(fake_node: FakeNode) -> None:
    slices = pool(fake_node("trn2.48xlarge"), NodeTopology())
    names = {n for s in slices for d in s["spec"]["devices"] for n in d["attributes"]}
    assert PCIE_ROOT not in names and NUMA_NODE not in names


@pytest.mark.parametrize("layout", list(CounterLayout))
@pytest.mark.parametrize("mode", list(UltraServerDevices))
def test_the_worst_case_node_passes_the_v1_limits(
    fake_node: FakeNode, layout: CounterLayout, mode: UltraServerDevices
) -> None:
    # trn2u.48xlarge at LNC 1: 16 devices, the node device, 128 cores, and every
    # attribute the driver knows, at the longest values its sources allow. Its cores do
    # not fit beside the counters of 1.34, so the agent publishes them only from 1.35.
    cores = layout is CounterLayout.OWN_SLICE
    slices = pool(
        worst_case(fake_node),
        WIDEST,
        counter_layout=layout,
        cores=cores,
        ultraserver_devices=mode,
    )
    kinds = by_kind(slices)
    if layout is CounterLayout.OWN_SLICE and mode is UltraServerDevices.BOTH:
        assert sorted(kinds) == ["neuron_core", "neuron_device", "neuron_node"]
        assert len(kinds["neuron_core"]) == 128
    assert validate_pool(slices, layout) == []
    for devices in kinds.values():
        for device in devices:
            size = len(device["attributes"]) + len(device.get("capacity", {}))
            assert size <= MAX_ATTRIBUTES_AND_CAPACITIES


def test_room_left_under_the_attribute_limit(fake_node: FakeNode) -> None:
    """The widest device of each kind, measured: what room later attributes have."""
    kinds = by_kind(
        pool(worst_case(fake_node), WIDEST, counter_layout=CounterLayout.OWN_SLICE, cores=True)
    )
    widest = {
        kind: max(len(d["attributes"]) + len(d.get("capacity", {})) for d in devices)
        for kind, devices in kinds.items()
    }
    assert widest["neuron_device"] <= MAX_ATTRIBUTES_AND_CAPACITIES - 2
    assert widest["neuron_core"] < widest["neuron_device"]
    assert widest["neuron_node"] < widest["neuron_device"]


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_every_type_with_every_attribute_passes_the_v1_limits(
    fake_node: FakeNode, name: str
) -> None:
    spec = INSTANCE_TYPES[name]
    root = fake_node(
        name,
        lnc=1 if spec.has_lnc else None,
        ultraserver=FakeUltraServer() if spec.ultraserver else None,
        pci_parents=True,
    )
    for layout, cores in ((CounterLayout.OWN_SLICE, True), (CounterLayout.BESIDE_DEVICES, False)):
        slices = pool(root, WIDEST, counter_layout=layout, cores=cores)
        assert validate_pool(slices, layout) == []
        names = {n for s in slices for d in s["spec"].get("devices") or [] for n in d["attributes"]}
        assert {PCIE_ROOT, NUMA_NODE, *LAYERS} <= names
