"""Claims' `status.devices` writes: each claim retried on its own schedule.

The API is a fake of the two calls the writer makes, over claims held in memory;
the clock is injected, and `write_due` is one pass of the writer's loop.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import ClaimPrepared, ClaimUnprepared
from neuron_dra.agent.claims.plan import PreparedClaim, plan
from neuron_dra.agent.claims.statuswriter import ERRORS_METRIC, StatusWriter
from neuron_dra.agent.telemetry.metrics import Metrics
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim
from tests.sysfs_tree import FakeNode

POOL = "node-a"
Json = dict[str, Any]


class Api:
    """The API server's answers to the writer's two calls, over claims in memory."""

    def __init__(self) -> None:
        self.claims: dict[str, Json] = {}
        self.failing: dict[str, int] = {}  # claim name -> the status its applies get
        self.applies: list[str] = []  # claim names, in the order applies came
        self.arrived: dict[str, asyncio.Event] = {}
        self.reads = 0

    def get_resource_claim(self, namespace: str, name: str) -> Json:
        self.reads += 1
        if name not in self.claims:
            raise ApiError(404, f"resourceclaims {name!r} not found")
        return copy.deepcopy(self.claims[name])

    async def apply_claim_status(self, namespace: str, name: str, body: Json, manager: str) -> Json:
        assert manager == DRIVER_NAME
        self.applies.append(name)
        self.arrived.setdefault(name, asyncio.Event()).set()
        if name in self.failing:
            raise ApiError(self.failing[name], "etcdserver: request timed out")
        claim = self.claims[name]
        claim["status"]["devices"] = (body.get("status") or {}).get("devices") or []
        return copy.deepcopy(claim)

    async def applied(self, name: str) -> None:
        await self.arrived.setdefault(name, asyncio.Event()).wait()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class NoJitter(random.Random):
    """Each backoff step whole: 1, 2, 4, ... seconds."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.fixture
def inventory(fake_node: FakeNode) -> NodeInventory:
    return discover(fake_node("trn2.48xlarge")).inventory


def claim(api: Api, inventory: NodeInventory, name: str, device: str) -> PreparedClaim:
    """A claim allocated `device`, known to the API, as its prepare planned it."""
    uid = f"0c7d2a1e-1111-4222-8333-{abs(hash(name)) % 10**12:012d}"
    api.claims[name] = allocated_claim(uid, [device], pool=POOL, name=name)
    return plan(ClaimRef("default", name, uid), api.claims[name], inventory, POOL)


async def settled() -> None:
    """Until what other threads handed to the loop (`call_soon_threadsafe`) has run."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def test_a_claim_whose_write_keeps_failing_does_not_delay_another(
    inventory: NodeInventory,
) -> None:
    """The writer's own loop: claim A's apply fails, its retry 10 minutes off; claim B,
    prepared meanwhile, is written at once, not after A's backoff."""

    async def main() -> None:
        api = Api()
        a, b = (
            claim(api, inventory, "a", "neurondevice0"),
            claim(api, inventory, "b", "neurondevice1"),
        )
        api.failing["a"] = 500
        backoff = Backoff(initial_s=600.0, max_s=600.0)
        writer = StatusWriter(api, Metrics(), lambda: inventory, POOL, backoff=backoff)
        loop = asyncio.create_task(writer.run())
        try:
            writer.prepared(ClaimPrepared(a, inventory))
            await api.applied("a")
            writer.prepared(ClaimPrepared(b, inventory))
            # A bound on a failure only: B's apply is what the test waits for.
            await asyncio.wait_for(api.applied("b"), timeout=20)
            assert api.applies == ["a", "b"]
            assert [e["device"] for e in api.claims["b"]["status"]["devices"]] == ["neurondevice1"]
        finally:
            loop.cancel()

    run(main)


def errors(metrics: Metrics) -> dict[str, float]:
    """The write errors counted, by reason."""
    found = {}
    for line in metrics.render().splitlines():
        if line.startswith(f"{ERRORS_METRIC}{{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('reason="')[1].split('"')[0]] = float(value)
    return found


def test_each_claim_backs_off_on_its_own_schedule(inventory: NodeInventory) -> None:
    async def main() -> None:
        api, clock, metrics = Api(), Clock(), Metrics()
        a, b = (
            claim(api, inventory, "a", "neurondevice0"),
            claim(api, inventory, "b", "neurondevice1"),
        )
        api.failing["a"] = 422  # refused, say by an admission policy, while A holds its devices
        steps = Backoff(initial_s=1.0, max_s=60.0, rng=NoJitter())
        writer = StatusWriter(
            api, metrics, lambda: inventory, POOL, backoff=steps, clock=clock, coalesce_s=0
        )

        writer.prepared(ClaimPrepared(a, inventory))
        await settled()
        assert await writer.write_due() == 1.0 and api.applies == ["a"]
        writer.prepared(ClaimPrepared(b, inventory))
        await settled()
        assert await writer.write_due() == 1.0  # B written, A's retry not due yet
        assert api.applies == ["a", "b"] and writer.pending == 1
        waits: list[float] = []
        for _ in range(8):
            clock.now += waits[-1] if waits else 1.0
            wait = await writer.write_due()
            assert wait is not None
            waits.append(wait)
        assert waits == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]  # capped at 60 s
        assert api.applies.count("a") == 9 and errors(metrics) == {"refused": 9.0}

        clock.now += 30.0  # halfway through A's wait: not tried
        assert await writer.write_due() == 30.0 and api.applies.count("a") == 9
        del api.failing["a"]
        clock.now += 30.0
        assert await writer.write_due() is None and writer.pending == 0
        assert [e["device"] for e in api.claims["a"]["status"]["devices"]] == ["neurondevice0"]

    run(main)


def test_a_later_write_of_a_backing_off_claim_is_tried_at_once(inventory: NodeInventory) -> None:
    """An unprepare replaces the failing apply: the clear is not held back by its backoff
    (the failed apply may have landed, so the clear is sent, with no read first)."""

    async def main() -> None:
        api, clock = Api(), Clock()
        a = claim(api, inventory, "a", "neurondevice0")
        api.failing["a"] = 503
        steps = Backoff(initial_s=1.0, max_s=60.0, rng=NoJitter())
        writer = StatusWriter(
            api, Metrics(), lambda: inventory, POOL, backoff=steps, clock=clock, coalesce_s=0
        )
        writer.prepared(ClaimPrepared(a, inventory))
        await settled()
        assert await writer.write_due() == 1.0
        writer.unprepared(ClaimUnprepared(a.claim))
        del api.failing["a"]
        await settled()
        assert await writer.write_due() is None and writer.pending == 0
        assert api.applies == ["a", "a"] and api.reads == 0

        writer.prepared(ClaimPrepared(a, inventory))  # prepared again, and now written at once
        await settled()
        assert await writer.write_due() is None and api.applies == ["a", "a", "a"]

    run(main)


def test_a_claim_gone_while_backing_off_is_dropped(inventory: NodeInventory) -> None:
    async def main() -> None:
        api, clock = Api(), Clock()
        a = claim(api, inventory, "a", "neurondevice0")
        api.failing["a"] = 500
        writer = StatusWriter(api, Metrics(), lambda: inventory, POOL, clock=clock, coalesce_s=0)
        writer.prepared(ClaimPrepared(a, inventory))
        await settled()
        assert (delay := await writer.write_due()) is not None and 0.5 <= delay <= 1.0
        del api.claims["a"]
        api.failing["a"] = 404
        clock.now += 1.0
        assert await writer.write_due() is None and writer.pending == 0

    run(main)
