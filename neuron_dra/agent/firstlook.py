"""The agent's first look at the node: its devices, its boot id, the health counters'
baselines. Blocking reads of sysfs, run off the event loop with a deadline: a read
that hangs there ends the start with an error naming it (the kubelet restarts the
container, and its log says why) instead of holding up the event loop, and the
kubelet's registration and probes with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from neuron_dra.agent.files.offloop import READ_DEADLINE_S, Watched, bounded
from neuron_dra.agent.options import RunOptions
from neuron_dra.agent.telemetry.health import HealthMonitor
from neuron_dra.agent.telemetry.mounts import Check, check_root
from neuron_dra.hardware.discovery import Discovery, boot_id, discover, log_findings
from neuron_dra.hardware.inventory import NodeInventory

log = logging.getLogger("neuron_dra")

Discover = Callable[[Path], Discovery]


class NodeUnreadableError(RuntimeError):
    """The first look at the node did not finish: the agent cannot start."""


@dataclass(frozen=True)
class FirstLook:
    """What the agent reads of the node before anything else: blocking reads."""

    inventory: NodeInventory
    boot_id: str | None
    health: HealthMonitor
    read_only_mounts: tuple[Check, ...]  # the host mounts meant read-only all the way down


def first_look(options: RunOptions, discover_node: Discover = discover) -> FirstLook:
    inventory = read_inventory(options.sysfs_root, discover_node)
    found = boot_id(options.sysfs_root)
    if found is None:
        log.warning(
            "no boot id: prepared state cannot be told apart across reboots, so every "
            "checkpoint write is fsynced"
        )
    health = HealthMonitor(
        options.sysfs_root,
        [d.index for d in inventory.devices],
        kmsg=options.kmsg or options.sysfs_root / "dev" / "kmsg",
        recovery_s=options.health_recovery_s,
        heartbeat_timeout_s=options.health_heartbeat_timeout_s,
        serials={d.index: d.serial_number for d in inventory.devices},
    )
    return FirstLook(inventory, found, health, check_root(options.sysfs_root, options.mountinfo))


def read_inventory(root: Path, discover_node: Discover) -> NodeInventory:
    result = discover_node(root)
    log_findings(result.findings, log)
    return result.inventory


async def look_at_node(
    options: RunOptions,
    discover_node: Discover = discover,
    deadline_s: float = READ_DEADLINE_S,
) -> FirstLook:
    """`first_look` off the event loop; NodeUnreadableError past `deadline_s`."""
    try:
        return await bounded(
            lambda: first_look(options, discover_node), deadline_s, "neuron-dra-discovery"
        )
    except TimeoutError:
        raise NodeUnreadableError(
            f"the node's Neuron devices were not read within {deadline_s:.0f} s: a read "
            f"under {options.sysfs_root} hangs; the agent cannot start"
        ) from None


def watched_rediscovery(look_again: Callable[[], NodeInventory]) -> Watched[NodeInventory]:
    """Each later look at the node (`look_again`), off the loop with the first look's
    deadline, reported while it hangs."""
    return Watched(
        look_again,
        "neuron-dra-rediscovery",
        what="rediscovery",
        cause="a sysfs read hangs",
        meanwhile="the devices stay as last found until it ends",
        recovered="the devices are followed again",
    )
