"""What a node's own sysfs says of an instance type the catalogue does not have.

The catalogue (`instance_types`) stays the source of truth for the types it
has. For any other, the Neuron driver still says much of what the catalogue
would: each device's neighbours (`connected_devices`), its physical cores
(`core_count`), and its silicon (`info/architecture/device_name`, each
NeuronCore's `arch_type`). From those alone this module derives the connected
sets a claim may ask for and whether the node has logical NeuronCores, and
names what it could not derive, so that such a node is published as its
hardware says rather than as single devices only. Pure: the values are read by
discovery and passed in.

Connected sets follow the catalogue's rules where the graph has the shape they
are made for: on a 4x4 torus (as the driver lists it, for Trainium3's switched
fabric too) the rows, the halves and the whole node; on a ring or a line the
aligned contiguous blocks of every size dividing the device count; on any
other graph those same aligned blocks. Each set is kept only when all its
devices are present and it is connected in the graph, so that every published
`devicegroup{N}_id` is one a claim can be served with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

TORUS_SIDE = 4
TORUS_DEVICES = TORUS_SIDE * TORUS_SIDE
# What no sysfs file of the Neuron driver says, whatever the type.
NEVER_DERIVED = (
    "memory capacity",
    "UltraServer membership",
    "topology_x/y (the driver lists torus neighbours for switched devices too)",
)
# The silicon by the driver's `device_name`, and whether it fuses physical cores into
# logical ones (NeuronCore-v3 and later: Trainium2 and Trainium3).
SILICON_LNC = {
    "Inferentia": False,
    "Inferentia2": False,
    "Trainium1": False,
    "Trainium2": True,
    "Trainium3": True,
}
FIRST_LNC_CORE = 3  # NeuronCore-v3 (Trainium2) is the first with logical NeuronCores
_CORE_ARCH = re.compile(r"NCv([1-9][0-9]?)")

DeviceSet = frozenset[int]


class Graph(StrEnum):
    """What the `connected_devices` graph looks like."""

    SINGLE = "single device"
    UNCONNECTED = "no links listed"
    TORUS = "4x4 torus"
    RING = "ring"
    LINE = "line"
    OTHER = "graph of no known shape"


@dataclass(frozen=True)
class Derived:
    """A node's connected sets, cores and LNC as its sysfs gives them, and what it does not."""

    graph: Graph
    devices: int  # device positions the graph spans (0 .. devices-1)
    sets: tuple[tuple[int, tuple[DeviceSet, ...]], ...]  # (size, sets), sizes ascending
    cores_per_device: int | None  # physical, from core_count
    has_lnc: bool
    lnc_from: str | None  # the file that said whether there are any; None: none did
    not_derived: tuple[str, ...]

    def connected_sets(self) -> dict[int, tuple[DeviceSet, ...]]:
        return dict(self.sets)

    def summary(self) -> str:
        """One line: what was derived from which file, and what was not."""
        sizes = ", ".join(str(size) for size, _ in self.sets) or "none"
        cores = "unknown" if self.cores_per_device is None else str(self.cores_per_device)
        lnc = "logical NeuronCores" if self.has_lnc else "no logical NeuronCores"
        source = self.lnc_from or "nothing the driver exposes says: none assumed"
        return (
            f"connected_devices: {self.devices} devices, {self.graph}, connected sets of "
            f"{sizes}; core_count: {cores} cores a device; {lnc} ({source}); "
            f"not derived: {', '.join(self.not_derived)}"
        )


def derive(
    neighbours: Mapping[int, tuple[int, ...]],
    cores: Iterable[int | None],
    device_names: Iterable[str | None],
    core_arch: str | None,
    family_has_lnc: bool,
) -> Derived:
    """The derivation for present devices `neighbours` (index -> listed neighbours).

    `cores` and `device_names` are the devices' own; `core_arch` is a NeuronCore's
    `arch_type` (`NCv3`) where one was read; `family_has_lnc` says whether the type's
    family is one the catalogue knows to have logical NeuronCores (`LNC_FAMILIES`).
    """
    graph, count, sets = connected_sets(neighbours)
    counts = {c for c in cores if c is not None}
    per_device = counts.pop() if len(counts) == 1 else None
    has_lnc, lnc_from = _lnc(core_arch, set(device_names) - {None}, family_has_lnc)
    missing = list(NEVER_DERIVED)
    if per_device is None:
        missing.insert(0, "cores (core_count unread or not the same on every device)")
    if graph is Graph.UNCONNECTED:
        missing.insert(0, "connected sets beyond single devices (no connected_devices read)")
    if lnc_from is None:
        missing.insert(0, "logical NeuronCores")
    return Derived(
        graph=graph,
        devices=count,
        sets=tuple(sorted(sets.items())),
        cores_per_device=per_device,
        has_lnc=has_lnc,
        lnc_from=lnc_from,
        not_derived=tuple(missing),
    )


