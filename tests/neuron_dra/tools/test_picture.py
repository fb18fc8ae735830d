"""Pictures of simulated allocations: the SVG is well-formed and shows what was allocated."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from neuron_dra.tools.picture import (
    PALETTE,
    TAKEN_COLOUR,
    colour,
    node_views,
    render_svg,
    render_text,
)
from neuron_dra.tools.simulate import Cluster, Outcome, simulate, simulated_nodes

SPECS = Path(__file__).resolve().parents[3] / "examples" / "specs"
SVG = "{http://www.w3.org/2000/svg}"


def allocate(files: list[str], nodes: list[tuple[str, int]]) -> tuple[Cluster, list[Outcome]]:
    cluster = Cluster(simulated_nodes(nodes), {})
    if ("trn2.48xlarge", 1) in nodes:
        cluster.take("trn2.48xlarge-0", "neurondevice15", "earlier")
    return cluster, simulate([SPECS / f for f in files], cluster)


def svg_of(cluster: Cluster, outcomes: list[Outcome]) -> ET.Element:
    text = render_svg(node_views(cluster, outcomes), [o.claim.key for o in outcomes])
    return ET.fromstring(text)


def test_trn2_node_has_16_device_boxes_in_claim_colours() -> None:
    cluster, outcomes = allocate(["two-claims-one-pod.yaml"], [("trn2.48xlarge", 1)])
    root = svg_of(cluster, outcomes)
    boxes = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "device"]
    assert len(boxes) == 16
    fills = {int(str(r.get("data-device"))): r.get("fill") for r in boxes}
    assert {fills[i] for i in range(4)} == {colour(0)}
    assert {fills[i] for i in range(4, 8)} == {colour(1)}
    assert fills[15] == TAKEN_COLOUR
    # Each claim holds one torus row: both rows are outlined in the claim's colour.
    groups = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "group"]
    assert sorted(str(g.get("stroke")) for g in groups) == sorted([PALETTE[0], PALETTE[1]])
    # Wrap-around links leave the grid dashed.
    assert any(line.get("stroke-dasharray") for line in root.iter(f"{SVG}line"))
    legend = [r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("class") == "legend"]
    assert legend == [colour(0), colour(1)]


def test_ring_line_single_and_whole_node() -> None:
    nodes = [("inf2.48xlarge", 1), ("inf2.24xlarge", 1), ("inf2.xlarge", 1), ("trn2u.48xlarge", 1)]
    cluster, outcomes = allocate(
        ["inf2-2-connected.yaml", "single-device.yaml", "us-4-node-config.yaml"], nodes
    )
    root = svg_of(cluster, outcomes)
    boxes = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "device"]
    assert len(boxes) == 12 + 6 + 1 + 16
    assert len([c for c in root.iter(f"{SVG}circle") if c.get("class") == "ring"]) == 1
    frames = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "node"]
    whole = outcomes.index(next(o for o in outcomes if o.node == "trn2u.48xlarge-0"))
    assert any(f.get("stroke") == colour(whole) for f in frames)


def test_text_grid() -> None:
    cluster, outcomes = allocate(
        ["l-trn2.yaml", "1x4-connected-devices.yaml"], [("trn2.48xlarge", 1)]
    )
    [view] = node_views(cluster, outcomes)
    text = render_text(view, [o.letter for o in outcomes])
    lines = text.splitlines()
    assert lines[0] == "trn2.48xlarge-0 (trn2.48xlarge, torus)"
    assert lines[1].startswith("   0:A   1:A   2:A   3:A")
    assert lines[3].startswith("   8:B   9:B  10:B  11:B")
    assert lines[4].startswith("  12:.  13:.  14:.  15:#")
