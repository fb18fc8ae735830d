"""What a prepare and an unprepare cost the API server, counted by the API server;
and the claim status writer alone, what each sequence it is told of costs.

The kubelet's calls go straight to the agent's DRA socket, one claim at a time, and
each claim's status is let land before it is unprepared and cleared. The count is
kube-apiserver's own `apiserver_request_total`, read before and after: no other
client of this cluster GETs a ResourceClaim (the scheduler and controllers watch
them), so every GET of one counted here is the agent's. A prepare reads its claim
once; the status write that follows, and the unprepare's clear, read nothing.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.kube import Kube
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import ClaimPrepared, ClaimUnprepared
from neuron_dra.agent.claims.plan import PreparedClaim, plan
from neuron_dra.agent.claims.statuswriter import StatusWriter
from neuron_dra.agent.telemetry.metrics import Metrics
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import DEVICE_CLASSES, SimulatedNode, add_simulated_node
from tests.reliability.test_crash_storm import allocated_claim
from tests.reliability.test_outages import call, claim_ref
from tests.sysfs_tree import FakeNode

pytestmark = pytest.mark.e2e

NODE = "reads-a"
CLAIMS = 6
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[SimulatedNode]:
    cluster.apply_yaml(DEVICE_CLASSES.read_text())
    found = add_simulated_node(cluster, NODE, "trn2.48xlarge")
    yield found
    if found.plugin is not None:
        cluster.stop_process(found.plugin)
    cluster.stop_kubelet_side(NODE)


def claim_requests(cluster: Cluster) -> dict[str, float]:
    """kube-apiserver's count of ResourceClaim requests so far, by verb and subresource."""
    request = urllib.request.Request(
        cluster.server + "/metrics", headers={"Authorization": f"Bearer {cluster.token}"}
    )
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name != "apiserver_request_total":
                continue
            if labels.get("resource") == "resourceclaims":
                key = f"{labels.get('verb')} {labels.get('subresource') or '-'}"
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def entries(cluster: Cluster, name: str) -> list[Obj]:
    """The agent's status entries of claim `name`, read with a LIST (not counted as a GET)."""
    listed = cluster.list_objects("resource.k8s.io/v1", "ResourceClaim", "default")
    [obj] = [c for c in listed if c["metadata"]["name"] == name]
    devices = (obj.get("status") or {}).get("devices") or []
    return [d for d in devices if d.get("driver") == DRIVER_NAME]


def wait_for_entries(cluster: Cluster, name: str, *, present: bool) -> None:
    deadline = time.monotonic() + 20.0
    while bool(entries(cluster, name)) != present:
        assert time.monotonic() < deadline, (
            f"{name}'s status {'not written' if present else 'kept'}"
        )
        time.sleep(0.05)


def test_a_prepare_reads_its_claim_once(cluster: Cluster, node: SimulatedNode) -> None:
    """Each claim prepared, its status written, unprepared and its status cleared: one
    GET of the claim for all of it, one apply to write and one to clear."""
    claims = [allocated_claim(cluster, f"reads-{i}", NODE, i) for i in range(CLAIMS)]
    before = claim_requests(cluster)
    for obj in claims:
        name = obj["metadata"]["name"]
        error, _ = call(node, "prepare", claim_ref(obj))
        assert not error
        wait_for_entries(cluster, name, present=True)
        error, _ = call(node, "unprepare", claim_ref(obj))
        assert not error
        wait_for_entries(cluster, name, present=False)
    # The server counts a request once it has answered it: the last clear's apply may be
    # counted a moment after its effect is seen.
    deadline = time.monotonic() + 10.0
    while True:
        after = claim_requests(cluster)
        spent = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
        writes = sum(v for k, v in spent.items() if k.endswith(" status"))
        if writes >= 2 * CLAIMS or time.monotonic() > deadline:
            break
    assert spent.get("GET -", 0.0) == CLAIMS, spent
    assert writes == 2 * CLAIMS, spent


# The status writer alone, against the same kube-apiserver: what each sequence of
# prepares and unprepares it is told of costs the server.


def writer_claim(
    cluster: Cluster, name: str, device: int, inventory: NodeInventory
) -> PreparedClaim:
    """A claim allocated `neurondevice{device}` of NODE's pool, as its prepare planned it."""
    obj = allocated_claim(cluster, name, NODE, device)
    meta = obj["metadata"]
    return plan(ClaimRef(meta["namespace"], meta["name"], meta["uid"]), obj, inventory, NODE)


