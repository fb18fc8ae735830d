from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.discovery import Discovery, discover
from neuron_dra.hardware.driverformats import FAKE_VERSIONS
from neuron_dra.hardware.fakenode import FakeUltraServer, build_fake_node
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.hardware.inventory import UltraServer
from neuron_dra.hardware.sysfsreader import Finding
from tests.sysfs_tree import FakeNode, run_unprivileged, write

DEV0 = "sys/devices/virtual/neuron_device/neuron0"
INFERENTIA = 0x7064  # PCI device id of the first generation


def messages(result: Discovery) -> dict[str, str]:
    return {f.path: f.message for f in result.findings}


# Each silicon generation under every driver release; every instance type under one.
EVERY_RELEASE = [
    (name, version)
    for name in (
        "inf1.xlarge",
        "inf2.xlarge",
        "trn1.2xlarge",
        "trn2.3xlarge",
        "trn2u.48xlarge",
        "trn3.48xlarge",
    )
    for version in FAKE_VERSIONS
]
EVERY_TYPE = [(name, "2.26.1.0") for name in sorted(INSTANCE_TYPES)]


@pytest.mark.parametrize(("name", "version"), EVERY_TYPE + EVERY_RELEASE)
def test_a_healthy_node_reads_back_exactly(fake_node: FakeNode, name: str, version: str) -> None:
    spec = INSTANCE_TYPES[name]
    result = discover(fake_node(name, driver_version=version))
    inventory = result.inventory
    assert result.findings == ()
    assert inventory.instance_type == name
    assert inventory.driver_version == version
    assert [d.index for d in inventory.devices] == list(range(spec.devices))
    assert {d.cores for d in inventory.devices} == {spec.cores_per_device}
    assert inventory.lnc == (2 if spec.has_lnc else None)
    assert all(d.device_name for d in inventory.devices)
    # 16 lowercase hex digits, as the driver prints them; Inferentia (v1) has none.
    serials = {d.serial_number for d in inventory.devices}
    if spec.pci_device_id == INFERENTIA:
        assert serials == {None}
    else:
        assert all(re.fullmatch("[0-9a-f]{16}", s or "") for s in serials)
        assert len(serials) == spec.devices
    assert (inventory.ultraserver is not None) == spec.ultraserver


def test_lnc_comes_from_the_node_config(fake_node: FakeNode) -> None:
    assert discover(fake_node("trn2.48xlarge", lnc=1)).inventory.lnc == 1
    assert discover(fake_node("trn2.3xlarge", name="small")).inventory.lnc == 2


