"""The preparer's events: posted from any thread, handled on the loop in order."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from neuron_dra.agent.claims import events as events_module
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import (
    ClaimEvents,
    ClaimsChanged,
    ClaimUnprepared,
)


class Logged(logging.Filter):
    """Sets `seen` when the events' logger logs."""

    def __init__(self, seen: asyncio.Event) -> None:
        super().__init__()
        self.seen = seen

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen.set()
        return True


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


def test_a_thread_handler_runs_off_the_loop_and_its_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> list[tuple[str, bool]]:
        events, seen = ClaimEvents(), list[tuple[str, bool]]()
        loop_thread = threading.current_thread()
        failed = asyncio.Event()

        def tidy(event: ClaimUnprepared) -> None:
            seen.append((event.claim.name, threading.current_thread() is loop_thread))
            raise OSError("directory busy")

        events.on_thread(ClaimUnprepared, tidy)
        logger, logged = logging.getLogger(events_module.__name__), Logged(failed)
        logger.addFilter(logged)
        try:
            events.dispatch(ClaimUnprepared(A))
            await asyncio.wait_for(failed.wait(), 10)
        finally:
            logger.removeFilter(logged)
        return seen

    assert asyncio.run(main()) == [("a", False)]
    assert "claim event not handled" in caplog.text
    assert "directory busy" in caplog.text
