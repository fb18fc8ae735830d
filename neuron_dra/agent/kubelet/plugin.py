"""The kubelet side of the plugin: registration and DRA gRPC services on unix sockets.

The kubelet finds the plugin through the registration socket in its
plugins_registry directory, asks GetInfo for the DRA socket and the versions
spoken, then calls NodePrepareResources / NodeUnprepareResources there and
watches device health (`resourcehealth`). A kubelet restart re-reads the
registry directory; if the registration socket vanishes (a cleaned directory)
it is served again.

Socket names and stale sockets are `sockets`'; the probes' health service is
`readiness`'.

The DRA socket is served by grpcio's synchronous server: each call runs in one
of its worker threads from request to answer, with no hop to the event loop and
back (the measurements: docs/contributors/performance.md, "The threading model").
The registration and probe sockets, called a few times an hour, stay on the
event loop with the rest of the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sized
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from api.kubelet.dra.v1 import api_pb2 as dra_v1
from api.kubelet.dra.v1 import api_pb2_grpc as dra_v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as dra_v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from api.kubelet.drahealth.v1 import api_pb2_grpc as drahealth_v1_grpc
from api.kubelet.drahealth.v1alpha1 import api_pb2_grpc as drahealth_v1alpha1_grpc
from api.kubelet.pluginregistration.v1 import api_pb2 as reg_pb
from api.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from consts import DRIVER_NAME
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.limits import MAX_CLAIMS_PER_CALL
from neuron_dra.agent.files.dirs import PLUGIN_DIR_MODE, ensure_dir
from neuron_dra.agent.kubelet.probesocket import serve_probes
from neuron_dra.agent.kubelet.readiness import READINESS_SERVICE, Health, probe_server
from neuron_dra.agent.kubelet.resourcehealth import ResourceHealth, ResourceHealthV1alpha1
from neuron_dra.agent.kubelet.sockets import is_socket, remove_stale_sockets, socket_paths

if TYPE_CHECKING:
    # Only for types: the kubelet side is served before the preparer is imported.
    from neuron_dra.agent.claims.preparer import Outcome, Preparer

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
SyncContext = grpc.ServicerContext

PLUGIN_TYPE = "DRAPlugin"
# The kubelet takes the first DRA version in this list that it speaks, so the newest
# comes first. Kubelets skip entries they do not know: up to 1.36 they ignore the health
# entries (and watch v1alpha1 when their gate is on); 1.37 takes v1 over v1alpha1 by its
# own preference, which this order repeats.
SUPPORTED_VERSIONS = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)
SOCKET_CHECK_INTERVAL_S = 1.0
# Worker threads of the DRA server: calls at once (the kubelet prepares the pods it
# starts side by side) plus the kubelet's device-health watch, which keeps one.
DRA_WORKERS = 16
MAX_WAITING_CALLS = 256


class DraV1(dra_v1_grpc.DRAPluginServicer):
    """The kubelet's DRA v1 service: its prepare and unprepare calls, answered by the
    preparer.

    grpcio's synchronous server calls it, each call in one of its `DRA_WORKERS` threads
    from request to answer and calls side by side. A call that comes before the
    preparer is served (`serve`, from the event loop once the checkpoint is read) waits
    for it, and once `refuse`d is answered with that error; a call with more claims than
    `MAX_CLAIMS_PER_CALL` is refused whole before anything is touched. It keeps no state
    of claims: idempotency and what survives a crash are the preparer's.
    """

    def __init__(self, preparer: Preparer | None) -> None:
        self._preparer = preparer
        self._refusal = ""
        self._ready = threading.Event()
        if preparer is not None:
            self._ready.set()

    def serve(self, preparer: Preparer) -> None:
        """Answer claims from now on; calls that came earlier were waiting for this."""
        self._preparer = preparer
        self._ready.set()

    def refuse(self, error: str) -> None:
        """Unless claims are served already: answer every call that waits, and every
        later one, with `error` (the agent stops before it could serve them)."""
        if self._preparer is None:
            self._refusal = error
            self._ready.set()

    def _ready_preparer(self) -> Preparer | None:
        """The preparer once it is served; None once refused."""
        self._ready.wait()
        return self._preparer

    def NodePrepareResources(  # noqa: N802 (name fixed by the protocol)
        self, request: dra_v1.NodePrepareResourcesRequest, context: SyncContext
    ) -> dra_v1.NodePrepareResourcesResponse:
        response = dra_v1.NodePrepareResourcesResponse()
        error = _too_many(request.claims, "NodePrepareResources", "prepared")
        preparer = None if error else self._ready_preparer()
        if preparer is None:
            for claim in request.claims:
                response.claims[claim.uid].error = error or self._refusal
            return response
        outcomes = preparer.prepare(_refs(request.claims))
        for uid, outcome in outcomes.items():
            entry = response.claims[uid]
            if outcome.error:
                entry.error = outcome.error
            for device in outcome.devices:
                entry.devices.add(
                    request_names=device.request_names,
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=device.cdi_device_ids,
                )
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: dra_v1.NodeUnprepareResourcesRequest, context: SyncContext
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        error = _too_many(request.claims, "NodeUnprepareResources", "unprepared")
        preparer = None if error else self._ready_preparer()
        if preparer is None:
            answer = dra_v1.NodeUnprepareResourceResponse(error=error or self._refusal)
            return dra_v1.NodeUnprepareResourcesResponse(
                claims={c.uid: answer for c in request.claims}
            )
        outcomes = preparer.unprepare(_refs(request.claims))
        return dra_v1.NodeUnprepareResourcesResponse(
            claims={uid: _unprepared(o) for uid, o in outcomes.items()}
        )


class DraV1beta1(dra_v1beta1_grpc.DRAPluginServicer):
    """The DRA v1beta1 service of 1.33 kubelets: `DraV1`'s calls, with its contract.

    v1beta1 is v1 on the wire (v1 only adds fields), so requests are re-read as v1 and
    answered by the same `DraV1`, in the same worker thread.
    """

    def __init__(self, v1: DraV1) -> None:
        self._v1 = v1

    def NodePrepareResources(  # noqa: N802
        self, request: dra_v1beta1.NodePrepareResourcesRequest, context: SyncContext
    ) -> dra_v1beta1.NodePrepareResourcesResponse:
        as_v1 = dra_v1.NodePrepareResourcesRequest.FromString(request.SerializeToString())
        response = self._v1.NodePrepareResources(as_v1, context)
        return dra_v1beta1.NodePrepareResourcesResponse.FromString(response.SerializeToString())

    def NodeUnprepareResources(  # noqa: N802
        self, request: dra_v1beta1.NodeUnprepareResourcesRequest, context: SyncContext
    ) -> dra_v1beta1.NodeUnprepareResourcesResponse:
        as_v1 = dra_v1.NodeUnprepareResourcesRequest.FromString(request.SerializeToString())
        response = self._v1.NodeUnprepareResources(as_v1, context)
        return dra_v1beta1.NodeUnprepareResourcesResponse.FromString(response.SerializeToString())


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, dra_socket: Path, health: Health | None = None) -> None:
        self._dra_socket = dra_socket
        self._health = health
        self.registered = asyncio.Event()

    def set_registered(self, registered: bool) -> None:
        """The kubelet's verdict, mirrored in the readiness service."""
        if registered:
            self.registered.set()
        else:
            self.registered.clear()
        if self._health is not None:
            self._health.set_serving(registered, READINESS_SERVICE)

    async def GetInfo(  # noqa: N802
        self, request: reg_pb.InfoRequest, context: Context
    ) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER_NAME,
            endpoint=str(self._dra_socket),
            supported_versions=SUPPORTED_VERSIONS,
        )

    async def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg_pb.RegistrationStatus, context: Context
    ) -> reg_pb.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("registered with the kubelet", extra={"socket": str(self._dra_socket)})
        else:
            log.error("the kubelet refused registration: %s", request.error)
        self.set_registered(request.plugin_registered)
        return reg_pb.RegistrationStatusResponse()