async def written(writer: StatusWriter) -> None:
    """Until the writer has no write pending: from then on it makes no request."""
    await asyncio.sleep(0)  # what `prepared` and `unprepared` handed to the loop
    while writer.pending:
        await asyncio.sleep(0.02)


def spent_on(
    cluster: Cluster,
    inventory: NodeInventory,
    steps: Callable[[StatusWriter], Awaitable[None]],
) -> Obj:
    """The claim requests a writer makes for `steps`, which end with nothing pending."""

    async def main() -> None:
        kube = Kube.connect(cluster.kubeconfig)
        writer = StatusWriter(kube, Metrics(), lambda: inventory, NODE)
        task = asyncio.create_task(writer.run())
        try:
            await steps(writer)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            kube.close()

    before = claim_requests(cluster)
    asyncio.run(main())
    after = claim_requests(cluster)
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


@pytest.fixture
def inventory(fake_node: FakeNode) -> NodeInventory:
    return discover(fake_node("trn2.48xlarge")).inventory


def test_a_claim_unprepared_before_its_write_costs_the_server_nothing(
    cluster: Cluster, node: SimulatedNode, inventory: NodeInventory
) -> None:
    prepared = writer_claim(cluster, "writer-quick", 8, inventory)

    async def steps(writer: StatusWriter) -> None:
        writer.prepared(ClaimPrepared(prepared, inventory))
        writer.unprepared(ClaimUnprepared(prepared.claim))
        await written(writer)

    assert spent_on(cluster, inventory, steps) == {}
    assert entries(cluster, "writer-quick") == []


def test_a_burst_of_writes_of_one_claim_is_one_apply(
    cluster: Cluster, node: SimulatedNode, inventory: NodeInventory
) -> None:
    prepared = writer_claim(cluster, "writer-burst", 9, inventory)

    async def steps(writer: StatusWriter) -> None:
        for _ in range(5):
            writer.prepared(ClaimPrepared(prepared, inventory))
        await written(writer)

    assert spent_on(cluster, inventory, steps) == {"APPLY status": 1.0}
    assert [e["device"] for e in entries(cluster, "writer-burst")] == ["neurondevice9"]


def test_a_clear_applies_without_reading_the_claim(
    cluster: Cluster, node: SimulatedNode, inventory: NodeInventory
) -> None:
    """Written, then cleared once its write landed: two applies, no GET."""
    prepared = writer_claim(cluster, "writer-clear", 10, inventory)

    async def steps(writer: StatusWriter) -> None:
        writer.prepared(ClaimPrepared(prepared, inventory))
        await written(writer)
        writer.unprepared(ClaimUnprepared(prepared.claim))
        await written(writer)

    assert spent_on(cluster, inventory, steps) == {"APPLY status": 2.0}
    assert entries(cluster, "writer-clear") == []


def test_a_restored_claim_is_read_once_and_cleared_without_another_read(
    cluster: Cluster, node: SimulatedNode, inventory: NodeInventory
) -> None:
    """A claim prepared before the start, with no entries: read, planned and written;
    its unprepare then clears it with an apply alone."""
    prepared = writer_claim(cluster, "writer-restored", 11, inventory)

    async def steps(writer: StatusWriter) -> None:
        writer.restored([prepared.claim])
        await written(writer)
        writer.unprepared(ClaimUnprepared(prepared.claim))
        await written(writer)

    assert spent_on(cluster, inventory, steps) == {"GET -": 1.0, "APPLY status": 2.0}
    assert entries(cluster, "writer-restored") == []


def test_a_writer_turned_off_writes_nothing(
    cluster: Cluster, node: SimulatedNode, inventory: NodeInventory
) -> None:
    prepared = writer_claim(cluster, "writer-off", 12, inventory)

    async def main() -> None:
        kube = Kube.connect(cluster.kubeconfig)
        writer = StatusWriter(kube, Metrics(), lambda: inventory, NODE, enabled=False)
        task = asyncio.create_task(writer.run())
        try:
            writer.restored([prepared.claim])
            writer.prepared(ClaimPrepared(prepared, inventory))
            await asyncio.sleep(0)
            assert writer.pending == 0
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            kube.close()

    before = claim_requests(cluster)
    asyncio.run(main())
    assert claim_requests(cluster) == before
