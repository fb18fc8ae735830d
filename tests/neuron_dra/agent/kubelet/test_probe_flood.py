"""A pod that floods the plugin's network port does not get the plugin restarted.

Any pod the network lets through can open connections to the plugin pod's IP. The
flood here is what took the kubelet's gRPC probes out: about 300 raw TCP
connections to the health port, none sending the HTTP/2 preface, each opened again
as soon as the server closes it. While it runs, the DaemonSet's own liveness and
readiness probes (`deploy/daemonset.yaml`) are made as the kubelet makes them: a
`grpc` probe is one new connection to the port and one `Check` with the probe's
timeout; an `exec` probe is its command run with the container's environment and
the probe's timeout. The kubelet restarts the container after `failureThreshold`
liveness failures in a row: none may happen. `tests/e2e/test_realnode_probes.py` does
the same against the real kubelet.

The plugin runs in a process of its own (the agent's `KubeletPlugin`, its health
port on loopback standing for the pod IP), as the chart configures it. Probes come
every PROBE_PERIOD_S (faster than the chart's, to keep the test short) for
`NEURON_DRA_PROBE_FLOOD_S` seconds (default FLOOD_S; 600 for the ten-minute run).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from api.kubelet.grpchealth.v1 import api_pb2 as health
from api.kubelet.grpchealth.v1 import api_pb2_grpc as health_grpc
from tests.connection_flood import CONNECTIONS, Flood, flood, flood_seconds

REPO = Path(__file__).resolve().parents[4]
FLOOD_S = flood_seconds(15.0)
PROBE_PERIOD_S = 0.5
POD_UID = "0b7f1c2e-5d3a-4e8f-9a61-2c4d6e8f0a1b"

SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from neuron_dra.agent.kubelet.plugin import KubeletPlugin

    async def main() -> None:
        root, env = Path(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:])
        plugin = KubeletPlugin(
            None, pool="node-a", registrar_dir=root / "registry",
            plugins_dir=root / "plugins", pod_uid=env["POD_UID"], health_port=0,
            **({"probe_socket": env["PROBE_SOCKET"]} if "PROBE_SOCKET" in env else {}),
        )
        await plugin.start()
        plugin.registration.set_registered(True)
        print(plugin.health_port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())
    """
)


def container() -> dict[str, Any]:
    """The plugin container of the committed DaemonSet (the chart's default output)."""
    docs = yaml.safe_load_all((REPO / "deploy" / "daemonset.yaml").read_text())
    [daemonset] = [d for d in docs if d and d["kind"] == "DaemonSet"]
    [found] = daemonset["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = found
    return result


def container_env() -> dict[str, str]:
    """The container's literal environment, with the pod UID its fieldRef gives."""
    env = {e["name"]: e["value"] for e in container()["env"] if "value" in e}
    return env | {"POD_UID": POD_UID}


@pytest.fixture
def plugin() -> Iterator[int]:
    """The health port of a plugin configured as the DaemonSet's container is."""
    env = container_env()
    # A short directory: a socket's path is at most 107 bytes, and pytest's are long.
    with tempfile.TemporaryDirectory(prefix="ndra-") as root:
        yield from _plugin(Path(root), env)


def _plugin(root: Path, env: dict[str, str]) -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(root), *(f"{k}={v}" for k, v in env.items())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


@dataclass
class Probe:
    """One of the container's probes, made as the kubelet makes it."""

    spec: dict[str, Any]
    port: int

    @property
    def timeout_s(self) -> float:
        return float(self.spec.get("timeoutSeconds", 1))

    async def __call__(self) -> bool:
        if "grpc" in self.spec:
            return await self._grpc()
        return await self._exec()

    async def _grpc(self) -> bool:
        service = self.spec["grpc"].get("service", "")
        options = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}", options=options) as ch:
            try:
                answer = await health_grpc.HealthStub(ch).Check(
                    health.HealthCheckRequest(service=service), timeout=self.timeout_s
                )
            except grpc.aio.AioRpcError:
                return False
        return answer.status == health.HealthCheckResponse.SERVING

    async def _exec(self) -> bool:
        # The container's environment, with its python3 on PATH as in the image.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        proc = await asyncio.create_subprocess_exec(
            *self.spec["exec"]["command"],
            env=container_env() | {"PATH": path},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            return await asyncio.wait_for(proc.wait(), self.timeout_s) == 0
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return False


@dataclass
class Record:
    """Outcomes of one probe, in order."""

    results: list[bool]

    @property
    def failed(self) -> int:
        return self.results.count(False)

    def longest_failing_run(self) -> int:
        longest = run = 0
        for passed in self.results:
            run = 0 if passed else run + 1
            longest = max(longest, run)
        return longest


async def probe_for(probe: Probe, until: float) -> Record:
    """The probe every PROBE_PERIOD_S until `until` (monotonic), as the kubelet's
    prober does: the next one is due a period after the last was due, each awaited."""
    record = Record([])
    due = time.monotonic()
    while due < until:
        record.results.append(await probe())
        due += PROBE_PERIOD_S
        await asyncio.sleep(max(0.0, due - time.monotonic()))  # the probe period
    return record


def test_a_connection_flood_never_gets_the_plugin_restarted(plugin: int) -> None:
    spec = container()
    liveness = Probe(spec["livenessProbe"], plugin)
    readiness = Probe(spec["readinessProbe"], plugin)

    async def main() -> tuple[Record, Record, Flood]:
        assert await liveness() and await readiness()  # served before the flood
        state = Flood()
        flooding = asyncio.create_task(flood("127.0.0.1", plugin, state))
        await state.connected.wait()
        until = time.monotonic() + FLOOD_S
        live, ready = await asyncio.gather(probe_for(liveness, until), probe_for(readiness, until))
        flooding.cancel()
        return live, ready, state

    live, ready, state = asyncio.run(main())
    print(
        f"{state.summary()}, for {FLOOD_S:.0f} s: liveness "
        f"{live.failed}/{len(live.results)} failed (longest run "
        f"{live.longest_failing_run()}), readiness {ready.failed}/{len(ready.results)}"
    )
    assert state.opened > CONNECTIONS, state.summary()  # closed by the server, made again
    threshold = int(spec["livenessProbe"].get("failureThreshold", 3))
    assert live.longest_failing_run() < threshold, live.results
    assert live.failed == 0 and ready.failed == 0, (live.results, ready.results)
