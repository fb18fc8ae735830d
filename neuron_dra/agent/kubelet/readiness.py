"""The plugin pod's liveness and readiness: one `grpc.health.v1` service, and the
gRPC server on the pod IP that answers it for `neuron-dra doctor`.

The kubelet's probes ask the same `Health` over the pod's abstract unix socket
(`probesocket`), which no other pod can reach: a gRPC probe of the pod IP shares
the server's connections with every pod the network lets through (see
docs/contributors/decisions.md). A gRPC health client calls `Check`, one
connection per call, so that is all the server serves: `Watch` is not registered
(the server answers UNIMPLEMENTED without running any of ours). The port is
reachable from any pod that the chart's NetworkPolicy does not keep out, so the
server is bounded too: connections, calls at once, streams per connection, and how
long a connection may stay idle or open. Measured by `test_probe_server` on 2
cores: unbounded, 2,000 connections held open took the plugin from 38 to 93 MiB,
and 3,000 `Watch` streams to 99 MiB; bounded, 42 and 41 MiB. A flood that fills
the connections makes `doctor`'s checks fail while it lasts (UNAVAILABLE) instead
of the plugin's memory limit killing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from api.kubelet.grpchealth.v1 import api_pb2 as health_pb
from neuron_dra.agent.kubelet.sockets import is_socket

Context = grpc.aio.ServicerContext[Any, Any]

READINESS_SERVICE = "readiness"
"""grpc.health.v1 service name of the readiness probe; "" (the default) is liveness."""
HEALTH_SERVICES = ("", READINESS_SERVICE)
HEALTH_SERVICE_NAME = "grpc.health.v1.Health"

# Bounds of the gRPC server. A client opens one connection per check (doctor asks both
# services) and closes it after one Check; the bounds leave room for checks that overlap
# a slow answer, and cap what anyone else can hold open.
MAX_CONNECTIONS = 128
MAX_CALLS = 16  # Checks at once over all connections; more are RESOURCE_EXHAUSTED
MAX_STREAMS_PER_CONNECTION = 4
# A connection is closed after this long without a call, and any connection after
# MAX_CONNECTION_AGE_S (its calls get the grace to finish): a client that opens
# connections and holds them frees its slots within seconds.
MAX_IDLE_S = 10
MAX_CONNECTION_AGE_S = 30
CONNECTION_AGE_GRACE_S = 5


class Health:
    """The kubelet's gRPC probes. Liveness (service ""): serving while the DRA socket is
    up (served, and `dra_socket` still a socket: the kubelet calls the plugin at that
    file, and a plugin whose file is gone is restarted, which serves it anew) and no
    long-lived loop of the agent keeps failing. Readiness (service
    READINESS_SERVICE): serving once the kubelet has registered the plugin, until it
    reports a failed registration or the socket is served anew, while every loop runs
    (see `supervisor`), and while `registration_socket` is a socket: the kubelet finds
    the plugin by that file, so a plugin whose file is gone (removed, replaced, or its
    directory) is not ready, whatever else says so, until it is served again."""

    def __init__(
        self, registration_socket: Path | None = None, dra_socket: Path | None = None
    ) -> None:
        self._registration_socket = registration_socket
        self._dra_socket = dra_socket
        self._serving = dict.fromkeys(HEALTH_SERVICES, False)
        self._down: set[str] = set()  # loops waiting to be started again: not ready
        self._failing: set[str] = set()  # loops failing again and again: not live

    def serving(self, service: str = "") -> bool:
        if service == READINESS_SERVICE and (self._down or not _present(self._registration_socket)):
            return False
        if service == "" and (self._failing or not _present(self._dra_socket)):
            return False
        return self._serving[service]

    def set_serving(self, serving: bool, service: str = "") -> None:
        self._serving[service] = serving

    def set_loop(self, name: str, *, down: bool, failing: bool) -> None:
        """What the supervisor knows of one loop of the agent."""
        for names, member in ((self._down, down), (self._failing, failing)):
            if member:
                names.add(name)
            else:
                names.discard(name)

    async def Check(  # noqa: N802 (name fixed by the protocol)
        self, request: health_pb.HealthCheckRequest, context: Context
    ) -> health_pb.HealthCheckResponse:
        if request.service not in self._serving:
            # As grpc.health.v1 says: an unknown service is NOT_FOUND, which a probe
            # reports as a failure naming the status.
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        serving = health_pb.HealthCheckResponse.SERVING
        not_serving = health_pb.HealthCheckResponse.NOT_SERVING
        return health_pb.HealthCheckResponse(
            status=serving if self.serving(request.service) else not_serving
        )


def _present(socket: Path | None) -> bool:
    return socket is None or is_socket(socket)


def probe_server(health: Health) -> grpc.aio.Server:
    """A server of `health.Check` alone, within the bounds above; the caller adds its port."""
    server = grpc.aio.server(
        maximum_concurrent_rpcs=MAX_CALLS,
        options=(
            ("grpc.max_allowed_incoming_connections", MAX_CONNECTIONS),
            ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
            ("grpc.max_connection_idle_ms", MAX_IDLE_S * 1000),
            ("grpc.max_connection_age_ms", MAX_CONNECTION_AGE_S * 1000),
            ("grpc.max_connection_age_grace_ms", CONNECTION_AGE_GRACE_S * 1000),
            ("grpc.max_receive_message_length", 1024),  # a request names one service
        ),
    )
    check = grpc.unary_unary_rpc_method_handler(
        health.Check,
        request_deserializer=health_pb.HealthCheckRequest.FromString,
        response_serializer=health_pb.HealthCheckResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(HEALTH_SERVICE_NAME, {"Check": check}),)
    )
    return server
