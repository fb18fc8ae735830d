from __future__ import annotations

import pytest

from neuron_dra.hardware.instance_types import INSTANCE_TYPES, Shape
from neuron_dra.hardware.topology import DeviceSet, connected_sets, neighbours


def sets(*groups: range | set[int]) -> tuple[DeviceSet, ...]:
    return tuple(frozenset(g) for g in groups)


ROWS = sets(range(0, 4), range(4, 8), range(8, 12), range(12, 16))
HALVES = sets(range(0, 8), range(8, 16))
TORUS = {1: sets(*({i} for i in range(16))), 4: ROWS, 8: HALVES, 16: sets(range(16))}

EXPECTED: dict[str, dict[int, tuple[DeviceSet, ...]]] = {
    "trn1.32xlarge": TORUS,
    "trn1n.32xlarge": TORUS,
    "trn2.48xlarge": TORUS,
    "trn2u.48xlarge": TORUS,
    # Switched all-to-all: every set is connected; these are the EFA driver's groups.
    "trn3.48xlarge": TORUS,
    "trn3p.48xlarge": TORUS,
    "trn3-dev0.48xlarge": TORUS,
    "trn3-dev1.48xlarge": TORUS,
    "inf1.6xlarge": {
        1: sets({0}, {1}, {2}, {3}),
        2: sets({0, 1}, {2, 3}),
        4: sets(range(4)),
    },
    "inf1.24xlarge": {
        1: sets(*({i} for i in range(16))),
        2: sets(*(range(i, i + 2) for i in range(0, 16, 2))),
        4: ROWS,
        8: HALVES,
        16: sets(range(16)),
    },
    "inf2.24xlarge": {
        1: sets(*({i} for i in range(6))),
        2: sets({0, 1}, {2, 3}, {4, 5}),
        3: sets({0, 1, 2}, {3, 4, 5}),
        6: sets(range(6)),
    },
    "inf2.48xlarge": {
        1: sets(*({i} for i in range(12))),
        2: sets(*(range(i, i + 2) for i in range(0, 12, 2))),
        3: sets(range(0, 3), range(3, 6), range(6, 9), range(9, 12)),
        4: sets(range(0, 4), range(4, 8), range(8, 12)),
        6: sets(range(0, 6), range(6, 12)),
        12: sets(range(12)),
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_connected_sets_are_exactly_the_documented_ones(name: str) -> None:
    spec = INSTANCE_TYPES[name]
    assert dict(connected_sets(spec.shape, spec.devices)) == EXPECTED[name]


def test_every_multi_device_instance_type_is_covered() -> None:
    multi = {name for name, spec in INSTANCE_TYPES.items() if spec.devices > 1}
    assert multi == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(n for n, s in INSTANCE_TYPES.items() if s.devices == 1))
def test_single_device_instances_have_only_the_device(name: str) -> None:
    spec = INSTANCE_TYPES[name]
    assert dict(connected_sets(spec.shape, spec.devices)) == {1: (frozenset({0}),)}
    assert neighbours(spec.shape, 1, 0) == ()


def test_torus_squares_and_pairs_are_not_groups() -> None:
    groups = {g for gs in TORUS.values() for g in gs}
    assert frozenset({9, 10, 13, 14}) not in groups
    assert frozenset({1, 2}) not in groups
    assert 2 not in connected_sets(Shape.TORUS, 16) and 7 not in connected_sets(Shape.TORUS, 16)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_allowed_set_is_connected_through_neighbours(name: str) -> None:
    spec = INSTANCE_TYPES[name]
    for groups in connected_sets(spec.shape, spec.devices).values():
        for group in groups:
            reached, frontier = {min(group)}, [min(group)]
            while frontier:
                for n in neighbours(spec.shape, spec.devices, frontier.pop()):
                    if n in group and n not in reached:
                        reached.add(n)
                        frontier.append(n)
            assert reached == group


def test_torus_neighbours_wrap_in_driver_order() -> None:
    assert neighbours(Shape.TORUS, 16, 0) == (12, 3, 4, 1)
    assert neighbours(Shape.TORUS, 16, 15) == (11, 14, 3, 12)


def test_line_ends_have_one_neighbour_and_ring_wraps() -> None:
    assert neighbours(Shape.LINE, 6, 0) == (1,)
    assert neighbours(Shape.LINE, 6, 5) == (4,)
    assert neighbours(Shape.LINE, 6, 3) == (2, 4)
    assert neighbours(Shape.RING, 12, 0) == (11, 1)
    assert neighbours(Shape.RING, 12, 11) == (10, 0)


def test_a_torus_must_have_sixteen_devices() -> None:
    with pytest.raises(ValueError, match="16 devices, not 8"):
        connected_sets(Shape.TORUS, 8)


def test_switched_nodes_list_the_torus_neighbours_the_driver_reports() -> None:
    # The Neuron driver's connected_devices for 16 Trainium3 devices is the 4x4 table.
    assert neighbours(Shape.SWITCHED, 16, 0) == (12, 3, 4, 1)
    with pytest.raises(ValueError, match="a switched node has 16 devices, not 4"):
        connected_sets(Shape.SWITCHED, 4)
