"""NodeInventory -> the resource.k8s.io/v1 ResourceSlices the driver publishes.

A pure function: same inventory and options, same slices, byte for byte, so
the publisher can compare desired and actual state without noise.

UltraServer nodes also publish one `neuron_node` device standing for the
whole node, and where asked each logical NeuronCore is a device too. A core,
its device and the node device must never go to two claims: with partitionable
devices (shared counters) every kind draws on one counter per Neuron device,
holding its logical cores, so the scheduler itself keeps them apart. Where the
cluster does not serve counters, cores are not published and the operator
chooses per node which of the other two kinds to publish.

The layout, for the largest node (trn2u.48xlarge at LNC 1: 16 devices, 128
cores, the node device) and the 1.35+ limits: one counter set of 16 counters
(at most 8 sets per slice, 32 counters per set); each device draws on one set
(at most 2), the node device on all 16 counters of it in one consumption (at
most 32 counters per consumption); 145 devices in slices of 64, the limit once
devices consume counters, after the counter slice: 4 slices.

The allocator walks a pool's slices in name order, first fit, running each request's
selectors on every free device it meets: each slice's generated name starts with its
place, and whole devices come before every core, so a whole-device claim stops before
the cores, and a class that matches both kinds hands out whole devices first.
`SliceOptions.core_leads` puts the first core ahead of them instead: measured, not
published (docs/contributors/decisions.md). What shares a counter a prepared claim
spends is left out (`SliceOptions.held`);
every published device always draws on its counters, held or not, so whatever rule the
allocator follows for an allocated device's consumption (the slice as it is now, or as
it was when the device was allocated) gives the same answer.

Where the counters go depends on the Kubernetes release (see
`limits.CounterLayout`): beside the devices in the pool's first slice (1.34), or
in a slice of their own ahead of the device slices (1.35 on). The agent learns
which one the API server accepts; the builder only lays the pool out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from consts import (
    ATTR_DEVICE_ID,
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    COUNTER_SET_NODE,
    DRIVER_NAME,
    NODE_DEVICE_NAME,
)
from neuron_dra.hardware import cores as logical
from neuron_dra.hardware import devicegroups
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources import limits
from neuron_dra.resources.devices import core_device, node_device, whole_device
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.nodetopology import NodeTopology
from neuron_dra.resources.taints import (
    Notice,
    Unhealthy,
    device_taints,
    earliest_per_key,
    first_seen,
)

Json = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"


class CoreLayout(StrEnum):
    """How logical NeuronCores are published."""

    OFF = "off"  # whole devices only
    PARTITIONS = "partitions"  # each core a device, kept apart from its device by counters
    # Each device shareable (consumable capacity, KEP-5075), a claim taking a number of its
    # physical cores. Measured by bench/scale.py, not published by the agent (docs/contributors/
    # decisions.md and fleet-scale.md): the 1.37 allocator scans every share in
    # the cluster per device.
    CAPACITY = "capacity"


class UltraServerDevices(StrEnum):
    """Which devices an UltraServer node publishes."""

    BOTH = "both"  # devices and the whole-node device, exclusive through shared counters
    NODE = "node"  # only the whole-node device (UltraServerConfig workloads)
    DEVICES = "devices"  # only the individual devices


@dataclass(frozen=True)
class SliceOptions:
    node_name: str
    node_uid: str | None = None  # owner reference to the Node, when known
    generation: int = 1
    ultraserver_devices: UltraServerDevices = UltraServerDevices.BOTH
    unhealthy: tuple[Unhealthy, ...] = ()
    # Where the API server drops device taints, unhealthy devices are withdrawn instead.
    device_taints: bool = True
    # Only pools with shared counters differ by layout. The 1.34 layout by default: what
    # the callers publishing slices themselves (tests, tools) have always been given; the
    # agent sets the layout its API server accepts.
    counter_layout: CounterLayout = CounterLayout.BESIDE_DEVICES
    # Each logical NeuronCore as a device too; they need shared counters, so only where the
    # API server keeps them (the agent asks it).
    cores: bool | CoreLayout = False
    # Names of the devices (the node device and cores too) prepared on this node. What
    # could not be allocated beside them is not published: a held device's cores and
    # node device, a held core's whole device and node device (its counter is partly
    # spent, and they need all of it). The counters refuse them anyway, yet every pod
    # the scheduler places would evaluate its selectors on them, on every scan. A held
    # device itself is published as ever, with its counters: were its consumption to
    # change while it is allocated, an allocator that records consumption when it
    # allocates would count it wrong (docs/contributors/decisions.md).
    # So an adminAccess request cannot have a held device that has counters while the
    # allocator charges admin requests for counters (it does up to 1.38).
    held: frozenset[str] = frozenset()
    # Names of the devices (cores too) a prepared claim on this node has, admin access
    # too: published whatever they share a counter with. An allocated device must stay
    # published: an allocator that fails closed stops handing out the pool's counters on
    # the node when one goes missing.
    kept: frozenset[str] = frozenset()
    # Where the node sits in the EC2 network, from its Node object's labels.
    topology: NodeTopology = field(default_factory=NodeTopology)
    # Informational taints (effect None), published as given: the caller passes none
    # where the API server drops or refuses them.
    notices: tuple[Notice, ...] = ()
    # The first published core ahead of the whole devices in the allocator's walk (see
    # the module's docstring); False, as published: every core after them.
    core_leads: bool = False

    @property
    def core_layout(self) -> CoreLayout:
        """`cores` as a layout: True is the agent's, partitions."""
        if isinstance(self.cores, CoreLayout):
            return self.cores
        return CoreLayout.PARTITIONS if self.cores else CoreLayout.OFF


