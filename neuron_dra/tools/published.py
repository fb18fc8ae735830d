"""What the driver publishes for every instance type of the catalogue, built once.

`lint` checks claims against this: the attribute names, per instance type
and over all of them, the devices selectors are evaluated on, and the sizes of
the connected sets (`devicegroup{N}_id`). Nothing here is read from a
cluster; it is the driver's own slice builder run on simulated nodes.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from consts import DRIVER_NAME, GROUP_ATTRIBUTE_DOMAIN
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer, build_fake_node
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.tools.cel import CelCompileError, CelEvalError, DeviceView, compile_selector
from neuron_dra.tools.cel import referenced_attributes as cel_attributes

Names = Mapping[str, frozenset[str]]  # domain -> attribute names

OUR_DOMAINS = (DRIVER_NAME, GROUP_ATTRIBUTE_DOMAIN)
# A devicegroup name as published (`devicegroup4_id`) or as commonly mistyped.
GROUP_NAME = re.compile(r"devicegroup(\d+)_?id", re.IGNORECASE)


@dataclass(frozen=True)
class Published:
    """What the driver publishes, over every instance type of the catalogue."""

    names: Names  # over every instance type
    devices: Mapping[str, tuple[DeviceView, ...]]  # instance type -> its devices
    group_sizes: Mapping[str, frozenset[int]]  # instance type -> N of devicegroupN_id
    names_by_type: Mapping[str, Names]  # instance type -> what its devices carry

    def names_on(self, instance_types: Iterable[str]) -> Names:
        """Names every one of the types publishes; all names when no type is given."""
        per_type = [self.names_by_type[t] for t in instance_types]
        if not per_type:
            return self.names
        return {
            domain: frozenset.intersection(*(n.get(domain, frozenset()) for n in per_type))
            for domain in self.names
        }


@cache
def published() -> Published:
    devices: dict[str, tuple[DeviceView, ...]] = {}
    sizes: dict[str, frozenset[int]] = {}
    by_type: dict[str, Names] = {}
    with tempfile.TemporaryDirectory(prefix="neuron-dra-lint-") as tmp:
        for instance_type, spec in INSTANCE_TYPES.items():
            unit = FakeUltraServer() if spec.ultraserver else None
            root = build_fake_node(Path(tmp) / instance_type, instance_type, ultraserver=unit)
            inventory = discover(root).inventory
            views = [
                DeviceView.from_slice_device(DRIVER_NAME, device)
                for obj in build_slices(inventory, SliceOptions(instance_type))
                for device in obj["spec"]["devices"]
            ]
            devices[instance_type] = tuple(views)
            sizes[instance_type] = frozenset(inventory.connected_sets())
            names: dict[str, set[str]] = {}
            for view in views:
                for domain, attrs in view.attributes.items():
                    names.setdefault(domain, set()).update(attrs)
            by_type[instance_type] = {d: frozenset(n) for d, n in names.items()}
    everywhere: dict[str, frozenset[str]] = {}
    for names_of_type in by_type.values():
        for domain, found in names_of_type.items():
            everywhere[domain] = everywhere.get(domain, frozenset()) | found
    return Published(everywhere, devices, sizes, by_type)


def suggest(name: str, known: Iterable[str]) -> str | None:
    """The closest published name; case is ignored, as typos often get it wrong.

    A devicegroup name gets the smallest published set at least as large as the
    one asked for (else the largest): string likeness would as soon offer
    `devicegroup1_id` for `devicegroup7_id`.
    """
    candidates = list(known)
    asked = GROUP_NAME.fullmatch(name)
    groups = {int(m[1]): k for k in candidates if (m := GROUP_NAME.fullmatch(k))}
    if asked and groups:
        size = int(asked[1])
        return groups[min((s for s in groups if s >= size), default=max(groups))]
    by_lower = {k.lower(): k for k in candidates}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


@cache
def usable(expression: str) -> bool:
    """Whether a selector compiles and names only published attributes."""
    try:
        compile_selector(expression)
    except CelCompileError:
        return False
    return not unpublished(expression)


def unpublished(expression: str) -> list[tuple[str, str]]:
    """Attributes of the driver's domains the expression names and no device carries."""
    known = published().names
    return [
        (domain, name)
        for domain, name in sorted(cel_attributes(expression))
        if domain in OUR_DOMAINS and name not in known.get(domain, frozenset())
    ]


@cache
def matching_types(expressions: tuple[str, ...]) -> tuple[str, ...]:
    """Instance types with at least one device every expression accepts."""
    selectors = [compile_selector(e) for e in expressions]
    out = []
    for instance_type, views in published().devices.items():
        for view in views:
            try:
                if all(s.matches(view) for s in selectors):
                    out.append(instance_type)
                    break
            except CelEvalError:
                continue
    return tuple(out)


def narrow(types: Sequence[str]) -> bool:
    """Whether the selectors pin the hardware: some types match, all of one shape and size."""
    shapes = {(INSTANCE_TYPES[t].shape, INSTANCE_TYPES[t].devices) for t in types}
    return len(shapes) == 1 and len(types) < len(INSTANCE_TYPES)
