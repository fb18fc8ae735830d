"""resource.kubernetes.io/pcieRoot and numaNode: where sysfs links a Neuron device to its
PCI function, and every way that link can be absent or wrong."""

from __future__ import annotations

from pathlib import Path

from neuron_dra.hardware.discovery import Discovery, discover
from neuron_dra.hardware.fakenode import fake_pci_function
from tests.sysfs_tree import FakeNode, write

DEVICES = "sys/devices/virtual/neuron_device"
LINK = "sys/class/neuron_device/neuron{}/device"


def placement(result: Discovery) -> dict[int, tuple[str | None, int | None]]:
    return {d.index: (d.pcie_root, d.numa_node) for d in result.inventory.devices}


def function_dir(root: Path, index: int) -> Path:
    pcie_root, under = fake_pci_function(index)
    return root / "sys/devices" / pcie_root / under


def test_the_neuron_driver_registers_no_parent_and_that_says_nothing(fake_node: FakeNode) -> None:
    result = discover(fake_node("trn2.48xlarge"))
    assert result.findings == ()
    assert set(placement(result).values()) == {(None, None)}


def test_a_linked_device_has_its_root_complex_and_numa_node(fake_node: FakeNode) -> None:
    result = discover(fake_node("trn2.48xlarge", pci_parents=True))
    assert result.findings == ()
    found = placement(result)
    assert found[0] == ("pci0000:10", 0)
    assert found[5] == ("pci0000:20", 0)
    assert found[15] == ("pci0000:40", 1)
    assert {found[i][0] for i in range(16)} == {
        "pci0000:10",
        "pci0000:20",
        "pci0000:30",
        "pci0000:40",
    }


def test_numa_node_minus_one_or_absent_gives_no_numa_node(fake_node: FakeNode) -> None:
    root = fake_node("inf2.24xlarge", pci_parents=True)
    write(function_dir(root, 1), "numa_node", "-1\n")
    (function_dir(root, 2) / "numa_node").unlink()  # a kernel without NUMA
    result = discover(root)
    assert result.findings == ()
    assert placement(result)[1] == ("pci0000:10", None)
    assert placement(result)[2] == ("pci0000:10", None)
    assert placement(result)[0] == ("pci0000:10", 0)


def test_a_numa_node_that_is_not_a_number_is_a_finding(fake_node: FakeNode) -> None:
    root = fake_node("inf2.24xlarge", pci_parents=True)
    write(function_dir(root, 3), "numa_node", "zero\n")
    result = discover(root)
    assert placement(result)[3] == ("pci0000:10", None)
    [finding] = result.findings
    assert finding.path.endswith(f"{fake_pci_function(3)[1]}/numa_node")
    assert finding.message.startswith("invalid value 'zero'")


def test_a_dangling_link_is_a_finding_and_no_attribute(fake_node: FakeNode) -> None:
    root = fake_node("inf2.24xlarge", pci_parents=True)
    pcie_root, under = fake_pci_function(4)
    function = root / "sys/devices" / pcie_root / under
    for child in function.iterdir():
        child.unlink()
    function.rmdir()
    result = discover(root)
    assert placement(result)[4] == (None, None)
    assert placement(result)[5] == ("pci0000:20", 1)
    assert [(f.path, f.message) for f in result.findings] == [
        (
            "/" + LINK.format(4),
            "dangling link: resource.kubernetes.io/pcieRoot and numaNode not published",
        )
    ]


def test_a_link_on_some_devices_only_names_the_others(fake_node: FakeNode) -> None:
    root = fake_node("inf2.24xlarge", pci_parents=True)
    (root / DEVICES / "neuron2" / "device").unlink()
    result = discover(root)
    assert placement(result)[2] == (None, None)
    assert placement(result)[1] == ("pci0000:10", 0)
    [finding] = result.findings
    assert finding.path == "/" + LINK.format(2)
    assert finding.message.startswith("missing although other Neuron devices have it")


def test_a_link_to_something_other_than_a_pci_function_is_a_finding(fake_node: FakeNode) -> None:
    root = fake_node("inf2.24xlarge", pci_parents=True)
    platform = root / "sys/devices/platform/neuron0"
    platform.mkdir(parents=True)
    link = root / DEVICES / "neuron0" / "device"
    link.unlink()
    link.symlink_to("../../../platform/neuron0")
    bridge = root / DEVICES / "neuron1" / "device"
    bridge.unlink()
    bridge.symlink_to("../../../pci0000:10")  # the root complex itself
    outside = root / DEVICES / "neuron2" / "device"
    outside.unlink()
    outside.symlink_to("../neuron3")
    result = discover(root)
    assert {i: placement(result)[i] for i in (0, 1, 2)} == dict.fromkeys((0, 1, 2), (None, None))
    messages = {f.path: f.message for f in result.findings}
    assert messages["/" + LINK.format(0)].startswith(
        "leads to /sys/devices/platform/neuron0, not to a PCI function under a root complex"
    )
    assert messages["/" + LINK.format(1)].startswith("leads to /sys/devices/pci0000:10, not")
    assert messages["/" + LINK.format(2)].startswith(
        "leads to /sys/devices/virtual/neuron_device/neuron3, not"
    )
    assert placement(result)[3] == ("pci0000:10", 1)


def test_a_link_leading_out_of_sys_devices_is_a_finding(fake_node: FakeNode) -> None:
    root = fake_node("inf2.24xlarge", pci_parents=True)
    link = root / DEVICES / "neuron0" / "device"
    link.unlink()
    link.symlink_to("../../../../module")
    (root / "sys/module").mkdir(parents=True, exist_ok=True)
    result = discover(root)
    assert placement(result)[0] == (None, None)
    [finding] = result.findings
    assert finding.message.startswith("leads outside /sys/devices, not to a PCI device")
