"""Device health for the kubelet: one state, served as DRAResourceHealth v1 and v1alpha1.

Kubernetes 1.34 to 1.36 watch v1alpha1 whenever their ResourceHealthStatus
gate is on; 1.37 watches v1 when the registration advertises it and falls back
to v1alpha1. Both services stream the same state with the same timing, so a
pod's `allocatedResourcesStatus` does not depend on which one its kubelet took.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc

from api.kubelet.drahealth.v1 import api_pb2 as drahealth_v1
from api.kubelet.drahealth.v1 import api_pb2_grpc as drahealth_v1_grpc
from api.kubelet.drahealth.v1alpha1 import api_pb2 as drahealth_v1alpha1
from api.kubelet.drahealth.v1alpha1 import api_pb2_grpc as drahealth_v1alpha1_grpc
from consts import DEVICE_NAME_PREFIX, NODE_DEVICE_NAME
from neuron_dra.agent.telemetry.health import Problem
from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.inventory import NodeInventory

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
HealthEntry = tuple[bool, str]  # (healthy, detail)

# The kubelet marks health stale after ~30 s without a message; resend well before.
HEALTH_RESEND_S = 10.0
HEALTH_CHECK_TIMEOUT_S = 30


def health_entries(
    inventory: NodeInventory, problems: Mapping[int, Problem]
) -> dict[str, HealthEntry]:
    """Device name -> (healthy, detail) for every device the node publishes."""
    entries = {
        d.name: (d.index not in problems, problems[d.index].kind if d.index in problems else "")
        for d in inventory.devices
    }
    if inventory.ultraserver is not None:
        # Every problem counts, a vanished device's too, as for the whole-node
        # device's taint in the slice: a pod on it uses every device of the node.
        sick = ", ".join(f"{DEVICE_NAME_PREFIX}{i} ({problems[i].kind})" for i in sorted(problems))
        entries[NODE_DEVICE_NAME] = (not problems, f"unhealthy devices: {sick}" if sick else "")
    # A NeuronCore is as healthy as its device (listed whether or not the slices carry
    # cores: the kubelet asks only about devices it prepared).
    entries |= {core.name: entries[core.device.name] for core in logical_cores(inventory)}
    return entries


class ResourceHealth(drahealth_v1_grpc.DRAResourceHealthServicer):
    """Streams every device's health to the kubelet: on connect, on change, and periodically."""

    def __init__(self, pool: str) -> None:
        self._pool = pool
        self._devices: dict[str, HealthEntry] = {}
        self._updated = 0
        self._updates = 0  # counts changes, so a stream knows whether it missed one
        self._changed = asyncio.Condition()

    async def update(self, devices: Mapping[str, HealthEntry]) -> None:
        async with self._changed:
            if devices != self._devices:
                self._devices = dict(devices)
                self._updated = int(time.time())
                self._updates += 1
                self._changed.notify_all()

    def _snapshot(self) -> drahealth_v1.NodeWatchResourcesResponse:
        response = drahealth_v1.NodeWatchResourcesResponse()
        for name, (healthy, message) in sorted(self._devices.items()):
            response.devices.add(
                device=drahealth_v1.DeviceIdentifier(pool_name=self._pool, device_name=name),
                health=drahealth_v1.HEALTHY if healthy else drahealth_v1.UNHEALTHY,
                last_updated_time=self._updated,
                health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_S,
                message=message,
            )
        return response

    async def NodeWatchResources(  # noqa: N802 (name fixed by the protocol)
        self, request: drahealth_v1.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[drahealth_v1.NodeWatchResourcesResponse]:
        async for response in self.watch("v1"):
            yield response

    async def watch(self, api: str) -> AsyncIterator[drahealth_v1.NodeWatchResourcesResponse]:
        # Which version a kubelet chose is otherwise invisible from the node.
        log.info("kubelet watches device health", extra={"api": f"{api}.DRAResourceHealth"})
        while True:
            async with self._changed:
                snapshot, seen = self._snapshot(), self._updates
            # Never yield holding the lock: a slow reader would block every update().
            yield snapshot
            async with self._changed:
                if self._updates == seen:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), HEALTH_RESEND_S)


class ResourceHealthV1alpha1(drahealth_v1alpha1_grpc.DRAResourceHealthServicer):
    """v1alpha1 is v1 on the wire (same messages, other package), so each v1 message is re-read."""

    def __init__(self, v1: ResourceHealth) -> None:
        self._v1 = v1

    async def NodeWatchResources(  # noqa: N802
        self, request: drahealth_v1alpha1.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[drahealth_v1alpha1.NodeWatchResourcesResponse]:
        async for response in self._v1.watch("v1alpha1"):
            yield drahealth_v1alpha1.NodeWatchResourcesResponse.FromString(
                response.SerializeToString()
            )
