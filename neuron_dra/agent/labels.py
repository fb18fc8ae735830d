"""Node labels for UltraServer placement (LeaderWorkerSet exclusive topology, PodGroup
topology), which the driver owns and keeps equal to the hardware.

The driver owns exactly `ULTRASERVER_LABELS`: it sets those the node earns and
removes those it does not, whoever wrote them, and never touches another label.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from consts import (
    LABEL_ULTRASERVER_MODE,
    LABEL_ULTRASERVER_NODE_ID_2,
    LABEL_ULTRASERVER_NODE_ID_4,
    LABEL_ULTRASERVER_SERVER_ID_2,
    LABEL_ULTRASERVER_SERVER_ID_4,
)
from neuron_dra.agent.backoff import Backoff
from neuron_dra.agent.kube import Json, Kube
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.slices import modes_label

log = logging.getLogger(__name__)

# Labels healed again within this long of the last heal: someone is writing them back.
# Each such heal waits a growing backoff, so two owners never fight at wire speed.
CONTESTED_S = 60.0

ULTRASERVER_LABELS = (
    LABEL_ULTRASERVER_MODE,
    LABEL_ULTRASERVER_SERVER_ID_2,
    LABEL_ULTRASERVER_SERVER_ID_4,
    LABEL_ULTRASERVER_NODE_ID_2,
    LABEL_ULTRASERVER_NODE_ID_4,
)


def ultraserver_labels(inventory: NodeInventory) -> dict[str, str | None]:
    """The labels to merge into the Node; None removes a label the node no longer earns."""
    us = inventory.ultraserver
    if us is None:
        return dict.fromkeys(ULTRASERVER_LABELS)
    return {
        LABEL_ULTRASERVER_MODE: modes_label(us.modes),
        LABEL_ULTRASERVER_SERVER_ID_2: us.server_id_2,
        LABEL_ULTRASERVER_SERVER_ID_4: us.server_id_4,
        LABEL_ULTRASERVER_NODE_ID_2: _optional(us.node_id_2),
        LABEL_ULTRASERVER_NODE_ID_4: _optional(us.node_id_4),
    }


def _optional(value: int | None) -> str | None:
    """A unit the node is not in (trn3 knows only its reservation's) has no label."""
    return None if value is None else str(value)


def label_patch(
    wanted: Mapping[str, str | None], current: Mapping[str, str]
) -> dict[str, str | None]:
    """The merge patch taking `current` to `wanted` (None: absent); empty when equal."""
    return {k: v for k, v in wanted.items() if current.get(k) != v}


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
        self.patches = 0

    async def keep(self, node: Json | None) -> None:
        """Patch the Node if its owned labels differ; raises ApiError when refused."""
        if node is None:
            return  # nothing to label until it is created again
        current = (node.get("metadata") or {}).get("labels") or {}
        patch = label_patch(self._wanted(), current)
        if not patch:
            return
        if self._healed_at is not None and self._clock() - self._healed_at < CONTESTED_S:
            delay = self._backoff.delay()
            log.warning(
                "UltraServer labels of Node %s changed again by another writer; restoring "
                "in %.0fs", self._name, delay, extra={"node": self._name, "labels": patch},
            )  # fmt: skip
            await self._sleep(delay)
        else:
            self._backoff.reset()
            log.info("setting UltraServer labels of Node %s", self._name,
                     extra={"node": self._name, "labels": patch})  # fmt: skip
        await self._kube.patch_node_labels(self._name, patch)
        self.patches += 1
        self._healed_at = self._clock()
