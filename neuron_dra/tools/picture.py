"""Pictures of simulated allocations: an SVG per cluster and a compact text grid per node.

Each node is drawn in its interconnect's shape (the 4x4 torus as a grid whose
edge links wrap around, rings as a circle, lines as a row, single devices as
one box), every device filled with the colour of the claim holding it. Where a
claim holds exactly one of the node's connected sets (a torus row or half, an
aligned ring block), the set is outlined, so a reader sees at once whether the
devices a workload got are wired together. A device some of whose NeuronCores
are held shows the claims holding them (pale in the SVG, lower-case letters in
text). The SVG is written by hand: it is a few rectangles and lines, and the
driver takes no drawing dependency for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from consts import (
    ATTR_CORE_ID,
    ATTR_DEVICE_ID,
    ATTR_RESOURCE_TYPE,
    DRIVER_NAME,
    NODE_DEVICE_NAME,
    RESOURCE_TYPE_CORE,
)
from neuron_dra.hardware.instance_types import INSTANCE_TYPES, Shape
from neuron_dra.hardware.topology import TORUS_SIDE, DeviceSet, connected_sets
from neuron_dra.tools.simulate import Cluster, Outcome, SimNode

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#2f4b7c",
    "#a05195",
    "#008080",
)
TAKEN_COLOUR = "#9e9e9e"  # held by claims that were allocated before the simulation
FREE_COLOUR = "#ffffff"
BOX = 44  # device box side, px
GAP = 16
MARGIN = 30


@dataclass(frozen=True)
class NodeView:
    name: str
    instance_type: str | None
    shape: Shape
    devices: int
    owners: Mapping[int, int]  # device index -> claim number
    whole_node: int | None = None  # claim number holding the whole-node device
    taken: frozenset[int] = frozenset()  # devices held before the simulation
    outlines: tuple[tuple[DeviceSet, int], ...] = field(default=())  # set, claim number
    # Device index -> its held NeuronCores: (core number, claim number; None: held before).
    cores: Mapping[int, tuple[tuple[int, int | None], ...]] = field(default_factory=dict)


def colour(claim: int) -> str:
    return PALETTE[claim % len(PALETTE)]


def node_views(cluster: Cluster, outcomes: Sequence[Outcome]) -> list[NodeView]:
    """One view per node, in the cluster's order."""
    holder: dict[tuple[str, str, str], int] = {}
    for number, outcome in enumerate(outcomes):
        for placement in outcome.placements:
            holder[placement.device.key] = number
    return [_view(node, cluster, holder) for node in cluster.nodes]


def _view(node: SimNode, cluster: Cluster, holder: Mapping[tuple[str, str, str], int]) -> NodeView:
    spec = INSTANCE_TYPES.get(node.instance_type or "")
    owners: dict[int, int] = {}
    taken: set[int] = set()
    whole: int | None = None
    cores: dict[int, list[tuple[int, int | None]]] = {}
    indices = []
    for device in node.devices:
        if device.driver != DRIVER_NAME:
            continue
        number = holder.get(device.key)
        if device.name == NODE_DEVICE_NAME:
            whole = number
            continue
        own = device.view.attributes.get(DRIVER_NAME, {})
        index = own.get(ATTR_DEVICE_ID)
        if index is None:
            continue
        if own.get(ATTR_RESOURCE_TYPE) == RESOURCE_TYPE_CORE:
            if number is not None or device.key in cluster.taken:
                cores.setdefault(int(index), []).append((int(own[ATTR_CORE_ID]), number))
            continue
        indices.append(int(index))
        if number is not None:
            owners[int(index)] = number
        elif device.key in cluster.taken:
            taken.add(int(index))
    count = spec.devices if spec else (max(indices) + 1 if indices else 0)
    shape = spec.shape if spec else Shape.LINE
    outlines = []
    if spec is not None:
        by_claim: dict[int, set[int]] = {}
        for index, number in owners.items():
            by_claim.setdefault(number, set()).add(index)
        sets = connected_sets(spec.shape, spec.devices)
        for number, members in sorted(by_claim.items()):
            size = len(members)
            if size > 1 and frozenset(members) in sets.get(size, ()):
                outlines.append((frozenset(members), number))
    held = {i: tuple(sorted(c, key=lambda pair: pair[0])) for i, c in sorted(cores.items())}
    return NodeView(
        node.name,
        node.instance_type,
        shape,
        count,
        owners,
        whole,
        frozenset(taken),
        tuple(outlines),
        held,
    )


