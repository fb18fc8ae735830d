"""The probe server on the pod IP holds its memory under thousands of callers.

The plugin runs in a process of its own (the agent's KubeletPlugin with its health
port on loopback), so that its resident memory is measured alone."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from api.kubelet.grpchealth.v1 import api_pb2 as health
from api.kubelet.grpchealth.v1 import api_pb2_grpc as health_grpc

CONNECTIONS = 2000
WATCH_CONNECTIONS, WATCHES_PER_CONNECTION = 40, 75  # 3,000 streams
# What the plugin may grow by under either flood. Unbounded, these 2,000 connections
# took it from 38 to 93 MiB and the 3,000 Watch streams to 99 MiB (see `readiness`).
MAX_GROWTH_MIB = 8.0

SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from neuron_dra.agent.kubelet.plugin import KubeletPlugin

    async def main() -> None:
        root = Path(sys.argv[1])
        plugin = KubeletPlugin(
            None, pool="node-a", registrar_dir=root / "registry",
            plugins_dir=root / "plugins", health_port=0,
        )
        await plugin.start()
        print(plugin.health_port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())
    """
)


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """(pid, health port) of a plugin in a process of its own."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.pid, int(proc.stdout.readline())
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def channel(port: int) -> grpc.aio.Channel:
    # A subchannel pool of its own: each channel is a TCP connection of its own.
    return grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
    )


async def check(port: int) -> int:
    async with channel(port) as probe:
        answer = await health_grpc.HealthStub(probe).Check(health.HealthCheckRequest(), timeout=10)
        return answer.status


async def hold(
    port: int, channels: int, watches: int
) -> tuple[list[grpc.aio.Channel], Counter[str]]:
    """Open `channels` connections, each with a Check and then `watches` Watch streams
    left open; how each call ended."""
    opened = [channel(port) for _ in range(channels)]
    outcomes: Counter[str] = Counter()

    async def one(held: grpc.aio.Channel) -> None:
        stub = health_grpc.HealthStub(held)
        try:
            await stub.Check(health.HealthCheckRequest(), timeout=20)
            outcomes["check OK"] += 1
        except grpc.aio.AioRpcError as err:
            outcomes[f"check {err.code().name}"] += 1
        for _ in range(watches):
            try:
                await stub.Watch(health.HealthCheckRequest(), timeout=20).read()
                outcomes["watch streaming"] += 1  # left open, as a flood would
            except grpc.aio.AioRpcError as err:
                outcomes[f"watch {err.code().name}"] += 1

    await asyncio.gather(*(one(held) for held in opened))
    return opened, outcomes


@pytest.mark.parametrize(
    ("channels", "watches"),
    [(CONNECTIONS, 0), (WATCH_CONNECTIONS, WATCHES_PER_CONNECTION)],
    ids=["connections", "watch-streams"],
)
def test_a_flood_of_callers_leaves_the_plugins_memory_flat(
    plugin: tuple[int, int], channels: int, watches: int
) -> None:
    pid, port = plugin

    async def main() -> None:
        for _ in range(3):  # the server's first calls allocate what every call reuses
            assert await check(port) == health.HealthCheckResponse.SERVING
        before = rss_mib(pid)
        opened, outcomes = await hold(port, channels, watches)
        during = rss_mib(pid)
        print(
            f"{channels} connections, {watches} watches each: {before:.1f} -> "
            f"{during:.1f} MiB, {dict(outcomes)}"
        )
        assert outcomes["watch streaming"] == 0, outcomes
        if watches:
            assert outcomes["watch UNIMPLEMENTED"] == channels * watches, outcomes
        assert during - before < MAX_GROWTH_MIB, (before, during, outcomes)
        for held in opened:
            await held.close()
        # The flood gone, the probes are answered again.
        assert await check(port) == health.HealthCheckResponse.SERVING

    asyncio.run(main())
