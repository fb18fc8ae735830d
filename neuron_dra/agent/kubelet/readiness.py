"""The kubelet's gRPC probes of the plugin pod: liveness and readiness, one
`grpc.health.v1` service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from api.kubelet.grpchealth.v1 import api_pb2 as health_pb
from api.kubelet.grpchealth.v1 import api_pb2_grpc as health_grpc
from neuron_dra.agent.kubelet.sockets import is_socket

Context = grpc.aio.ServicerContext[Any, Any]

READINESS_SERVICE = "readiness"
"""grpc.health.v1 service name of the readiness probe; "" (the default) is liveness."""
HEALTH_SERVICES = ("", READINESS_SERVICE)


class Health(health_grpc.HealthServicer):
    """The kubelet's gRPC probes. Liveness (service ""): serving while the DRA socket is
    up and no long-lived loop of the agent keeps failing. Readiness (service
    READINESS_SERVICE): serving once the kubelet has registered the plugin, until it
    reports a failed registration or the socket is served anew, while every loop runs
    (see `supervisor`), and while `registration_socket` is a socket: the kubelet finds
    the plugin by that file, so a plugin whose file is gone (removed, replaced, or its
    directory) is not ready, whatever else says so, until it is served again."""

    def __init__(self, registration_socket: Path | None = None) -> None:
        self._registration_socket = registration_socket
        self._serving = dict.fromkeys(HEALTH_SERVICES, False)
        self._down: set[str] = set()  # loops waiting to be started again: not ready
        self._failing: set[str] = set()  # loops failing again and again: not live
        self._changed = asyncio.Condition()

    def serving(self, service: str = "") -> bool:
        if service == READINESS_SERVICE and (self._down or not self._socket_served()):
            return False
        if service == "" and self._failing:
            return False
        return self._serving[service]

    def _socket_served(self) -> bool:
        return self._registration_socket is None or is_socket(self._registration_socket)

    async def changed(self) -> None:
        """Wake every Watch: something `serving` reads but does not keep (the socket's
        file) may have changed."""
        async with self._changed:
            self._changed.notify_all()

    async def set_serving(self, serving: bool, service: str = "") -> None:
        async with self._changed:
            self._serving[service] = serving
            self._changed.notify_all()

    async def set_loop(self, name: str, *, down: bool, failing: bool) -> None:
        """What the supervisor knows of one loop of the agent."""
        async with self._changed:
            for names, member in ((self._down, down), (self._failing, failing)):
                if member:
                    names.add(name)
                else:
                    names.discard(name)
            self._changed.notify_all()

    def _status(self, service: str) -> health_pb.HealthCheckResponse:
        if service not in self._serving:
            return health_pb.HealthCheckResponse(
                status=health_pb.HealthCheckResponse.SERVICE_UNKNOWN
            )
        serving = health_pb.HealthCheckResponse.SERVING
        not_serving = health_pb.HealthCheckResponse.NOT_SERVING
        return health_pb.HealthCheckResponse(
            status=serving if self.serving(service) else not_serving
        )

    async def Check(  # noqa: N802
        self, request: health_pb.HealthCheckRequest, context: Context
    ) -> health_pb.HealthCheckResponse:
        if request.service not in self._serving:
            # As grpc.health.v1 says: an unknown service is NOT_FOUND, which a probe
            # reports as a failure naming the status.
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return self._status(request.service)

    async def Watch(  # noqa: N802
        self, request: health_pb.HealthCheckRequest, context: Context
    ) -> AsyncIterator[health_pb.HealthCheckResponse]:
        service = request.service
        while True:
            async with self._changed:
                status = self._status(service)
            yield status  # outside the lock, as in ResourceHealth
            async with self._changed:
                if self._status(service) == status:
                    await self._changed.wait()
