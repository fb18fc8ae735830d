"""What the preparer tells the rest of the agent, as typed events on one queue.

The preparer runs in the DRA service's threads; what follows from a claim prepared
or unprepared (its status written, the slices trimmed to what claims hold) runs on
the event loop. `post` is the one way across: it hands the event to the loop and
returns at once, never blocking the kubelet's call and never raising into it. On
the loop, `run` takes the events in the order they were posted and calls each
handler registered for its type; a handler that raises is logged and the others
still run, as a status write must not stop the slices from following. A handler that
touches the disk is registered with `on_thread`: the loop hands it to its worker
threads, as it does every call that may block.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from neuron_dra.agent.claims.checkpoint import ClaimRecord
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import PreparedClaim
from neuron_dra.hardware.inventory import NodeInventory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimPrepared:
    """A claim this instance prepared in full: CDI spec, metadata and checkpoint
    written. `inventory` is the node's as the claim was planned against."""

    prepared: PreparedClaim
    inventory: NodeInventory


@dataclass(frozen=True)
class ClaimUnprepared:
    """A claim this instance unprepared (or was asked to, holding nothing of it)."""

    claim: ClaimRef


@dataclass(frozen=True)
class ClaimsChanged:
    """The prepared claims now, after a commit of this instance or a checkpoint
    another instance (a rolling update) wrote."""

    claims: Mapping[str, ClaimRecord]


ClaimEvent = ClaimPrepared | ClaimUnprepared | ClaimsChanged
Post = Callable[[ClaimEvent], None]
E = TypeVar("E", ClaimPrepared, ClaimUnprepared, ClaimsChanged)


def no_post(event: ClaimEvent) -> None:
    """Nobody listens (a preparer on its own, in tests)."""


class ClaimEvents:
    """The queue: made on the event loop, `post` from any thread, `run` on the loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[ClaimEvent] = asyncio.Queue()
        self._handlers: dict[type[Any], list[Callable[[Any], None]]] = {}

    def on(self, kind: type[E], handler: Callable[[E], None]) -> None:
        """Call `handler` on the loop with each event of type `kind`, after the handlers
        registered before it."""
        self._handlers.setdefault(kind, []).append(handler)

    def on_thread(self, kind: type[E], handler: Callable[[E], None]) -> None:
        """As `on`, but `handler` runs in the loop's worker threads, in no set order
        with the other handlers."""
        self.on(kind, functools.partial(self._in_thread, handler))

    def _in_thread(self, handler: Callable[[E], None], event: E) -> None:
        done = self._loop.run_in_executor(None, handler, event)
        done.add_done_callback(functools.partial(_log_failure, type(event).__name__))

    def post(self, event: ClaimEvent) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the agent is stopping
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def dispatch(self, event: ClaimEvent) -> None:
        """Each handler of the event's type, on the loop; one that raises is logged."""
        for handler in self._handlers.get(type(event), ()):
            try:
                handler(event)
            except Exception:
                log.exception("claim event not handled", extra={"event": type(event).__name__})

    async def run(self) -> None:
        """Until cancelled: every event as it comes."""
        while True:
            self.dispatch(await self._queue.get())


def _log_failure(event: str, done: asyncio.Future[None]) -> None:
    if not done.cancelled() and (err := done.exception()) is not None:
        log.error("claim event not handled", exc_info=err, extra={"event": event})
