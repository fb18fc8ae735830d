"""The exec probes' client against the plugin's probe socket: exit 0 only on SERVING,
and an answer that says why otherwise."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from neuron_dra.agent.kubelet import probeclient
from neuron_dra.agent.kubelet.probesocket import serve_probes
from neuron_dra.agent.kubelet.readiness import READINESS_SERVICE, Health


def run_client(name: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """The client as the probe's command runs it, in a process of its own."""
    env = {k: v for k, v in os.environ.items() if k != "PROBE_SOCKET"}
    if name is not None:
        env["PROBE_SOCKET"] = name
    command = [sys.executable, "-I", "-m", probeclient.__name__, *args]
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=30)


@pytest.fixture
def name() -> str:
    return f"neuron-dra-test-{uuid.uuid4()}"  # abstract names are shared by the netns


def test_serving_and_not_serving(name: str) -> None:
    health = Health()  # no sockets to watch: serving as set

    async def main() -> None:
        server = await serve_probes(health, name)
        try:
            for service in ("", READINESS_SERVICE):
                out = await asyncio.to_thread(run_client, name, *([service] if service else []))
                assert (out.returncode, out.stdout.split(": ")[1]) == (1, "NOT_SERVING\n")
            health.set_serving(True)
            out = await asyncio.to_thread(run_client, name)
            assert (out.returncode, out.stdout) == (0, "liveness: SERVING\n")
            out = await asyncio.to_thread(run_client, name, READINESS_SERVICE)
            assert out.returncode == 1, out  # readiness is a service of its own
            health.set_serving(True, READINESS_SERVICE)
            out = await asyncio.to_thread(run_client, name, READINESS_SERVICE)
            assert (out.returncode, out.stdout) == (0, "readiness: SERVING\n")
            out = await asyncio.to_thread(run_client, name, "nonsense")
            assert (out.returncode, out.stdout) == (1, "nonsense: SERVICE_UNKNOWN\n")
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_a_caller_that_says_nothing_is_closed_and_others_answered(name: str) -> None:
    health = Health()
    health.set_serving(True)

    async def main() -> None:
        server = await serve_probes(health, name)
        try:
            reader, writer = await asyncio.open_unix_connection(probeclient.address(name))
            out = await asyncio.to_thread(run_client, name)  # while the silent one waits
            assert out.returncode == 0, out
            assert await reader.read() == b""  # closed after READ_TIMEOUT_S, unanswered
            writer.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_no_plugin_and_no_name_fail_with_a_reason(name: str) -> None:
    out = run_client(name)
    assert out.returncode == 1 and "no answer from the plugin" in out.stdout, out
    out = run_client(None)
    assert out.returncode == 2 and "PROBE_SOCKET" in out.stderr, out
