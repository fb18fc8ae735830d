"""Keep the Node labels the driver owns (`resources.nodelabels`) equal to the hardware,
from each state of the Node the agent sees."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.apiclient.kube import Kube
from neuron_dra.agent.objects.node import Node
from neuron_dra.resources.nodelabels import label_patch

log = logging.getLogger(__name__)

# Labels healed again within this long of the last heal: someone is writing them back.
# Each such heal waits a growing backoff, so two owners never fight at wire speed.
CONTESTED_S = 60.0


class LabelKeeper:
    """Keeps the owned labels of one Node equal to `wanted()`, from each state of it seen."""

    def __init__(
        self,
        kube: Kube,
        name: str,
        wanted: Callable[[], dict[str, str | None]],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        backoff: Backoff | None = None,
    ) -> None:
        self._kube = kube
        self._name = name
        self._wanted = wanted
        self._clock = clock
        self._sleep = sleep
        self._backoff = backoff or Backoff(initial_s=1.0, max_s=300.0)
        self._healed_at: float | None = None

    async def keep(self, node: Node | None) -> None:
        """Patch the Node if its owned labels differ; raises ApiError when refused."""
        if node is None:
            return  # nothing to label until it is created again
        patch = label_patch(self._wanted(), node.labels)
        if not patch:
            return
        if self._healed_at is not None and self._clock() - self._healed_at < CONTESTED_S:
            delay = self._backoff.delay()
            log.warning(
                "labels the driver owns on Node %s changed again by another writer; "
                "restoring in %.0fs",
                self._name,
                delay,
                extra={"node": self._name, "labels": patch},
            )
            await self._sleep(delay)
        else:
            self._backoff.reset()
            log.info(
                "setting the labels the driver owns on Node %s",
                self._name,
                extra={"node": self._name, "labels": patch},
            )
        await self._kube.patch_node_labels(self._name, patch)
        self._healed_at = self._clock()
