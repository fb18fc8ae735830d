"""Trainium3 and trn2e: what the catalogue says, and what a type missing from it still gets."""

from __future__ import annotations

import hashlib

import pytest

from neuron_dra.hardware import efa
from neuron_dra.hardware.devicegroups import group_ids
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.instance_types import INSTANCE_TYPES, Shape, lookup
from tests.sysfs_tree import FakeNode, write

TRN3 = ["trn3.48xlarge", "trn3p.48xlarge", "trn3-dev0.48xlarge", "trn3-dev1.48xlarge"]


def efa_hash(*addresses: str) -> str:
    return hashlib.sha256(",".join(sorted(set(addresses))).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", TRN3)
def test_trainium3_instance_types(name: str) -> None:
    spec = INSTANCE_TYPES[name]
    assert (spec.devices, spec.cores_per_device, spec.memory_gib_per_device) == (16, 8, 144)
    assert (spec.shape, spec.pci_device_id, spec.has_lnc, spec.ultraserver) == (
        Shape.SWITCHED,
        0x7564,
        True,
        True,
    )
    # Only trn3p elects its UltraServer; the others are placed by their reservation.
    assert spec.reservation == (name != "trn3p.48xlarge")


def test_a_trainium3_node_reads_back_as_trainium3(fake_node: FakeNode) -> None:
    root = fake_node("trn3-dev1.48xlarge")
    result = discover(root)
    assert result.findings == ()
    inventory = result.inventory
    assert inventory.instance_type == "trn3-dev1.48xlarge"  # a hyphen in the family
    assert {d.device_name for d in inventory.devices} == {"Trainium3"}
    assert inventory.lnc == 2


@pytest.mark.parametrize("name", ["trn2e.48xlarge", "trn3pd98.48xlarge", "trn3s.48xlarge"])
def test_types_without_public_facts_stay_out_of_the_catalogue(name: str) -> None:
    assert lookup(name) is None


@pytest.mark.parametrize(
    ("board", "name", "table"),
    [
        ("trn2.48xlarge", "trn2e.48xlarge", "trn2"),
        ("trn3.48xlarge", "trn3pd98.48xlarge", "trn3"),
        ("trn3.48xlarge", "trn3s.48xlarge", "trn3"),
    ],
)
def test_unknown_efa_types_get_lnc_and_efa_ids_of_the_sets_their_sysfs_shows(
    fake_node: FakeNode, board: str, name: str, table: str
) -> None:
    root = fake_node(board)
    write(root, "sys/devices/virtual/dmi/id/product_name", name + "\n")
    inventory = discover(root).inventory
    assert inventory.spec is None and inventory.lnc == 2
    ids = group_ids(inventory)
    # The sets the driver's connected_devices graph shows, none the catalogue adds.
    assert set(ids[0]) == {1, 4, 8, 16}
    nics = efa.efa_addresses(f"{table}.48xlarge")
    assert nics is not None and ids[0][1] == nics[0]
    assert ids[5][4] == efa_hash(*nics[4:8]) and ids[15][16] == efa_hash(*nics)


def test_trn3_dev_types_use_their_own_efa_table(fake_node: FakeNode) -> None:
    nics = efa.efa_addresses("trn3-dev0.48xlarge")
    assert nics == efa.efa_addresses("trn3-dev1.48xlarge")
    assert nics is not None and len(nics) == 16
    assert (nics[0], nics[3], nics[15]) == ("0000:a9:00.0", "0000:be:00.0", "0000:8d:00.0")
    assert nics != efa.efa_addresses("trn3.48xlarge")
    assert sorted(nics) == sorted(
        efa.efa_addresses("trn3.48xlarge") or ()
    )  # same NICs, paired apart
    ids = group_ids(discover(fake_node("trn3-dev0.48xlarge")).inventory)
    assert ids[0][1] == "0000:a9:00.0"
    assert (
        ids[1][4]
        == ids[0][4]
        == efa_hash("0000:a9:00.0", "0000:a8:00.0", "0000:bf:00.0", "0000:be:00.0")
    )
    assert ids[15][8] == efa_hash(*nics[8:])
    assert ids[15][16] == efa_hash(*nics)


@pytest.mark.parametrize(
    ("name", "first", "last"),
    [
        ("trn2e.48xlarge", "0000:c9:00.0", "0000:f6:00.0"),
        ("trn3.48xlarge", "0000:be:00.0", "0000:eb:00.0"),
        ("trn3p.48xlarge", "0000:be:00.0", "0000:eb:00.0"),
        ("trn3pd98.48xlarge", "0000:be:00.0", "0000:eb:00.0"),
        ("trn3s.48xlarge", "0000:be:00.0", "0000:eb:00.0"),
    ],
)
def test_efa_tables_follow_the_published_family_map(name: str, first: str, last: str) -> None:
    nics = efa.efa_addresses(name)
    assert nics is not None and (nics[0], nics[-1], len(nics)) == (first, last, 16)


def test_trn3_sizes_without_efa_have_no_efa_table() -> None:
    assert efa.efa_addresses("trn3.3xlarge") is None
