"""Reads of the node that may never return, kept off the event loop and bounded.

A sysfs attribute is read by the kernel driver's own code, which can hang (a
device that stopped answering); `sysfsfile` guards against what a path can be,
not against that. Such a read runs in a daemon thread, never an executor's: a
thread that never returns must not hold up the agent's exit, which joins
executor threads. The caller awaits it with a deadline and is told when it
passes; the thread is left to finish, and nothing starts a second one beside it.
`Watched` also says so in the log, once, and once more when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

# A read of the node takes milliseconds; past this, one hangs in the kernel driver.
READ_DEADLINE_S = 30.0


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
        except BaseException as err:  # SystemExit, say: the thread ends, the caller hears of it
            failed = RuntimeError(f"{name} ended by {type(err).__name__}: {err}")
            outcome = functools.partial(future.set_exception, failed)
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


class StoppedError(Exception):
    """The agent was told to stop before the work it waited for ended."""


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T:
    """`work`'s result; StoppedError once `stop` is set first (a SIGTERM during a read
    that hangs): `work` is cancelled, a daemon thread under it left to finish."""
    running = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not running.done():
        running.cancel()
        raise StoppedError
    return running.result()


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


class Watched(Generic[T]):
    """`work` one run at a time (`OneAtATime`), watched: a run past `deadline_s` is
    logged once as stalled, naming `cause` and what happens `meanwhile`, and its end
    once more (`recovered`); callers get None while it goes on."""

    def __init__(
        self,
        work: Callable[[], T],
        name: str,
        *,
        what: str,
        cause: str,
        meanwhile: str,
        recovered: str,
        deadline_s: float = READ_DEADLINE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = OneAtATime(work, name, clock)
        self._deadline_s = deadline_s
        self._what, self._cause = what, cause
        self._meanwhile, self._recovered = meanwhile, recovered
        self.stalled = False

    async def __call__(self) -> T | None:
        """The result of the run going on or of a new one; None while it hangs."""
        try:
            result = await self._run.run(self._deadline_s)
        except TimeoutError:
            if not self.stalled:
                log.error(
                    "%s stalled: running for %.0f s (%s); %s",
                    self._what,
                    self._run.running_s,
                    self._cause,
                    self._meanwhile,
                    extra={"deadline_s": self._deadline_s},
                )
            self.stalled = True
            return None
        except Exception:
            self._ended()
            raise
        self._ended()
        return result

    def _ended(self) -> None:
        if self.stalled:
            log.warning("%s answered again; %s", self._what, self._recovered)
        self.stalled = False
