"""Write a sysfs tree of the real shape for a simulated Neuron node.

The same builder serves `neuron-dra fake-node`, the local demo and the tests,
so what the driver is tested on is what operators can inspect. Files carry the
modes and formatting of the real Neuron driver (core_count is 0400 with no
trailing newline) so discovery meets the same quirks it meets on hardware.
"""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from consts import ENV_NEURON_LOGICAL_NC_CONFIG
from neuron_dra.hardware import discovery, topology
from neuron_dra.hardware.instance_types import INSTANCE_TYPES

DEFAULT_DRIVER_VERSION = "2.24.7.0"
FAKE_MAJOR = 238  # the real major number is assigned dynamically when the driver loads

# PCI device id -> (arch_type, device_name) as the Neuron driver reports them.
_SILICON = {
    0x7064: ("NCv1", "Inferentia"),
    0x7264: ("NCv2", "Inferentia2"),
    0x7164: ("NCv2", "Trainium"),
    0x7364: ("NCv3", "Trainium2"),
    0x7564: ("NCv4", "Trainium3"),
}
_HARDWARE_COUNTERS = (
    "mem_ecc_corrected",
    "mem_ecc_uncorrected",
    "sram_ecc_corrected",
    "sram_ecc_uncorrected",
)


@dataclass(frozen=True)
class FakeUltraServer:
    """The node's place in an UltraServer, written as its instance type's driver shows it.

    Elected types (trn2u, trn3p) get `server_id_2/4` and `node_id_2/4` of a 4-node
    UltraServer; reservation types (trn3) get `reservation_id` (= `server_id`),
    `node_id` and `node_cnt` (= `nodes`, 2 or 4). `modes` is the `ultraserver_mode`
    file (runtime mode numbers); by default what the driver offers such a unit.
    """

    server_id: str = "us-0"  # id of the UltraServer (the reservation on trn3)
    node_id: int = 0  # position 0..3 within it
    nodes: int = 4  # nodes in the reservation (trn3 only)
    modes: str | None = None


def build_fake_node(
    root: Path,
    instance_type: str,
    *,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    lnc: int | None = None,
    ultraserver: FakeUltraServer | None = None,
    pci_parents: bool = False,
    char_device: tuple[int, int] | None = None,
) -> Path:
    """Create the tree under `root` and return `root`.

    `pci_parents`: link each device to a PCI function (`device`, with `numa_node`), as
    the kernel does for a class device registered with a parent. The Neuron driver up to
    2.24 registers its devices without one, so the default tree has no such link.

    `char_device`: make every `dev/neuronN` a character device of this (major, minor)
    and say so in sysfs, so that a container given the device by its CDI spec can open
    it; (1, 3), /dev/null's, makes them readable and writable. Needs root (mknod).
    """
    spec = INSTANCE_TYPES.get(instance_type)
    if spec is None:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise ValueError(f"unknown instance type {instance_type!r}; known: {known}")
    if lnc is not None and not spec.has_lnc:
        raise ValueError(f"{instance_type} has no logical NeuronCores; --lnc does not apply")
    if ultraserver is not None and not spec.ultraserver:
        raise ValueError(f"{instance_type} is not an UltraServer instance type")
    if ultraserver is not None and not 0 <= ultraserver.node_id <= 3:
        raise ValueError(f"UltraServer node id must be 0..3, not {ultraserver.node_id}")
    if ultraserver is not None and ultraserver.nodes not in ((2, 4) if spec.reservation else (4,)):
        raise ValueError(
            f"{instance_type} cannot be in an UltraServer of {ultraserver.nodes} nodes"
        )

    _write(root / discovery.PRODUCT_NAME_FILE, instance_type + "\n")
    _write(root / discovery.DRIVER_VERSION_FILE, driver_version + "\n")
    if not (root / "dev/kmsg").exists():
        _write(root / "dev/kmsg", "")  # the kernel log the health monitor follows
    if not (root / discovery.BOOT_ID_FILE).exists():
        _write(root / discovery.BOOT_ID_FILE, f"{uuid.uuid4()}\n")
    if lnc is not None:
        _write(root / discovery.LNC_CONFIG_FILE, f"{ENV_NEURON_LOGICAL_NC_CONFIG}={lnc}\n")
    arch, silicon = _SILICON[spec.pci_device_id]
    # Serial numbers differ between nodes (directory names) yet are stable across runs.
    serial_seed = hashlib.sha256(f"{root.name}/{instance_type}".encode()).hexdigest()[:8].upper()
    class_dir = root / discovery.CLASS_DIR
    class_dir.mkdir(parents=True, exist_ok=True)
    for index in range(spec.devices):
        device = root / discovery.DEVICES_DIR / f"neuron{index}"
        _write(device / "core_count", str(spec.cores_per_device), mode=0o400)
        major, minor = char_device or (FAKE_MAJOR, index)
        _write(device / "dev", f"{major}:{minor}\n")
        neighbours = topology.neighbours(spec.shape, spec.devices, index)
        _write(device / "connected_devices", ", ".join(str(n) for n in neighbours) + "\n")
        _write(device / "info/serial_number", f"{serial_seed}{index:08d}\n")
        _write(device / "info/architecture/arch_type", arch + "\n")
        _write(device / "info/architecture/instance_type", instance_type + "\n")
        _write(device / "info/architecture/device_name", silicon + "\n")
        for counter in _HARDWARE_COUNTERS:
            _write(device / "stats/hardware" / counter, "0\n")
        _write(device / "stats/power/utilization", "0\n")
        for core in range(spec.cores_per_device):
            _write(device / f"neuron_core{core}/stats/status/exec_success", "0\n")
        link = class_dir / f"neuron{index}"
        if not link.is_symlink():
            link.symlink_to(Path("../../devices/virtual/neuron_device") / f"neuron{index}")
        _device_node(root / discovery.DEV_DIR / f"neuron{index}", char_device)
        if pci_parents:
            _link_pci_parent(root, device, index, spec.devices, spec.pci_device_id)
    if spec.ultraserver:
        _write_ultraserver(
            class_dir, ultraserver or FakeUltraServer(), reservation=spec.reservation
        )
    return root


