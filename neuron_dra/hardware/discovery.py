"""Read a node's Neuron hardware from a sysfs root into a NodeInventory.

Real sysfs is partial and odd: files go missing, are readable only by root,
read `busy` while an UltraServer election runs, or hold garbage. Discovery
never raises for any of that. Every oddity becomes a Finding that names the
path and what was done about it, and the inventory keeps only what is known,
so the slices built from it are never wrong, at worst incomplete.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from neuron_dra.hardware import derived, driverformats, topology
from neuron_dra.hardware import sysfsvalues as values
from neuron_dra.hardware.instance_types import (
    DEFAULT_LNC,
    LNC_FAMILIES,
    InstanceType,
    family_of,
    lookup,
)
from neuron_dra.hardware.inventory import (
    NeuronDevice,
    NodeInventory,
    UltraServer,
    with_runtime_modes,
)
from neuron_dra.hardware.sysfsfile import read_text
from neuron_dra.hardware.sysfsreader import Finding, SysfsReader

DEVICES_DIR = "sys/devices/virtual/neuron_device"
CLASS_DIR = "sys/class/neuron_device"
DRIVER_VERSION_FILE = "sys/module/neuron/version"
PRODUCT_NAME_FILE = "sys/devices/virtual/dmi/id/product_name"
LNC_CONFIG_FILE = "opt/aws/neuron/logical_nc_config"
DEV_DIR = "dev"
BOOT_ID_FILE = "proc/sys/kernel/random/boot_id"

PCI_DEVICES_DIR = "sys/devices"  # PCI functions sit under their root complex: pciDDDD:BB/...
MAX_CORES_PER_DEVICE = 64
MAX_NUMA_NODE = 1023  # the kernel's largest
MAX_ULTRASERVER_NODES = 64
NO_SERVER_ID = "0" * 16  # what the driver shows for a unit the node is not in, or while busy

_DEVICE_DIR_RE = re.compile(r"neuron(0|[1-9][0-9]{0,3})")
_PCIE_ROOT_RE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")
_PCI_ADDRESS_RE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True)
class Discovery:
    inventory: NodeInventory
    findings: tuple[Finding, ...]


def discover(root: Path) -> Discovery:
    """Read the sysfs tree under `root` (`/` on a real node)."""
    return _Reader(root).read_node()


def boot_id(root: Path) -> str | None:
    """This boot's id: prepared state from another boot must not be trusted."""
    try:
        return read_text(root / BOOT_ID_FILE).strip() or None
    except OSError:
        return None


def log_findings(findings: Iterable[Finding], logger: logging.Logger) -> None:
    for finding in findings:
        logger.warning(finding.message, extra={"path": finding.path})


