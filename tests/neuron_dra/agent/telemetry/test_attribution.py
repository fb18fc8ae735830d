from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from api.kubelet.podresources.v1 import api_pb2
from neuron_dra.agent.telemetry import attribution
from neuron_dra.agent.telemetry.attribution import Holder, PodResources, allocation_samples, holders
from neuron_dra.agent.telemetry.metrics import Metrics
from neuron_dra.hardware.discovery import discover
from tests.sysfs_tree import FakeNode

DRIVER = "neuron.aws.com"


def answer(
    *pods: tuple[str, str, str, str, list[tuple[str, str, str]]],
) -> api_pb2.ListPodResourcesResponse:
    """(namespace, pod, container, claim, [(driver, pool, device)]) per container."""
    response = api_pb2.ListPodResourcesResponse()
    for namespace, pod, container, claim, devices in pods:
        entry = response.pod_resources.add(name=pod, namespace=namespace)
        held = entry.containers.add(name=container).dynamic_resources.add(
            claim_name=claim, claim_namespace=namespace
        )
        for driver, pool, device in devices:
            held.claim_resources.add(driver_name=driver, pool_name=pool, device_name=device)
    return response


def test_only_this_drivers_devices_of_this_pool_are_held() -> None:
    response = answer(
        ("ml", "train-0", "main", "gpus", [(DRIVER, "node-a", "neurondevice3")]),
        ("ml", "train-0", "sidecar", "efa", [("efa.networking.k8s.aws", "node-a", "efa0")]),
        ("ml", "other", "main", "c", [(DRIVER, "node-b", "neurondevice1")]),  # another pool
    )
    assert holders(response, DRIVER, "node-a") == (
        Holder("ml", "train-0", "main", "gpus", "neurondevice3"),
    )


def test_each_container_gets_one_series_per_physical_device(fake_node: FakeNode) -> None:
    inventory = discover(fake_node("trn2u.48xlarge")).inventory
    held = [
        Holder("ml", "a", "main", "one", "neurondevice3"),
        Holder("ml", "a", "side", "one", "neurondevice3"),  # a claim shared by containers
        Holder("ml", "b", "main", "core", "neuroncore25"),  # at LNC 2, 4 a device: device 6
        Holder("ml", "c", "main", "all", "neuronnode"),
        Holder("ml", "d", "main", "gone", "neurondevice99"),  # not on this node
    ]
    samples, dropped = allocation_samples(held, inventory, "node-a")
    assert dropped == 0
    rows = {
        (dict(s.labels)["pod"], dict(s.labels)["container"], dict(s.labels)["neuron_device"])
        for s in samples
    }
    assert {r for r in rows if r[0] != "c"} == {
        ("a", "main", "3"),
        ("a", "side", "3"),
        ("b", "main", "6"),
    }
    assert {r[2] for r in rows if r[0] == "c"} == {str(i) for i in range(16)}
    first = dict(samples[0].labels)
    assert first == {
        "node": "node-a",
        "neuron_device": "3",
        "device": "neurondevice3",
        "serial_number": inventory.devices[3].serial_number,
        "namespace": "ml",
        "pod": "a",
        "container": "main",
        "claim": "one",
    }
    assert all(s.value == 1.0 and s.name == "neuron_dra_device_allocation_info" for s in samples)


