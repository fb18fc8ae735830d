"""A pod's connection flood of a TCP port, as one that keeps a server's connections full.

CONNECTIONS raw connections, none sending anything (no HTTP/2 preface, no TLS hello),
each opened again as soon as the server closes it. Shared by the probe tests on a
plugin process (`tests/neuron_dra/agent/kubelet/test_probe_flood.py`) and on the real node
(`tests/e2e/test_realnode_probes.py`); `NEURON_DRA_PROBE_FLOOD_S` sets how long both
hold it (the ten-minute run: 600).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

CONNECTIONS = 300


def flood_seconds(default: float) -> float:
    """How long a test holds the flood: `NEURON_DRA_PROBE_FLOOD_S`, else `default`."""
    return float(os.environ.get("NEURON_DRA_PROBE_FLOOD_S", default))


@dataclass
class Flood:
    """Counts of the flood so far, and `connected`, set once every connection was made."""

    connected: asyncio.Event = field(default_factory=asyncio.Event)
    first: int = 0  # connections made at least once
    opened: int = 0  # connections made in all, reopenings included
    refused: int = 0

    def summary(self) -> str:
        return f"{CONNECTIONS} connections, {self.opened} opened, {self.refused} refused"


async def flood(host: str, port: int, state: Flood, connections: int = CONNECTIONS) -> None:
    """Hold `connections` silent connections to host:port until cancelled."""

    async def one() -> None:
        first = True
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                state.refused += 1
                continue
            state.opened += 1
            if first:
                first = False
                state.first += 1
                if state.first == connections:
                    state.connected.set()
            await reader.read()  # until the server closes it
            writer.close()

    await asyncio.gather(*(one() for _ in range(connections)))
