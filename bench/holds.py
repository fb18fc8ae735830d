"""The table of docs/contributors/fleet-scale.md for runs that compare what held
claims withdraw (bench/results/holds-*.json, each one run of bench/scale.py over
`--states full,core-full-1`): per layout, what a claim costs on nodes 90% full of
1-core claims against a 1-device claim on nodes 90% held whole, in the same run.

The machine's load moves a figure by tens of percent between runs, so each run's
ratio is taken within the run (both states on one cluster, minutes apart), and the
runs are summarised by the median and the range of those ratios.
"""

from __future__ import annotations

from statistics import median
from typing import Any

Obj = dict[str, Any]
BASE = ("full", "1 device")  # a 1-device claim on nodes held whole
# (label, state, case): p50s over BASE, the goal's figures.
RATIOS = (
    ("1 core, full of 1-core claims", "core-full-1", "1 core"),
    ("1 device, full of 1-core claims", "core-full-1", "1 device"),
    ("16 devices, full of 1-core claims", "core-full-1", "16 devices"),
)


def _p50(step: Obj, state: str, case: str) -> float:
    return float(step[state][case]["p50_ms"])


def _step(name: str, run: Obj, layout: str) -> Obj:
    """The run's one size of `layout`: a column is one run at one size."""
    sizes = list(run["layouts"][layout]["sizes"].values())
    if len(sizes) != 1:
        raise ValueError(f"{name}: {layout} measured at {len(sizes)} sizes, not one")
    return dict(sizes[0])


def _cell(values: list[float], fmt: str) -> str:
    spread = f"{min(values):{fmt}}-{max(values):{fmt}}" if len(values) > 1 else "-"
    return f"{median(values):{fmt}} | {spread}"


def holds_table(runs: dict[str, Obj]) -> str:
    """One row a figure and layout: each run's value, their median and range."""
    names = list(runs)
    header = " | ".join(f"`{n}`" for n in names)
    lines = [
        f"| layout | figure | {header} | median | range |",
        "|---|---|" + "---|" * len(names) + "---|---|",
    ]
    layouts: list[str] = []
    for run in runs.values():
        layouts += [name for name in run["layouts"] if name not in layouts]
    for layout in layouts:
        steps = [_step(name, run, layout) for name, run in runs.items()]
        rows: list[tuple[str, list[float], str]] = [
            ("1 device, 90% held whole (ms)", [_p50(s, *BASE) for s in steps], ",.0f")
        ]
        for label, state, case in RATIOS:
            rows.append((f"{label} (ms)", [_p50(s, state, case) for s in steps], ",.0f"))
            rows.append(
                (
                    f"{label} / 1 device held whole",
                    [_p50(s, state, case) / _p50(s, *BASE) for s in steps],
                    ".2f",
                )
            )
        for state in ("full", "core-full-1"):
            rows.append(
                (
                    f"kube-apiserver RSS, {state} (MiB)",
                    [float(s["fill"][state]["rss_mib"]["kube-apiserver"]) for s in steps],
                    ",.0f",
                )
            )
            rows.append(
                (
                    f"devices published, {state}",
                    [float(s["fill"][state]["devices_published"]) for s in steps],
                    ",.0f",
                )
            )
        for label, values, fmt in rows:
            each = " | ".join(f"{v:{fmt}}" for v in values)
            lines.append(f"| {layout} | {label} | {each} | {_cell(values, fmt)} |")
    return "\n".join(lines)