def build_slices(inventory: NodeInventory, options: SliceOptions) -> list[Json]:
    ultraserver = inventory.ultraserver
    publish_node = ultraserver is not None and options.ultraserver_devices in (
        UltraServerDevices.BOTH,
        UltraServerDevices.NODE,
    )
    publish_devices = not publish_node or options.ultraserver_devices is UltraServerDevices.BOTH
    partitions = options.core_layout is CoreLayout.PARTITIONS
    cores = logical.logical_cores(inventory) if partitions and publish_devices else ()
    counters = bool(inventory.devices) and ((publish_node and publish_devices) or bool(cores))
    withdrawn = (
        _withdrawn(inventory, cores, options.held, options.kept) if counters else _Withdrawn()
    )
    published_cores = [
        c for c in cores if c.device.index not in withdrawn.cores_of or c.name in options.kept
    ]

    ids = devicegroups.group_ids(inventory)
    sick = {u.device: u for u in options.unhealthy}
    noticed: dict[int, list[Notice]] = {}
    for notice in options.notices:
        noticed.setdefault(notice.device, []).append(notice)
    devices = []
    if publish_devices:
        devices = [
            _tainted(
                whole_device(inventory, d, ids.get(d.index, {}), options.topology),
                sick.get(d.index),
                noticed.get(d.index, ()),
            )
            for d in inventory.devices
            if (options.device_taints or d.index not in sick) and d.name not in withdrawn.names
        ]
    if (
        publish_node
        and ultraserver is not None
        and (options.device_taints or not sick)
        and NODE_DEVICE_NAME not in withdrawn.names
    ):
        # The whole node is only as healthy as its devices, since the first of them failed:
        # a later failure must not move its taint's value or time.
        first = min(sick.values(), key=first_seen, default=None)
        node = node_device(inventory, ultraserver, options.topology)
        devices.append(_tainted(node, first, earliest_per_key(options.notices)))
    before_cores = len(devices)
    # A core is as healthy as its device.
    devices += [
        _tainted(
            core_device(inventory, core, ids.get(core.device.index, {}), options.topology),
            sick.get(core.device.index),
            noticed.get(core.device.index, ()),
        )
        for core in published_cores
        if options.device_taints or core.device.index not in sick
    ]
    if options.core_leads and len(devices) > before_cores:
        devices.insert(0, devices.pop(before_cores))
    if options.core_layout is CoreLayout.CAPACITY:
        for device in devices:
            if device["name"] != NODE_DEVICE_NAME:
                _shareable(device, inventory.lnc)
    if counters:
        pool = _Counters(inventory, cores=bool(cores))
        for device in devices:
            device["consumesCounters"] = pool.consumption(device)

    per_slice = limits.MAX_DEVICES
    if counters:
        # Beside devices (1.34) one counter set cannot serve devices of other slices: only
        # the 128 devices that fit beside it can use it, which no Neuron node passes
        # without its cores.
        per_slice = limits.COUNTER_RULES[options.counter_layout].max_devices
    elif any("taints" in d for d in devices):
        per_slice = limits.MAX_DEVICES_WITH_TAINTS_OR_COUNTERS
    chunks = [devices[i : i + per_slice] for i in range(0, len(devices), per_slice)] or [[]]
    contents: list[Json] = [{"devices": chunk} for chunk in chunks]
    if counters and options.counter_layout is CounterLayout.OWN_SLICE:
        # No `devices` key at all: an empty list beside counters is refused too.
        contents.insert(0, {"sharedCounters": pool.shared()})
    elif counters:
        contents[0]["sharedCounters"] = pool.shared()
    return [_slice(options, i, len(contents), content) for i, content in enumerate(contents)]


@dataclass(frozen=True)
class _Withdrawn:
    """What could not be allocated beside what is held, and so is left out."""

    cores_of: frozenset[int] = frozenset()  # device indexes whose cores are left out
    names: frozenset[str] = frozenset()  # whole devices left out, the node device too


