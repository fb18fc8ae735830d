"""The slice publisher against an API server that answers LISTs but not watches: it
backs off instead of listing again at its first step, honours Retry-After, and what
it sends a minute is the fleet's figure (README, Reliability).

Waits are recorded, not slept.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from neuron_dra.agent.backoff import Backoff
from neuron_dra.agent.kube import Kube
from neuron_dra.agent.publisher import BACKOFF_INITIAL_S, BACKOFF_MAX_S, SlicePublisher
from tests.neuron_dra.agent.stressed_api import NAME, Server

BOUND_S = 10.0


def publish(server: Server, kube: Kube, passes: int, *, lists: int = 0) -> list[float]:
    """Run a publisher (no slices wanted) until it has waited `passes` times, or the
    server has served `lists` LISTs."""
    waits: list[float] = []

    async def main() -> None:
        done = asyncio.Event()
        if lists:
            server.waiters.append((asyncio.get_running_loop(), done, lists))

        async def sleep(seconds: float) -> None:
            waits.append(seconds)
            if len(waits) >= passes:
                done.set()
                await asyncio.Event().wait()

        backoff = Backoff(BACKOFF_INITIAL_S, BACKOFF_MAX_S, random.Random(3))
        publisher = SlicePublisher(
            kube, NAME, lambda generation, uid: [], backoff=backoff, sleep=sleep
        )
        task = asyncio.create_task(publisher.run())
        try:
            await asyncio.wait_for(done.wait(), BOUND_S)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return waits


def first_minute(waits: list[float]) -> int:
    """Requests (a LIST and a watch each pass) sent in the first 60 s of waiting."""
    spent, passes = 0.0, 1
    for wait in waits:
        spent += wait
        if spent > 60:
            break
        passes += 1
    return 2 * passes


@pytest.mark.parametrize(("watch", "retry_after"), [("429", "1"), ("410", None)])
def test_a_server_refusing_every_watch_is_not_stormed(
    api: tuple[Server, Kube], watch: str, retry_after: str | None
) -> None:
    server, kube = api
    server.watch, server.retry_after = watch, retry_after
    waits = publish(server, kube, 16)
    assert server.requests.count("LIST") == server.requests.count("WATCH") == 16
    # Growing, never back at the first step although every LIST succeeded.
    assert waits[8] > 4 * BACKOFF_MAX_S / 10, waits
    assert min(waits) >= float(retry_after or 0)
    # The steady pace: a pass every 30-60 s once the backoff is at its cap.
    assert all(w >= 30 for w in waits[-3:]), waits
    assert first_minute(waits) <= 30, (first_minute(waits), waits)


def test_a_watch_that_delivers_resets_the_backoff(api: tuple[Server, Kube]) -> None:
    server, kube = api
    server.watch = "event"
    waits = publish(server, kube, 1, lists=5)
    # Each watch delivered an event and ended: listed again at once, never a wait.
    assert waits == []