def _write_ultraserver(class_dir: Path, unit: FakeUltraServer, *, reservation: bool) -> None:
    if reservation:
        _write(class_dir / "reservation_id", unit.server_id + "\n")
        _write(class_dir / "node_id", f"{unit.node_id}\n")
        _write(class_dir / "node_cnt", f"{unit.nodes}\n")
        # X4 and X2V for 4 nodes; 2 nodes are joined by their vertical links only.
        modes = "1,3,4" if unit.nodes == 4 else "3,4"
    else:
        _write(class_dir / "server_id_4", unit.server_id + "\n")
        _write(class_dir / "node_id_4", f"{unit.node_id}\n")
        _write(class_dir / "server_id_2", f"{unit.server_id}-{unit.node_id // 2}\n")
        _write(class_dir / "node_id_2", f"{unit.node_id % 2}\n")
        # What a healthy trn2u offers: X4, X2V (its 2-node units are vertical pairs)
        # and X1. X2H ("1,2,4") is written where a test asks for it.
        modes = "1,3,4"
    _write(class_dir / "ultraserver_mode", (unit.modes or modes) + "\n")


def fake_pci_function(index: int) -> tuple[str, str]:
    """(PCIe root complex, path under it) of device `index`'s PCI function in a fake tree:
    four devices behind each root complex, each behind a bridge of its own."""
    bus = 0x10 * (index // 4 + 1)
    bridge = f"0000:{bus:02x}:{index % 4 + 1:02x}.0"
    return f"pci0000:{bus:02x}", f"{bridge}/0000:{bus + index % 4 + 1:02x}:00.0"


def _link_pci_parent(root: Path, device: Path, index: int, devices: int, pci_id: int) -> None:
    pcie_root, under = fake_pci_function(index)
    function = root / discovery.PCI_DEVICES_DIR / pcie_root / under
    _write(function / "vendor", "0x1d0f\n")
    _write(function / "device", f"0x{pci_id:04x}\n")
    _write(function / "numa_node", f"{index * 2 // devices}\n")  # half the devices per node
    link = device / "device"
    if not link.is_symlink():
        link.symlink_to(Path("../../..") / pcie_root / under)


def _device_node(path: Path, char_device: tuple[int, int] | None) -> None:
    if char_device is None:
        # Stands in for the character device: presence is what discovery checks.
        _write(path, "")
        return
    path.unlink(missing_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(*char_device))
    path.chmod(0o666)  # past the umask: the Neuron driver's udev rule makes them 0666


def _write(path: Path, text: str, *, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(0o600)  # rebuilding over a tree whose core_count is 0400
    path.write_text(text)
    path.chmod(mode)
