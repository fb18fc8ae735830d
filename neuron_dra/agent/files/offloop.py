"""Reads of the node that may never return, kept off the event loop and bounded.

A sysfs attribute is read by the kernel driver's own code, which can hang (a
device that stopped answering); `sysfsfile` guards against what a path can be,
not against that. Such a read runs in a daemon thread, never an executor's: a
thread that never returns must not hold up the agent's exit, which joins
executor threads. The caller awaits it with a deadline and is told when it
passes; the thread is left to finish, and nothing starts a second one beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def in_daemon_thread(work: Callable[[], T], name: str) -> asyncio.Future[T]:
    """`work()` in a daemon thread of its own; its result (or error) as a future."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = work()
        except Exception as err:
            outcome = functools.partial(future.set_exception, err)
        else:
            outcome = functools.partial(future.set_result, result)
        # The loop may have closed while a read hung: nothing is waiting then.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


async def bounded(work: Callable[[], T], deadline_s: float, name: str) -> T:
    """`work()` in a daemon thread; TimeoutError once `deadline_s` passed without it."""
    return await asyncio.wait_for(in_daemon_thread(work, name), deadline_s)


class OneAtATime(Generic[T]):
    """`work` in a daemon thread, one run at a time: a caller that comes while a run
    goes on (one past a previous caller's deadline, say) awaits that run again."""

    def __init__(
        self, work: Callable[[], T], name: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._work = work
        self._name = name
        self._clock = clock
        self._running: asyncio.Future[T] | None = None
        self._started = 0.0

    @property
    def running_s(self) -> float:
        """How long the current run has gone on; 0 when none does."""
        return self._clock() - self._started if self._running is not None else 0.0

    async def run(self, deadline_s: float) -> T:
        """The result of the run going on, or of a new one; TimeoutError when it takes
        longer than `deadline_s` from now (the run goes on)."""
        if self._running is None:
            self._running = in_daemon_thread(self._work, self._name)
            self._started = self._clock()
        running = self._running
        try:
            return await asyncio.wait_for(asyncio.shield(running), deadline_s)
        finally:
            if running.done():
                self._running = None
