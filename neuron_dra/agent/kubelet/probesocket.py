"""The plugin's side of the kubelet's exec probes (`probeclient`): the `Health` of the
gRPC probe server, answered over an abstract unix socket.

Only processes in the plugin pod's network namespace reach an abstract socket, so no
other pod can hold its connections the way it can the TCP port on the pod IP. Each
connection is one question and one answer; one that says nothing within
READ_TIMEOUT_S is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from neuron_dra.agent.kubelet.probeclient import MAX_ANSWER, address
from neuron_dra.agent.kubelet.readiness import HEALTH_SERVICES, Health

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 2.0


def status(health: Health, service: str) -> str:
    """The grpc.health.v1 status name of `service`, as `Health.Check` would answer."""
    if service not in HEALTH_SERVICES:
        return "SERVICE_UNKNOWN"
    return "SERVING" if health.serving(service) else "NOT_SERVING"


async def serve_probes(health: Health, name: str) -> asyncio.Server:
    """Answer the exec probes at the abstract socket `name` until the server is closed."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
            service = line[:MAX_ANSWER].decode(errors="replace").strip()
            writer.write(status(health, service).encode() + b"\n")
            await writer.drain()
        except (TimeoutError, OSError, ValueError):
            pass  # a caller that said nothing, or went away: it gets no answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    server = await asyncio.start_unix_server(answer, path=address(name), limit=MAX_ANSWER)
    log.info("answering the kubelet's probes", extra={"socket": f"@{name}"})
    return server
