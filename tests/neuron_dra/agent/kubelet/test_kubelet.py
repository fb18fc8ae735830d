from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import socket
import stat
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from api.kubelet.dra.v1 import api_pb2 as v1
from api.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from api.kubelet.drahealth.v1 import api_pb2 as drahealth_v1
from api.kubelet.drahealth.v1 import api_pb2_grpc as drahealth_v1_grpc
from api.kubelet.drahealth.v1alpha1 import api_pb2 as drahealth
from api.kubelet.drahealth.v1alpha1 import api_pb2_grpc as drahealth_grpc
from api.kubelet.grpchealth.v1 import api_pb2 as health
from api.kubelet.grpchealth.v1 import api_pb2_grpc as health_grpc
from api.kubelet.pluginregistration.v1 import api_pb2 as reg
from api.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.claims.checkpoint import CheckpointStore
from neuron_dra.agent.claims.limits import MAX_CLAIMS_PER_CALL
from neuron_dra.agent.claims.preparer import Preparer
from neuron_dra.agent.kubelet.plugin import SOCKET_CHECK_INTERVAL_S, KubeletPlugin
from neuron_dra.agent.kubelet.readiness import READINESS_SERVICE
from neuron_dra.agent.supervisor import FAILURES_NOT_LIVE, Supervisor
from neuron_dra.agent.telemetry.health import Problem, health_entries
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from tests.claim_objects import allocated_claim, neuron_config, opaque
from tests.sysfs_tree import FakeNode

UID = "7f0e6b2c-0000-4000-8000-000000000001"
BAD = "7f0e6b2c-0000-4000-8000-000000000002"


