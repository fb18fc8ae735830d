"""Which namespace, pod, container and claim hold each Neuron device of the node.

The kubelet knows which container was given which DRA device, and says so through
its PodResources API (`<kubelet root>/pod-resources/kubelet.sock`, the dynamic
resources part: beta and on by default from Kubernetes 1.34, GA in 1.36), the
API device monitors have always used to attribute devices to pods. Asking it
costs the API server nothing: this node's kubelet answers from memory.

The answer names DRA devices (`neurondevice3`, `neuroncore12`, `neuronnode`);
`allocation_samples` turns each into the physical devices it covers, so that the
info series it makes join any per-device series on `neuron_device`, and carry the
device's serial number to join series keyed by it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from api.kubelet.podresources.v1 import api_pb2, api_pb2_grpc
from consts import DRIVER_NAME, NODE_DEVICE_NAME
from neuron_dra.agent.options import POD_RESOURCES_INTERVAL_S, RunOptions
from neuron_dra.agent.telemetry.devicemetrics import device_labels
from neuron_dra.agent.telemetry.metrics import Sample
from neuron_dra.hardware import cores
from neuron_dra.hardware.inventory import NeuronDevice, NodeInventory

log = logging.getLogger(__name__)

ALLOCATION_INFO = "neuron_dra_device_allocation_info"
# Series of one node's allocation info at most. A node holds 16 devices (128 logical
# cores) at most, and a container rarely shares one with many others; a node of
# claims shared by hundreds of containers would otherwise make thousands of series
# at every scrape. Rows past the bound are dropped, counted in the log when their
# number changes (not at every scrape).
MAX_ALLOCATION_SERIES = 2048
# A scrape waits this long for the kubelet at most; it answers from memory in ~1 ms.
LIST_TIMEOUT_S = 1.0


@dataclass(frozen=True, order=True)
class Holder:
    """One container holding one DRA device of this driver's pool."""

    namespace: str
    pod: str
    container: str
    claim: str  # the ResourceClaim's name, in `namespace`
    device: str  # the DRA device name


def holders(
    response: api_pb2.ListPodResourcesResponse, driver: str, pool: str
) -> tuple[Holder, ...]:
    """The containers holding devices of `driver`'s `pool`, from a List answer."""
    found = {
        Holder(pod.namespace, pod.name, container.name, claim.claim_name, resource.device_name)
        for pod in response.pod_resources
        for container in pod.containers
        for claim in container.dynamic_resources
        for resource in claim.claim_resources
        if resource.driver_name == driver and resource.pool_name == pool
    }
    return tuple(sorted(found))


def allocation_samples(
    held: Iterable[Holder], inventory: NodeInventory, node: str
) -> tuple[list[Sample], int]:
    """One info sample per (container, physical device): `neuronnode` covers every
    device, a core its device. Devices the inventory does not know are left out.
    With the number of rows dropped past MAX_ALLOCATION_SERIES."""
    samples: dict[tuple[tuple[str, str], ...], Sample] = {}
    dropped = 0
    for holder in held:
        for device in _physical(holder.device, inventory):
            labels = (
                *device_labels(node, device.index),
                ("device", holder.device),
                ("serial_number", device.serial_number or ""),
                ("namespace", holder.namespace),
                ("pod", holder.pod),
                ("container", holder.container),
                ("claim", holder.claim),
            )
            if labels in samples:
                continue
            if len(samples) >= MAX_ALLOCATION_SERIES:
                dropped += 1
                continue
            samples[labels] = Sample(ALLOCATION_INFO, labels, 1.0)
    return list(samples.values()), dropped


def _physical(name: str, inventory: NodeInventory) -> tuple[NeuronDevice, ...]:
    if name == NODE_DEVICE_NAME:
        return inventory.devices
    for device in inventory.devices:
        if device.name == name:
            return (device,)
    core = cores.find(inventory, name)
    return (core.device,) if core is not None else ()


class PodResources:
    """A client of the kubelet's PodResources API; one channel, opened on first use.

    `refresh` asks the kubelet and keeps its answer: `holders` (none while it does not
    answer) and `up`; `samples` are the allocation info series of that answer. An
    answer (or its failure) is kept `max_age_s`: refreshes until then, from any number
    of scrapers, at once or one after the other, ask nothing.
    """

    def __init__(
        self,
        socket: Path,
        driver: str,
        pool: str,
        *,
        max_age_s: float = POD_RESOURCES_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._socket = socket
        self._driver = driver
        self._pool = pool
        self._max_age_s = max_age_s
        self._clock = clock
        self._asked_at: float | None = None
        self._asking = asyncio.Lock()  # one List at a time; those waiting take its answer
        self._channel: grpc.aio.Channel | None = None
        self._failing: str | None = None
        self.up = False  # whether the last List was answered
        self.holders: tuple[Holder, ...] = ()
        self._dropped = 0  # allocation rows left out at the last scrape

    @classmethod
    def of_node(cls, options: RunOptions) -> PodResources:
        """The client of this driver's pool on the node `options` name."""
        return cls(
            options.pod_resources_socket,
            DRIVER_NAME,
            options.node_name,
            max_age_s=options.pod_resources_interval_s,
        )

    def samples(self, inventory: NodeInventory, node: str) -> list[Sample]:
        """The allocation info of the kubelet's last answer; rows past the bound are
        said in the log once each time their number changes, not at every scrape."""
        found, dropped = allocation_samples(self.holders, inventory, node)
        if dropped != self._dropped:
            self._dropped = dropped
            if dropped:
                log.warning(
                    "allocation info capped at %d series; %d left out",
                    MAX_ALLOCATION_SERIES,
                    dropped,
                )
            else:
                log.info("allocation info no longer capped")
        return found

    async def refresh(self, timeout_s: float = LIST_TIMEOUT_S) -> None:
        async with self._asking:
            now = self._clock()
            if self._asked_at is not None and now - self._asked_at < self._max_age_s:
                return
            self._asked_at = now
            found = await self.list(timeout_s)
            self.holders = found if found is not None else ()

    async def list(self, timeout_s: float) -> tuple[Holder, ...] | None:
        """The holders of this pool's devices; None (logged once per cause) when the
        kubelet does not answer."""
        if self._channel is None:
            # The kubelet serves the socket only after it starts: connect lazily, and
            # let gRPC reconnect when the kubelet restarts.
            self._channel = grpc.aio.insecure_channel(f"unix://{self._socket}")
        stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        try:
            response = await stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout_s)
        except grpc.aio.AioRpcError as err:
            self.up = False
            self._report(f"{err.code().name}: {err.details()}")
            return None
        if self._failing is not None:
            log.info("kubelet PodResources API answering again", extra={"path": str(self._socket)})
            self._failing = None
        self.up = True
        return holders(response, self._driver, self._pool)

    def _report(self, cause: str) -> None:
        if cause != self._failing:
            self._failing = cause
            log.warning(
                "kubelet PodResources API not answering (%s): devices are not attributed "
                "to pods until it does",
                cause,
                extra={"path": str(self._socket)},
            )

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