def test_ultraserver_ids_are_read(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-7", 3))
    assert discover(root).inventory.ultraserver == UltraServer(
        "us-7-1", "us-7", 1, 3, modes=(1, 2, 4), runtime_modes=(1, 3, 4)
    )
    horizontal = FakeUltraServer("us-8", 0, modes="1,2,4")
    found = discover(fake_node("trn2u.48xlarge", ultraserver=horizontal, name="h")).inventory
    assert found.ultraserver is not None and found.ultraserver.runtime_modes == (1, 2, 4)


def test_missing_core_count_falls_back_to_the_catalogue(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    (root / DEV0 / "core_count").unlink()
    result = discover(root)
    assert result.findings == (
        Finding(f"/{DEV0}/core_count", "missing"),
        Finding(f"/{DEV0}/core_count", "using trn2.48xlarge's 8 cores instead"),
    )
    assert result.inventory.devices[0].cores == 8


def test_a_device_whose_core_count_disagrees_takes_the_nodes(fake_node: FakeNode) -> None:
    """The runtime numbers cores by device index x cores per device: neuron12 reading
    4 where its siblings read 8 would take neuroncore24-25 of neuron6 at LNC 2."""
    root = fake_node("trn2.48xlarge")
    write(root, "sys/devices/virtual/neuron_device/neuron12/core_count", "4")
    result = discover(root)
    assert {d.cores for d in result.inventory.devices} == {8}
    path = "/sys/devices/virtual/neuron_device/neuron12/core_count"
    assert Finding(path, "4 cores where trn2.48xlarge has 8; using sysfs") in result.findings
    assert (
        Finding(
            path,
            "4 cores where the node's other devices have 8; using 8, as the runtime "
            "numbers cores by device index x 8",
        )
        in result.findings
    )
    cores = logical_cores(result.inventory)
    assert len({c.index for c in cores}) == len(cores) == 64


def test_a_fifo_where_a_file_should_be_is_reported_not_waited_on(fake_node: FakeNode) -> None:
    """A plain read of a FIFO blocks until a writer comes: discovery would hang."""
    root = fake_node("inf2.48xlarge")
    path = root / DEV0 / "core_count"
    path.unlink()
    os.mkfifo(path)
    result = discover(root)
    assert Finding(f"/{DEV0}/core_count", "unreadable: not a regular file") in result.findings
    assert result.inventory.devices[0].cores == 2


def test_an_oversized_file_is_reported_not_read_whole(fake_node: FakeNode) -> None:
    root = fake_node("inf2.48xlarge")
    write(root, f"{DEV0}/core_count", "2" + " " * (1 << 20))
    result = discover(root)
    assert Finding(f"/{DEV0}/core_count", "unreadable: larger than 65536 bytes") in result.findings


def test_core_count_readable_only_by_root_is_reported() -> None:
    # The real file is 0400; a driver that lost root must say so, not crash.
    base = Path(tempfile.mkdtemp(prefix="neuron-dra-"))
    try:
        base.chmod(0o755)
        root = build_fake_node(base / "node", "trn1.32xlarge")
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        result = run_unprivileged(lambda: discover(root))
    finally:
        shutil.rmtree(base)
    core_findings = [f for f in result.findings if f.path.endswith("neuron3/core_count")]
    assert core_findings[0] == Finding(
        "/sys/devices/virtual/neuron_device/neuron3/core_count",
        "unreadable: permission denied (the driver needs root to read it)",
    )
    assert len(result.inventory.devices) == 16
    assert {d.cores for d in result.inventory.devices} == {2}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("abc", "invalid value 'abc': not an integer from 1 to 64"),
        ("", "invalid value '': not an integer from 1 to 64"),
        ("0", "invalid value '0': out of range 1..64"),
        ("-8", "invalid value '-8': not an integer from 1 to 64"),
        # What Python's int() takes and no driver writes: ASCII digits only.
        ("\uff14", "invalid value '\uff14': not an integer from 1 to 64"),
        ("+4", "invalid value '+4': not an integer from 1 to 64"),
        ("1_0", "invalid value '1_0': not an integer from 1 to 64"),
        (b"\xff\xfe", "unreadable: not text"),
    ],
)
def test_garbage_core_count_never_reaches_the_inventory(
    fake_node: FakeNode, text: str | bytes, reason: str
) -> None:
    root = fake_node("inf2.48xlarge")
    write(root, f"{DEV0}/core_count", text)
    result = discover(root)
    assert result.findings[0] == Finding(f"/{DEV0}/core_count", reason)
    assert result.inventory.devices[0].cores == 2


def test_empty_driver_version_is_left_out(fake_node: FakeNode) -> None:
    root = fake_node("trn1.2xlarge")
    write(root, "sys/module/neuron/version", "\n")
    result = discover(root)
    assert messages(result) == {"/sys/module/neuron/version": "invalid value '': empty"}
    assert result.inventory.driver_version is None


