"""The in-memory inventory of a simulated node is what discovery reads from its fake tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.driverformats import FAKE_VERSIONS
from neuron_dra.hardware.fakenode import Counters, FakeUltraServer, build_fake_node
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools.simnode import simulated_inventory


def units(instance_type: str) -> list[FakeUltraServer | None]:
    spec = INSTANCE_TYPES[instance_type]
    if not spec.ultraserver:
        return [None]
    found: list[FakeUltraServer | None] = [None, *(FakeUltraServer("us-1", i) for i in range(4))]
    if spec.reservation:
        found += [FakeUltraServer("r-7", 1, nodes=2)]
    return found


@pytest.mark.parametrize("instance_type", sorted(INSTANCE_TYPES))
def test_the_inventory_equals_the_discovered_fake_tree(tmp_path: Path, instance_type: str) -> None:
    spec = INSTANCE_TYPES[instance_type]
    for lnc in (None, 1, 2) if spec.has_lnc else (None,):
        for pci_parents in (False, True):
            for n, unit in enumerate(units(instance_type)):
                name = f"node-{lnc}-{pci_parents}-{n}"
                root = build_fake_node(
                    tmp_path / name,
                    instance_type,
                    lnc=lnc,
                    ultraserver=unit,
                    pci_parents=pci_parents,
                    counters=Counters.NONE,
                )
                built = simulated_inventory(
                    name, instance_type, lnc=lnc, ultraserver=unit, pci_parents=pci_parents
                )
                assert built == discover(root).inventory, (lnc, pci_parents, unit)


@pytest.mark.parametrize("version", FAKE_VERSIONS)
def test_every_driver_release_gives_the_same_inventory(tmp_path: Path, version: str) -> None:
    root = build_fake_node(
        tmp_path / "n", "trn2u.48xlarge", driver_version=version, counters=Counters.NONE
    )
    inventory = simulated_inventory("n", "trn2u.48xlarge", driver_version=version)
    assert inventory == discover(root).inventory


def test_what_a_fake_tree_refuses_it_refuses() -> None:
    with pytest.raises(ValueError, match=r"unknown instance type 'trn9\.xlarge'"):
        simulated_inventory("n", "trn9.xlarge")
    with pytest.raises(ValueError, match=r"inf2\.xlarge has no logical NeuronCores"):
        simulated_inventory("n", "inf2.xlarge", lnc=2)
    with pytest.raises(ValueError, match="has the modes the driver offers its unit"):
        simulated_inventory("n", "trn2u.48xlarge", ultraserver=FakeUltraServer("u", 0, modes="4"))
