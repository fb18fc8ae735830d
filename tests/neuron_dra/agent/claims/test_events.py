"""The preparer's events: posted from any thread, handled on the loop in order."""

from __future__ import annotations

import asyncio
import threading

import pytest

from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import (
    ClaimEvents,
    ClaimsChanged,
    ClaimUnprepared,
)

A, B = ClaimRef("default", "a", "uid-a"), ClaimRef("default", "b", "uid-b")


def test_events_from_other_threads_reach_their_handlers_in_order() -> None:
    async def main() -> list[str]:
        events, seen = ClaimEvents(), list[str]()
        done = asyncio.Event()
        events.on(ClaimUnprepared, lambda e: seen.append(f"status {e.claim.name}"))
        events.on(ClaimUnprepared, lambda e: seen.append(f"other {e.claim.name}"))

        def held(event: ClaimsChanged) -> None:
            seen.append(f"held {len(event.claims)}")
            done.set()

        events.on(ClaimsChanged, held)
        task = asyncio.create_task(events.run())

        def dra_thread() -> None:
            events.post(ClaimUnprepared(A))
            events.post(ClaimUnprepared(B))
            events.post(ClaimsChanged({}))

        thread = threading.Thread(target=dra_thread)
        thread.start()
        await asyncio.wait_for(done.wait(), 10)
        thread.join()
        task.cancel()
        return seen

    assert asyncio.run(main()) == ["status a", "other a", "status b", "other b", "held 0"]


def test_a_handler_that_raises_stops_no_other(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> list[str]:
        events, seen = ClaimEvents(), list[str]()

        def broken(event: ClaimUnprepared) -> None:
            raise RuntimeError("status write refused")

        events.on(ClaimUnprepared, broken)
        events.on(ClaimUnprepared, lambda e: seen.append(e.claim.name))
        events.dispatch(ClaimUnprepared(A))
        return seen

    assert asyncio.run(main()) == ["a"]
    assert "claim event not handled" in caplog.text


def test_an_event_posted_after_the_loop_closed_is_dropped() -> None:
    async def make() -> ClaimEvents:
        return ClaimEvents()

    events = asyncio.run(make())
    events.post(ClaimUnprepared(A))  # the agent is stopping: no error for the kubelet's call
