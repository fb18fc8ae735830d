"""The node inventory: an immutable picture of one node's Neuron hardware."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from consts import DEVICE_NAME_PREFIX
from neuron_dra.hardware import topology
from neuron_dra.hardware.instance_types import InstanceType, lookup


@dataclass(frozen=True)
class UltraServer:
    """The node's place in a trn2u UltraServer (4 nodes joined by NeuronLink)."""

    server_id_2: str
    server_id_4: str
    node_id_2: int
    node_id_4: int
    modes: tuple[int, ...]  # supported unit sizes in nodes, e.g. (1, 2, 4)


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    cores: int | None  # physical NeuronCores; None when neither sysfs nor the catalogue says
    neighbours: tuple[int, ...]
    serial_number: str | None = None
    device_name: str | None = None
    # Character device numbers from sysfs `dev`; lets runtimes create the node without a stat.
    major_minor: tuple[int, int] | None = None

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
    spec: InstanceType | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spec = lookup(self.instance_type) if self.instance_type else None
        object.__setattr__(self, "spec", spec)

    def connected_sets(self) -> Mapping[int, tuple[topology.DeviceSet, ...]]:
        """Allowed connected sets by size; only single devices when the type is unknown."""
        if self.spec is None:
            return {1: tuple(frozenset({d.index}) for d in self.devices)}
        return topology.connected_sets(self.spec.shape, self.spec.devices)

    def in_topology(self, device: NeuronDevice) -> bool:
        """Whether the catalogue places this device (unknown types and extra devices: no)."""
        return self.spec is not None and device.index < self.spec.devices
