"""Follow the agent's own Node object: list it, then watch it, for as long as the agent runs.

What the agent keeps on its Node (UltraServer labels, `present`) and reads from it (the
network topology labels) must follow the object, not the agent's memory of it:
a Node deleted and created again under the same name (a common repair), or a
label another hand removed, is seen within one event. One watch a node, with a
field selector on its name, is what each kubelet already keeps open for the
same object: the API server serves it from its watch cache.

Each state the Node may have reached is handed to `on_node` (None: no such
Node). A handler that fails counts as the pass failing: the Node is listed
again after a backoff, so a refused label patch is retried at a pace the
server sets. The backoff resets only once a watch has proven itself (stayed
open `WATCH_PROVEN_S` or delivered an event), never on a bare successful LIST: a
server that answers LISTs but refuses watches sees one LIST per backoff step,
not a storm.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from neuron_dra.agent.apiclient.backoff import WATCH_PROVEN_S, Backoff
from neuron_dra.agent.apiclient.kube import ApiError, Kube
from neuron_dra.agent.objects.node import Node, decode
from neuron_dra.agent.objects.watch import decode as decode_event

log = logging.getLogger(__name__)

OnNode = Callable[[Node | None], Awaitable[None]]


class NodeWatch:
    def __init__(
        self,
        kube: Kube,
        name: str,
        on_node: OnNode,
        *,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._kube = kube
        self._name = name
        self._on_node = on_node
        self._backoff = backoff or Backoff(max_s=60.0)
        self._clock = clock
        self._sleep = sleep
        self.node: Node | None = None  # as last seen, decoded
        self.tried = asyncio.Event()  # set once the first LIST was answered, or failed
        self._proven = False

    async def run(self) -> None:
        while True:
            self._proven = False
            retry_after: float | None = None
            try:
                await self._pass()
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                retry_after = err.retry_after_s
                level = logging.INFO if err.status == 410 else logging.WARNING
                log.log(
                    level, "Node %s not followed: %s", self._name, err, extra={"node": self._name}
                )
            except Exception:
                # Never give up on the Node: log it loudly and list it again.
                log.exception("following Node %s failed", self._name, extra={"node": self._name})
            if self._proven:
                self._backoff.reset()
                if retry_after is None:
                    continue
            await self._sleep(self._backoff.delay(retry_after or 0.0))

    async def _pass(self) -> None:
        """One LIST, then its watch until the server ends it."""
        try:
            listed = await self._kube.list_node(self._name)
            await self._seen(decode(listed.items[0]) if listed.items else None)
        finally:
            self.tried.set()
        opened = self._clock()
        try:
            async for event in self._kube.watch_node(self._name, listed.resource_version):
                self._proven = True
                seen = decode_event(event)
                if seen.type == "DELETED":
                    await self._seen(None)
                elif seen.type in ("ADDED", "MODIFIED"):
                    await self._seen(None if seen.object is None else decode(seen.object))
        finally:
            self._proven = self._proven or self._clock() - opened >= WATCH_PROVEN_S

    async def _seen(self, node: Node | None) -> None:
        if node is None and self.node is not None:
            log.warning(
                "Node %s is gone; waiting for it to come back",
                self._name,
                extra={"node": self._name},
            )
        self.node = node
        await self._on_node(node)