def core_holders(view: NodeView, index: int) -> list[int | None]:
    """The claims holding NeuronCores of device `index`, first core first (None: held before)."""
    holders: list[int | None] = []
    for _, number in view.cores.get(index, ()):
        if number not in holders:
            holders.append(number)
    return holders


# --- Text -------------------------------------------------------------------------------


def render_text(view: NodeView, letters: Sequence[str]) -> str:
    """A few lines per node: each device as `index:letter` (`.` free, `#` taken before).

    A device whose NeuronCores are held shows the holders' letters in lower case.
    """

    def cell(index: int) -> str:
        if index in view.owners:
            mark = letters[view.owners[index]]
        elif index in view.cores:
            marks = ["#" if n is None else letters[n].lower() for n in core_holders(view, index)]
            mark = "".join(marks) if len(marks) <= 2 else f"{marks[0]}+"
        elif view.whole_node is not None:
            mark = letters[view.whole_node]
        else:
            mark = "#" if index in view.taken else "."
        return f"{index:>2}:{mark:<2}"

    head = f"{view.name} ({view.instance_type or 'unknown type'}, {view.shape.value})"
    if view.whole_node is not None:
        head += f", whole node ({NODE_DEVICE_NAME}) to {letters[view.whole_node]}"
    lines = [head]
    if view.shape is Shape.TORUS and view.devices == TORUS_SIDE * TORUS_SIDE:
        for row in range(TORUS_SIDE):
            cells = [cell(row * TORUS_SIDE + col) for col in range(TORUS_SIDE)]
            lines.append("  " + " ".join(cells).rstrip() + "  (row wraps)")
        lines.append("  columns wrap top to bottom")
    else:
        suffix = "  (ring: last wraps to first)" if view.shape is Shape.RING else ""
        lines.append("  " + " ".join(cell(i) for i in range(view.devices)).rstrip() + suffix)
    if view.cores:
        lines.append("  lower case: NeuronCores of the device held by that claim (+: more claims)")
    return "\n".join(lines)


# --- SVG --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Box:
    x: float
    y: float


