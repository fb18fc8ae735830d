"""Claims that fill the nodes of bench/fleet.py, allocated by hand through the status
subresource as the scheduler would (upstream's scheduler_perf fills its clusters the
same way).

A node is filled one of three ways (`HOLDS`): every whole device held by one claim;
or every core taken by claims of 1 core, or of 4 cores of one device, one claim a pod
as users write them. Where the layout withdraws what a held device or core leaves
unallocatable (a held device's cores, a held core's whole device, and the node
device), the node is published again without it, as the agent does once the kubelet
has prepared the claims, and again with it when it is emptied. Where cores are the
devices' capacity (`capacity`), core claims are shares of the devices instead, each
device shared out whole. A fleet state (`STATES`) says which
nodes are filled which way: "full", nine in ten held whole; "core-full-1" and
"core-full-4", nine in ten full of core claims; "mixed", a third held whole, a third
full of 1-core claims and a third free.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fleet import RESOURCE, WORKERS, Api, Fleet, claim_path

from consts import (
    ATTR_RESOURCE_TYPE,
    CAPACITY_CORES,
    DRIVER_NAME,
    RESOURCE_TYPE_CORE,
    RESOURCE_TYPE_DEVICE,
)
from neuron_dra.resources.slices import CoreLayout

Obj = dict[str, Any]
NODE_LABEL = "bench.neuron.aws.com/node"
HOLDS = ("devices", "cores-1", "cores-4")

# state -> how the i-th node of the fleet is filled (None: left free)
STATES: dict[str, Callable[[int], str | None]] = {
    "full": lambda i: "devices" if i % 10 < 9 else None,
    "core-full-1": lambda i: "cores-1" if i % 10 < 9 else None,
    "core-full-4": lambda i: "cores-4" if i % 10 < 9 else None,
    "mixed": lambda i: ("devices", "cores-1", None)[i % 3],
}
CORE_STATES = ("core-full-1", "core-full-4", "mixed")
"""States that need cores published."""


def allocation(
    node: str, devices: list[Obj], request: str = "neurons", share: Obj | None = None
) -> Obj:
    """A claim's status allocating `devices` of `node`'s pool; of a shareable device,
    `share` of its capacity (by default all of it)."""
    results = []
    for device in devices:
        result: Obj = {
            "request": request,
            "driver": DRIVER_NAME,
            "pool": node,
            "device": device["name"],
        }
        if device.get("allowMultipleAllocations"):
            # A whole device taken as one share of all its capacity.
            result["shareID"] = str(uuid.uuid4())
            result["consumedCapacity"] = share or {
                k: c["requestPolicy"]["default"] if "requestPolicy" in c else c["value"]
                for k, c in device["capacity"].items()
            }
        results.append(result)
    return {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }


def of_type(devices: list[Obj], kind: str) -> list[Obj]:
    return [d for d in devices if d["attributes"][ATTR_RESOURCE_TYPE]["string"] == kind]


def core_groups(devices: list[Obj], size: int) -> list[list[Obj]]:
    """The node's cores in claims of `size`, each of one device's cores."""
    by_device: dict[int, list[Obj]] = {}
    for core in of_type(devices, RESOURCE_TYPE_CORE):
        by_device.setdefault(core["attributes"]["deviceId"]["int"], []).append(core)
    return [
        cores[i : i + size]
        for cores in by_device.values()
        for i in range(0, len(cores) - size + 1, size)
    ]


@dataclass
class Filler:
    """Nodes filled by claims allocated by hand, and emptied again."""

    api: Api
    fleet: Fleet
    held: dict[str, str] = field(default_factory=dict)  # node -> how it is filled
    claims: int = 0  # claims holding nodes now

    def fill(self, state: str) -> float:
        """Fill the fleet's nodes as `state` says; seconds it took."""
        started = time.monotonic()
        how = STATES[state]
        want = [
            (n, h)
            for i, n in enumerate(self.fleet.nodes)
            if (h := how(i)) is not None and n not in self.held
        ]
        with ThreadPoolExecutor(WORKERS) as pool:
            self.claims += sum(pool.map(lambda nh: self._hold(*nh), want))
        return time.monotonic() - started

    def _claim(
        self,
        node: str,
        name: str,
        devices: list[Obj],
        class_name: str,
        share: dict[str, str] | None = None,
    ) -> None:
        exactly: Obj = {"deviceClassName": class_name, "count": len(devices)}
        if share:
            exactly["capacity"] = {"requests": share}
        spec = {"devices": {"requests": [{"name": "neurons", "exactly": exactly}]}}
        claim = self.api.call(
            "POST",
            claim_path(),
            {
                "apiVersion": RESOURCE,
                "kind": "ResourceClaim",
                "metadata": {"name": name, "labels": {NODE_LABEL: node}},
                "spec": spec,
            },
        )
        claim["status"] = allocation(node, devices, share=share)
        self.api.call("PUT", claim_path(name) + "/status", claim)

    def _hold(self, node: str, how: str) -> int:
        """Fill `node` as `how` says; the claims it took."""
        devices = self.fleet.devices[self.fleet.kinds[node]]
        if how == "devices":
            self._claim(node, f"fill-{node}", of_type(devices, RESOURCE_TYPE_DEVICE), DRIVER_NAME)
            claims = 1
            if self.fleet.withholds:
                # The kubelet prepares the claim; the agent withdraws the devices' cores.
                inventory = self.fleet.inventories[self.fleet.kinds[node]]
                self.fleet.publish(node, frozenset(d.name for d in inventory.devices))
        elif self.fleet.layout.cores is CoreLayout.CAPACITY:
            claims = self._shares(node, int(how.removeprefix("cores-")))
        else:
            groups = core_groups(devices, int(how.removeprefix("cores-")))
            for i, cores in enumerate(groups):
                self._claim(node, f"fill-{node}-{i}", cores, f"neuroncore.{DRIVER_NAME}")
            claims = len(groups)
            if self.fleet.withholds:
                # Prepared, the cores withdraw their devices.
                self.fleet.publish(node, frozenset(c["name"] for g in groups for c in g))
        self.held[node] = how
        return claims

    def _shares(self, node: str, size: int) -> int:
        """Every device of `node` shared out in claims of `size` logical cores, where
        cores are the devices' capacity; the claims it took."""
        lnc = self.fleet.inventories[self.fleet.kinds[node]].lnc or 1
        whole = of_type(self.fleet.devices[self.fleet.kinds[node]], RESOURCE_TYPE_DEVICE)
        share = {CAPACITY_CORES: str(size * lnc)}
        claims = 0
        for device in whole:
            for k in range(int(device["capacity"][CAPACITY_CORES]["value"]) // (size * lnc)):
                name = f"fill-{node}-{device['name']}-{k}"
                self._claim(node, name, [device], f"neuroncore.{DRIVER_NAME}", share)
                claims += 1
        return claims

    def empty(self) -> float:
        started = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            for _ in pool.map(self._release, sorted(self.held)):
                pass
        self.held.clear()
        self.claims = 0
        return time.monotonic() - started

    def _release(self, node: str) -> None:
        self.api.call("DELETE", claim_path() + f"?labelSelector={NODE_LABEL}%3D{node}")
        if self.fleet.withholds:
            self.fleet.publish(node, frozenset())
