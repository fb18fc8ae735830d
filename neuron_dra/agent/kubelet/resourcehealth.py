"""Device health for the kubelet: one state, served as DRAResourceHealth v1 and v1alpha1.

Kubernetes 1.34 to 1.36 watch v1alpha1 whenever their ResourceHealthStatus
gate is on; 1.37 watches v1 when the registration advertises it and falls back
to v1alpha1. Both services stream the same state with the same timing, so a
pod's `allocatedResourcesStatus` does not depend on which one its kubelet took.

They are served on the DRA socket, by its synchronous server: a watch keeps one
of its worker threads, woken by an update, by its end, or to resend.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping

import grpc

from api.kubelet.drahealth.v1 import api_pb2 as drahealth_v1
from api.kubelet.drahealth.v1 import api_pb2_grpc as drahealth_v1_grpc
from api.kubelet.drahealth.v1alpha1 import api_pb2 as drahealth_v1alpha1
from api.kubelet.drahealth.v1alpha1 import api_pb2_grpc as drahealth_v1alpha1_grpc

log = logging.getLogger(__name__)

Context = grpc.ServicerContext
# (healthy, detail) by device name, from `telemetry.health.health_entries`. This module
# imports no more than gRPC and the protocols: it is served before the rest is imported.
HealthEntry = tuple[bool, str]

# The kubelet marks health stale after ~30 s without a message; resend well before.
HEALTH_RESEND_S = 10.0
HEALTH_CHECK_TIMEOUT_S = 30


class ResourceHealth(drahealth_v1_grpc.DRAResourceHealthServicer):
    """Streams every device's health to the kubelet: on connect, on change, and periodically."""

    def __init__(self, pool: str) -> None:
        self._pool = pool
        self._devices: dict[str, HealthEntry] = {}
        self._updated = 0
        self._updates = 0  # counts changes, so a stream knows whether it missed one
        self._changed = threading.Condition()
        self._closed = False

    def update(self, devices: Mapping[str, HealthEntry]) -> None:
        with self._changed:
            if devices != self._devices:
                self._devices = dict(devices)
                self._updated = int(time.time())
                self._updates += 1
                self._changed.notify_all()

    def close(self) -> None:
        """End every watch, so that the server's threads are free when it stops."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _wake(self) -> None:
        with self._changed:
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

    def NodeWatchResources(  # noqa: N802 (name fixed by the protocol)
        self, request: drahealth_v1.NodeWatchResourcesRequest, context: Context
    ) -> Iterator[drahealth_v1.NodeWatchResourcesResponse]:
        yield from self.watch("v1", context)

    def watch(
        self, api: str, context: Context
    ) -> Iterator[drahealth_v1.NodeWatchResourcesResponse]:
        # Which version a kubelet chose is otherwise invisible from the node.
        log.info("kubelet watches device health", extra={"api": f"{api}.DRAResourceHealth"})
        # A kubelet that goes away ends the wait at once, not at the next resend.
        context.add_callback(self._wake)
        while context.is_active():
            with self._changed:
                if self._closed:
                    return
                snapshot, seen = self._snapshot(), self._updates
            # Never yield holding the lock: a slow reader would block every update().
            yield snapshot
            with self._changed:
                if self._updates == seen and not self._closed and context.is_active():
                    self._changed.wait(HEALTH_RESEND_S)


class ResourceHealthV1alpha1(drahealth_v1alpha1_grpc.DRAResourceHealthServicer):
    """v1alpha1 is v1 on the wire (same messages, other package), so each v1 message is re-read."""

    def __init__(self, v1: ResourceHealth) -> None:
        self._v1 = v1

    def NodeWatchResources(  # noqa: N802
        self, request: drahealth_v1alpha1.NodeWatchResourcesRequest, context: Context
    ) -> Iterator[drahealth_v1alpha1.NodeWatchResourcesResponse]:
        for response in self._v1.watch("v1alpha1", context):
            yield drahealth_v1alpha1.NodeWatchResourcesResponse.FromString(
                response.SerializeToString()
            )