def connected_sets(
    neighbours: Mapping[int, tuple[int, ...]],
) -> tuple[Graph, int, dict[int, tuple[DeviceSet, ...]]]:
    """(shape, device positions, sets by size) of the graph the driver lists.

    Every present device is a set of 1; larger sets are the shape's candidates that
    are whole (every device present) and connected in the graph.
    """
    present = frozenset(neighbours)
    if not present:
        return Graph.UNCONNECTED, 0, {}
    edges = {
        frozenset((index, other))
        for index, listed in neighbours.items()
        for other in listed
        if other != index and other >= 0
    }
    count = max(present | {i for edge in edges for i in edge}) + 1
    graph, candidates = _candidates(count, edges)
    sets: dict[int, tuple[DeviceSet, ...]] = {1: tuple(frozenset({i}) for i in sorted(present))}
    for size, blocks in candidates.items():
        kept = tuple(b for b in blocks if b <= present and _connected(b, edges))
        if size > 1 and kept:
            sets[size] = kept
    return graph, count, sets


def _candidates(
    count: int, edges: set[frozenset[int]]
) -> tuple[Graph, dict[int, tuple[DeviceSet, ...]]]:
    if count == 1:
        return Graph.SINGLE, {}
    if not edges:
        return Graph.UNCONNECTED, {}
    if count == TORUS_DEVICES and edges <= _torus_edges():
        # Rows, halves and the whole node: the Neuron scheduler extension's rule.
        return Graph.TORUS, _aligned(count, (TORUS_SIDE, TORUS_DEVICES // 2, TORUS_DEVICES))
    divisors = tuple(s for s in range(2, count + 1) if count % s == 0)
    ring = {frozenset((i, (i + 1) % count)) for i in range(count)}
    if edges <= ring:
        wrapped = count > 2 and frozenset((count - 1, 0)) in edges
        return (Graph.RING if wrapped else Graph.LINE), _aligned(count, divisors)
    return Graph.OTHER, _aligned(count, divisors)


def _aligned(count: int, sizes: Iterable[int]) -> dict[int, tuple[DeviceSet, ...]]:
    return {
        size: tuple(frozenset(range(start, start + size)) for start in range(0, count, size))
        for size in sizes
    }


def _torus_edges() -> set[frozenset[int]]:
    edges = set()
    for index in range(TORUS_DEVICES):
        row, col = divmod(index, TORUS_SIDE)
        edges.add(frozenset((index, row * TORUS_SIDE + (col + 1) % TORUS_SIDE)))
        edges.add(frozenset((index, (row + 1) % TORUS_SIDE * TORUS_SIDE + col)))
    return edges


def _connected(members: DeviceSet, edges: set[frozenset[int]]) -> bool:
    """Whether `members` is connected using only links between its own devices."""
    start = min(members)
    seen, frontier = {start}, [start]
    while frontier:
        index = frontier.pop()
        for other in members - seen:
            if frozenset((index, other)) in edges:
                seen.add(other)
                frontier.append(other)
    return seen == members


def _lnc(
    core_arch: str | None, names: set[str | None], family_has_lnc: bool
) -> tuple[bool, str | None]:
    """Whether the node has logical NeuronCores, and which of the driver's files says so."""
    match = _CORE_ARCH.fullmatch(core_arch or "")
    if match is not None:
        return int(match.group(1)) >= FIRST_LNC_CORE, f"NeuronCore arch_type {core_arch}"
    known = {SILICON_LNC[n] for n in names if n in SILICON_LNC}
    if len(known) == 1 and len(names) == 1:
        return known.pop(), f"device_name {next(iter(names))}"
    if family_has_lnc:
        return True, "the instance family"
    return False, None
