"""The taints a published device carries, as pure values.

Two kinds: a device out of service (`Unhealthy`, effect NoSchedule or NoExecute,
key `neuron.aws.com/unhealthy`), and something worth knowing about a device that
stays in service (`Notice`, effect None: purely informational, it keeps no claim
from the device and evicts nothing, yet kubectl, `neuron-dra simulate` and
schedulers see it). Each is dated when first seen: its `timeAdded` stays put while
it lasts, across writes for other devices and plugin restarts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from consts import TAINT_UNHEALTHY

Json = dict[str, Any]

INFORMATIONAL = "None"
"""The effect of an informational device taint (Kubernetes 1.35+)."""


@dataclass(frozen=True)
class Unhealthy:
    device: int
    kind: str  # the taint's value
    effect: str = "NoSchedule"
    # Unix time the problem was first seen, published as the taint's `timeAdded`. Left to
    # the API server, that would be the time of whichever write the taint rode on, and a
    # NoExecute eviction counts its toleration from it.
    since: float | None = None


@dataclass(frozen=True)
class Notice:
    """An informational taint of one device: `key` under the driver's domain, `value`
    a label value, `since` when it was first seen."""

    device: int
    key: str
    value: str
    since: float | None = None


def first_seen(item: Unhealthy | Notice) -> tuple[bool, float, int]:
    """Order of appearance: undated after dated ones, then by device index."""
    since = item.since
    return since is None, since or 0.0, item.device


def earliest_per_key(notices: Iterable[Notice]) -> tuple[Notice, ...]:
    """Of each key, the notice seen first: what a device made of several carries."""
    earliest: dict[str, Notice] = {}
    for notice in sorted(notices, key=first_seen):
        earliest.setdefault(notice.key, notice)
    return tuple(sorted(earliest.values(), key=lambda n: n.key))


def device_taints(unhealthy: Unhealthy | None, notices: Sequence[Notice]) -> list[Json]:
    """A device's taints: out of service first, then its notices by key."""
    taints = []
    if unhealthy is not None:
        taints.append(_taint(TAINT_UNHEALTHY, unhealthy.kind, unhealthy.effect, unhealthy.since))
    taints += [
        _taint(n.key, n.value, INFORMATIONAL, n.since) for n in sorted(notices, key=lambda n: n.key)
    ]
    return taints


def _taint(key: str, value: str, effect: str, since: float | None) -> Json:
    taint: Json = {"key": key, "value": value, "effect": effect}
    if since is not None:
        taint["timeAdded"] = rfc3339(since)
    return taint


def rfc3339(seconds: float) -> str:
    """A Unix time as the API server stores a metav1.Time: UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(seconds)))