def test_series_are_capped(
    fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(attribution, "MAX_ALLOCATION_SERIES", 20)
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    held = [Holder("ml", f"p{i}", "main", "c", "neuronnode") for i in range(2)]
    samples, dropped = allocation_samples(held, inventory, "n")
    assert (len(samples), dropped) == (20, 12)
    # The scrapes of a capped node say so once, not at each scrape, and once more when
    # it is capped no longer.
    client = PodResources(Path("/nonexistent/kubelet.sock"), DRIVER, "n")
    client.holders = tuple(held)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert len(client.samples(inventory, "n")) == 20
        client.holders = tuple(held[:1])
        assert len(client.samples(inventory, "n")) == 16
        client.samples(inventory, "n")
    capped = [r for r in caplog.records if "capped" in r.getMessage()]
    assert [r.getMessage() for r in capped] == [
        "allocation info capped at 20 series; 12 left out",
        "allocation info no longer capped",
    ]


def test_a_kubelet_that_does_not_answer_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = PodResources(tmp_path / "pod-resources/kubelet.sock", DRIVER, "node-a")

    async def twice() -> list[object]:
        try:
            return [await client.list(timeout_s=0.5) for _ in range(2)]
        finally:
            await client.close()

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(twice()) == [None, None]
    assert not client.up
    said = [r.getMessage() for r in caplog.records if "PodResources" in r.getMessage()]
    assert len(said) == 1 and "devices are not attributed to pods" in said[0]


class CountingKubelet:
    """The kubelet's PodResources List, counted; one container holding neurondevice3."""

    def __init__(self) -> None:
        self.lists = 0

    async def List(  # noqa: N802 (name fixed by the protocol)
        self, request: api_pb2.ListPodResourcesRequest, context: object
    ) -> api_pb2.ListPodResourcesResponse:
        self.lists += 1
        return answer(("ml", "train-0", "main", "gpus", [(DRIVER, "node-a", "neurondevice3")]))


async def serve_kubelet(socket: Path, kubelet: CountingKubelet) -> grpc.aio.Server:
    server = grpc.aio.server()
    listing = grpc.unary_unary_rpc_method_handler(
        kubelet.List,
        request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
        response_serializer=api_pb2.ListPodResourcesResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": listing}),)
    )
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    return server


async def scrape(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:100]
    return answer


def scraped_by_many(
    tmp_path: Path, client: PodResources, test: Callable[[int, CountingKubelet], Awaitable[None]]
) -> None:
    """Serve /metrics with the client as the agent wires it, beside a counting kubelet."""
    kubelet = CountingKubelet()

    async def main() -> None:
        server = await serve_kubelet(tmp_path / "kubelet.sock", kubelet)
        metrics = Metrics()
        metrics.before_scrape = client.refresh
        endpoint = await metrics.serve(0, "127.0.0.1")
        try:
            await test(endpoint.sockets[0].getsockname()[1], kubelet)
        finally:
            endpoint.close()
            await client.close()
            await server.stop(0)

    asyncio.run(main())


SCRAPERS, SCRAPES_EACH = 8, 10


def test_scrapers_share_one_kubelet_call_per_interval(tmp_path: Path) -> None:
    """However many scrape and however often, the kubelet is asked once an interval:
    its PodResources server allows 100 calls a second to all its clients."""
    client = PodResources(tmp_path / "kubelet.sock", DRIVER, "node-a")

    async def test(port: int, kubelet: CountingKubelet) -> None:
        async def scraper() -> None:
            for _ in range(SCRAPES_EACH):
                await scrape(port)

        await asyncio.gather(*(scraper() for _ in range(SCRAPERS)))
        assert kubelet.lists == 1
        assert client.up
        assert client.holders == (Holder("ml", "train-0", "main", "gpus", "neurondevice3"),)

    scraped_by_many(tmp_path, client, test)


def test_the_kubelet_is_asked_again_once_the_interval_is_over(tmp_path: Path) -> None:
    now = [100.0]
    client = PodResources(
        tmp_path / "kubelet.sock", DRIVER, "node-a", max_age_s=30.0, clock=lambda: now[0]
    )

    async def test(port: int, kubelet: CountingKubelet) -> None:
        await asyncio.gather(*(scrape(port) for _ in range(SCRAPERS)))
        now[0] += 29.9
        await scrape(port)
        assert kubelet.lists == 1
        now[0] += 0.1
        await asyncio.gather(*(scrape(port) for _ in range(SCRAPERS)))
        assert kubelet.lists == 2

    scraped_by_many(tmp_path, client, test)
