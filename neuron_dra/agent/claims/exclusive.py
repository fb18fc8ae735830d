"""One claim per device: the driver's last check before two workloads share one.

The scheduler allocates each device once, and shared counters keep a NeuronCore
from going out with its device; this catches what went wrong upstream (a stale
allocation, a claim written by hand) at prepare.
"""

from __future__ import annotations

from collections.abc import Iterable

from consts import NODE_DEVICE_NAME
from neuron_dra.agent.claims.plan import ClaimError, Holding, PreparedClaim, format_cores
from neuron_dra.hardware import cores as logical
from neuron_dra.hardware.inventory import NodeInventory


def check_exclusive(
    prepared: PreparedClaim, held: Iterable[Holding], inventory: NodeInventory
) -> None:
    """Refuse a device that another claim holds, unless either side has admin access.

    The scheduler allocates each device once, and shared counters keep a NeuronCore
    from going out with its device, so this only fires when something went wrong
    upstream (a stale allocation, a claim written by hand); the driver is the last
    place that can stop two unrelated workloads from sharing a device. `neuronnode`
    is every device of the node, a Neuron device every one of its cores.
    """
    ours = [d for d in prepared.devices if not d.admin_access]
    for holding in held:
        if holding.admin_access or holding.claim.uid == prepared.claim.uid:
            continue
        theirs = _footprint(holding.device, inventory)
        for device in ours:
            if device.pool != holding.pool:
                continue
            shared = _footprint(device.device, inventory) & theirs
            if device.device == holding.device:
                what = f"device {device.device} is already prepared for claim {holding.claim}"
            elif shared:
                what = (
                    f"device {device.device} and device {holding.device}, already prepared "
                    f"for claim {holding.claim}, share {_describe(shared, inventory)}"
                )
            else:
                continue
            raise ClaimError(
                f"claim {prepared.claim}: {what}; a Neuron device or NeuronCore serves one claim "
                "at a time unless a request has adminAccess"
            )


_WHOLE = -1  # in a footprint: a device whose cores are unknown


def _footprint(device: str, inventory: NodeInventory) -> set[tuple[int, int]]:
    """(Neuron device, logical core) pairs a published device stands for, at the node's LNC."""
    if device == NODE_DEVICE_NAME:
        whole = inventory.devices
    else:
        core = logical.find(inventory, device)
        if core is not None:
            return {(core.device.index, core.index)}
        whole = tuple(d for d in inventory.devices if d.name == device)
    return {
        (d.index, number)
        for d in whole
        for number in logical.device_cores(d, inventory.lnc) or (_WHOLE,)
    }


def _describe(shared: set[tuple[int, int]], inventory: NodeInventory) -> str:
    """`/dev/neuron2, /dev/neuron3 (core 13)`: a device, or the cores of it shared."""
    parts = []
    for device in inventory.devices:
        numbers = sorted(n for i, n in shared if i == device.index)
        if not numbers:
            continue
        path = device.dev_path
        if numbers == [_WHOLE] or numbers == list(
            logical.device_cores(device, inventory.lnc) or ()
        ):
            parts.append(path)
        else:
            parts.append(f"{path} (core{'s' if len(numbers) > 1 else ''} {format_cores(numbers)})")
    return ", ".join(parts)
