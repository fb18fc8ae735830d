"""A node's logical NeuronCores: what NEURON_RT_VISIBLE_CORES numbers.

The Neuron runtime numbers logical cores across the host: device k with c
logical cores owns k*c .. k*c+c-1, where c is the device's physical cores over
the node's LNC (trn2 and trn3 fuse two physical cores into one at LNC 2;
other silicon has no LNC and c is its physical cores). The slices publish each
logical core as a device named after that number, and the agent turns a
core's name back into its device and number: one function each way, here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from consts import CORE_NAME_PREFIX
from neuron_dra.hardware.inventory import NeuronDevice, NodeInventory

_NAME = re.compile(rf"{CORE_NAME_PREFIX}(0|[1-9][0-9]*)")


@dataclass(frozen=True)
class LogicalCore:
    device: NeuronDevice
    index: int  # host-global logical core number, as NEURON_RT_VISIBLE_CORES gives it

    @property
    def name(self) -> str:
        """Device name in the ResourceSlice."""
        return core_name(self.index)


def core_name(index: int) -> str:
    return f"{CORE_NAME_PREFIX}{index}"


def per_device(device: NeuronDevice, lnc: int | None) -> int | None:
    """Logical cores of `device` at logical core size `lnc`; None when its cores are unknown."""
    if device.cores is None:
        return None
    return device.cores // (lnc or 1)


def device_cores(device: NeuronDevice, lnc: int | None) -> range | None:
    """The host-global numbers of `device`'s logical cores at size `lnc`."""
    count = per_device(device, lnc)
    if count is None:
        return None
    return range(device.index * count, (device.index + 1) * count)


def logical_cores(inventory: NodeInventory) -> tuple[LogicalCore, ...]:
    """Every logical core of the node at its LNC, by number; none of a device of unknown size."""
    return tuple(
        LogicalCore(device, index)
        for device in inventory.devices
        for index in device_cores(device, inventory.lnc) or ()
    )


def find(inventory: NodeInventory, name: str) -> LogicalCore | None:
    """The core a ResourceSlice device name stands for; None when it is not one of this node."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    index = int(match.group(1))
    for device in inventory.devices:
        numbers = device_cores(device, inventory.lnc)
        if numbers is not None and index in numbers:
            return LogicalCore(device, index)
    return None
