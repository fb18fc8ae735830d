"""The table of docs/contributors/fleet-scale.md for runs that compare what held
claims withdraw (bench/results/holds-*.json, each one run of bench/scale.py over
`--states full,core-full-1`): per layout and release, what a claim costs on nodes 90% full of
1-core claims against a 1-device claim on nodes 90% held whole, in the same run.

The machine's load moves a figure by tens of percent between runs, so each run's
ratio is taken within the run (both states on one cluster, minutes apart), and the
runs are summarised by the median and the range of those ratios.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _step(name: str, run: Obj, layout: str) -> Obj | None:
    """The run's one size of `layout` (a column is one run at one size); None where
    the run did not measure the layout."""
    if layout not in run["layouts"]:
        return None
    sizes = list(run["layouts"][layout]["sizes"].values())
    if len(sizes) != 1:
        raise ValueError(f"{name}: {layout} measured at {len(sizes)} sizes, not one")
    return dict(sizes[0])


def median_and_range(values: list[float], fmt: str) -> str:
    """Two table cells: the median of `values`, and their range (`-` for one value)."""
    spread = f"{min(values):{fmt}}-{max(values):{fmt}}" if len(values) > 1 else "-"
    return f"{median(values):{fmt}} | {spread}"


def holds_table(runs: dict[str, Obj]) -> str:
    """One row a figure, layout and Kubernetes release: each run's value, their median
    and range."""
    names = list(runs)
    header = " | ".join(f"`{n}`" for n in names)
    lines = [
        f"| layout | figure | {header} | median | range |",
        "|---|---|" + "---|" * len(names) + "---|---|",
    ]
    rows: list[tuple[str, str]] = []
    for run in runs.values():
        rows += [
            (name, _release(run)) for name in run["layouts"] if (name, _release(run)) not in rows
        ]
    for layout, release in rows:
        steps = [
            _step(name, run, layout) if _release(run) == release else None
            for name, run in runs.items()
        ]
        for label, fmt, figure in FIGURES:
            values = [None if step is None else figure(step) for step in steps]
            each = " | ".join("-" if v is None else f"{v:{fmt}}" for v in values)
            measured = [v for v in values if v is not None]
            lines.append(
                f"| {layout}, {release} | {label} | {each} | {median_and_range(measured, fmt)} |"
            )
    return "\n".join(lines)


def _release(run: Obj) -> str:
    """The Kubernetes release a run measured."""
    return str(run["run"].get("kubernetes", "?"))


def _figures() -> list[tuple[str, str, Callable[[Obj], float]]]:
    """(label, format, the figure of one run's step), in the table's order."""

    def p50(state: str, case: str) -> Callable[[Obj], float]:
        return lambda step: _p50(step, state, case)

    def over_base(state: str, case: str) -> Callable[[Obj], float]:
        return lambda step: _p50(step, state, case) / _p50(step, *BASE)

    def filled(state: str, key: str) -> Callable[[Obj], float]:
        def figure(step: Obj) -> float:
            value = step["fill"][state][key]
            return float(value["kube-apiserver"] if key == "rss_mib" else value)

        return figure

    found: list[tuple[str, str, Callable[[Obj], float]]] = [
        ("1 device, 90% held whole (ms)", ",.0f", p50(*BASE))
    ]
    for label, state, case in RATIOS:
        found.append((f"{label} (ms)", ",.0f", p50(state, case)))
        found.append((f"{label} / 1 device held whole", ".2f", over_base(state, case)))
    for state in ("full", "core-full-1"):
        found.append((f"kube-apiserver RSS, {state} (MiB)", ",.0f", filled(state, "rss_mib")))
        found.append((f"devices published, {state}", ",.0f", filled(state, "devices_published")))
    return found


FIGURES = _figures()
