"""Which held devices the slices leave out what shares their counters for: those held
long enough.

While a claim holds a device whole, the node's slices can leave out its NeuronCores
(and a trn2u node device); while a claim holds a core, its whole device (and the node
device): the counters already refuse them to the scheduler, and withdrawn they cost
it nothing to scan. Withdrawing is a rewrite of the node's
slices, and so is publishing them again when the hold ends; a fleet whose holds
last seconds pays two rewrites a hold for scans it hardly saves
(docs/contributors/fleet-scale.md, "A churning fleet"). So a device is withdrawn
only once a claim has held it for `after_s`; a hold that ends sooner costs no write.
Not withdrawing is always safe: the held device keeps its counters either way.

Devices already held when the agent starts count as held long enough: a previous
instance may have withdrawn them, and publishing their cores again only to withdraw
them later would be two rewrites for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class HoldOff:
    """What is held, since when (agent clock), and what the slices treat as held."""

    since: Mapping[str, float]
    withdrawn: frozenset[str]
    next_due: float | None  # when the next held device becomes due; None: none waits


def hold_off(
    since: Mapping[str, float], held: frozenset[str], now: float, after_s: float
) -> HoldOff:
    """`held` (the devices prepared claims hold whole now) at `now`, given when each
    device already held was first seen held (`since`): devices newly held start now,
    devices no longer held are forgotten."""
    started = {device: since.get(device, now) for device in held}
    due = {device: at + after_s for device, at in started.items()}
    withdrawn = frozenset(d for d, at in due.items() if at <= now)
    waiting = [at for d, at in due.items() if d not in withdrawn]
    return HoldOff(started, withdrawn, min(waiting) if waiting else None)


def already_held(held: frozenset[str], now: float, after_s: float) -> dict[str, float]:
    """`since` for the devices held when the agent starts: due at once."""
    return {device: now - after_s for device in held}
