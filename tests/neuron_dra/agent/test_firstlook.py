"""The first look at the node runs off the event loop, bounded: a sysfs read that
hangs there ends the start with an error naming it, while the kubelet's sockets
answer, and a prepare that waited for the agent is answered too."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from api.kubelet.dra.v1 import api_pb2 as v1
from api.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from api.kubelet.pluginregistration.v1 import api_pb2 as reg
from api.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from neuron_dra.agent.firstlook import NodeUnreadableError, look_at_node
from neuron_dra.agent.kubelet.plugin import KubeletPlugin
from neuron_dra.agent.node import serve
from neuron_dra.agent.options import RunOptions
from neuron_dra.hardware.discovery import Discovery, discover
from tests.neuron_dra.agent.apiclient.test_apiconfig import kubeconfig
from tests.sysfs_tree import FakeNode

UID = "7f0e6b2c-0000-4000-8000-000000000001"
PATIENCE_S = 5.0


def options(tmp_path: Path, root: Path) -> RunOptions:
    return RunOptions(
        node_name="node-a",
        sysfs_root=root,
        cdi_root=tmp_path / "cdi",
        registrar_dir=tmp_path / "registry",
        plugins_dir=tmp_path / "plugins",
    )


def test_a_first_look_that_hangs_ends_the_start_and_answers_the_kubelet(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    root = fake_node("trn2.48xlarge")
    gate = threading.Event()

    def hanging(at: Path) -> Discovery:
        gate.wait()  # a device attribute whose driver never answers
        return discover(at)

    async def main() -> None:
        opts = options(tmp_path, root)
        plugin = KubeletPlugin(
            None, pool="node-a", registrar_dir=opts.registrar_dir, plugins_dir=opts.plugins_dir
        )
        await plugin.start()
        looking = asyncio.ensure_future(look_at_node(opts, hanging, deadline_s=1.0))
        async with (
            grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as dra,
            grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as kubelet,
        ):
            request = v1.NodePrepareResourcesRequest(
                claims=[v1.Claim(namespace="ns", name="c", uid=UID)]
            )
            call = asyncio.ensure_future(v1_grpc.DRAPluginStub(dra).NodePrepareResources(request))
            # The event loop answers the kubelet while the read hangs.
            info = await reg_grpc.RegistrationStub(kubelet).GetInfo(reg.InfoRequest())
            assert info.endpoint == str(plugin.dra_socket)
            assert not looking.done()
            with pytest.raises(NodeUnreadableError, match=f"a read under {root} hangs"):
                await looking
            # As `run` does when the agent fails: the sockets go, the waiting call is
            # answered, not left waiting (the process could not exit then).
            await plugin.stop(grace=1.0)
            answer = await asyncio.wait_for(call, 5.0)
        assert answer.claims[UID].error == "the plugin stopped before it could serve claims"
        assert not plugin.registration_socket.exists()

    try:
        asyncio.run(main())
    finally:
        gate.set()


def test_a_sigterm_during_a_first_look_that_hangs_ends_the_agent_at_once(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    """`serve` returns when told to stop, not at the first look's deadline; `run` then
    removes the sockets."""
    root = fake_node("trn2.48xlarge")
    entered, gate = threading.Event(), threading.Event()

    def hanging(at: Path) -> Discovery:
        entered.set()
        gate.wait()
        return discover(at)

    async def main() -> None:
        opts = replace(
            options(tmp_path, root),
            kubeconfig=kubeconfig(tmp_path / "kubeconfig", {"server": "http://127.0.0.1:9"}),
        )
        plugin = KubeletPlugin(
            None, pool="node-a", registrar_dir=opts.registrar_dir, plugins_dir=opts.plugins_dir
        )
        await plugin.start()
        stop = asyncio.Event()
        serving = asyncio.ensure_future(serve(opts, plugin, 0.0, stop, discover_node=hanging))
        await asyncio.to_thread(entered.wait, PATIENCE_S)
        stop.set()
        await asyncio.wait_for(serving, PATIENCE_S)  # the deadline is 30 s
        await plugin.stop(grace=1.0)
        assert not plugin.registration_socket.exists()

    try:
        asyncio.run(main())
    finally:
        gate.set()


def test_the_first_look_reads_the_node(tmp_path: Path, fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    look = asyncio.run(look_at_node(options(tmp_path, root)))
    assert look.inventory == discover(root).inventory
    # Every device found is watched, its counters' baselines read: nothing is news.
    assert look.health.poll() == []
    assert sorted(look.health.sources) == [d.index for d in look.inventory.devices]
    assert len(look.inventory.devices) == 16
    assert look.boot_id is not None
