"""A model of clusters beyond what bench/scale.py measured on this machine.

The model is the scheduler's scan rule with the per-node costs the runs measured. For
each pod the scheduler filters nodes until it has found numFeasibleNodesToFind feasible
ones (`nodes_to_find`): on an empty cluster the first that many nodes it tries; on a
cluster whose free nodes are a share `free` of all, about nodes_to_find / free of them,
at most every node. Each layout's and claim's p50 is fitted, least squares, to
a + b x (nodes scanned) over the measured sizes, empty and full apart, and evaluated at
larger sizes. Throughput is what one scheduling at a time allows: 1000 / p50 pods a
second. The fit is per this machine's cores: the scheduler filters nodes in parallel,
so a control plane with more cores divides b.

Where a fit holds: over the nodes scanned in the sizes it was fitted on (a run of
1,000 to 5,000 nodes scans about 100 to 5,000 nodes), and no further. Beyond, the
per-pod costs that grow with the cluster rather than with the nodes scanned are left
out: the allocator copies the allocated state (every allocated claim's devices) for
each pod, lists every slice of the cluster, and the scheduler's heap (every slice,
every claim) grows, and with it its garbage collection. Evaluating a fit at 10,000
nodes and more (`MODEL_SIZES`) extrapolates it 2-20x beyond its range: a floor, not a
forecast. It needs two sizes at least.

`python bench/scalemodel.py [scale.json]` prints the model's table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
RESULTS = Path(__file__).resolve().parent / "results"
FREE = 0.1  # the share of free nodes in a "90% full" cluster
MODEL_SIZES = (10_000, 30_000, 100_000)


def nodes_to_find(nodes: int, percentage: int | None = None) -> int:
    """numFeasibleNodesToFind: all below 100 nodes; else `percentage` (by default
    50 - nodes/125, at least 5) of them, at least 100."""
    if nodes < 100:
        return nodes
    if percentage is None:
        percentage = max(50 - nodes // 125, 5)
    return max(nodes * percentage // 100, 100)


def scanned(nodes: int, state: str, percentage: int | None = None) -> float:
    """Nodes filtered for one pod: `state` "empty" or "full" (a share FREE free)."""
    wanted = nodes_to_find(nodes, percentage)
    return float(wanted) if state == "empty" else min(float(nodes), wanted / FREE)


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares a + b x through (x, y)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def model(result: Obj) -> Obj:
    """Per layout, state and case: the fit and the p50 it gives at MODEL_SIZES."""
    out: Obj = {}
    for layout, figures in result["layouts"].items():
        sizes = {int(n): step for n, step in figures["sizes"].items()}
        if len(sizes) < 2:
            continue
        for state in ("empty", "full"):
            cases = next(iter(sizes.values()))[state]
            for case in cases:
                points = [
                    (scanned(n, state), step[state][case]["p50_ms"])
                    for n, step in sorted(sizes.items())
                ]
                base, per_node = fit(points)
                entry: Obj = {"base_ms": base, "per_node_ms": per_node}
                for n in MODEL_SIZES:
                    entry[f"p50_{n}_ms"] = base + per_node * scanned(n, state)
                # The knob that bounds it: a fixed share of nodes to score.
                entry["p50_100000_at_1_percent_ms"] = base + per_node * scanned(100_000, state, 1)
                out[f"{layout}/{state}/{case}"] = entry
    return out


def model_table(result: Obj, layouts: list[str], cases: list[str]) -> str:
    fitted = model(result)
    header = (
        "| layout | state | claim | per node scanned | "
        + " | ".join(f"{n:,}" for n in MODEL_SIZES)
        + " | 100,000 at 1% |"
    )
    lines = [header, "|" + "---|" * (len(MODEL_SIZES) + 5)]
    for layout in layouts:
        for state in ("empty", "full"):
            for case in cases:
                entry = fitted.get(f"{layout}/{state}/{case}")
                if entry is None:
                    continue
                cells = [f"{entry[f'p50_{n}_ms']:.0f}" for n in MODEL_SIZES]
                cells.append(f"{entry['p50_100000_at_1_percent_ms']:.0f}")
                lines.append(
                    f"| {layout} | {'empty' if state == 'empty' else '90% full'} | {case} | "
                    f"{entry['per_node_ms'] * 1000:.0f} us | " + " | ".join(cells) + " |"
                )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else RESULTS / "scale.json"
    result = json.loads(path.read_text())
    print(model_table(result, list(result["layouts"]), ["1 device", "1 core", "16 devices"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