def test_busy_ultraserver_ids_withhold_membership(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    write(root, "sys/class/neuron_device/server_id_4", "busy\n")
    result = discover(root)
    assert messages(result) == {
        "/sys/class/neuron_device/server_id_4": (
            "busy (the Neuron driver is reconfiguring); ignored until it settles"
        ),
        "/sys/class/neuron_device": "UltraServer membership unknown: whole-node device withheld",
    }
    assert result.inventory.ultraserver is None
    assert len(result.inventory.devices) == 16


def test_garbage_ultraserver_modes_advertise_single_node_only(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    write(root, "sys/class/neuron_device/ultraserver_mode", "1,5\n")
    result = discover(root)
    assert (
        "expected the runtime's UltraServer modes from 1 (X4), 2 (X2H), 3 (X2V), 4 (X1)"
        in messages(result)["/sys/class/neuron_device/ultraserver_mode"]
    )
    assert result.inventory.ultraserver is not None
    assert result.inventory.ultraserver.modes == (1,)


def test_device_numbers_with_gaps(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    shutil.rmtree(root / "sys/devices/virtual/neuron_device/neuron2")
    result = discover(root)
    assert messages(result) == {
        "/sys/devices/virtual/neuron_device": (
            "trn2.48xlarge has 16 devices but neuron2 is missing; "
            "connected sets that include them cannot be allocated"
        )
    }
    assert [d.index for d in result.inventory.devices] == [0, 1, *range(3, 16)]


def test_devices_beyond_the_catalogue_count_are_flagged(fake_node: FakeNode) -> None:
    root = fake_node("inf2.24xlarge")
    (root / "sys/devices/virtual/neuron_device/neuron6").mkdir()
    write(root, "sys/devices/virtual/neuron_device/neuron6/core_count", "2")
    write(root, "dev/neuron6", "")
    result = discover(root)
    assert (
        "neuron6 beyond the 6 devices of inf2.24xlarge"
        in messages(result)["/sys/devices/virtual/neuron_device"]
    )
    extra = result.inventory.devices[-1]
    assert extra.index == 6 and not result.inventory.in_topology(extra)


def test_a_device_without_its_dev_node_is_not_published(fake_node: FakeNode) -> None:
    root = fake_node("inf1.6xlarge")
    (root / "dev/neuron1").unlink()
    result = discover(root)
    assert messages(result) == {"/dev/neuron1": "missing: device not published"}
    assert [d.index for d in result.inventory.devices] == [0, 2, 3]


def test_unknown_instance_type_publishes_what_its_sysfs_says(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    write(root, "sys/devices/virtual/dmi/id/product_name", "trn9.96xlarge\n")
    result = discover(root)
    assert result.findings == ()  # an unknown type is no oddity of sysfs: `derived` says it
    inventory = result.inventory
    assert inventory.instance_type == "trn9.96xlarge" and inventory.spec is None
    assert len(inventory.devices) == 16 and inventory.devices[0].cores == 8
    assert inventory.devices[0].neighbours == (12, 3, 4, 1)  # sysfs still says
    assert inventory.lnc == 2  # Trainium2 silicon, by its device_name
    assert sorted(inventory.connected_sets()) == [1, 4, 8, 16]
    assert inventory.derived is not None and inventory.derived.devices == 16


def test_missing_dmi_derives_nothing(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    (root / "sys/devices/virtual/dmi/id/product_name").unlink()
    inventory = discover(root).inventory
    assert inventory.instance_type is None and inventory.derived is None
    assert inventory.lnc is None
    assert dict(inventory.connected_sets()) == {1: tuple(frozenset({i}) for i in range(16))}


def test_unknown_type_of_an_lnc_family_keeps_the_lnc_default(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    write(root, "sys/devices/virtual/dmi/id/product_name", "trn2e.48xlarge\n")
    assert discover(root).inventory.lnc == 2


def test_missing_dmi_is_not_filled_in_with_the_neuron_drivers_family(fake_node: FakeNode) -> None:
    # The driver's info/architecture/instance_type holds the family ("Inf2"), as its
    # source writes it: it names no instance type.
    root = fake_node("inf2.xlarge")
    (root / "sys/devices/virtual/dmi/id/product_name").unlink()
    result = discover(root)
    assert result.inventory.instance_type is None
    assert [f.message for f in result.findings] == [
        "missing",
        "the Neuron driver names the family only (Inf2): mount the host's "
        "/sys/devices/virtual/dmi for the instance type",
    ]


def test_garbage_instance_type_is_not_published(fake_node: FakeNode) -> None:
    root = fake_node("inf1.xlarge")
    write(root, "sys/devices/virtual/dmi/id/product_name", "Not Specified\n")
    write(root, f"{DEV0}/info/architecture/instance_type", "")
    result = discover(root)
    assert result.inventory.instance_type is None
    assert messages(result)["/sys/devices/virtual/dmi/id/product_name"] == (
        "invalid value 'Not Specified': not an instance type such as trn2.48xlarge"
    )


def test_connected_devices_mismatch_logs_both_views(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    write(root, f"{DEV0}/connected_devices", "1, 4\n")
    result = discover(root)
    assert messages(result) == {
        f"/{DEV0}/connected_devices": (
            "sysfs lists neighbours 1,4 but the torus of trn2.48xlarge has 12,3,4,1; "
            "using sysfs for neighbours, the catalogue for connected sets"
        )
    }
    assert result.inventory.devices[0].neighbours == (1, 4)
    assert result.inventory.connected_sets()[4][0] == frozenset(range(4))


def test_garbage_connected_devices_keep_the_model(fake_node: FakeNode) -> None:
    root = fake_node("inf2.48xlarge")
    write(root, f"{DEV0}/connected_devices", "11, x\n")
    result = discover(root)
    assert "invalid value '11, x'" in messages(result)[f"/{DEV0}/connected_devices"]
    assert result.inventory.devices[0].neighbours == (11, 1)


@pytest.mark.parametrize(
    ("text", "expected", "finding"),
    [
        ("NEURON_LOGICAL_NC_CONFIG=1\n", 1, None),
        ("# set by the launch template\nNEURON_LOGICAL_NC_CONFIG=2\n", 2, None),
        ("1", 1, None),
        ("NEURON_LOGICAL_NC_CONFIG=4", 2, "expected NEURON_LOGICAL_NC_CONFIG=1 or =2"),
        ("LNC=1", 2, "expected NEURON_LOGICAL_NC_CONFIG=1 or =2"),
    ],
)
def test_lnc_config_file(
    fake_node: FakeNode, text: str, expected: int, finding: str | None
) -> None:
    root = fake_node("trn2.48xlarge")
    write(root, "opt/aws/neuron/logical_nc_config", text)
    result = discover(root)
    assert result.inventory.lnc == expected
    found = messages(result).get("/opt/aws/neuron/logical_nc_config")
    assert (found is None) if finding is None else (found is not None and finding in found)


def test_lnc_config_on_hardware_without_lnc_is_ignored(fake_node: FakeNode) -> None:
    root = fake_node("inf2.48xlarge")
    write(root, "opt/aws/neuron/logical_nc_config", "NEURON_LOGICAL_NC_CONFIG=1\n")
    result = discover(root)
    assert result.inventory.lnc is None
    assert messages(result) == {
        "/opt/aws/neuron/logical_nc_config": ("ignored: inf2.48xlarge has no logical NeuronCores")
    }


def test_no_neuron_driver_at_all(tmp_path: Path) -> None:
    result = discover(tmp_path)
    assert result.inventory.devices == ()
    assert messages(result)["/sys/devices/virtual/neuron_device"] == (
        "missing: no Neuron devices (is the Neuron driver loaded?)"
    )


def test_a_file_where_a_device_directory_belongs(fake_node: FakeNode) -> None:
    root = fake_node("inf1.6xlarge")
    shutil.rmtree(root / "sys/devices/virtual/neuron_device/neuron3")
    write(root, "sys/devices/virtual/neuron_device/neuron3", "oops")
    result = discover(root)
    assert messages(result)["/sys/devices/virtual/neuron_device/neuron3"] == (
        "not a directory; device ignored"
    )
    assert [d.index for d in result.inventory.devices] == [0, 1, 2]


def test_a_file_missing_under_a_newer_driver_says_the_layout_may_have_moved(
    fake_node: FakeNode,
) -> None:
    root = fake_node("trn2u.48xlarge", driver_version="2.31.7.0")
    (root / "sys/class/neuron_device/server_id_4").unlink()
    assert messages(discover(root))["/sys/module/neuron/version"] == (
        "Neuron driver 2.31.7.0 is newer than 2.30.2.0, the newest whose sysfs layout this "
        "driver knows; driver 2.31 moved several nodes, so the missing files above may have moved"
    )
    # The same file missing under a known release is only missing.
    known = fake_node("trn2u.48xlarge", name="known", driver_version="2.30.2.0")
    (known / "sys/class/neuron_device/server_id_4").unlink()
    assert "/sys/module/neuron/version" not in messages(discover(known))
