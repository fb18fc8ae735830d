"""What a node's pool must be, derived from the plugin's checkpoint on its own (not with
the agent's code), for the random held-cores test.

A device or core a prepared claim holds keeps its counters in every form: only what
needs a counter it spends is withdrawn (a held device's cores, a held core's whole
device, and the UltraServer node device for either; for a held node device, every whole
device and core), unless a prepared claim has it too (admin access): an allocated device
is never withdrawn. So, on a whole pool:

- at any moment, every published device draws on its counters;
- once the plugin has caught up with its checkpoint, the pool is exactly the node's
  devices less what the held ones withdraw.
"""

from __future__ import annotations

import json
from typing import Any

from consts import CORE_NAME_PREFIX, DEVICE_NAME_PREFIX, NODE_DEVICE_NAME
from neuron_dra_harness.nodes import SimulatedNode
from tests.e2e.test_cores import PER_DEVICE

Obj = dict[str, Any]
DEVICES = 16  # trn2.48xlarge and trn2u.48xlarge alike, LNC 2: 4 logical cores each


def checkpointed(node: SimulatedNode) -> list[Obj]:
    """The devices of the claims the plugin's checkpoint holds prepared."""
    if not node.checkpoint.exists():
        return []
    claims = json.loads(node.checkpoint.read_text())["claims"]
    return [d for claim in claims.values() for d in claim["devices"]]


def held_here(node: SimulatedNode) -> frozenset[str]:
    """Names of the devices, cores and node device prepared claims hold, from the
    checkpoint; admin access holds nothing."""
    return frozenset(d["device"] for d in checkpointed(node) if not d.get("adminAccess"))


def expected_names(node: SimulatedNode, held: frozenset[str], kept: frozenset[str]) -> set[str]:
    """The device names the pool must publish while `held` are prepared (cores too) and
    `kept` prepared at all (admin access too): an allocated device is never withdrawn."""
    ultraserver = node.instance_type.startswith("trn2u")
    if NODE_DEVICE_NAME in held:
        return {NODE_DEVICE_NAME} | kept
    cored = {
        int(name.removeprefix(CORE_NAME_PREFIX)) // PER_DEVICE
        for name in held
        if name.startswith(CORE_NAME_PREFIX)
    }
    # A held core withdraws its device; a device held itself stays.
    whole = {f"{DEVICE_NAME_PREFIX}{i}" for i in range(DEVICES) if i not in cored}
    whole |= {name for name in held if name.startswith(DEVICE_NAME_PREFIX)}
    cores = {
        f"{CORE_NAME_PREFIX}{i * PER_DEVICE + c}"
        for i in range(DEVICES)
        if f"{DEVICE_NAME_PREFIX}{i}" not in held
        for c in range(PER_DEVICE)
    }
    node_device = {NODE_DEVICE_NAME} if ultraserver and not held else set()
    return whole | cores | node_device | kept


def whole_pool(node: SimulatedNode) -> dict[str, Obj] | None:
    """name -> device of the node's pool once it is whole; None while it is rewritten."""
    pool = node.pool()
    if pool is None:
        return None
    return {d["name"]: d for s in pool for d in s["spec"].get("devices") or []}


def counters_missing(devices: dict[str, Obj]) -> list[str]:
    """Published devices that draw on no counter: a held device too keeps its counter,
    so that what the scheduler records at allocation never changes under it."""
    return sorted(name for name, device in devices.items() if not device.get("consumesCounters"))


def cores_beside_their_device_unlinked(devices: dict[str, Obj]) -> list[str]:
    """Published cores whose own device's counter is not among those they draw on."""
    found = []
    for name, device in devices.items():
        if name.startswith(CORE_NAME_PREFIX):
            owner = f"{DEVICE_NAME_PREFIX}{int(name.removeprefix(CORE_NAME_PREFIX)) // PER_DEVICE}"
            counters = {c for use in device.get("consumesCounters") or [] for c in use["counters"]}
            if owner not in counters:
                found.append(name)
    return found


def pool_problems(node: SimulatedNode) -> list[str]:
    """What is wrong with the node's pool at this moment, whatever the checkpoint says."""
    devices = whole_pool(node)
    if devices is None:
        return []
    problems = [f"{name} draws on no counter" for name in counters_missing(devices)]
    problems += [
        f"{name} not on its device's counter"
        for name in cores_beside_their_device_unlinked(devices)
    ]
    return problems


def checkpoint_mismatch(node: SimulatedNode) -> str | None:
    """How the pool differs from what the checkpoint implies; None once it follows."""
    devices = whole_pool(node)
    if devices is None:
        return f"{node.name}'s pool is being rewritten"
    held = held_here(node)
    want = expected_names(node, held, frozenset(d["device"] for d in checkpointed(node)))
    extra, missing = sorted(set(devices) - want), sorted(want - set(devices))
    if extra or missing:
        return f"held {sorted(held)}: published beyond it {extra}, missing {missing}"
    return None