def _withdrawn(
    inventory: NodeInventory,
    cores: Sequence[logical.LogicalCore],
    held: frozenset[str],
    kept: frozenset[str],
) -> _Withdrawn:
    """A held device or core keeps its place and its counters; what needs a counter it
    spends goes, in one generation, and comes back in one: a held device's cores, a held
    core's whole device (a device's other cores stay: their shares are free), and the
    node device for either. What a prepared claim on this node has (`kept`) stays,
    whatever it shares a counter with."""
    if NODE_DEVICE_NAME in held:
        every = frozenset(d.index for d in inventory.devices)
        return _Withdrawn(every, frozenset(d.name for d in inventory.devices) - held - kept)
    whole = frozenset(d.index for d in inventory.devices if d.name in held)
    cored = frozenset(c.device.index for c in cores if c.name in held)
    names = {d.name for d in inventory.devices if d.index in cored - whole}
    if whole or cored:
        names.add(NODE_DEVICE_NAME)
    return _Withdrawn(whole, frozenset(names) - kept)


def _shareable(device: Json, lnc: int | None) -> None:
    """Make `device` allocatable to several claims, each taking some of its physical
    cores in steps of one logical core; a claim that names no amount takes them all,
    so whole-device requests stay exclusive. Memory is not divided."""
    capacity = device.get("capacity", {})
    cores = capacity.get(CAPACITY_CORES)
    if cores is None:
        return
    step = str(lnc or 1)
    device["allowMultipleAllocations"] = True
    cores["requestPolicy"] = {
        "default": cores["value"],
        "validRange": {"min": step, "max": cores["value"], "step": step},
    }
    if CAPACITY_MEMORY in capacity:
        capacity[CAPACITY_MEMORY]["requestPolicy"] = {"default": "0", "validRange": {"min": "0"}}


class _Counters:
    """The pool's shared counters: one per Neuron device, in sets of at most 32."""

    def __init__(self, inventory: NodeInventory, *, cores: bool) -> None:
        per_set = limits.MAX_COUNTERS_PER_SET
        self._devices = inventory.devices
        self._set = {
            d.index: _counter_set_name(i // per_set) for i, d in enumerate(inventory.devices)
        }
        self._by_name = {d.name: d for d in inventory.devices}
        # What a whole device is worth: its logical cores when they are devices too.
        self._units = {
            d.index: (logical.per_device(d, inventory.lnc) or 1) if cores else 1
            for d in inventory.devices
        }

    def shared(self) -> list[Json]:
        sets: dict[str, Json] = {}
        for device in self._devices:
            counters = sets.setdefault(self._set[device.index], {})
            counters[device.name] = {"value": str(self._units[device.index])}
        return [{"name": name, "counters": counters} for name, counters in sets.items()]

    def consumption(self, published: Json) -> list[Json]:
        name = published["name"]
        if name == NODE_DEVICE_NAME:
            taken = {d.index: self._units[d.index] for d in self._devices}
        elif name in self._by_name:
            index = self._by_name[name].index
            taken = {index: self._units[index]}
        else:
            taken = {published["attributes"][ATTR_DEVICE_ID]["int"]: 1}  # a core
        by_set: dict[str, Json] = {}
        for device in self._devices:
            if device.index in taken:
                counters = by_set.setdefault(self._set[device.index], {})
                counters[device.name] = {"value": str(taken[device.index])}
        return [{"counterSet": s, "counters": counters} for s, counters in by_set.items()]


def _counter_set_name(number: int) -> str:
    return COUNTER_SET_NODE if number == 0 else f"{COUNTER_SET_NODE}-{number}"


def _tainted(device: Json, unhealthy: Unhealthy | None, notices: Sequence[Notice]) -> Json:
    taints = device_taints(unhealthy, notices)
    if taints:
        device["taints"] = taints
    return device


def _slice(options: SliceOptions, position: int, count: int, content: Json) -> Json:
    """Slice `position` of the pool's `count`; `content` holds its devices or its shared
    counters.

    The allocator walks a pool's slices in name order and takes the first devices that
    fit, so the position leads the generated name: the walk is the order of
    `build_slices`' devices.
    """
    metadata: Json = {"generateName": slice_prefix(options.node_name, position)}
    if options.node_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": options.node_name,
                "uid": options.node_uid,
                "controller": True,
            }
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": options.node_name,
            "pool": {
                "name": options.node_name,
                "generation": options.generation,
                "resourceSliceCount": count,
            },
            **content,
        },
    }


def slice_prefix(node: str, position: int) -> str:
    """The generated name's fixed part of slice `position` of `node`'s pool."""
    return f"{node}-{DRIVER_NAME}-{position}-"
