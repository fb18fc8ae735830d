"""Generated kubelet plugin protocol code: freshness, wire facts and a real gRPC round trip."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.message import Message

from api.kubelet.dra.v1 import api_pb2 as dra_v1
from api.kubelet.dra.v1 import api_pb2_grpc as dra_v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as dra_v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from api.kubelet.drahealth.v1 import api_pb2 as health_v1
from api.kubelet.drahealth.v1alpha1 import api_pb2 as health
from api.kubelet.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from api.kubelet.pluginregistration.v1 import api_pb2 as reg
from api.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from api.kubelet.podresources.v1 import api_pb2 as podresources

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "generate_protos.py"


def test_generated_code_matches_protos() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_all_protos_share_one_descriptor_pool() -> None:
    # v1 and v1beta1 declare identically named messages; they only coexist
    # because each file has its own path and proto package.
    files = {
        "api/kubelet/pluginregistration/v1/api.proto": reg.DESCRIPTOR,
        "api/kubelet/dra/v1/api.proto": dra_v1.DESCRIPTOR,
        "api/kubelet/dra/v1beta1/api.proto": dra_v1beta1.DESCRIPTOR,
        "api/kubelet/drahealth/v1alpha1/api.proto": health.DESCRIPTOR,
        "api/kubelet/drahealth/v1/api.proto": health_v1.DESCRIPTOR,
        "api/kubelet/podresources/v1/api.proto": podresources.DESCRIPTOR,
    }
    pool = descriptor_pool.Default()
    for name, descriptor in files.items():
        assert descriptor.name == name
        assert pool.FindFileByName(name) is descriptor
    assert dra_v1.Device.DESCRIPTOR is not dra_v1beta1.Device.DESCRIPTOR
    for message in ("DeviceHealth", "DeviceIdentifier", "NodeWatchResourcesResponse"):
        assert pool.FindMessageTypeByName(f"v1.{message}").file is health_v1.DESCRIPTOR
        assert pool.FindMessageTypeByName(f"v1alpha1.{message}").file is health.DESCRIPTOR
    assert pool.FindEnumTypeByName("v1.HealthStatus").file is health_v1.DESCRIPTOR
    assert pool.FindEnumTypeByName("v1alpha1.HealthStatus").file is health.DESCRIPTOR
    # The kubelet's PodResources API shares the proto package v1 with DRA health.
    assert pool.FindMessageTypeByName("v1.PodResources").file is podresources.DESCRIPTOR


def test_both_health_protos_load_into_a_fresh_process_in_either_order() -> None:
    # A clash in the default pool shows at import time, and only in the
    # process that imports the second file; the test process imported both
    # long ago, in one fixed order.
    v1, v1alpha1 = "api.kubelet.drahealth.v1.api_pb2", "api.kubelet.drahealth.v1alpha1.api_pb2"
    for first, second in ((v1, v1alpha1), (v1alpha1, v1)):
        result = subprocess.run(
            [sys.executable, "-c", f"import {first}, {second}, {first}_grpc, {second}_grpc"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr


def test_service_and_package_names_match_kubelet() -> None:
    # These full names form the gRPC method paths the kubelet calls.
    services = {
        reg.DESCRIPTOR.services_by_name["Registration"]: "pluginregistration.Registration",
        dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"]: "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        dra_v1beta1.DESCRIPTOR.services_by_name[
            "DRAPlugin"
        ]: "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        health.DESCRIPTOR.services_by_name["DRAResourceHealth"]: "v1alpha1.DRAResourceHealth",
        health_v1.DESCRIPTOR.services_by_name["DRAResourceHealth"]: "v1.DRAResourceHealth",
        podresources.DESCRIPTOR.services_by_name["PodResourcesLister"]: "v1.PodResourcesLister",
    }
    for service, full_name in services.items():
        assert service.full_name == full_name
    assert set(reg.DESCRIPTOR.services_by_name["Registration"].methods_by_name) == {
        "GetInfo",
        "NotifyRegistrationStatus",
    }
    for module in (health, health_v1):
        watch = module.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods_by_name[
            "NodeWatchResources"
        ]
        assert watch.server_streaming
        assert not watch.client_streaming


def _field_numbers(message: type[Message]) -> dict[str, int]:
    return {field.name: field.number for field in message.DESCRIPTOR.fields}


def test_field_numbers_match_kubelet() -> None:
    assert _field_numbers(reg.PluginInfo) == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
    assert _field_numbers(reg.RegistrationStatus) == {"plugin_registered": 1, "error": 2}
    for dra in (dra_v1, dra_v1beta1):
        assert _field_numbers(dra.Claim) == {"namespace": 1, "uid": 2, "name": 3}
        assert _field_numbers(dra.NodePrepareResourcesRequest) == {"claims": 1}
        assert _field_numbers(dra.NodePrepareResourcesResponse) == {"claims": 1}
        assert _field_numbers(dra.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
        assert _field_numbers(dra.NodeUnprepareResourcesRequest) == {"claims": 1}
        assert _field_numbers(dra.NodeUnprepareResourcesResponse) == {"claims": 1}
        assert _field_numbers(dra.NodeUnprepareResourceResponse) == {"error": 1}
    device_fields = {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    assert _field_numbers(dra_v1beta1.Device) == device_fields
    assert _field_numbers(dra_v1.Device) == {**device_fields, "share_id": 5}
    for drahealth in (health, health_v1):
        assert _field_numbers(drahealth.NodeWatchResourcesRequest) == {}
        assert _field_numbers(drahealth.DeviceIdentifier) == {"pool_name": 1, "device_name": 2}
        assert _field_numbers(drahealth.DeviceHealth) == {
            "device": 1,
            "health": 2,
            "last_updated_time": 3,
            "health_check_timeout_seconds": 4,
            "message": 5,
        }
        assert _field_numbers(drahealth.NodeWatchResourcesResponse) == {"devices": 1}
        assert (drahealth.UNKNOWN, drahealth.HEALTHY, drahealth.UNHEALTHY) == (0, 1, 2)
    assert _field_numbers(podresources.ListPodResourcesResponse) == {"pod_resources": 1}
    assert _field_numbers(podresources.PodResources) == {
        "name": 1,
        "namespace": 2,
        "containers": 3,
        "cpu_ids": 4,
        "memory": 5,
    }
    assert _field_numbers(podresources.ContainerResources) == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
    assert _field_numbers(podresources.DynamicResource) == {
        "claim_name": 2,
        "claim_namespace": 3,
        "claim_resources": 4,
    }
    assert _field_numbers(podresources.ClaimResource) == {
        "cdi_devices": 1,
        "driver_name": 2,
        "pool_name": 3,
        "device_name": 4,
        "share_id": 5,
    }
    assert _field_numbers(podresources.CDIDevice) == {"name": 1}


def test_health_v1_and_v1alpha1_share_one_wire_format() -> None:
    v1_update = health_v1.NodeWatchResourcesResponse(
        devices=[
            health_v1.DeviceHealth(
                device=health_v1.DeviceIdentifier(pool_name="node-a", device_name="neuron1"),
                health=health_v1.UNHEALTHY,
                last_updated_time=1_700_000_000,
                health_check_timeout_seconds=30,
                message="MemEccUncorrected",
            )
        ]
    )
    wire = v1_update.SerializeToString()
    old = health.NodeWatchResourcesResponse.FromString(wire)
    (device,) = old.devices
    assert (device.device.pool_name, device.device.device_name) == ("node-a", "neuron1")
    assert device.health == health.UNHEALTHY
    assert (device.last_updated_time, device.health_check_timeout_seconds) == (1_700_000_000, 30)
    assert device.message == "MemEccUncorrected"
    assert old.SerializeToString() == wire


def test_v1_device_with_share_id_parses_as_v1beta1() -> None:
    v1_device = dra_v1.Device(
        request_names=["neuron"],
        pool_name="node-a",
        device_name="neuron0",
        cdi_device_ids=["aws.amazon.com/neuron=neuron0"],
        share_id="share-1",
    )
    old = dra_v1beta1.Device.FromString(v1_device.SerializeToString())
    assert list(old.request_names) == ["neuron"]
    assert old.pool_name == "node-a"
    assert old.device_name == "neuron0"
    assert list(old.cdi_device_ids) == ["aws.amazon.com/neuron=neuron0"]
    # The older message keeps the field as unknown data, so a relay through
    # it loses nothing.
    relayed = dra_v1.Device.FromString(old.SerializeToString())
    assert relayed.HasField("share_id")
    assert relayed.share_id == "share-1"

    without_share = dra_v1.Device.FromString(
        dra_v1beta1.Device(pool_name="node-a", device_name="neuron1").SerializeToString()
    )
    assert not without_share.HasField("share_id")
    assert without_share.device_name == "neuron1"


# Servicer method names are fixed by the rpc names in the protos.
class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self) -> None:
        self.statuses: list[reg.RegistrationStatus] = []

    async def GetInfo(  # noqa: N802
        self,
        request: reg.InfoRequest,
        context: grpc.aio.ServicerContext[reg.InfoRequest, Awaitable[reg.PluginInfo]],
    ) -> reg.PluginInfo:
        return reg.PluginInfo(
            type="DRAPlugin",
            name="neuron.aws.com",
            endpoint="/var/lib/kubelet/plugins/neuron.aws.com/dra.sock",
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )

    async def NotifyRegistrationStatus(  # noqa: N802
        self,
        request: reg.RegistrationStatus,
        context: grpc.aio.ServicerContext[
            reg.RegistrationStatus, Awaitable[reg.RegistrationStatusResponse]
        ],
    ) -> reg.RegistrationStatusResponse:
        self.statuses.append(request)
        return reg.RegistrationStatusResponse()


class _DRAv1(dra_v1_grpc.DRAPluginServicer):
    async def NodePrepareResources(  # noqa: N802
        self,
        request: dra_v1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            dra_v1.NodePrepareResourcesRequest, Awaitable[dra_v1.NodePrepareResourcesResponse]
        ],
    ) -> dra_v1.NodePrepareResourcesResponse:
        response = dra_v1.NodePrepareResourcesResponse()
        for claim in request.claims:
            if claim.name == "broken":
                response.claims[claim.uid].error = f"cannot prepare {claim.namespace}/{claim.name}"
                continue
            response.claims[claim.uid].devices.append(
                dra_v1.Device(
                    request_names=["neuron"],
                    pool_name="node-a",
                    device_name=f"neuron-{claim.name}",
                    cdi_device_ids=[
                        f"aws.amazon.com/neuron={claim.uid}",
                        f"aws.amazon.com/neuron-claim={claim.uid}",
                    ],
                    share_id=f"share-{claim.uid}",
                )
            )
        return response

    async def NodeUnprepareResources(  # noqa: N802
        self,
        request: dra_v1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            dra_v1.NodeUnprepareResourcesRequest,
            Awaitable[dra_v1.NodeUnprepareResourcesResponse],
        ],
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        response = dra_v1.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].SetInParent()
        return response


class _DRAv1beta1(dra_v1beta1_grpc.DRAPluginServicer):
    async def NodePrepareResources(  # noqa: N802
        self,
        request: dra_v1beta1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            dra_v1beta1.NodePrepareResourcesRequest,
            Awaitable[dra_v1beta1.NodePrepareResourcesResponse],
        ],
    ) -> dra_v1beta1.NodePrepareResourcesResponse:
        return dra_v1beta1.NodePrepareResourcesResponse(
            claims={
                claim.uid: dra_v1beta1.NodePrepareResourceResponse(
                    devices=[
                        dra_v1beta1.Device(
                            request_names=["a", "b"],
                            pool_name="node-b",
                            device_name="neuron3",
                            cdi_device_ids=[f"aws.amazon.com/neuron={claim.name}"],
                        )
                    ]
                )
                for claim in request.claims
            }
        )

    async def NodeUnprepareResources(  # noqa: N802
        self,
        request: dra_v1beta1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            dra_v1beta1.NodeUnprepareResourcesRequest,
            Awaitable[dra_v1beta1.NodeUnprepareResourcesResponse],
        ],
    ) -> dra_v1beta1.NodeUnprepareResourcesResponse:
        return dra_v1beta1.NodeUnprepareResourcesResponse()


HEALTH_UPDATES = [
    [("neuron0", health.HEALTHY), ("neuron1", health.HEALTHY)],
    [("neuron0", health.HEALTHY), ("neuron1", health.UNHEALTHY)],
]


class _Health(health_grpc.DRAResourceHealthServicer):
    async def NodeWatchResources(  # noqa: N802
        self,
        request: health.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[
            health.NodeWatchResourcesRequest, AsyncIterator[health.NodeWatchResourcesResponse]
        ],
    ) -> AsyncIterator[health.NodeWatchResourcesResponse]:
        for n, update in enumerate(HEALTH_UPDATES):
            yield health.NodeWatchResourcesResponse(
                devices=[
                    health.DeviceHealth(
                        device=health.DeviceIdentifier(pool_name="node-a", device_name=name),
                        health=status,
                        last_updated_time=1_700_000_000 + n,
                        health_check_timeout_seconds=30,
                        message="ok" if status == health.HEALTHY else "uncorrectable errors",
                    )
                    for name, status in update
                ]
            )


async def _round_trip(socket_path: str) -> None:
    registration = _Registration()
    server = grpc.aio.server()
    reg_grpc.add_RegistrationServicer_to_server(registration, server)
    dra_v1_grpc.add_DRAPluginServicer_to_server(_DRAv1(), server)
    dra_v1beta1_grpc.add_DRAPluginServicer_to_server(_DRAv1beta1(), server)
    health_grpc.add_DRAResourceHealthServicer_to_server(_Health(), server)
    target = f"unix://{socket_path}"
    assert server.add_insecure_port(target) != 0
    await server.start()
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            info = await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest())
            assert info.type == "DRAPlugin"
            assert info.name == "neuron.aws.com"
            assert info.endpoint == "/var/lib/kubelet/plugins/neuron.aws.com/dra.sock"
            assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]

            await reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=False, error="version mismatch")
            )
            assert [(s.plugin_registered, s.error) for s in registration.statuses] == [
                (False, "version mismatch")
            ]

            v1 = dra_v1_grpc.DRAPluginStub(channel)
            prepared = await v1.NodePrepareResources(
                dra_v1.NodePrepareResourcesRequest(
                    claims=[
                        dra_v1.Claim(namespace="ml", uid="uid-1", name="train"),
                        dra_v1.Claim(namespace="ml", uid="uid-2", name="broken"),
                    ]
                )
            )
            assert set(prepared.claims) == {"uid-1", "uid-2"}
            ok = prepared.claims["uid-1"]
            assert ok.error == ""
            assert len(ok.devices) == 1
            device = ok.devices[0]
            assert list(device.request_names) == ["neuron"]
            assert device.pool_name == "node-a"
            assert device.device_name == "neuron-train"
            assert list(device.cdi_device_ids) == [
                "aws.amazon.com/neuron=uid-1",
                "aws.amazon.com/neuron-claim=uid-1",
            ]
            assert device.HasField("share_id")
            assert device.share_id == "share-uid-1"
            failed = prepared.claims["uid-2"]
            assert failed.error == "cannot prepare ml/broken"
            assert not failed.devices

            unprepared = await v1.NodeUnprepareResources(
                dra_v1.NodeUnprepareResourcesRequest(
                    claims=[dra_v1.Claim(namespace="ml", uid="uid-1", name="train")]
                )
            )
            assert set(unprepared.claims) == {"uid-1"}
            assert unprepared.claims["uid-1"].error == ""

            beta = await dra_v1beta1_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra_v1beta1.NodePrepareResourcesRequest(
                    claims=[dra_v1beta1.Claim(namespace="default", uid="uid-9", name="infer")]
                )
            )
            assert list(beta.claims) == ["uid-9"]
            (beta_device,) = beta.claims["uid-9"].devices
            assert list(beta_device.request_names) == ["a", "b"]
            assert (beta_device.pool_name, beta_device.device_name) == ("node-b", "neuron3")
            assert list(beta_device.cdi_device_ids) == ["aws.amazon.com/neuron=infer"]

            stream = health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                health.NodeWatchResourcesRequest()
            )
            seen: list[list[tuple[str, str, int, int, int, str]]] = []
            async for update in stream:
                seen.append(
                    [
                        (
                            d.device.pool_name,
                            d.device.device_name,
                            d.health,
                            d.last_updated_time,
                            d.health_check_timeout_seconds,
                            d.message,
                        )
                        for d in update.devices
                    ]
                )
            assert seen == [
                [
                    ("node-a", "neuron0", health.HEALTHY, 1_700_000_000, 30, "ok"),
                    ("node-a", "neuron1", health.HEALTHY, 1_700_000_000, 30, "ok"),
                ],
                [
                    ("node-a", "neuron0", health.HEALTHY, 1_700_000_001, 30, "ok"),
                    (
                        "node-a",
                        "neuron1",
                        health.UNHEALTHY,
                        1_700_000_001,
                        30,
                        "uncorrectable errors",
                    ),
                ],
            ]
    finally:
        await server.stop(None)


def test_round_trip_over_unix_socket() -> None:
    # A short private directory keeps the socket path under the ~108 byte
    # limit of sun_path, which deep pytest temp paths can exceed.
    with tempfile.TemporaryDirectory(prefix="dra-") as tmp:
        asyncio.run(_round_trip(str(Path(tmp) / "dra.sock")))
