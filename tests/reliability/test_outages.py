"""The plugin's neighbours failing: the API server, the kubelet, and slices changed behind it.

Each test asserts a bound: how long until the plugin's published state is right
again, and how long a kubelet call may take while the API server is away (the
kubelet gives up on a NodePrepareResources call after 45 s).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from api.kubelet.dra.v1 import api_pb2 as dra
from api.kubelet.dra.v1 import api_pb2_grpc as dra_grpc
from consts import DRIVER_NAME
from neuron_dra.agent.slices.publisher import BACKOFF_MAX_S
from neuron_dra_harness.nodes import SimulatedNode
from tests.reliability.test_crash_storm import allocated_claim

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NODE = "outage"
KUBELET_CALL_TIMEOUT_S = 45.0
OUTAGE_S = 30.0
Obj = dict[str, Any]


def claim_ref(obj: Obj) -> dra.Claim:
    meta = obj["metadata"]
    return dra.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])


async def _call(node: SimulatedNode, method: str, claim: dra.Claim) -> tuple[str, float]:
    socket = node.side.plugins_dir / DRIVER_NAME / "dra.sock"
    started = time.monotonic()
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = dra_grpc.DRAPluginStub(channel)
        if method == "prepare":
            prepared = (
                await stub.NodePrepareResources(
                    dra.NodePrepareResourcesRequest(claims=[claim]),
                    timeout=KUBELET_CALL_TIMEOUT_S,
                )
            ).claims[claim.uid]
            assert bool(prepared.error) != bool(prepared.devices), prepared
            error = prepared.error
        else:
            unprepared = await stub.NodeUnprepareResources(
                dra.NodeUnprepareResourcesRequest(claims=[claim]), timeout=KUBELET_CALL_TIMEOUT_S
            )
            error = unprepared.claims[claim.uid].error
    return error, time.monotonic() - started


def call(node: SimulatedNode, method: str, claim: dra.Claim) -> tuple[str, float]:
    """(error, seconds) of one kubelet call over the plugin's DRA socket."""
    return asyncio.run(_call(node, method, claim))


def devices_of(slices: list[Obj]) -> list[Obj]:
    return sorted(
        (d for s in slices for d in s["spec"].get("devices") or []), key=lambda d: d["name"]
    )


def wait_for_slices(
    node: SimulatedNode, expected: list[Obj], what: str, bound: float, *, gone: str = ""
) -> float:
    """Seconds until the node's slices publish exactly `expected` devices (and the slice
    named `gone` is no longer among them); fails after `bound`."""
    started = time.monotonic()

    def check() -> bool:
        slices = node.slices()
        names = {s["metadata"]["name"] for s in slices}
        return gone not in names and devices_of(slices) == expected

    node.cluster.wait_for(what, check, timeout=bound, interval=0.02)
    return time.monotonic() - started


def test_slices_deleted_or_edited_behind_the_plugins_back(node: SimulatedNode) -> None:
    cluster = node.cluster
    before = node.slices()
    expected = devices_of(before)

    # A slice of devices (the pool may lead with a slice of shared counters).
    gone = next(s["metadata"]["name"] for s in before if s["spec"].get("devices"))
    cluster.delete("resource.k8s.io/v1", "ResourceSlice", gone)
    assert wait_for_slices(node, expected, "deleted slice re-created", 2.0, gone=gone) < 2.0

    # An edit (another controller, a person with kubectl) is put back too.
    current = next(s for s in node.slices() if s["spec"].get("devices"))
    edited = dict(current)
    edited["spec"] = dict(current["spec"])
    edited["spec"]["devices"] = [
        {**d, "attributes": {**d.get("attributes", {}), "deviceId": {"int": 99}}}
        for d in current["spec"]["devices"]
    ]
    path = cluster.path("resource.k8s.io/v1", "ResourceSlice", current["metadata"]["name"])
    stored = cluster.request("PUT", path, edited)
    assert devices_of([stored]) != expected  # the plugin may already be undoing it
    assert wait_for_slices(node, expected, "edited slice restored", 2.0) < 2.0


def test_kubelet_restart(node: SimulatedNode) -> None:
    cluster = node.cluster
    expected = devices_of(node.slices())
    cluster.stop_kubelet_side(node.name)
    # Returns once the restarted kubelet side has wiped the node's slices, as a kubelet does.
    node.side = cluster.start_kubelet_side(node.name)
    started = time.monotonic()
    node.side.wait_for_plugin(DRIVER_NAME, timeout=5.0)
    assert time.monotonic() - started < 5.0
    assert wait_for_slices(node, expected, "slices back after the kubelet restart", 5.0) < 5.0
    assert any(e["event"] == "slices-wiped" for e in node.side.report())


def test_api_server_outage(node: SimulatedNode) -> None:
    cluster = node.cluster
    plugin = node.plugin
    assert plugin is not None
    expected = devices_of(node.slices())
    steady, during, late = (
        claim_ref(allocated_claim(cluster, f"outage-{i}", NODE, device))
        for i, device in enumerate((0, 1, 2))
    )
    assert call(node, "prepare", steady)[0] == ""

    cluster.stop_apiserver()
    outage_started = time.monotonic()

    # A claim the plugin has prepared needs no API server: repeated calls still succeed.
    assert call(node, "prepare", steady)[0] == ""
    error, seconds = call(node, "prepare", during)
    assert error.startswith(f"claim {during.namespace}/{during.name} ({during.uid}): ApiError: ")
    assert "API server unreachable" in error
    assert seconds < KUBELET_CALL_TIMEOUT_S
    assert during.uid not in node.checkpointed()
    assert node.cdi_files() == [f"{DRIVER_NAME}-{steady.uid}.json"]
    # Unprepare never needs the API server.
    assert call(node, "unprepare", steady)[0] == ""

    # The outage's length is the fault under test, not a wait for some event.
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_started)))
    error, seconds = call(node, "prepare", late)
    assert "API server unreachable" in error
    assert seconds < KUBELET_CALL_TIMEOUT_S
    assert plugin.alive()

    cluster.start_apiserver()
    restarted = time.monotonic()
    assert wait_for_slices(node, expected, "slices after the outage", 10.0) < 10.0
    # The kubelet's retries now succeed.
    for claim in (during, late):
        assert call(node, "prepare", claim)[0] == ""
    assert node.checkpointed() == {during.uid, late.uid}
    assert time.monotonic() - restarted < 10.0
    assert plugin.alive()
    for claim in (during, late):
        assert call(node, "unprepare", claim)[0] == ""
    assert node.cdi_files() == []
    # The plugin reconciles again: a slice deleted now is re-created. Its retries back off
    # up to BACKOFF_MAX_S while the server is away, so that is how late it may notice.
    gone = next(s["metadata"]["name"] for s in node.slices() if s["spec"].get("devices"))
    cluster.delete("resource.k8s.io/v1", "ResourceSlice", gone)
    bound = BACKOFF_MAX_S + 5.0
    took = wait_for_slices(node, expected, "slice re-created after the outage", bound, gone=gone)
    assert took < bound
