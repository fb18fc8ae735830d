"""What prepared claims hold, followed into the slices.

A device a claim holds whole leaves its NeuronCores out of the slices, and a core a
claim holds its whole device, once held for `withdraw_after_s` (`slices.holdoff`);
every device a claim on this node has stays published. `Holdings` keeps both sets for
the slice source and asks for a rebuild of the slices when either changes. It runs on
the event loop, where the preparer's `ClaimsChanged` events reach it (`claims.events`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from consts import NODE_DEVICE_NAME
from neuron_dra.agent.claims.checkpoint import ClaimRecord
from neuron_dra.agent.claims.events import ClaimsChanged
from neuron_dra.agent.slices.holdoff import already_held, hold_off
from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.inventory import NodeInventory

log = logging.getLogger("neuron_dra")

# The changes of a burst of prepares share one rebuild of the slices, this long after
# the first (`Holdings.claims_changed`).
HELD_SETTLE_S = 1.0


class Holdings:
    """What prepared claims hold, as the slices must leave it out (`withdrawn`) or keep
    it (`kept`).

    Made and used on the event loop only: `claims_changed` takes the preparer's claims
    as they are now and schedules one `changed` `HELD_SETTLE_S` later for a whole burst
    (`_due`); `changed` is idempotent: it works the sets out again from the last claims
    and calls `on_change` only when they differ. Nothing survives a crash: the next
    start takes the checkpoint's claims as held long enough already (`already_held`).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        pool: str,
        withdraw_after_s: float,
        inventory: Callable[[], NodeInventory],
        on_change: Callable[[], None],
    ) -> None:
        self._loop, self._pool, self._after = loop, pool, withdraw_after_s
        self._inventory, self._on_change = inventory, on_change
        self._prepared: Mapping[str, ClaimRecord] = {}  # as the last ClaimsChanged had them
        # Devices and cores held long enough that what shares their counters is left
        # out; devices a claim on this node has, never left out.
        self.withdrawn: frozenset[str] = frozenset()
        self.kept: frozenset[str] = frozenset()
        # Since when each device or core is held (monotonic), once the claims were read.
        self._since: Mapping[str, float] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due: asyncio.TimerHandle | None = None  # the rebuild after a burst

    def restored(self, claims: ClaimsChanged) -> None:
        """The claims the checkpoint held at start: followed at once."""
        self._prepared = claims.claims
        self.changed()

    def claims_changed(self, claims: ClaimsChanged) -> None:
        """The prepared claims now; `changed` a moment later.

        What prepared claims hold only trims the slices (the counters already keep the
        scheduler from giving a held device's cores to another claim), so the changes
        of a burst of prepares share one rebuild of the slices, `HELD_SETTLE_S` after
        the first, rather than costing every prepare a rebuild on the event loop's
        thread while the prepare waits for the interpreter's lock.
        """
        self._prepared = claims.claims
        if self._due is None:
            self._due = self._loop.call_later(HELD_SETTLE_S, self._settled)

    def _settled(self) -> None:
        self._due = None
        self.changed()

    def changed(self) -> None:
        """On the event loop: what prepared claims hold, followed into the slices; a
        device or core held counts only once it has been for `withdraw_after_s`."""
        prepared = self._prepared
        held_now = held_here(self._inventory(), self._pool, prepared)
        now = time.monotonic()
        if self._since is None:
            self._since = already_held(held_now, now, self._after)
        state = hold_off(self._since, held_now, now, self._after)
        self._since = state.since
        if self._timer is not None:
            self._timer.cancel()
        self._timer = (
            None
            if state.next_due is None
            else self._loop.call_later(state.next_due - now, self.changed)
        )
        withdrawn, kept = state.withdrawn, prepared_here(self._pool, prepared)
        log.debug(
            "devices held",
            extra={"held": ",".join(sorted(held_now)), "withdrawn": ",".join(sorted(withdrawn))},
        )
        if (withdrawn, kept) != (self.withdrawn, self.kept):
            self.withdrawn, self.kept = withdrawn, kept
            self._on_change()


def held_here(
    inventory: NodeInventory, pool: str, claims: Mapping[str, ClaimRecord]
) -> frozenset[str]:
    """Names of the devices of `pool` a prepared claim holds: whole devices, the node
    device and cores of this node. Admin access holds nothing: others may have the
    device too."""
    known = (
        {d.name for d in inventory.devices}
        | {NODE_DEVICE_NAME}
        | {c.name for c in logical_cores(inventory)}
    )
    return frozenset(
        device.device
        for record in claims.values()
        for device in record.devices
        if device.pool == pool and not device.admin_access and device.device in known
    )


def prepared_here(pool: str, claims: Mapping[str, ClaimRecord]) -> frozenset[str]:
    """Names of the devices of `pool` a prepared claim has, admin access too: the
    slices never withdraw them."""
    return frozenset(
        device.device
        for record in claims.values()
        for device in record.devices
        if device.pool == pool
    )
