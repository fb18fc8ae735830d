"""The real plugin killed again and again at its fault points while claims come and go.

The kubelet's contract is simple: it retries a call until it succeeds. Whatever
point the plugin dies at, the retries must converge on exactly the state the
calls describe: one CDI spec and one checkpoint entry per prepared claim,
nothing for unprepared ones, and no device recorded for two claims.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import grpc
import pytest

from api.kubelet.dra.v1 import api_pb2 as dra
from api.kubelet.dra.v1 import api_pb2_grpc as dra_grpc
from consts import DRIVER_NAME
from neuron_dra.agent.claims.checkpoint import decode
from neuron_dra.agent.claims.preparer import STEPS, Step
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NODE = "storm"
CLAIMS = 100
# Claims prepared at once; fewer than the node's 16 devices, so allocations never overlap.
WINDOW = 8
RESTART_CHANCE = 0.2
Obj = dict[str, Any]
# Reconnect quickly to a restarted plugin; the defaults back off for seconds.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 20),
    ("grpc.min_reconnect_backoff_ms", 20),
    ("grpc.max_reconnect_backoff_ms", 100),
]


def allocated_claim(cluster: Cluster, name: str, node: str, device: int) -> Obj:
    """A claim allocated one device, written through the status subresource as the
    scheduler does, so the plugin's GET sees a real allocation."""
    claim = cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [{"name": "neurons", "exactly": {"deviceClassName": DRIVER_NAME}}]
                }
            },
        }
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "neurons",
                        "driver": DRIVER_NAME,
                        "pool": node,
                        "device": f"neurondevice{device}",
                    }
                ]
            }
        }
    }
    path = cluster.path("resource.k8s.io/v1", "ResourceClaim", name, "default")
    updated: Obj = cluster.request("PUT", path + "/status", claim)
    return updated


class Kubelet:
    """Calls the plugin's DRA socket and retries, restarting the plugin when it died."""

    def __init__(self, node: SimulatedNode, rnd: random.Random) -> None:
        self.node = node
        self.rnd = rnd
        self.socket = node.side.plugins_dir / DRIVER_NAME / "dra.sock"
        self.crashes: dict[str, int] = dict.fromkeys(STEPS, 0)
        self.restarts = 0
        self.armed: Step | None = None

    def restart(self, fault: Step | None) -> None:
        self.node.stop_plugin()
        self.armed = fault
        self.restarts += 1
        # Not waiting for registration: the calls below wait for the socket themselves.
        self.node.start_plugin(crash_after=fault, wait=False)

    async def call(self, method: str, claim: dra.Claim) -> Any:
        """One kubelet call, retried until the plugin answers it."""
        for _ in range(10):
            # A new channel per attempt: the old one backs off from the dead plugin's socket.
            async with grpc.aio.insecure_channel(
                f"unix://{self.socket}", options=CHANNEL_OPTIONS
            ) as channel:
                stub = dra_grpc.DRAPluginStub(channel)
                try:
                    if method == "prepare":
                        return await stub.NodePrepareResources(
                            dra.NodePrepareResourcesRequest(claims=[claim]),
                            timeout=30,
                            wait_for_ready=True,
                        )
                    return await stub.NodeUnprepareResources(
                        dra.NodeUnprepareResourcesRequest(claims=[claim]),
                        timeout=30,
                        wait_for_ready=True,
                    )
                except grpc.aio.AioRpcError as err:
                    plugin = self.node.plugin
                    assert plugin is not None
                    # The only way a call may fail here is the plugin killing itself.
                    assert plugin.process.wait(timeout=10) == -9, err
                    assert self.armed is not None
                    self.crashes[self.armed] += 1
            # Sometimes the restarted plugin is armed again, to crash in a retry.
            self.restart(self.rnd.choice(STEPS) if self.rnd.random() < 0.3 else None)
        raise AssertionError(f"{method} of {claim.name} never succeeded")


def test_crash_storm(node: SimulatedNode) -> None:
    asyncio.run(storm(node))


async def storm(node: SimulatedNode) -> None:
    cluster = node.cluster
    rnd = random.Random(20261122)
    objects = [allocated_claim(cluster, f"storm-{i}", NODE, i % 16) for i in range(CLAIMS)]
    refs = [
        dra.Claim(namespace="default", name=o["metadata"]["name"], uid=o["metadata"]["uid"])
        for o in objects
    ]
    kubelet = Kubelet(node, rnd)
    prepared: set[str] = set()

    for i in range(CLAIMS):
        ops = [("prepare", i)] + ([("unprepare", i - WINDOW)] if i >= WINDOW else [])
        for method, index in ops:
            if rnd.random() < RESTART_CHANCE:
                kubelet.restart(rnd.choice(STEPS))
            ref = refs[index]
            answer = (await kubelet.call(method, ref)).claims[ref.uid]
            assert not answer.error, answer.error
            if method == "prepare":
                name = f"neurondevice{index % 16}"
                assert [(d.pool_name, d.device_name) for d in answer.devices] == [(NODE, name)]
                assert list(answer.devices[0].cdi_device_ids) == [
                    f"{DRIVER_NAME}/neuron={ref.uid}-{name}",
                    f"{DRIVER_NAME}/metadata={ref.uid}_neurons",
                ]
                prepared.add(ref.uid)
            else:
                prepared.discard(ref.uid)

    # Every fault point was hit, so each kind of wreckage was met and repaired.
    assert all(kubelet.crashes.values()), kubelet.crashes
    # The end state, read after the last plugin has stopped writing.
    node.stop_plugin()
    assert prepared == {r.uid for r in refs[CLAIMS - WINDOW :]}
    assert node.cdi_files() == sorted(f"{DRIVER_NAME}-{uid}.json" for uid in prepared)
    metadata = [n for n in node.metadata_files() if n.endswith(".json") and "/" not in n]
    assert metadata == sorted(f"{DRIVER_NAME}_metadata_{uid}_neurons.json" for uid in prepared)
    _, records = decode(node.checkpoint.read_bytes())
    assert set(records) == prepared
    owners: dict[str, list[str]] = {}
    for uid, record in records.items():
        for device in record.devices:
            owners.setdefault(device.device, []).append(uid)
    assert all(len(uids) == 1 for uids in owners.values()), owners
    leftovers = [
        p.name
        for d in (node.cdi_dir, node.checkpoint.parent)
        for p in d.iterdir()
        if p.name.endswith(".tmp") or ".corrupt-" in p.name
    ]
    assert leftovers == []
    # A clean start on the storm's leftovers; then the rest is unprepared as pods go away.
    kubelet.restart(None)
    for ref in refs[CLAIMS - WINDOW :]:
        assert not (await kubelet.call("unprepare", ref)).claims[ref.uid].error
    assert node.cdi_files() == []
    assert node.metadata_files() == []
    assert node.checkpointed() == set()
    print(f"plugin restarts: {kubelet.restarts}, self-kills by fault point: {kubelet.crashes}")
