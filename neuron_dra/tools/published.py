"""What the driver publishes for every instance type of the catalogue, built once.

`lint` checks claims against this: the attribute names, per instance type
and over all of them, the devices selectors are evaluated on, and the sizes of
the connected sets (`devicegroup{N}_id`). Nothing here is read from a
cluster; it is the driver's own slice builder run on simulated nodes (`simnode`), with
each logical NeuronCore a device too (as where partitionable devices are
served) and at every LNC the instance type has, so a selector on the cores or
the LNC finds what it asks for. Every attribute a node may carry is there: the
network layers of a Node labelled with all four, the PCI placement of devices
linked to their PCI functions. Their values, like serial numbers, are the
simulated node's own: a selector that compares one to a real value matches no
simulated device (`node_specific` tells those apart).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from consts import (
    ATTR_INSTANCE_TYPE,
    ATTR_LOGICAL_NEURON_CORE,
    ATTR_NETWORK_NODE_LAYERS,
    ATTR_NUMA_NODE,
    ATTR_PCIE_ROOT,
    ATTR_RESOURCE_TYPE,
    ATTR_SERIAL_NUMBER,
    DRIVER_NAME,
    GROUP_ATTRIBUTE_DOMAIN,
    KUBERNETES_ATTRIBUTE_DOMAIN,
    LABEL_NETWORK_NODE_LAYER_PREFIX,
    RESOURCE_TYPE_CORE,
)
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES, family_of
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.nodetopology import from_labels
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.tools.cel import CelCompileError, CelEvalError, DeviceView, compile_selector
from neuron_dra.tools.cel import referenced_attributes as cel_attributes
from neuron_dra.tools.simnode import simulated_inventory

Names = Mapping[str, frozenset[str]]  # domain -> attribute names

OUR_DOMAINS = (DRIVER_NAME, GROUP_ATTRIBUTE_DOMAIN)
LNCS = (2, 1)  # of the instance types that have logical NeuronCores; the default first
# Attributes whose values differ from node to node (or device to device) of one type.
NODE_SPECIFIC = frozenset(
    {(DRIVER_NAME, name) for name in (*ATTR_NETWORK_NODE_LAYERS, ATTR_SERIAL_NUMBER)}
    | {(KUBERNETES_ATTRIBUTE_DOMAIN, name) for name in (ATTR_PCIE_ROOT, ATTR_NUMA_NODE)}
)
# A Node labelled with every layer, so that each name is known.
SIMULATED_TOPOLOGY = from_labels(
    {f"{LABEL_NETWORK_NODE_LAYER_PREFIX}{n}": f"nn-layer{n}" for n in range(1, 5)}
)[0]
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
    for instance_type, spec in INSTANCE_TYPES.items():
        unit = FakeUltraServer() if spec.ultraserver else None
        views = []
        for lnc in LNCS if spec.has_lnc else (None,):
            inventory = simulated_inventory(
                f"{instance_type}-{lnc}", instance_type, ultraserver=unit, lnc=lnc, pci_parents=True
            )
            options = SliceOptions(
                instance_type,
                counter_layout=CounterLayout.OWN_SLICE,
                cores=True,
                topology=SIMULATED_TOPOLOGY,
            )
            views += [
                DeviceView.from_slice_device(DRIVER_NAME, device)
                for obj in build_slices(inventory, options)
                for device in obj["spec"].get("devices") or ()
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


def node_specific(expressions: Iterable[str]) -> bool:
    """Whether a selector reads a value only the nodes themselves know (a network layer,
    a PCIe root): whether it matches cannot be told offline."""
    return any(NODE_SPECIFIC & cel_attributes(e) for e in expressions if usable(e))


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


@cache
def lacking(expression: str, base: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    """Attributes `expression` reads that some device `base` selects (any instance type)
    does not carry, where reading them there is a CEL runtime error."""
    selector = compile_selector(expression)
    accepted = [compile_selector(e) for e in base]
    named = cel_attributes(expression)
    missing: set[tuple[str, str]] = set()
    for views in published().devices.values():
        for view in views:
            try:
                if not all(s.matches(view) for s in accepted):
                    continue
            except CelEvalError:
                continue
            try:
                selector.matches(view)
            except CelEvalError:
                missing |= {(d, n) for d, n in named if n not in view.attributes.get(d, {})}
    return frozenset(missing)


@cache
def matching_kinds(expressions: tuple[str, ...]) -> frozenset[str]:
    """The resourceTypes of the devices, of any instance type, every expression accepts."""
    selectors = [compile_selector(e) for e in expressions]
    kinds = set()
    for views in published().devices.values():
        for view in views:
            try:
                if all(s.matches(view) for s in selectors):
                    kinds.add(str(view.attributes[DRIVER_NAME][ATTR_RESOURCE_TYPE]))
            except CelEvalError:
                continue
    return frozenset(kinds)


@cache
def matching_cores(expressions: tuple[str, ...]) -> tuple[tuple[str, int | None, int], ...]:
    """(instance type, LNC, logical cores per device) of the cores every expression accepts."""
    selectors = [compile_selector(e) for e in expressions]
    found: set[tuple[str, int | None, int]] = set()
    for instance_type, views in published().devices.items():
        spec = INSTANCE_TYPES[instance_type]
        for view in views:
            own = view.attributes[DRIVER_NAME]
            if own[ATTR_RESOURCE_TYPE] != RESOURCE_TYPE_CORE:
                continue
            lnc = own.get(ATTR_LOGICAL_NEURON_CORE)
            key = (str(own[ATTR_INSTANCE_TYPE]), None if lnc is None else int(lnc))
            try:
                if all(s.matches(view) for s in selectors):
                    found.add((*key, spec.cores_per_device // (key[1] or 1)))
            except CelEvalError:
                continue
    return tuple(sorted(found, key=lambda t: (t[0], -(t[1] or 0))))


def cores_text(numbers: Sequence[tuple[int | None, int]]) -> str:
    """`4 logical NeuronCores at LNC 2, 8 at LNC 1`, or `2 logical NeuronCores`."""
    parts = [f"{n} at LNC {lnc}" if lnc is not None else str(n) for lnc, n in numbers]
    first, _, where = parts[0].partition(" ")
    parts[0] = f"{first} logical NeuronCores" + (f" {where}" if where else "")
    return ", ".join(parts)


def cores_by_family(sizes: Sequence[tuple[str, int | None, int]]) -> str:
    """`trn2: 4 at LNC 2, 8 at LNC 1; inf1: 4; inf2 and trn1: 2`, largest first."""
    per_family: dict[str, dict[int | None, int]] = {}
    for instance_type, lnc, n in sizes:
        match = re.match(r"[a-z]+\d+", family_of(instance_type))
        family = match.group() if match else family_of(instance_type)
        per_family.setdefault(family, {})[lnc] = n
    by_text: dict[str, list[str]] = {}
    for family, numbers in per_family.items():
        ordered = sorted(numbers.items(), key=lambda pair: -(pair[0] or 0))
        text = ", ".join(f"{n} at LNC {lnc}" if lnc is not None else str(n) for lnc, n in ordered)
        by_text.setdefault(text, []).append(family)
    groups = sorted(
        by_text.items(), key=lambda item: (-max(per_family[item[1][0]].values()), sorted(item[1]))
    )
    named = []
    for text, families in groups:
        words = sorted(families)
        joined = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
        named.append(f"{joined}: {text}")
    return "; ".join(named)


def narrow(types: Sequence[str]) -> bool:
    """Whether the selectors pin the hardware: some types match, all of one shape and size."""
    shapes = {(INSTANCE_TYPES[t].shape, INSTANCE_TYPES[t].devices) for t in types}
    return len(shapes) == 1 and len(types) < len(INSTANCE_TYPES)
