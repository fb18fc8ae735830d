"""Write a sysfs tree of the real shape for a simulated Neuron node.

The same builder serves `neuron-dra fake-node`, the local demo and the tests,
so what the driver is tested on is what operators can inspect. Files carry the
modes and formatting of the real Neuron driver (core_count is 0400 with no
trailing newline) so discovery meets the same quirks it meets on hardware.
"""

from __future__ import annotations

import hashlib
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
}
_HARDWARE_COUNTERS = (
    "mem_ecc_corrected",
    "mem_ecc_uncorrected",
    "sram_ecc_corrected",
    "sram_ecc_uncorrected",
)


@dataclass(frozen=True)
class FakeUltraServer:
    server_id: str = "us-0"  # id of the 4-node UltraServer
    node_id: int = 0  # position 0..3 within it


def build_fake_node(
    root: Path,
    instance_type: str,
    *,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    lnc: int | None = None,
    ultraserver: FakeUltraServer | None = None,
) -> Path:
    """Create the tree under `root` and return `root`."""
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
        _write(device / "dev", f"{FAKE_MAJOR}:{index}\n")
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
        # Stands in for the character device: presence is what discovery checks.
        _write(root / discovery.DEV_DIR / f"neuron{index}", "")
    if spec.ultraserver:
        unit = ultraserver or FakeUltraServer()
        _write(class_dir / "server_id_4", unit.server_id + "\n")
        _write(class_dir / "node_id_4", f"{unit.node_id}\n")
        _write(class_dir / "server_id_2", f"{unit.server_id}-{unit.node_id // 2}\n")
        _write(class_dir / "node_id_2", f"{unit.node_id % 2}\n")
        _write(class_dir / "ultraserver_mode", "1,2,4\n")
    return root


def _write(path: Path, text: str, *, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(0o600)  # rebuilding over a tree whose core_count is 0400
    path.write_text(text)
    path.chmod(mode)
