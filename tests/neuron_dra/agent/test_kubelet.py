from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from api.kubelet.dra.v1 import api_pb2 as v1
from api.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from api.kubelet.drahealth.v1alpha1 import api_pb2 as drahealth
from api.kubelet.drahealth.v1alpha1 import api_pb2_grpc as drahealth_grpc
from api.kubelet.grpchealth.v1 import api_pb2 as health
from api.kubelet.grpchealth.v1 import api_pb2_grpc as health_grpc
from api.kubelet.pluginregistration.v1 import api_pb2 as reg
from api.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from neuron_dra.agent.checkpoint import CheckpointStore
from neuron_dra.agent.kubelet import SOCKET_CHECK_INTERVAL_S, KubeletPlugin
from neuron_dra.agent.preparer import Preparer
from neuron_dra.hardware.discovery import discover
from tests.claim_objects import allocated_claim, neuron_config, opaque
from tests.sysfs_tree import FakeNode

UID = "7f0e6b2c-0000-4000-8000-000000000001"
BAD = "7f0e6b2c-0000-4000-8000-000000000002"


def with_plugin(
    tmp_path: Path,
    root: Path,
    body: Callable[[KubeletPlugin], Awaitable[None]],
    health_port: int | None = None,
) -> None:
    claims: dict[tuple[str, str], dict[str, Any]] = {
        ("ns", "good"): allocated_claim(UID, ["neurondevice4", "neurondevice5"], name="good"),
        ("ns", "bad"): allocated_claim(BAD, ["neurondevice0"], name="bad",
                                       config=[opaque(neuron_config(3))]),
    }  # fmt: skip

    async def get_claim(namespace: str, name: str) -> dict[str, Any]:
        return claims[(namespace, name)]

    async def main() -> None:
        inventory = discover(root).inventory
        preparer = Preparer(
            inventory=lambda: inventory,
            pool="node-a",
            cdi_root=tmp_path / "cdi",
            store=CheckpointStore(tmp_path / "plugins/neuron.aws.com/checkpoint.json"),
            boot_id="boot-1",
            get_claim=get_claim,
        )
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


def test_registration_dra_and_sockets(tmp_path: Path, fake_node: FakeNode) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        assert plugin.registration_socket == tmp_path / "registry/neuron.aws.com-pod-1-reg.sock"
        assert plugin.dra_socket == tmp_path / "plugins/neuron.aws.com/dra-pod-1.sock"
        for socket in (plugin.registration_socket, plugin.dra_socket):
            mode = socket.stat().st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        async with grpc.aio.insecure_channel(f"unix://{plugin.registration_socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(reg.InfoRequest())
            assert (info.type, info.name, info.endpoint) == (
                "DRAPlugin", "neuron.aws.com", str(plugin.dra_socket)
            )  # fmt: skip
            assert list(info.supported_versions) == [
                "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"
            ]  # fmt: skip
            await stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True))
            assert plugin.registration.registered.is_set()

        async with grpc.aio.insecure_channel(f"unix://{plugin.dra_socket}") as channel:
            response = await v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[
                    v1.Claim(namespace="ns", name="good", uid=UID),
                    v1.Claim(namespace="ns", name="bad", uid=BAD),
                ])
            )  # fmt: skip
            good = response.claims[UID]
            assert good.error == ""
            assert [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
                    for d in good.devices] == [
                (["neurons"], "node-a", "neurondevice4",
                 [f"neuron.aws.com/neuron={UID}-neurondevice4"]),
                (["neurons"], "node-a", "neurondevice5",
                 [f"neuron.aws.com/neuron={UID}-neurondevice5"]),
            ]  # fmt: skip
            assert "field 'logicalNeuronCore': 3 is not allowed" in response.claims[BAD].error
            assert not response.claims[BAD].devices

            beta = await v1beta1_grpc.DRAPluginStub(channel).NodePrepareResources(
                v1beta1.NodePrepareResourcesRequest(
                    claims=[v1beta1.Claim(namespace="ns", name="good", uid=UID)]
                )
            )
            assert [d.device_name for d in beta.claims[UID].devices] == [
                "neurondevice4", "neurondevice5"
            ]  # fmt: skip
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


def test_health_service_for_the_liveness_probe(tmp_path: Path, fake_node: FakeNode) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        assert plugin.health_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{plugin.health_port}") as channel:
            stub = health_grpc.HealthStub(channel)
            check = await stub.Check(health.HealthCheckRequest())
            assert check.status == health.HealthCheckResponse.SERVING
            watch = stub.Watch(health.HealthCheckRequest())
            updates = aiter(watch)
            assert (await anext(updates)).status == health.HealthCheckResponse.SERVING
            await plugin.health.set_serving(False)
            assert (await anext(updates)).status == health.HealthCheckResponse.NOT_SERVING
            watch.cancel()

    with_plugin(tmp_path, fake_node("inf2.xlarge"), body, health_port=0)


def test_device_health_stream(tmp_path: Path, fake_node: FakeNode) -> None:
    async def body(plugin: KubeletPlugin) -> None:
        await plugin.resource_health.update(
            {"neurondevice0": (True, ""), "neurondevice1": (True, "")}
        )
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
            await plugin.resource_health.update(
                {"neurondevice0": (True, ""), "neurondevice1": (False, "MemEccUncorrected")}
            )
            second = await anext(updates)
            sick = [d for d in second.devices if d.health == drahealth.UNHEALTHY]
            assert [(d.device.device_name, d.message) for d in sick] == [
                ("neurondevice1", "MemEccUncorrected")
            ]
            stream.cancel()

    with_plugin(tmp_path, fake_node("inf2.48xlarge"), body)