async def until(what: str, check: Callable[[], bool]) -> None:
    """Poll `check` (what cannot be awaited: a file, another loop's state) for 10 s."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while not check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


def make_preparer(
    tmp_path: Path, root: Path, claims: dict[tuple[str, str], dict[str, Any]]
) -> Preparer:
    def get_claim(namespace: str, name: str) -> dict[str, Any]:
        return claims[(namespace, name)]

    inventory = discover(root).inventory
    return Preparer(
        inventory=lambda: inventory,
        pool="node-a",
        cdi_root=tmp_path / "cdi",
        store=CheckpointStore(tmp_path / "plugins/neuron.aws.com/checkpoint.json"),
        boot_id="boot-1",
        get_claim=get_claim,
    )


def with_plugin(
    tmp_path: Path,
    root: Path,
    body: Callable[[KubeletPlugin], Awaitable[None]],
    health_port: int | None = None,
) -> None:
    claims: dict[tuple[str, str], dict[str, Any]] = {
        ("ns", "good"): allocated_claim(UID, ["neurondevice4", "neurondevice5"], name="good"),
        ("ns", "bad"): allocated_claim(
            BAD, ["neurondevice0"], name="bad", config=[opaque(neuron_config(3))]
        ),
    }

    async def main() -> None:
        preparer = make_preparer(tmp_path, root, claims)
        preparer.start()
        plugin = KubeletPlugin(
            preparer,
            pool="node-a",
            registrar_dir=tmp_path / "registry",
            plugins_dir=tmp_path / "plugins",
            pod_uid="pod-1",
            health_port=health_port,
        )
        await plugin.start()
        try:
            await body(plugin)
        finally:
            await plugin.stop()

    asyncio.run(main())


def test_a_prepare_before_the_agent_is_ready_waits_for_it(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    """The sockets are served before the rest of the agent is imported (`run`): the
    kubelet registers at once, and a prepare that early is answered once it is ready."""
    claims = {("ns", "good"): allocated_claim(UID, ["neurondevice4"], name="good")}
    preparer = make_preparer(tmp_path, fake_node("trn2.48xlarge"), claims)

    async def main() -> None:
        plugin = KubeletPlugin(
            None,
            pool="node-a",
            registrar_dir=tmp_path / "registry",
            plugins_dir=tmp_path / "plugins",
        )
        await plugin.start()
        try:
            async with grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as channel:
                request = v1.NodePrepareResourcesRequest(
                    claims=[v1.Claim(namespace="ns", name="good", uid=UID)]
                )
                call = asyncio.ensure_future(
                    v1_grpc.DRAPluginStub(channel).NodePrepareResources(request)
                )
                socket = f"unix://{plugin.registration_socket}"
                async with grpc.aio.insecure_channel(socket) as registration:
                    info = await reg_grpc.RegistrationStub(registration).GetInfo(reg.InfoRequest())
                assert info.endpoint == str(plugin.dra_socket)
                assert not call.done()
                preparer.start()
                plugin.serve_claims(preparer)
                response = await call
            assert [d.device_name for d in response.claims[UID].devices] == ["neurondevice4"]
        finally:
            await plugin.stop()

    asyncio.run(main())


def test_registration_dra_and_sockets(tmp_path: Path, fake_node: FakeNode) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        assert plugin.registration_socket == tmp_path / "registry/neuron.aws.com-pod-1-reg.sock"
        assert plugin.dra_socket == tmp_path / "plugins/neuron.aws.com/dra-pod-1.sock"
        for path in (plugin.registration_socket, plugin.dra_socket):
            mode = path.stat().st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        async with grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(reg.InfoRequest())
            assert (info.type, info.name, info.endpoint) == (
                "DRAPlugin",
                "neuron.aws.com",
                str(plugin.dra_socket),
            )
            assert list(info.supported_versions) == [
                "v1.DRAPlugin",
                "v1beta1.DRAPlugin",
                "v1.DRAResourceHealth",
                "v1alpha1.DRAResourceHealth",
            ]
            await stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True))
            assert plugin.registration.registered.is_set()

        async with grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as channel:
            response = await v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                v1.NodePrepareResourcesRequest(
                    claims=[
                        v1.Claim(namespace="ns", name="good", uid=UID),
                        v1.Claim(namespace="ns", name="bad", uid=BAD),
                    ]
                )
            )
            good = response.claims[UID]
            assert good.error == ""
            assert [
                (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
                for d in good.devices
            ] == [
                (
                    ["neurons"],
                    "node-a",
                    "neurondevice4",
                    [f"neuron.aws.com/neuron={UID}-neurondevice4"],
                ),
                (
                    ["neurons"],
                    "node-a",
                    "neurondevice5",
                    [f"neuron.aws.com/neuron={UID}-neurondevice5"],
                ),
            ]
            assert "field 'logicalNeuronCore': 3 is not allowed" in response.claims[BAD].error
            assert not response.claims[BAD].devices

            beta = await v1beta1_grpc.DRAPluginStub(channel).NodePrepareResources(
                v1beta1.NodePrepareResourcesRequest(
                    claims=[v1beta1.Claim(namespace="ns", name="good", uid=UID)]
                )
            )
            assert [d.device_name for d in beta.claims[UID].devices] == [
                "neurondevice4",
                "neurondevice5",
            ]
            undone = await v1beta1_grpc.DRAPluginStub(channel).NodeUnprepareResources(
                v1beta1.NodeUnprepareResourcesRequest(
                    claims=[v1beta1.Claim(namespace="ns", name="good", uid=UID)]
                )
            )
            assert undone.claims[UID].error == ""
            assert not list((tmp_path / "cdi").iterdir())

    with_plugin(tmp_path, fake_node("trn2.48xlarge"), body)
    assert not (tmp_path / "registry/neuron.aws.com-pod-1-reg.sock").exists()
    assert not (tmp_path / "plugins/neuron.aws.com/dra-pod-1.sock").exists()


def test_a_vanished_registration_socket_is_served_again(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        supervisor = asyncio.create_task(plugin.supervise())
        plugin.registration_socket.unlink()
        deadline = asyncio.get_running_loop().time() + 10 * SOCKET_CHECK_INTERVAL_S
        while not plugin.registration_socket.exists():
            assert asyncio.get_running_loop().time() < deadline, "socket not served again"
            await asyncio.sleep(0.05)
        async with grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as channel:
            info = await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest())
            assert info.name == "neuron.aws.com"
        supervisor.cancel()

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body)


def test_a_registry_path_briefly_not_a_directory_does_not_end_registration(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    """The registration loop dies of the path (NotADirectoryError); the supervisor logs
    it, holds readiness down and starts it again, so the socket is served once the
    directory is back. Before, the loop died for good and the kubelet never saw the
    plugin again."""

    async def body(plugin: KubeletPlugin) -> None:
        plugin.health.set_serving(True, READINESS_SERVICE)
        loops = Supervisor(plugin.health, backoff=lambda: Backoff(0.05, 0.2))
        loops.start("registration", plugin.supervise)
        registry = plugin.registration_socket.parent
        shutil.rmtree(registry)
        registry.write_text("not a directory")
        await until("the loop failed", lambda: loops.restarts.get("registration", 0) >= 1)
        registry.unlink()
        registry.mkdir()
        await until("socket served again", plugin.registration_socket.exists)
        async with grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as channel:
            info = await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest())
            assert info.name == "neuron.aws.com"
        await loops.stop()

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body)


@pytest.mark.parametrize("call", ["NodePrepareResources", "NodeUnprepareResources"])
def test_a_call_with_more_claims_than_any_pod_is_refused_before_any_work(
    tmp_path: Path, fake_node: FakeNode, call: str
) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        async with grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as channel:
            stub = v1_grpc.DRAPluginStub(channel)
            prepared = v1.Claim(namespace="ns", name="good", uid=UID)
            request = v1.NodePrepareResourcesRequest(claims=[prepared])
            first = await stub.NodePrepareResources(request)
            assert not first.claims[UID].error
            spec = next((tmp_path / "cdi").iterdir())
            files = {p: p.read_bytes() for p in (spec, checkpoint)}
            written = checkpoint.stat().st_mtime_ns
            claims = [prepared] + [
                v1.Claim(namespace="ns", name=f"c{i}", uid=f"{i:08d}-0000-4000-8000-000000000000")
                for i in range(MAX_CLAIMS_PER_CALL)
            ]
            if call == "NodePrepareResources":
                answer: Any = await stub.NodePrepareResources(
                    v1.NodePrepareResourcesRequest(claims=claims)
                )
            else:
                answer = await stub.NodeUnprepareResources(
                    v1.NodeUnprepareResourcesRequest(claims=claims)
                )
        assert len(answer.claims) == len(claims)
        done = "prepared" if call == "NodePrepareResources" else "unprepared"
        errors = {c.error for c in answer.claims.values()}
        assert errors == {
            f"{len(claims)} claims in one {call} call; at most "
            f"{MAX_CLAIMS_PER_CALL} are {done} at once"
        }
        # Nothing written or removed: the one prepared claim is as it was.
        assert list((tmp_path / "cdi").iterdir()) == [spec]
        assert {p: p.read_bytes() for p in files} == files
        assert checkpoint.stat().st_mtime_ns == written

    checkpoint = tmp_path / "plugins/neuron.aws.com/checkpoint.json"
    with_plugin(tmp_path, fake_node("trn2.48xlarge"), body)


def test_a_failed_loop_is_not_ready_until_restarted_and_not_live_once_it_keeps_failing(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        plugin.health.set_serving(True, READINESS_SERVICE)

        def probes() -> tuple[bool, bool]:
            return plugin.health.serving(""), plugin.health.serving(READINESS_SERVICE)

        waiting: list[tuple[bool, bool]] = []  # (live, ready) while it waits to restart
        started: list[tuple[bool, bool]] = []  # and as each run starts
        done = asyncio.Event()

        @dataclasses.dataclass
        class Recorded(Backoff):
            def delay(self, at_least_s: float = 0.0) -> float:
                waiting.append(probes())
                return super().delay(at_least_s) / 100

        async def broken() -> None:
            started.append(probes())
            if len(started) > FAILURES_NOT_LIVE:
                done.set()
                await asyncio.Event().wait()
            raise OSError("a path the loop needs is gone")

        loops = Supervisor(plugin.health, backoff=Recorded)
        loops.start("broken", broken)
        await asyncio.wait_for(done.wait(), 10)
        await loops.stop()
        alive = FAILURES_NOT_LIVE - 1
        assert waiting == [(True, False)] * alive + [(False, False)]
        assert started == [(True, True)] * FAILURES_NOT_LIVE + [(False, True)]

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body)


def test_health_service_for_the_liveness_probe(tmp_path: Path, fake_node: FakeNode) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        assert plugin.health_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{plugin.health_port}") as channel:
            stub = health_grpc.HealthStub(channel)
            check = await stub.Check(health.HealthCheckRequest())
            assert check.status == health.HealthCheckResponse.SERVING
            plugin.health.set_serving(False)
            check = await stub.Check(health.HealthCheckRequest())
            assert check.status == health.HealthCheckResponse.NOT_SERVING
            # The probes only Check: a stream held open per caller is not served.
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await anext(aiter(stub.Watch(health.HealthCheckRequest())))
            assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body, health_port=0)


def test_readiness_service_follows_the_kubelets_registration(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    """The readiness probe's service: SERVING only while the kubelet has the plugin
    registered; liveness (the empty service name) does not wait for the kubelet."""
    serving, not_serving = (
        health.HealthCheckResponse.SERVING,
        health.HealthCheckResponse.NOT_SERVING,
    )

    async def body(plugin: KubeletPlugin) -> None:
        assert plugin.health_port
        ready = health.HealthCheckRequest(service=READINESS_SERVICE)
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{plugin.health_port}") as channel,
            grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as kubelet,
        ):
            stub, registrar = health_grpc.HealthStub(channel), reg_grpc.RegistrationStub(kubelet)
            assert (await stub.Check(health.HealthCheckRequest())).status == serving
            assert (await stub.Check(ready)).status == not_serving

            await registrar.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True))
            assert (await stub.Check(ready)).status == serving
            failed = reg.RegistrationStatus(plugin_registered=False, error="version mismatch")
            await registrar.NotifyRegistrationStatus(failed)
            assert (await stub.Check(ready)).status == not_serving
            # A failed registration is no reason to restart the plugin.
            assert (await stub.Check(health.HealthCheckRequest())).status == serving

            await registrar.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True))
            assert (await stub.Check(ready)).status == serving
        # Stopping: both go down (then the health server with the sockets).
        await plugin.stop()
        assert not plugin.health.serving(READINESS_SERVICE)
        assert not plugin.health.serving("")

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body, health_port=0)


def test_an_unknown_health_service_is_not_found(tmp_path: Path, fake_node: FakeNode) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{plugin.health_port}") as channel:
            stub = health_grpc.HealthStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Check(health.HealthCheckRequest(service="readyness"))
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body, health_port=0)


def test_a_served_again_registration_socket_is_not_ready_until_registered(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    """The kubelet registers a re-served socket anew; until then the pod is not ready."""

    async def body(plugin: KubeletPlugin) -> None:
        supervisor = asyncio.create_task(plugin.supervise())
        async with grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as kubelet:
            await reg_grpc.RegistrationStub(kubelet).NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True)
            )
        assert plugin.health.serving(READINESS_SERVICE)
        plugin.registration_socket.unlink()
        deadline = asyncio.get_running_loop().time() + 10 * SOCKET_CHECK_INTERVAL_S
        while not plugin.registration_socket.exists():
            assert asyncio.get_running_loop().time() < deadline, "socket not served again"
            await asyncio.sleep(0.05)
        assert not plugin.health.serving(READINESS_SERVICE)
        assert plugin.health.serving("")
        supervisor.cancel()

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body)


def test_readiness_follows_the_registration_socket(tmp_path: Path, fake_node: FakeNode) -> None:
    """Whenever the registration socket's file is gone or not a socket, the kubelet
    cannot find the plugin, and the readiness probe says so at once, not when the loop
    serves the socket again, and so where that fails (the registry path not a
    directory: the unlink before the new socket raises)."""
    not_serving = health.HealthCheckResponse.NOT_SERVING
    ready = health.HealthCheckRequest(service=READINESS_SERVICE)

    async def body(plugin: KubeletPlugin) -> None:
        socket, registry = plugin.registration_socket, plugin.registration_socket.parent

        async def register() -> None:
            async with grpc.aio.insecure_channel(f"unix://{socket}") as kubelet:
                await reg_grpc.RegistrationStub(kubelet).NotifyRegistrationStatus(
                    reg.RegistrationStatus(plugin_registered=True)
                )

        async with grpc.aio.insecure_channel(f"127.0.0.1:{plugin.health_port}") as channel:
            stub = health_grpc.HealthStub(channel)

            async def status() -> int:
                return int((await stub.Check(ready)).status)

            await register()
            assert await status() == health.HealthCheckResponse.SERVING
            socket.unlink()
            assert await status() == not_serving
            socket.write_text("not a socket")
            assert await status() == not_serving
            socket.unlink()
            shutil.rmtree(registry)
            registry.write_text("not a directory")
            assert await status() == not_serving
            # The loop that serves the socket again fails on the path, and is started
            # again and again: never ready meanwhile, whichever step it is at.
            with pytest.raises(NotADirectoryError):
                await plugin.supervise()
            assert await status() == not_serving
            assert not plugin.registration.registered.is_set()
            registry.unlink()
            registry.mkdir()
            supervisor = asyncio.create_task(plugin.supervise())
            await until("socket served again", socket.is_socket)
            assert await status() == not_serving  # until the kubelet registers it anew
            await register()
            assert await status() == health.HealthCheckResponse.SERVING
            supervisor.cancel()

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body, health_port=0)


def test_liveness_follows_the_dra_socket(tmp_path: Path, fake_node: FakeNode) -> None:
    """The kubelet calls the plugin at its DRA socket's file: once that is gone (a
    cleaned directory), nothing serves it again in the running plugin, so the liveness
    probe fails and the kubelet restarts the container, which serves it anew."""

    async def body(plugin: KubeletPlugin) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{plugin.health_port}") as channel:
            stub = health_grpc.HealthStub(channel)
            check = await stub.Check(health.HealthCheckRequest())
            assert check.status == health.HealthCheckResponse.SERVING
            plugin.dra_socket.unlink()
            check = await stub.Check(health.HealthCheckRequest())
            assert check.status == health.HealthCheckResponse.NOT_SERVING

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body, health_port=0)


def test_device_health_stream(tmp_path: Path, fake_node: FakeNode) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        plugin.resource_health.update({"neurondevice0": (True, ""), "neurondevice1": (True, "")})
        async with grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as channel:
            stream = drahealth_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                drahealth.NodeWatchResourcesRequest()
            )
            updates = aiter(stream)
            first = await anext(updates)
            assert [
                (d.device.pool_name, d.device.device_name, d.health) for d in first.devices
            ] == [
                ("node-a", "neurondevice0", drahealth.HEALTHY),
                ("node-a", "neurondevice1", drahealth.HEALTHY),
            ]
            plugin.resource_health.update(
                {"neurondevice0": (True, ""), "neurondevice1": (False, "MemEccUncorrected")}
            )
            second = await anext(updates)
            sick = [d for d in second.devices if d.health == drahealth.UNHEALTHY]
            assert [(d.device.device_name, d.message) for d in sick] == [
                ("neurondevice1", "MemEccUncorrected")
            ]
            stream.cancel()

    with_plugin(tmp_path, fake_node("inf2.48xlarge"), body)


def test_registration_advertises_health_v1_before_v1alpha1(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        async with grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as channel:
            info = await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest())
        versions = list(info.supported_versions)
        health = [v for v in versions if v.endswith(".DRAResourceHealth")]
        assert health == ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]
        # The kubelet takes the first DRA entry it speaks; health must not come before.
        assert versions[0] == "v1.DRAPlugin"
        assert max(versions.index(v) for v in versions if v.endswith(".DRAPlugin")) < min(
            versions.index(v) for v in health
        )

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body)


def _devices(response: drahealth.NodeWatchResourcesResponse) -> list[tuple[str, str, int, str]]:
    return [
        (d.device.pool_name, d.device.device_name, d.health, d.message) for d in response.devices
    ]


def test_v1_and_v1alpha1_health_clients_get_the_same_updates(
    tmp_path: Path, fake_node: FakeNode
) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        plugin.resource_health.update({"neurondevice0": (True, ""), "neurondevice1": (True, "")})
        async with grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as channel:
            new = drahealth_v1_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                drahealth_v1.NodeWatchResourcesRequest()
            )
            old = drahealth_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                drahealth.NodeWatchResourcesRequest()
            )
            new_updates, old_updates = aiter(new), aiter(old)
            seen: list[tuple[bytes, bytes]] = []
            for devices in (
                {"neurondevice0": (True, ""), "neurondevice1": (False, "MemEccUncorrected")},
                {"neurondevice0": (False, "DeviceMissing"), "neurondevice1": (True, "")},
            ):
                v1, v1alpha1 = await asyncio.gather(anext(new_updates), anext(old_updates))
                assert isinstance(v1, drahealth_v1.NodeWatchResourcesResponse)
                assert isinstance(v1alpha1, drahealth.NodeWatchResourcesResponse)
                seen.append((v1.SerializeToString(), v1alpha1.SerializeToString()))
                plugin.resource_health.update(devices)
            v1, v1alpha1 = await asyncio.gather(anext(new_updates), anext(old_updates))
            seen.append((v1.SerializeToString(), v1alpha1.SerializeToString()))
            new.cancel()
            old.cancel()
        # Same bytes: same devices, health, messages and timestamps, from one state.
        assert [a for a, _ in seen] == [b for _, b in seen]
        last = drahealth.NodeWatchResourcesResponse.FromString(seen[-1][1])
        assert _devices(last) == [
            ("node-a", "neurondevice0", drahealth.UNHEALTHY, "DeviceMissing"),
            ("node-a", "neurondevice1", drahealth.HEALTHY, ""),
        ]
        assert {d.health_check_timeout_seconds for d in last.devices} == {30}

    with_plugin(tmp_path, fake_node("inf2.48xlarge"), body)


def _problem(kind: str) -> Problem:
    return Problem(kind, f"{kind} detail", since=1_700_000_000.0)


def test_whole_node_device_health_follows_its_devices(fake_node: FakeNode) -> None:
    ultraserver = FakeUltraServer("us-1", 2)
    inventory = discover(fake_node("trn2u.48xlarge", ultraserver=ultraserver)).inventory
    assert inventory.ultraserver is not None and len(inventory.devices) == 16

    healthy = health_entries(inventory, {})
    assert healthy["neuronnode"] == (True, "")
    cores = {f"neuroncore{i}" for i in range(64)}  # 4 logical cores a device at LNC 2
    assert set(healthy) == {d.name for d in inventory.devices} | {"neuronnode"} | cores
    assert all(ok for ok, _ in healthy.values())

    one = health_entries(inventory, {3: _problem("MemEccUncorrected")})
    assert one["neurondevice3"] == (False, "MemEccUncorrected")
    assert one["neuronnode"] == (False, "unhealthy devices: neurondevice3 (MemEccUncorrected)")
    assert [name for name, (ok, _) in one.items() if not ok] == [
        "neurondevice3",
        "neuronnode",
        "neuroncore12",
        "neuroncore13",
        "neuroncore14",
        "neuroncore15",
    ]

    two = health_entries(
        inventory, {12: _problem("DeviceMissing"), 2: _problem("SramEccUncorrected")}
    )
    assert two["neuronnode"] == (
        False,
        "unhealthy devices: neurondevice2 (SramEccUncorrected), neurondevice12 (DeviceMissing)",
    )

    # A device gone from the inventory still makes the node unhealthy, as its taint does.
    fewer = dataclasses.replace(inventory, devices=inventory.devices[:-1])
    gone = health_entries(fewer, {15: _problem("DeviceMissing")})
    assert "neurondevice15" not in gone
    assert gone["neuronnode"] == (False, "unhealthy devices: neurondevice15 (DeviceMissing)")


def test_only_ultraserver_nodes_get_a_whole_node_health_entry(fake_node: FakeNode) -> None:
    inventory = discover(fake_node("inf2.48xlarge")).inventory
    assert inventory.ultraserver is None
    entries = health_entries(inventory, {0: _problem("MemEccUncorrected")})
    cores = [f"neuroncore{i}" for i in range(24)]  # 2 cores a device
    assert sorted(entries) == sorted([d.name for d in inventory.devices] + cores)
    assert entries["neurondevice0"] == (False, "MemEccUncorrected")
    assert entries["neuroncore1"] == (False, "MemEccUncorrected")
    assert entries["neuroncore2"] == (True, "")


def test_whole_node_device_health_reaches_the_kubelet(tmp_path: Path, fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-1", 2))
    inventory = discover(root).inventory

    async def body(plugin: KubeletPlugin) -> None:
        plugin.resource_health.update(health_entries(inventory, {}))
        async with grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as channel:
            stream = drahealth_v1_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                drahealth_v1.NodeWatchResourcesRequest()
            )
            updates = aiter(stream)
            first = {d.device.device_name: d.health for d in (await anext(updates)).devices}
            assert first["neuronnode"] == drahealth_v1.HEALTHY
            plugin.resource_health.update(
                health_entries(inventory, {5: _problem("MemEccUncorrected")})
            )
            second = {d.device.device_name: d for d in (await anext(updates)).devices}
            node = second["neuronnode"]
            assert (node.device.pool_name, node.health) == ("node-a", drahealth_v1.UNHEALTHY)
            assert node.message == "unhealthy devices: neurondevice5 (MemEccUncorrected)"
            stream.cancel()

    with_plugin(tmp_path, root, body)


# Pod UIDs: the API server makes them, always in this shape.
KILLED, RUNNING = "5b0c3f5e-1d2a-4c47-9a51-0c6e1d0f0a11", "9e4f0a7c-6b3d-4e2f-8c1a-2d7b5e9f0b22"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory: socket paths may not exceed 107 bytes, which tmp_path's names do."""
    path = Path(tempfile.mkdtemp(prefix="ndra-"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def _stale_socket(path: Path) -> None:
    """A socket file nobody listens on, as a SIGKILLed plugin leaves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))  # closed without unlinking: connect() is refused


def _live_socket(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


def test_stale_sockets_of_killed_plugins_are_removed_at_start(
    short_dir: Path, fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    registry, plugin_dir = short_dir / "registry", short_dir / "plugins/neuron.aws.com"
    stale = [
        registry / f"neuron.aws.com-{KILLED}-reg.sock",
        plugin_dir / f"dra-{KILLED}.sock",
        registry / "neuron.aws.com-reg.sock",  # a plugin run without --pod-uid
        plugin_dir / "dra.sock",
    ]
    live = [registry / f"neuron.aws.com-{RUNNING}-reg.sock", plugin_dir / f"dra-{RUNNING}.sock"]
    others = [
        registry / "gpu.nvidia.com-reg.sock",
        registry / f"gpu.nvidia.com-{KILLED}-reg.sock",
        registry / f"neuron.aws.com.example-{KILLED}-reg.sock",
        registry / "neuron.aws.com-other-reg.sock",  # driver neuron.aws.com-other
    ]
    for path in stale + others:
        _stale_socket(path)
    not_a_socket = plugin_dir / f"dra-{RUNNING[::-1]}.sock"
    not_a_socket.write_text("")
    listening = [_live_socket(path) for path in live]

    async def body(plugin: KubeletPlugin) -> None:
        assert [path for path in stale if path.exists()] == []
        assert [path for path in live + others if not path.exists()] == []
        assert not_a_socket.exists()
        # The instance still running keeps serving on the very same sockets.
        for path in live:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(str(path))

    caplog.set_level(logging.INFO, logger="neuron_dra.agent.kubelet.sockets")
    try:
        with_plugin(short_dir, fake_node("inf2.xlarge"), body)
    finally:
        for sock in listening:
            sock.close()
    removed = [r for r in caplog.records if r.getMessage().startswith("removed the stale socket")]
    assert sorted(getattr(r, "socket", "") for r in removed) == sorted(map(str, stale))