class KubeletPlugin:
    """Owns the sockets: DRA first, then registration, so the kubelet never finds a dead end."""

    def __init__(
        self,
        preparer: Preparer | None,
        *,
        pool: str,
        registrar_dir: Path,
        plugins_dir: Path,
        pod_uid: str | None = None,
        health_port: int | None = None,
        health_address: str = "127.0.0.1",
        probe_socket: str | None = None,
    ) -> None:
        self.registration_socket, self.dra_socket = socket_paths(
            registrar_dir, plugins_dir, pod_uid
        )
        # None: the sockets are served before the rest of the agent is imported and the
        # checkpoint loaded (start-up is mostly imports); `serve_claims` ends the wait.
        self._dra = DraV1(preparer)
        self.resource_health = ResourceHealth(pool)
        self.health = Health(self.registration_socket, self.dra_socket)
        self.registration = Registration(self.dra_socket, self.health)
        self.health_port = health_port
        self.health_address = health_address
        self.probe_socket = probe_socket
        self._probe_server: asyncio.Server | None = None
        self._dra_server: grpc.Server | None = None
        self._registration_server: grpc.aio.Server | None = None
        self._health_server: grpc.aio.Server | None = None

    def serve_claims(self, preparer: Preparer) -> None:
        self._dra.serve(preparer)

    async def start(self) -> None:
        await asyncio.to_thread(
            remove_stale_sockets, self.registration_socket.parent, self.dra_socket.parent
        )
        if self.health_port is not None:
            self._health_server = probe_server(self.health)
            # Port 0 picks a free port; the bound one is what a probe must use.
            address = self.health_address
            host = f"[{address}]" if ":" in address else address  # IPv6 pod IPs
            self.health_port = self._health_server.add_insecure_port(f"{host}:{self.health_port}")
            await self._health_server.start()
        if self.probe_socket is not None:
            self._probe_server = await serve_probes(self.health, self.probe_socket)
        self._dra_server = grpc.server(
            ThreadPoolExecutor(DRA_WORKERS, thread_name_prefix="dra"),
            # A call beyond the workers and this many waiting is refused at once
            # (RESOURCE_EXHAUSTED) rather than queued without bound; the kubelet retries.
            maximum_concurrent_rpcs=DRA_WORKERS + MAX_WAITING_CALLS,
        )
        dra_v1_grpc.add_DRAPluginServicer_to_server(self._dra, self._dra_server)
        dra_v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1(self._dra), self._dra_server)
        drahealth_v1_grpc.add_DRAResourceHealthServicer_to_server(
            self.resource_health, self._dra_server
        )
        drahealth_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
            ResourceHealthV1alpha1(self.resource_health), self._dra_server
        )
        await asyncio.to_thread(_serve_unix, self._dra_server, self.dra_socket)
        self.health.set_serving(True)
        await self._start_registration()

    async def supervise(self) -> None:
        """Serve the registration socket again whenever it disappears (or something else
        takes its name). Readiness fails from the moment it is gone (see `Health`)."""
        while True:
            await asyncio.sleep(SOCKET_CHECK_INTERVAL_S)
            if not is_socket(self.registration_socket):
                log.warning(
                    "registration socket gone; serving it again",
                    extra={"socket": str(self.registration_socket)},
                )
                await self._stop_registration()
                await self._start_registration()

    async def stop(self, grace: float = 5.0) -> None:
        """Registration first, so the kubelet stops sending calls before DRA goes away."""
        self.health.set_serving(False)
        self.health.set_serving(False, READINESS_SERVICE)
        await self._stop_registration()
        # Calls that wait for an agent that never started: answered, not left hanging.
        self._dra.refuse("the plugin stopped before it could serve claims")
        self.resource_health.close()
        if self._dra_server is not None:
            stopped = self._dra_server.stop(grace)
            await asyncio.to_thread(stopped.wait)
        if self._health_server is not None:
            await self._health_server.stop(grace)
        if self._probe_server is not None:
            self._probe_server.close()
            await self._probe_server.wait_closed()
        self.dra_socket.unlink(missing_ok=True)

    async def _start_registration(self) -> None:
        self._registration_server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self.registration, self._registration_server)
        _listen_unix(self._registration_server, self.registration_socket)
        await self._registration_server.start()
        _owner_only(self.registration_socket)

    async def _stop_registration(self) -> None:
        # First: whatever fails below, the kubelet must register the plugin anew.
        self.registration.set_registered(False)
        if self._registration_server is not None:
            await self._registration_server.stop(0)
            self._registration_server = None
        self.registration_socket.unlink(missing_ok=True)


def _serve_unix(server: grpc.Server, path: Path) -> None:
    _listen_unix(server, path)
    server.start()
    _owner_only(path)


def _listen_unix(server: grpc.Server | grpc.aio.Server, path: Path) -> None:
    ensure_dir(path.parent, PLUGIN_DIR_MODE)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a socket left by a killed predecessor
    server.add_insecure_port(f"unix://{path}")


def _owner_only(path: Path) -> None:
    # Only root (the kubelet) may connect: a prepare hands out devices.
    path.chmod(0o600)


def _too_many(claims: Sized, call: str, done: str) -> str:
    """The error of every claim of a call that carries more than MAX_CLAIMS_PER_CALL, or
    ""; such a call is answered before any API read or file write."""
    if len(claims) <= MAX_CLAIMS_PER_CALL:
        return ""
    return (
        f"{len(claims)} claims in one {call} call; at most {MAX_CLAIMS_PER_CALL} are {done} at once"
    )


def _refs(claims: object) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in claims]  # type: ignore[attr-defined]


def _unprepared(outcome: Outcome) -> dra_v1.NodeUnprepareResourceResponse:
    return dra_v1.NodeUnprepareResourceResponse(error=outcome.error)