def _positions(view: NodeView) -> tuple[dict[int, _Box], float, float]:
    """Top-left corner of each device box within the node panel, and the panel size."""
    step = BOX + GAP
    if view.shape is Shape.TORUS and view.devices == TORUS_SIDE * TORUS_SIDE:
        boxes = {
            i: _Box(GAP + (i % TORUS_SIDE) * step, GAP + (i // TORUS_SIDE) * step)
            for i in range(view.devices)
        }
        side = float(TORUS_SIDE * step + GAP)
        return boxes, side, side
    if view.shape is Shape.RING and view.devices > 2:
        radius = max(60.0, view.devices * step / (2 * math.pi))
        centre = radius + BOX / 2 + GAP
        boxes = {}
        for i in range(view.devices):
            angle = 2 * math.pi * i / view.devices - math.pi / 2
            boxes[i] = _Box(
                centre + radius * math.cos(angle) - BOX / 2,
                centre + radius * math.sin(angle) - BOX / 2,
            )
        side = 2 * centre
        return boxes, side, side
    boxes = {i: _Box(GAP + i * step, GAP) for i in range(max(view.devices, 1))}
    return boxes, float(max(view.devices, 1) * step + GAP), float(BOX + 2 * GAP)


def render_svg(views: Sequence[NodeView], labels: Sequence[str]) -> str:
    """The whole cluster: one panel per node, side by side in rows, and a legend."""
    panels = [_panel(v, labels) for v in views]
    per_row = 4
    x = y = float(MARGIN)
    row_height = 0.0
    width = 0.0
    parts = []
    for i, (body, w, h) in enumerate(panels):
        if i and i % per_row == 0:
            x = float(MARGIN)
            y += row_height + MARGIN
            row_height = 0.0
        parts.append(f'<g transform="translate({x:.1f},{y:.1f})">{body}</g>')
        x += w + MARGIN
        width = max(width, x)
        row_height = max(row_height, h)
    y += row_height + MARGIN
    legend = []
    for number, label in enumerate(labels):
        ly = y + number * 20
        legend.append(
            f'<rect class="legend" x="{MARGIN}" y="{ly:.1f}" width="14" height="14" '
            f'fill="{colour(number)}" stroke="#333"/>'
            f'<text x="{MARGIN + 20}" y="{ly + 12:.1f}" font-size="12">{escape(label)}</text>'
        )
    height = y + len(labels) * 20 + MARGIN
    width = max(width, 400.0)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif">\n'
        + "\n".join(parts + legend)
        + "\n</svg>\n"
    )


def _panel(view: NodeView, labels: Sequence[str]) -> tuple[str, float, float]:
    boxes, width, height = _positions(view)
    out = [
        f'<text x="0" y="-6" font-size="13" font-weight="bold">'
        f"{escape(view.name)} ({escape(view.instance_type or 'unknown type')})</text>"
    ]
    frame = "#333" if view.whole_node is None else colour(view.whole_node)
    stroke = 1 if view.whole_node is None else 4
    out.append(
        f'<rect class="node" x="0" y="0" width="{width:.1f}" height="{height:.1f}" '
        f'fill="#f7f7f7" stroke="{frame}" stroke-width="{stroke}"/>'
    )
    if view.whole_node is not None:
        out.append(
            f'<text x="4" y="{height + 14:.1f}" font-size="11">{NODE_DEVICE_NAME}: '
            f"{escape(labels[view.whole_node])}</text>"
        )
    out.extend(_links(view, boxes, width, height))
    for members_set, group_owner in view.outlines:
        members = [boxes[i] for i in members_set if i in boxes]
        x0 = min(b.x for b in members) - 5
        y0 = min(b.y for b in members) - 5
        x1 = max(b.x for b in members) + BOX + 5
        y1 = max(b.y for b in members) + BOX + 5
        out.append(
            f'<rect class="group" x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" '
            f'height="{y1 - y0:.1f}" fill="none" stroke="{colour(group_owner)}" stroke-width="3" '
            f'stroke-dasharray="6 3" rx="6"/>'
        )
    for index, box in sorted(boxes.items()):
        if index >= view.devices:
            continue
        number = view.owners.get(index, view.whole_node)
        fill = colour(number) if number is not None else FREE_COLOUR
        if number is None and index in view.taken:
            fill = TAKEN_COLOUR
        title = labels[number] if number is not None else "taken" if index in view.taken else "free"
        partly = ""
        if number is None and index in view.cores:
            # Held core by core: the first holder's colour, paler, and every core in the title.
            first = core_holders(view, index)[0]
            fill = TAKEN_COLOUR if first is None else colour(first)
            partly = ' fill-opacity="0.5"'
            title = ", ".join(
                f"neuroncore{core}: {'taken' if n is None else labels[n]}"
                for core, n in view.cores[index]
            )
        out.append(
            f'<rect class="device" data-device="{index}" x="{box.x:.1f}" y="{box.y:.1f}" '
            f'width="{BOX}" height="{BOX}" rx="4" fill="{fill}"{partly} stroke="#222">'
            f"<title>neurondevice{index}: {escape(title)}</title></rect>"
            f'<text x="{box.x + BOX / 2:.1f}" y="{box.y + BOX / 2 + 5:.1f}" font-size="14" '
            f'text-anchor="middle">{index}</text>'
        )
    return "".join(out), width, height + (18 if view.whole_node is not None else 0)


def _links(view: NodeView, boxes: Mapping[int, _Box], width: float, height: float) -> list[str]:
    half = BOX / 2
    out = []

    def line(x1: float, y1: float, x2: float, y2: float, dashed: bool = False) -> None:
        dash = ' stroke-dasharray="3 3"' if dashed else ""
        out.append(
            f'<line class="link" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="#888" stroke-width="2"{dash}/>'
        )

    if view.shape is Shape.TORUS and view.devices == TORUS_SIDE * TORUS_SIDE:
        for i, box in boxes.items():
            row, col = divmod(i, TORUS_SIDE)
            cx, cy = box.x + half, box.y + half
            if col < TORUS_SIDE - 1:
                line(cx, cy, cx + BOX + GAP, cy)
            else:  # wrap-around links drawn as dashed stubs leaving the panel on both sides
                line(box.x + BOX, cy, width, cy, dashed=True)
                line(0, cy, boxes[row * TORUS_SIDE].x, cy, dashed=True)
            if row < TORUS_SIDE - 1:
                line(cx, cy, cx, cy + BOX + GAP)
            else:
                line(cx, box.y + BOX, cx, height, dashed=True)
                line(cx, 0, cx, boxes[col].y, dashed=True)
    elif view.shape is Shape.RING and view.devices > 2:
        first = boxes[0]
        radius = abs(first.y + half - (height / 2))
        out.append(
            f'<circle class="ring" cx="{width / 2:.1f}" cy="{height / 2:.1f}" r="{radius:.1f}" '
            'fill="none" stroke="#888" stroke-width="2"/>'
        )
    elif view.shape in (Shape.LINE, Shape.RING):
        for i in range(view.devices - 1):
            a, b = boxes[i], boxes[i + 1]
            line(a.x + BOX, a.y + half, b.x, b.y + half)
    return out
