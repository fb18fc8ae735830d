"""Write a sysfs tree of the real shape for a simulated Neuron node.

The same builder serves `neuron-dra fake-node`, the local demo and the tests,
so what the driver is tested on is what operators can inspect. Files carry the
names, modes and formats the Neuron driver's source gives them, release by
release (`driverformats`): core_count without a trailing newline, 0400 before
2.28 and 0444 after; serial numbers as 16 lowercase hex digits; power as the
driver's five-field line; every counter directory of every NeuronCore.
"""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from consts import ENV_NEURON_LOGICAL_NC_CONFIG
from neuron_dra.hardware import counterfiles, discovery, topology
from neuron_dra.hardware.driverformats import (
    FAKE_VERSIONS,
    HEALTH_STATUS_DIR,
    DriverFormat,
    format_for,
)
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.hardware.stats import EXECUTION_OUTCOMES

# Neuron SDK 2.26's driver, which the examples select by version; every release of
# FAKE_VERSIONS is one flag away (`neuron-dra fake-node --driver-version`).
DEFAULT_DRIVER_VERSION = FAKE_VERSIONS[0]
FAKE_MAJOR = 238  # the real major number is assigned dynamically when the driver loads
# A minute boundary the power line says it was sampled at (the driver aggregates a
# minute of samples and stamps the minute's wall-clock second).
POWER_SAMPLED_AT = 1764115200