class _Reader(SysfsReader):
    # --- node ---------------------------------------------------------------

    def read_node(self) -> Discovery:
        indices = self.device_indices()
        instance_type = self.instance_type(indices)
        spec = lookup(instance_type) if instance_type else None
        if spec is not None:
            self.check_device_count(spec, indices)
        devices = tuple(device for i in indices if (device := self.device(i, spec)) is not None)
        devices = self.with_pci_parents(self.uniform_cores(devices, spec))
        # A type the catalogue does not have is published as its sysfs says (`derived`).
        found = self.derive(instance_type, devices) if instance_type and spec is None else None
        has_lnc = spec.has_lnc if spec is not None else found is not None and found.has_lnc
        inventory = NodeInventory(
            instance_type=instance_type,
            driver_version=self.parse(DRIVER_VERSION_FILE, values.printable),
            lnc=self.lnc(instance_type, has_lnc),
            devices=devices,
            ultraserver=self.ultraserver(spec) if spec is not None and spec.ultraserver else None,
            derived=found,
        )
        if driverformats.beyond_known(inventory.driver_version) and any(
            f.message == "missing" for f in self.findings
        ):
            self.note(
                DRIVER_VERSION_FILE,
                f"Neuron driver {inventory.driver_version} is newer than "
                f"{driverformats.NEWEST_KNOWN}, the newest whose sysfs layout this driver "
                "knows; driver 2.31 moved several nodes, so the missing files above may "
                "have moved",
            )
        return Discovery(inventory, tuple(self.findings))

    def device_indices(self) -> list[int]:
        try:
            entries = list((self.root / DEVICES_DIR).iterdir())
        except FileNotFoundError:
            self.note(DEVICES_DIR, "missing: no Neuron devices (is the Neuron driver loaded?)")
            return []
        except OSError as err:
            self.note(DEVICES_DIR, f"unreadable: {err.strerror or err}")
            return []
        indices = []
        for entry in entries:
            match = _DEVICE_DIR_RE.fullmatch(entry.name)
            if match is None:
                continue
            if not entry.is_dir():
                self.note(f"{DEVICES_DIR}/{entry.name}", "not a directory; device ignored")
                continue
            indices.append(int(match.group(1)))
        return sorted(indices)

    def instance_type(self, indices: list[int]) -> str | None:
        found = self.parse(PRODUCT_NAME_FILE, values.instance_type)
        if found is not None or not indices:
            return found
        # The Neuron driver's own `instance_type` names the family (Trn2), not the EC2
        # instance type: it can say what is there, not stand in for the DMI table.
        family = self.parse(
            f"{DEVICES_DIR}/neuron{indices[0]}/info/architecture/instance_type",
            values.printable,
            optional=True,
        )
        if family is not None:
            self.note(
                PRODUCT_NAME_FILE,
                f"the Neuron driver names the family only ({family}): mount the host's "
                "/sys/devices/virtual/dmi for the instance type",
            )
        return None

    def check_device_count(self, spec: InstanceType, indices: list[int]) -> None:
        missing = sorted(set(range(spec.devices)) - set(indices))
        extra = [i for i in indices if i >= spec.devices]
        if missing:
            self.note(
                DEVICES_DIR,
                f"{spec.name} has {spec.devices} devices but neuron{values.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} missing; "
                "connected sets that include them cannot be allocated",
            )
        if extra:
            self.note(
                DEVICES_DIR,
                f"neuron{values.join(extra)} beyond the {spec.devices} devices of {spec.name}; "
                "published without topology attributes",
            )

    def derive(self, instance_type: str, devices: tuple[NeuronDevice, ...]) -> derived.Derived:
        """What the devices' own files say of a type the catalogue does not have."""
        core_arch = (
            self.parse(
                f"{DEVICES_DIR}/neuron{devices[0].index}/neuron_core0/info/architecture/arch_type",
                values.printable,
                optional=True,
            )
            if devices
            else None
        )
        return derived.derive(
            {d.index: d.neighbours for d in devices},
            (d.cores for d in devices),
            (d.device_name for d in devices),
            core_arch,
            family_of(instance_type) in LNC_FAMILIES,
        )

    def lnc(self, instance_type: str | None, has_lnc: bool) -> int | None:
        """The node's LNC where it has logical NeuronCores: the runtime's configuration, or
        its default."""
        configured = self.parse(LNC_CONFIG_FILE, values.lnc_config, optional=True)
        if not has_lnc:
            if configured is not None:
                self.note(
                    LNC_CONFIG_FILE,
                    f"ignored: {instance_type or 'this instance'} has no logical NeuronCores",
                )
            return None
        return DEFAULT_LNC if configured is None else configured

    def ultraserver(self, spec: InstanceType) -> UltraServer | None:
        runtime_modes = self.parse(f"{CLASS_DIR}/ultraserver_mode", values.runtime_modes)
        found = self.reserved_ultraserver() if spec.reservation else self.elected_ultraserver()
        if found is None:
            return None
        if runtime_modes is None:
            self.note(CLASS_DIR, "UltraServer modes unknown: only single-node use is advertised")
            return found
        return with_runtime_modes(found, runtime_modes)

    def elected_ultraserver(self) -> UltraServer | None:
        """trn2u, trn3p: ids of the node's units of 2 and 4 nodes, from the driver's election."""
        server_2, server_4, node_2, node_4 = (
            self.parse(f"{CLASS_DIR}/server_id_2", values.label_value),
            self.parse(f"{CLASS_DIR}/server_id_4", values.label_value),
            self.parse(f"{CLASS_DIR}/node_id_2", values.int_in(-1, 1)),
            self.parse(f"{CLASS_DIR}/node_id_4", values.int_in(-1, 3)),
        )
        if server_2 is None or server_4 is None or node_2 is None or node_4 is None:
            self.note(CLASS_DIR, "UltraServer membership unknown: whole-node device withheld")
            return None
        # The driver shows node id -1 and server id 0000000000000000 for a unit it is not in.
        in_2, in_4 = (
            node_2 >= 0 and server_2 != NO_SERVER_ID,
            node_4 >= 0 and server_4 != NO_SERVER_ID,
        )
        if not in_2 and not in_4:
            self.note(CLASS_DIR, "not in a unit of 2 or 4 nodes: whole-node device withheld")
            return None
        return UltraServer(
            server_id_2=server_2 if in_2 else None,
            server_id_4=server_4 if in_4 else None,
            node_id_2=node_2 if in_2 else None,
            node_id_4=node_4 if in_4 else None,
        )

    def reserved_ultraserver(self) -> UltraServer | None:
        """trn3: the one unit the node's reservation makes (`reservation_id` names it)."""
        reservation, node, count = (
            self.parse(f"{CLASS_DIR}/reservation_id", values.label_value),
            self.parse(f"{CLASS_DIR}/node_id", values.int_in(-1, 3)),
            self.parse(f"{CLASS_DIR}/node_cnt", values.int_in(-1, MAX_ULTRASERVER_NODES)),
        )
        if reservation is None or node is None or count is None:
            self.note(CLASS_DIR, "UltraServer membership unknown: whole-node device withheld")
            return None
        if count not in (2, 4) or node < 0 or reservation == NO_SERVER_ID:
            self.note(
                CLASS_DIR,
                f"not in a unit of 2 or 4 nodes (node_cnt {count}, node_id {node}, "
                f"reservation_id {reservation}): whole-node device withheld",
            )
            return None
        # node_id is the node's place in the reservation, whatever mode the runtime runs in.
        pair, four = count == 2, count == 4
        return UltraServer(
            server_id_2=reservation if pair else None,
            server_id_4=reservation if four else None,
            node_id_2=node if pair else None,
            node_id_4=node if four else None,
            reservation_id=reservation,
        )

    # --- device -------------------------------------------------------------

    def uniform_cores(
        self, devices: tuple[NeuronDevice, ...], spec: InstanceType | None
    ) -> tuple[NeuronDevice, ...]:
        """One core count for every device. The runtime numbers logical cores by device
        index times the cores of a device, the same for all: a device whose core_count
        disagrees would take its neighbours' numbers (on a trn2 with neuron12 reading 4,
        neuroncore24 twice). It gets the count most devices report, the catalogue's on
        a tie."""
        counts = Counter(d.cores for d in devices if d.cores is not None)
        if len(counts) <= 1:
            return devices
        most = max(counts.values())
        leaders = sorted(c for c, n in counts.items() if n == most)
        catalogue = spec.cores_per_device if spec is not None else None
        node = catalogue if catalogue in leaders else leaders[0]
        kept = []
        for device in devices:
            if device.cores is not None and device.cores != node:
                self.note(
                    f"{DEVICES_DIR}/neuron{device.index}/core_count",
                    f"{device.cores} cores where the node's other devices have {node}; "
                    f"using {node}, as the runtime numbers cores by device index x {node}",
                )
            kept.append(device if device.cores in (None, node) else replace(device, cores=node))
        return tuple(kept)

    def device(self, index: int, spec: InstanceType | None) -> NeuronDevice | None:
        base = f"{DEVICES_DIR}/neuron{index}"
        if not (self.root / DEV_DIR / f"neuron{index}").exists():
            self.note(f"{DEV_DIR}/neuron{index}", "missing: device not published")
            return None
        in_topology = spec is not None and index < spec.devices
        cores = self.parse(f"{base}/core_count", values.int_in(1, MAX_CORES_PER_DEVICE))
        if spec is not None:
            if cores is None:
                cores = spec.cores_per_device
                self.note(f"{base}/core_count", f"using {spec.name}'s {cores} cores instead")
            elif cores != spec.cores_per_device:
                self.note(
                    f"{base}/core_count",
                    f"{cores} cores where {spec.name} has {spec.cores_per_device}; using sysfs",
                )
        return NeuronDevice(
            index=index,
            cores=cores,
            neighbours=self.neighbours(base, index, spec if in_topology else None),
            # Inferentia (v1) devices have none; the driver writes an empty line when the
            # firmware does not answer.
            serial_number=self.parse(f"{base}/info/serial_number", values.serial, optional=True),
            device_name=self.parse(f"{base}/info/architecture/device_name", values.printable),
            major_minor=self.parse(f"{base}/dev", values.major_minor),
        )

    def neighbours(self, base: str, index: int, spec: InstanceType | None) -> tuple[int, ...]:
        rel = f"{base}/connected_devices"
        listed = self.parse(rel, values.device_list)
        if spec is None:
            return listed or ()
        model = topology.neighbours(spec.shape, spec.devices, index)
        if listed is None:
            return model
        if set(listed) != set(model):
            self.note(
                rel,
                f"sysfs lists neighbours {values.join(listed) or 'none'} but the {spec.shape} of "
                f"{spec.name} has {values.join(model) or 'none'}; using sysfs for neighbours, "
                "the catalogue for connected sets",
            )
        return listed

    # --- PCI parent ---------------------------------------------------------

    def with_pci_parents(self, devices: tuple[NeuronDevice, ...]) -> tuple[NeuronDevice, ...]:
        """The devices with their PCIe root and NUMA node, where sysfs links them to their
        PCI function (`/sys/class/neuron_device/neuronN/device`, as for any class device
        registered with a parent). The Neuron driver up to 2.24 registers its devices
        without one, so no link at all is the normal case and says nothing; a link on
        some devices only, or one that does not lead to a PCI function, is a finding."""
        placed = {d.index: self.pci_parent(d.index) for d in devices}
        linked = {i for i, found in placed.items() if found is not None}
        if not linked:
            return devices
        for index in sorted(set(placed) - linked):
            self.note(
                f"{CLASS_DIR}/neuron{index}/device",
                "missing although other Neuron devices have it: "
                "resource.kubernetes.io/pcieRoot and numaNode not published for this device",
            )
        return tuple(
            replace(d, pcie_root=found[0], numa_node=found[1])
            if (found := placed[d.index]) is not None
            else d
            for d in devices
        )

    def pci_parent(self, index: int) -> tuple[str | None, int | None] | None:
        """(PCIe root, NUMA node) of the device's PCI function, each None where unknown
        (a finding says why); None without a link."""
        rel = f"{CLASS_DIR}/neuron{index}/device"
        link = self.root / rel
        if not link.is_symlink():
            return None
        unpublished = "resource.kubernetes.io/pcieRoot and numaNode not published"
        try:
            target = link.resolve(strict=True)
            under = target.relative_to((self.root / PCI_DEVICES_DIR).resolve())
        except (OSError, RuntimeError):
            self.note(rel, f"dangling link: {unpublished}")
            return None, None
        except ValueError:
            self.note(rel, f"leads outside /{PCI_DEVICES_DIR}, not to a PCI device: {unpublished}")
            return None, None
        parts = under.parts
        if (
            len(parts) < 2
            or _PCIE_ROOT_RE.fullmatch(parts[0]) is None
            or _PCI_ADDRESS_RE.fullmatch(parts[-1]) is None
        ):
            self.note(
                rel,
                f"leads to /{PCI_DEVICES_DIR}/{under}, not to a PCI function under a root "
                f"complex (/{PCI_DEVICES_DIR}/pciDDDD:BB/.../DDDD:BB:DD.F): {unpublished}",
            )
            return None, None
        # -1: no NUMA affinity; no file: a kernel without NUMA. Neither is a numaNode.
        numa = self.parse(
            f"{PCI_DEVICES_DIR}/{under}/numa_node", values.int_in(-1, MAX_NUMA_NODE), optional=True
        )
        return parts[0], None if numa is None or numa < 0 else numa
