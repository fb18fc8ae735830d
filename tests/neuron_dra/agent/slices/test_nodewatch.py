"""Following the agent's own Node, and keeping the labels it owns, against a local HTTP
peer that answers as an API server under stress does: LISTs served, watches refused
(429 with Retry-After, or 410 Gone), or a watch that delivers and ends.

Waits are recorded, not slept: what is asserted is how many requests a node sends
and how long it would wait between them.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable

import pytest

from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.apiclient.kube import ApiConfig, ApiError, Kube
from neuron_dra.agent.objects.node import Node, decode
from neuron_dra.agent.slices.labels import LabelKeeper
from neuron_dra.agent.slices.nodewatch import NodeWatch
from neuron_dra.resources.nodelabels import label_patch
from tests.neuron_dra.agent.stressed_api import (
    BOUND_S,
    NAME,
    Server,
    Sleep,
    first_minute,
    waits_of,
)


def follow(
    server: Server, kube: Kube, passes: int, keeper: LabelKeeper | None = None, *, lists: int = 0
) -> list[float]:
    """Run a NodeWatch until it has waited `passes` times (or the server served `lists`
    LISTs); the waits it asked for."""

    async def seen(node: Node | None) -> None:
        if keeper is not None:
            await keeper.keep(node)

    def watch(sleep: Sleep) -> Awaitable[None]:
        backoff = Backoff(initial_s=0.2, max_s=30.0, rng=random.Random(1))
        return NodeWatch(kube, NAME, seen, backoff=backoff, sleep=sleep).run()

    return waits_of(server, watch, passes, lists=lists)


def test_a_refused_watch_backs_off_and_honours_retry_after(api: tuple[Server, Kube]) -> None:
    """An overloaded server answering LISTs but 429 to every watch: one LIST and one
    watch per wait, each wait at least what the server asked and growing past it."""
    server, kube = api
    waits = follow(server, kube, 10)
    assert server.requests[:20] == ["LIST", "WATCH"] * 10
    assert min(waits) >= 2.0  # Retry-After: 2
    assert waits[-1] > 10 * waits[0] / 2 and max(waits) <= 30.0
    # The fleet's figure: requests a node sends in its first minute of such an outage.
    assert first_minute(waits) <= 22, waits


def test_a_gone_watch_backs_off_without_retry_after(api: tuple[Server, Kube]) -> None:
    """410 Gone on every watch (a server that cannot serve the listed version): the
    backoff grows from its first step, never resets to it after a LIST."""
    server, kube = api
    server.watch, server.retry_after = "410", None
    waits = follow(server, kube, 8)
    # Each step at least the last (equal jitter: half to all of a doubling step).
    assert all(b >= a for a, b in itertools.pairwise(waits))
    assert waits[0] <= 0.2 and waits[7] >= 0.2 * 2**7 / 2


def test_a_watch_that_delivered_resets_the_backoff(api: tuple[Server, Kube]) -> None:
    server, kube = api
    server.watch = "event"
    waits = follow(server, kube, 1, lists=5)
    # Each watch delivered an event, then the server ended it: listed again at once.
    assert waits == []
    assert server.requests[:9] == ["LIST", "WATCH"] * 4 + ["LIST"]


def test_owned_labels_are_set_and_no_other(api: tuple[Server, Kube]) -> None:
    server, kube = api
    server.watch = "429"
    server.labels = {"team": "vision", "a": "wrong", "b": "stale"}
    wanted: dict[str, str | None] = {"a": "1", "b": None, "c": "3"}
    keeper = LabelKeeper(kube, NAME, lambda: wanted)
    follow(server, kube, 3, keeper)
    assert server.patches[0] == {"metadata": {"labels": {"a": "1", "b": None, "c": "3"}}}
    assert len(server.patches) == 1  # once equal, LISTs patch nothing
    assert server.labels == {"team": "vision", "a": "1", "c": "3"}


def test_label_patch() -> None:
    assert label_patch({"a": "1", "b": None}, {"a": "1"}) == {}
    assert label_patch({"a": "1", "b": None}, {"b": "x", "z": "y"}) == {"a": "1", "b": None}


def test_a_contested_label_is_restored_after_a_growing_wait(api: tuple[Server, Kube]) -> None:
    """Another writer changing the label back each time: restored, but not at wire speed."""
    server, kube = api
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def main() -> None:
        backoff = Backoff(initial_s=1.0, max_s=300.0, rng=random.Random(2))
        keeper = LabelKeeper(kube, NAME, lambda: {"a": "1"}, sleep=sleep, backoff=backoff)
        for _ in range(5):
            await keeper.keep(decode({"metadata": {"labels": {"a": "theirs"}}}))

    asyncio.run(asyncio.wait_for(main(), BOUND_S))
    assert len(server.patches) == 5
    assert len(waits) == 4 and waits == sorted(waits) and waits[0] >= 0.5 and waits[-1] >= 4


def test_a_trickling_answer_ends_at_the_call_deadline(api: tuple[Server, Kube]) -> None:
    """One byte every 20 ms: each read succeeds, so only a deadline on the whole call
    ends it (before: a 1 s timeout call lived 18.5 s)."""
    server, _ = api
    server.node_answer = "trickle"
    kube = Kube(ApiConfig(server=server.url), request_timeout_s=0.3)
    try:
        with pytest.raises(ApiError, match=r"no whole answer within 0.3s"):
            asyncio.run(asyncio.wait_for(kube.get_node(NAME), BOUND_S))
    finally:
        kube.close()


def test_an_oversized_answer_is_refused_unread(api: tuple[Server, Kube]) -> None:
    server, _ = api
    server.node_answer = "huge"
    kube = Kube(ApiConfig(server=server.url), max_response_bytes=64 << 10)
    try:
        with pytest.raises(ApiError, match=r"more than 65536 bytes"):
            asyncio.run(kube.get_node(NAME))
    finally:
        kube.close()