class Counters(StrEnum):
    """The NeuronCore counter files a fake tree carries.

    A trn2.48xlarge has 128 NeuronCores and the driver gives each some 40 counter
    directories: 20,501 files and directories in all, 0.6 s to write on tmpfs.
    Tests and tools that build hundreds of trees write fewer.
    """

    ALL = "all"  # every file the driver writes: `fake-node`, the format tests
    READ = "read"  # the counters the agent's metrics read: 3,829 files, 0.1 s
    NONE = "none"  # none of the NeuronCores': discovery, health, simulation; 501 files


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
    counters: Counters = Counters.ALL,
) -> Path:
    """Create the tree under `root` and return `root`.

    `pci_parents`: link each device to a PCI function (`device`, with `numa_node`), as
    the kernel does for a class device registered with a parent. The Neuron driver up to
    2.24 registers its devices without one, so the default tree has no such link.

    `char_device`: make every `dev/neuronN` a character device of this (major, minor)
    and say so in sysfs, so that a container given the device by its CDI spec can open
    it; (1, 3), /dev/null's, makes them readable and writable. Needs root (mknod).

    `counters`: which counter files of each NeuronCore are written (`Counters`); the
    device's own files (information, power, ECC, health) are always there.
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

    driver = format_for(driver_version)  # refuses what is not a version
    _write(root / discovery.PRODUCT_NAME_FILE, instance_type + "\n")
    _write(root / discovery.DRIVER_VERSION_FILE, driver_version + "\n")
    if not (root / "dev/kmsg").exists():
        _write(root / "dev/kmsg", "")  # the kernel log the health monitor follows
    if not (root / discovery.BOOT_ID_FILE).exists():
        _write(root / discovery.BOOT_ID_FILE, f"{uuid.uuid4()}\n")
    if lnc is not None:
        _write(root / discovery.LNC_CONFIG_FILE, f"{ENV_NEURON_LOGICAL_NC_CONFIG}={lnc}\n")
    silicon = SILICON[spec.pci_device_id]
    # Serial numbers differ between nodes (directory names) yet are stable across runs.
    serial_seed = int(hashlib.sha256(f"{root.name}/{instance_type}".encode()).hexdigest()[:8], 16)
    class_dir = root / discovery.CLASS_DIR
    class_dir.mkdir(parents=True, exist_ok=True)
    for index in range(spec.devices):
        device = root / discovery.DEVICES_DIR / f"neuron{index}"
        _write(device / "reset", "1\n", mode=0o600)  # 1: READY
        # No newline: the driver keeps it so, for the device plugin that breaks on one.
        _write(device / "core_count", str(spec.cores_per_device), mode=driver.topology_mode)
        major, minor = char_device or (FAKE_MAJOR, index)
        _write(device / "dev", f"{major}:{minor}\n", mode=0o444)
        neighbours = topology.neighbours(spec.shape, spec.devices, index)
        _write(
            device / "connected_devices",
            ", ".join(str(n) for n in neighbours) + "\n",
            mode=driver.topology_mode,
        )
        if driver.firmware_files:
            _write(device / "fw_api_version", "6\n", mode=0o444)
            _write(device / "fw_build", "20260101\n", mode=0o444)
        _write_device_stats(device, silicon, driver, spec.cores_per_device, counters)
        if silicon.generation > 1:  # the v1 layer reads no serial number
            _write(device / "info/serial_number", f"{serial_seed << 32 | index:016x}\n")
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
    else:
        _write_standalone(class_dir, driver)
    return root


def _write_standalone(class_dir: Path, driver: DriverFormat) -> None:
    """The class files of a node in no UltraServer."""
    if driver.firmware_files:  # 2.29+: per platform; a standalone one has these only
        _write(class_dir / "hbm_7200_capable", "0\n", mode=0o444)
        _write(class_dir / "current_perf_profile", "0\n", mode=0o444)
        return
    # Up to 2.28 every platform has the elected UltraServer files, saying "none".
    for size in (2, 4):
        _write(class_dir / f"node_id_{size}", "-1\n", mode=0o444)
        _write(class_dir / f"server_id_{size}", f"{0:016x}\n", mode=0o444)
    _write(class_dir / "ultraserver_mode", "\n", mode=0o444)


@dataclass(frozen=True)
class Silicon:
    """What the Neuron driver's hardware layer calls one kind of device: the names the
    fake tree writes, and whether it has serial numbers (generation > 1)."""

    generation: int  # the driver's hardware layer: v1 Inferentia ... v4 Trainium3
    device_arch: str  # info/architecture/arch_type of the device
    core_arch: str  # ... of each NeuronCore
    family: str  # info/architecture/instance_type: the family, not the EC2 type
    name: str  # info/architecture/device_name
    dies: int  # power is sampled per die


# PCI device id -> what the driver's hardware layer calls it (v1..v4 dhal tables).
SILICON = {
    0x7064: Silicon(1, "NDv1", "NCv1", "Inf1", "Inferentia", 1),
    0x7264: Silicon(2, "NDv3", "NCv2", "Inf2", "Inferentia2", 1),
    0x7164: Silicon(2, "NDv2", "NCv2", "Trn1", "Trainium1", 1),
    0x7364: Silicon(3, "NDv3", "NCv3", "Trn2", "Trainium2", 2),
    0x7564: Silicon(4, "NDv4", "NCv4", "Trn3", "Trainium3", 2),
}


def _write_device_stats(
    device: Path, silicon: Silicon, driver: DriverFormat, cores: int, counters: Counters
) -> None:
    """info/ and stats/ of one device and, as `counters` says, of its NeuronCores; idle."""
    _write(device / "info/notify_delay", "-1\n")
    arch = device / "info/architecture"
    _write(arch / "arch_type", silicon.device_arch + "\n")
    _write(arch / "instance_type", silicon.family + "\n")
    _write(arch / "device_name", silicon.name + "\n")
    every = counters is Counters.ALL
    if every:
        for category in counterfiles.HOST_MEMORY:
            memory = device / "stats/memory_usage/host_mem" / category
            _counter(memory, counterfiles.MEMORY_COUNTER)
    if silicon.generation > 1:  # v1 creates no stats/hardware
        for name in driver.ecc:
            _write(device / "stats/hardware" / name, "0\n")
        if silicon.generation > 2:
            for name in driver.health_status:
                _write(device / HEALTH_STATUS_DIR / name, _HEALTH_IDLE[name], mode=0o444)
    _write(device / "stats/power/utilization", f"{POWER_NO_LOAD}\n")
    if driver.power_raw:
        dies = "".join(f"{die},0,1\n" for die in range(silicon.dies))
        _write(device / "stats/power/utilization_raw", "die,util_bips,counter\n" + dies)
    for core in range(cores if counters is not Counters.NONE else 0):
        base = device / f"neuron_core{core}"
        _write(base / "info/architecture/arch_type", silicon.core_arch + "\n")
        stats = base / "stats"
        for name in counterfiles.STATUS if every else EXECUTION_OUTCOMES:
            _counter(stats / "status" / name, counterfiles.COUNTER)
        memory = stats / "memory_usage"
        _counter(memory / "device_mem", counterfiles.MEMORY_COUNTER)
        if not every:
            continue
        _counter(memory / "host_mem", counterfiles.MEMORY_COUNTER)
        for category in counterfiles.DEVICE_MEMORY:
            _counter(memory / "device_mem" / category, counterfiles.MEMORY_COUNTER)
        for name in counterfiles.OTHER_INFO:
            _counter(stats / "other_info" / name, counterfiles.COUNTER)
        if silicon.generation > 1:
            _write(stats / "tensor_engine/pe_cntrs", "xrow_grp,mm_active,wl_active,idle\n")


# What an idle device's health_status files hold.
_HEALTH_IDLE = {
    "hbm_ecc_err_count": "0\n",
    "repairable_hbm_ecc_err_count": "0\n",
    "sram_ecc_err_count": "0\n",
    "hw_error_event": "0\n",
    "unhealthy_components": "\n",  # an empty line: nothing failing
    "healthcheck_heartbeat": "1\n",
}
POWER_NO_LOAD = f"POWER_STATUS_VALID,{POWER_SAMPLED_AT},0.00,0.00,0.00"

# The `ultraserver_mode` written when the unit names none (runtime modes: X4=1, X2V=3,
# X1=4). An elected unit (trn2u) is what a healthy trn2u offers: X4, X2V (its 2-node
# units are vertical pairs) and X1; X2H ("1,2,4") is written where a test asks for it.
# A reserved unit (trn3), by its node count: X4 and X2V for 4 nodes; 2 nodes are joined
# by their vertical links only.
ELECTED_MODES = (1, 3, 4)
RESERVED_MODES = {4: (1, 3, 4), 2: (3, 4)}


def _counter(directory: Path, files: tuple[str, ...]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in files:
        _write(directory / name, "0\n", parents=False)


def _write_ultraserver(class_dir: Path, unit: FakeUltraServer, *, reservation: bool) -> None:
    if reservation:
        _write(class_dir / "reservation_id", unit.server_id + "\n")
        _write(class_dir / "node_id", f"{unit.node_id}\n")
        _write(class_dir / "node_cnt", f"{unit.nodes}\n")
        modes = RESERVED_MODES[unit.nodes]
    else:
        _write(class_dir / "server_id_4", unit.server_id + "\n")
        _write(class_dir / "node_id_4", f"{unit.node_id}\n")
        _write(class_dir / "server_id_2", f"{unit.server_id}-{unit.node_id // 2}\n")
        _write(class_dir / "node_id_2", f"{unit.node_id % 2}\n")
        modes = ELECTED_MODES
    written = unit.modes or ",".join(map(str, modes))
    _write(class_dir / "ultraserver_mode", written + "\n")


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


def _write(path: Path, text: str, *, mode: int = 0o644, parents: bool = True) -> None:
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        path.chmod(0o600)  # rebuilding over a tree: core_count may be 0400, others 0444
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(fd, mode)  # past the umask, and over a rebuilt file's 0600
        file.write(text.encode())
