"""The pool the agent may publish: never one the API server would refuse.

The API server refuses a pool that breaks a resource.k8s.io/v1 limit whole, so a
node whose sysfs is odd in one place would publish nothing at all. The full layout
goes out when it keeps every limit (`limits.validate_pool`); else the devices alone,
without their NeuronCores, when those do; else nothing new, and the stored pool
stays as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.limits import validate_pool
from neuron_dra.resources.slices import CoreLayout, SliceOptions, build_slices

Json = dict[str, Any]


class InvalidPoolError(ValueError):
    """Neither the full layout nor the devices alone keep the limits."""


@dataclass(frozen=True)
class Pool:
    slices: list[Json]
    # Why the slices are not the full layout (the limits it broke); empty when they are.
    problems: tuple[str, ...] = ()


def publishable_pool(inventory: NodeInventory, options: SliceOptions) -> Pool:
    slices = build_slices(inventory, options)
    problems = tuple(validate_pool(slices, options.counter_layout))
    if not problems:
        return Pool(slices)
    if options.core_layout is not CoreLayout.OFF:
        alone = build_slices(inventory, replace(options, cores=False))
        if not validate_pool(alone, options.counter_layout):
            return Pool(alone, problems)
    raise InvalidPoolError("; ".join(problems))
