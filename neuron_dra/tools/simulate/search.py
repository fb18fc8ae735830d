"""The allocator's search: backtracking over requests and devices in slice order.

Like the scheduler's structured-parameters allocator, it walks a node's
devices in the order its slices list them and backtracks when a constraint,
a shared counter or a taint rules a device out; the first solution in that
order is the one the scheduler would find.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

from neuron_dra.tools.simulate.claims import (
    MAX_CLAIM_DEVICES,
    Alternative,
    Claim,
    DeviceClass,
    Json,
)
from neuron_dra.tools.simulate.nodes import CounterKey, DeviceKey, SimDevice, SimNode

SEARCH_LIMIT = 1_000_000  # device placements tried per node before giving up, as a time bound


@dataclass(frozen=True)
class Placement:
    request: str  # the request (or request/subrequest) the device was allocated for
    device: SimDevice
    admin: bool = False  # with adminAccess: the device is not held by this claim


class Allocated(Protocol):
    """What the search reads of the cluster (the allocator's `Cluster`)."""

    taken: dict[DeviceKey, str]  # device -> who holds it
    used: dict[CounterKey, Fraction]

    def selected(self, alt: Alternative, node: SimNode) -> list[SimDevice]:
        """Devices the class and request selectors accept, in slice order."""

    def candidates(self, alt: Alternative, node: SimNode) -> list[SimDevice]:
        """The selected devices whose taints the request tolerates."""

    def counters_of(self, counter: CounterKey) -> Fraction:
        """A shared counter's total."""

    @property
    def classes(self) -> dict[str, DeviceClass]:
        """The DeviceClasses, by name."""

    def matches(self, expression: str, device: SimDevice) -> bool:
        """Whether a CEL selector accepts the device."""


class NodeFailedError(Exception):
    """A node cannot take the claims, for a reason worth reporting as it stands."""


class _SearchLimitError(Exception):
    pass


def available(
    cluster: Allocated, device: SimDevice, used: Mapping[CounterKey, Fraction], *, admin: bool
) -> bool:
    """Whether a request may have the device, with the shared counters spent as `used`.
    An admin request may have a device other claims hold, but not past its counters:
    the allocator checks them for admin requests too, and the driver publishes a held
    device with its counters, so an admin request cannot have a held device that draws
    on one."""
    if not admin and device.key in cluster.taken:
        return False
    return all(
        used.get(counter, Fraction(0)) + amount <= cluster.counters_of(counter)
        for counter, amount in device.consumes
    )


def tolerated(taints: Sequence[Json], tolerations: Sequence[Json]) -> bool:
    """NoSchedule and NoExecute taints keep a device out unless a toleration matches."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and toleration.get("value", "") == taint.get("value", "")


class Search:
    """Backtracking over requests and devices in slice order, as the scheduler's allocator."""

    def __init__(self, cluster: Allocated, node: SimNode, claims: Sequence[Claim]) -> None:
        self.cluster = cluster
        self.node = node
        self.claims = claims
        self.chosen: list[list[Placement]] = [[] for _ in claims]
        self.in_use: set[DeviceKey] = set()
        self.used: dict[CounterKey, Fraction] = dict(cluster.used)
        # Per claim and constraint: (value, devices holding it).
        self.values: list[list[tuple[Any, int]]] = [
            [(None, 0) for _ in c.spec.constraints] for c in claims
        ]
        self.steps = 0
        self._done: Callable[[list[list[Placement]]], bool] = lambda _: True
        self._candidates: dict[str, list[SimDevice]] = {}

    def first(self) -> list[list[Placement]] | None:
        found: list[list[list[Placement]]] = []

        def keep(solution: list[list[Placement]]) -> bool:
            found.append(solution)
            return True

        self.run(keep)
        return found[0] if found else None

    def run(self, done: Callable[[list[list[Placement]]], bool]) -> None:
        self._done = done
        try:
            self._request(0, 0)
        except _SearchLimitError:
            raise NodeFailedError(
                f"gave up after trying {SEARCH_LIMIT} device placements (the scheduler also "
                "bounds its search)"
            ) from None

    def _request(self, ci: int, ri: int) -> bool:
        if ci == len(self.claims):
            return self._done([list(c) for c in self.chosen])
        requests = self.claims[ci].spec.requests
        if ri == len(requests):
            # An allocation holds at most so many results; All requests can reach past it.
            return len(self.chosen[ci]) <= MAX_CLAIM_DEVICES and self._request(ci + 1, 0)
        for alt in requests[ri].alternatives:
            candidates = self._candidates.get(alt.name + f"@{ci}")
            if candidates is None:
                candidates = self.cluster.candidates(alt, self.node)
                self._candidates[alt.name + f"@{ci}"] = candidates
            if alt.all:
                if self._take_all(ci, ri, alt):
                    return True
            elif self._pick(ci, ri, alt, candidates, start=0):
                return True
        return False

    def _take_all(self, ci: int, ri: int, alt: Alternative) -> bool:
        # All means every device the selectors match on the node, tainted ones included:
        # a taint the request does not tolerate makes the request fail, as a taken device does.
        selected = self.cluster.selected(alt, self.node)
        if not selected or any(not tolerated(d.taints, alt.tolerations) for d in selected):
            return False
        added: list[SimDevice] = []
        for device in selected:
            if not self._add(ci, alt, device):
                break
            added.append(device)
        else:
            if self._request(ci, ri + 1):
                return True
        for device in reversed(added):
            self._remove(ci, alt, device)
        return False

    def _pick(
        self, ci: int, ri: int, alt: Alternative, candidates: list[SimDevice], *, start: int
    ) -> bool:
        remaining = alt.count - len([p for p in self.chosen[ci] if p.request == alt.name])
        if remaining == 0:
            return self._request(ci, ri + 1)
        # Devices are picked in increasing slice order: the scheduler's first solution is the
        # lexicographically smallest, which is this one, without visiting permutations.
        for k in range(start, len(candidates) - remaining + 1):
            device = candidates[k]
            if not self._add(ci, alt, device):
                continue
            if self._pick(ci, ri, alt, candidates, start=k + 1):
                return True
            self._remove(ci, alt, device)
        return False

    def _add(self, ci: int, alt: Alternative, device: SimDevice) -> bool:
        self.steps += 1
        if self.steps > SEARCH_LIMIT:
            raise _SearchLimitError
        if device.key in self.in_use:
            return False
        if not available(self.cluster, device, self.used, admin=alt.admin):
            return False
        claim = self.claims[ci]
        values = self.values[ci]
        for i, constraint in enumerate(claim.spec.constraints):
            if not constraint.applies(alt.name):
                continue
            value = device.attribute(constraint.attribute)
            if value is None:
                return False
            held, holders = values[i]
            if holders and held != value:
                return False
        for i, constraint in enumerate(claim.spec.constraints):
            if constraint.applies(alt.name):
                held, holders = values[i]
                values[i] = (device.attribute(constraint.attribute), holders + 1)
        # An admin request's devices spend counters while the claims are allocated
        # together; once allocated, they are not counted (the allocator's `allocate_pod`).
        for counter, amount in device.consumes:
            self.used[counter] = self.used.get(counter, Fraction(0)) + amount
        self.in_use.add(device.key)
        self.chosen[ci].append(Placement(alt.name, device, alt.admin))
        return True

    def _remove(self, ci: int, alt: Alternative, device: SimDevice) -> None:
        self.chosen[ci].pop()
        self.in_use.discard(device.key)
        for counter, amount in device.consumes:
            self.used[counter] -= amount
        values = self.values[ci]
        for i, constraint in enumerate(self.claims[ci].spec.constraints):
            if constraint.applies(alt.name):
                held, holders = values[i]
                values[i] = (held if holders > 1 else None, holders - 1)
