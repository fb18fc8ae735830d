"""Derivation from sysfs: the catalogue's answer on every type it has, and what an
unknown type's own graph, core counts and silicon give."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from neuron_dra.hardware import derived
from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.derived import Graph, connected_sets, derive
from neuron_dra.hardware.discovery import PRODUCT_NAME_FILE, discover
from neuron_dra.hardware.fakenode import Counters
from neuron_dra.hardware.instance_types import INSTANCE_TYPES, Shape
from neuron_dra.hardware.topology import neighbours
from tests.sysfs_tree import FakeNode, write

# A name no catalogue or family list knows: whatever is derived comes from the tree.
UNLISTED = "unlisted.48xlarge"

# The graph each catalogue shape shows in sysfs, and why where the two differ.
GRAPH_OF_SHAPE = {
    Shape.SINGLE: Graph.SINGLE,
    Shape.LINE: Graph.LINE,
    Shape.RING: Graph.RING,
    Shape.TORUS: Graph.TORUS,
    # The Neuron driver lists 4x4 torus neighbours for Trainium3's devices, though they
    # are switched: sysfs does not say there is a NeuronSwitch. The sets (1, 4, 8, 16)
    # are the same; only the name of the shape differs.
    Shape.SWITCHED: Graph.TORUS,
}


# Every type without NeuronCore directories (the device_name says the silicon), and one
# type of each silicon with them (the NeuronCore's arch_type says it), as a node has.
CASES = [(name, Counters.NONE) for name in sorted(INSTANCE_TYPES)] + [
    (name, Counters.READ)
    for name in ("inf1.xlarge", "inf2.xlarge", "trn1.2xlarge", "trn2.3xlarge", "trn3p.48xlarge")
]


@pytest.mark.parametrize(("name", "counters"), CASES)
def test_derivation_gives_the_catalogues_answer(
    fake_node: FakeNode, name: str, counters: Counters
) -> None:
    spec = INSTANCE_TYPES[name]
    lnc = 1 if spec.has_lnc else None  # not the default: the configured value must carry
    root = fake_node(name, lnc=lnc, counters=counters)
    catalogue = discover(root).inventory
    write(root, PRODUCT_NAME_FILE, UNLISTED + "\n")
    found = discover(root)
    inventory = found.inventory
    assert inventory.spec is None and inventory.derived is not None
    facts = inventory.derived

    assert dict(inventory.connected_sets()) == dict(catalogue.connected_sets())
    assert inventory.lnc == catalogue.lnc
    assert facts.has_lnc == spec.has_lnc
    # With NeuronCore directories the core's arch_type says it; without, the device_name.
    assert (facts.lnc_from or "").startswith(
        "NeuronCore arch_type" if counters is Counters.READ else "device_name"
    )
    assert facts.cores_per_device == spec.cores_per_device
    assert [d.cores for d in inventory.devices] == [d.cores for d in catalogue.devices]
    assert len(logical_cores(inventory)) == len(logical_cores(catalogue))
    assert facts.devices == spec.devices
    assert facts.graph is GRAPH_OF_SHAPE[spec.shape]
    assert found.findings == discover(root).findings  # deriving adds no finding

    # What the catalogue knows and sysfs does not carry, said as not derived:
    # memory (no sysfs file holds a device's memory size), UltraServer membership
    # (which of the driver's schemes a type uses is the catalogue's `reservation`),
    # and topology_x/y (the torus a switched node lists is not its fabric).
    assert spec.memory_gib_per_device > 0
    assert inventory.ultraserver is None
    assert set(derived.NEVER_DERIVED) <= set(facts.not_derived)
    assert facts.not_derived == derived.NEVER_DERIVED  # nothing else was missing


def test_a_trn2_tree_of_an_unknown_type_gets_the_trn2_sets_and_lnc(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    write(root, PRODUCT_NAME_FILE, "trn9.48xlarge\n")
    inventory = discover(root).inventory
    sets = inventory.connected_sets()
    assert sorted(sets) == [1, 4, 8, 16]
    assert sets[4] == tuple(frozenset(range(s, s + 4)) for s in (0, 4, 8, 12))
    assert inventory.lnc == 2 and len(logical_cores(inventory)) == 64
    assert inventory.derived is not None
    assert inventory.derived.summary() == (
        "connected_devices: 16 devices, 4x4 torus, connected sets of 1, 4, 8, 16; "
        "core_count: 8 cores a device; logical NeuronCores (device_name Trainium2); "
        "not derived: memory capacity, UltraServer membership, topology_x/y (the driver "
        "lists torus neighbours for switched devices too)"
    )


def graph_of(shape: Shape, count: int) -> dict[int, tuple[int, ...]]:
    return {i: neighbours(shape, count, i) for i in range(count)}


def sizes(found: Mapping[int, object]) -> list[int]:
    return sorted(found)


def test_a_ring_gives_aligned_arcs_of_every_dividing_size() -> None:
    graph, count, sets = connected_sets(graph_of(Shape.RING, 12))
    assert (graph, count, sizes(sets)) == (Graph.RING, 12, [1, 2, 3, 4, 6, 12])
    assert sets[3][1] == frozenset({3, 4, 5})


def test_a_broken_torus_link_withholds_only_the_sets_it_disconnects() -> None:
    graph = graph_of(Shape.TORUS, 16)
    # Row 0 loses 0-1 and 2-3: {0,1,2,3} is no longer connected within itself.
    graph[0] = tuple(n for n in graph[0] if n != 1)
    graph[1] = tuple(n for n in graph[1] if n != 0)
    graph[2] = tuple(n for n in graph[2] if n != 3)
    graph[3] = tuple(n for n in graph[3] if n != 2)
    shape, _, sets = connected_sets(graph)
    assert shape is Graph.TORUS
    assert sets[4] == tuple(frozenset(range(s, s + 4)) for s in (4, 8, 12))
    assert len(sets[8]) == 2 and len(sets[16]) == 1  # still connected through rows 1 and 3


def test_a_missing_device_withholds_every_set_it_is_in() -> None:
    graph = graph_of(Shape.RING, 4)
    del graph[2]
    _, count, sets = connected_sets(graph)
    assert count == 4
    assert sets == {1: (frozenset({0}), frozenset({1}), frozenset({3})), 2: (frozenset({0, 1}),)}


def test_no_links_read_gives_single_devices_only_and_says_so() -> None:
    facts = derive({i: () for i in range(16)}, [8] * 16, ["Trainium2"] * 16, None, False)
    assert facts.graph is Graph.UNCONNECTED and sizes(facts.connected_sets()) == [1]
    assert facts.not_derived[0].startswith("connected sets beyond single devices")


def test_a_graph_of_no_known_shape_keeps_its_connected_aligned_blocks() -> None:
    # A star around device 0: no block without device 0 is connected.
    star = {0: (1, 2, 3), 1: (0,), 2: (0,), 3: (0,)}
    graph, _, sets = connected_sets(star)
    assert graph is Graph.OTHER
    assert sets == {
        1: tuple(frozenset({i}) for i in range(4)),
        2: (frozenset({0, 1}),),
        4: (frozenset(range(4)),),
    }


@pytest.mark.parametrize(
    ("core_arch", "names", "family", "expected"),
    [
        ("NCv3", ["Trainium2"], False, (True, "NeuronCore arch_type NCv3")),
        ("NCv2", ["Trainium2"], True, (False, "NeuronCore arch_type NCv2")),
        (None, ["Inferentia2"], True, (False, "device_name Inferentia2")),
        (None, ["Trainium4"], True, (True, "the instance family")),
        (None, ["Trainium4"], False, (False, None)),
        (None, ["Trainium1", "Trainium2"], False, (False, None)),
    ],
)
def test_lnc_comes_from_the_first_file_that_says(
    core_arch: str | None, names: list[str], family: bool, expected: tuple[bool, str | None]
) -> None:
    facts = derive({0: ()}, [8], names, core_arch, family)
    assert (facts.has_lnc, facts.lnc_from) == expected
    assert ("logical NeuronCores" in facts.not_derived) == (expected[1] is None)


def test_cores_that_disagree_are_not_derived() -> None:
    facts = derive({0: (1,), 1: (0,)}, [8, None], ["Trainium2"] * 2, None, False)
    assert facts.cores_per_device == 8
    facts = derive({0: (1,), 1: (0,)}, [None, None], ["Trainium2"] * 2, None, False)
    assert facts.cores_per_device is None and facts.not_derived[0].startswith("cores")
