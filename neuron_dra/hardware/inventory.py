"""The node inventory: an immutable picture of one node's Neuron hardware."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from consts import DEVICE_NAME_PREFIX
from neuron_dra.hardware import topology
from neuron_dra.hardware.derived import Derived
from neuron_dra.hardware.instance_types import InstanceType, lookup

# The Neuron runtime's UltraServer modes (NEURON_RT_ULTRASERVER_MODE), as the driver's
# `ultraserver_mode` file lists them: X4=1, X2H=2 (horizontal links), X2V=3 (vertical), X1=4.
RUNTIME_MODE_NODES = {1: 4, 2: 2, 3: 2, 4: 1}


@dataclass(frozen=True)
class UltraServer:
    """The node's place in an UltraServer: the units of 2 and of 4 nodes it belongs to.

    Nodes that elect their UltraServer (trn2u, trn3p) know both units; a node placed
    by its reservation (trn3) knows only the unit its reservation makes, so the other
    size's ids are None.
    """

    server_id_2: str | None
    server_id_4: str | None
    node_id_2: int | None
    node_id_4: int | None
    # Unit sizes in nodes a claim may ask for, e.g. (1, 2, 4): the node alone until the
    # runtime's modes are known (`with_runtime_modes`).
    modes: tuple[int, ...] = (1,)
    runtime_modes: tuple[int, ...] = ()  # the driver's list: runtime mode numbers, e.g. (1, 3, 4)
    reservation_id: str | None = None  # trn3: shared by the nodes of one reservation

    def unit(self, nodes: int) -> tuple[str, int] | None:
        """(server id, node id) of the node's unit of `nodes` nodes, if it is in one."""
        if nodes == 4 and self.server_id_4 is not None and self.node_id_4 is not None:
            return self.server_id_4, self.node_id_4
        if nodes == 2 and self.server_id_2 is not None and self.node_id_2 is not None:
            return self.server_id_2, self.node_id_2
        return None

    def runtime_mode(self, nodes: int) -> int:
        """NEURON_RT_ULTRASERVER_MODE for a unit of `nodes` nodes.

        Two nodes use the vertical links (X2V) where the driver offers them, else the
        horizontal ones (X2H), as AWS's UltraServer init script chooses.
        """
        if nodes == 2:
            return 3 if 3 in self.runtime_modes else 2
        return {4: 1, 1: 4}[nodes]


def with_runtime_modes(membership: UltraServer, runtime_modes: tuple[int, ...]) -> UltraServer:
    """`membership` with the runtime's modes (the driver's `ultraserver_mode` list) and the
    unit sizes they offer a claim: the node alone always; 2 or 4 nodes where a mode of that
    size is offered and the node is in a unit of it."""
    sizes = {RUNTIME_MODE_NODES[m] for m in runtime_modes}
    modes = tuple(n for n in (1, 2, 4) if n == 1 or (n in sizes and membership.unit(n)))
    return replace(membership, modes=modes, runtime_modes=runtime_modes)


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    cores: int | None  # physical NeuronCores; None when neither sysfs nor the catalogue says
    neighbours: tuple[int, ...]
    serial_number: str | None = None
    device_name: str | None = None
    # Character device numbers from sysfs `dev`; lets runtimes create the node without a stat.
    major_minor: tuple[int, int] | None = None
    # The PCIe root complex (`pci0000:00`) and NUMA node of the device's PCI function, where
    # sysfs links the device to it; the Neuron driver up to 2.24 registers none.
    pcie_root: str | None = None
    numa_node: int | None = None

    @property
    def name(self) -> str:
        """Device name in the ResourceSlice."""
        return f"{DEVICE_NAME_PREFIX}{self.index}"

    @property
    def dev_path(self) -> str:
        """Character device path on the host (and in the container)."""
        return f"/dev/neuron{self.index}"


@dataclass(frozen=True)
class NodeInventory:
    instance_type: str | None
    driver_version: str | None
    lnc: int | None  # node default logical NeuronCore size; None on hardware without LNC
    devices: tuple[NeuronDevice, ...]
    ultraserver: UltraServer | None = None
    # Of a type the catalogue does not have: what its sysfs says (`derived`).
    derived: Derived | None = None
    spec: InstanceType | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spec = lookup(self.instance_type) if self.instance_type else None
        object.__setattr__(self, "spec", spec)

    def connected_sets(self) -> Mapping[int, tuple[topology.DeviceSet, ...]]:
        """Allowed connected sets by size: the catalogue's, else those derived from sysfs,
        else single devices."""
        if self.spec is not None:
            return topology.connected_sets(self.spec.shape, self.spec.devices)
        if self.derived is not None:
            return self.derived.connected_sets()
        return {1: tuple(frozenset({d.index}) for d in self.devices)}

    def in_topology(self, device: NeuronDevice) -> bool:
        """Whether the catalogue places this device (unknown types and extra devices: no)."""
        return self.spec is not None and device.index < self.spec.devices
