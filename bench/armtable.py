"""The `interleaved` table of docs/contributors/fleet-scale.md, made from the runs of
bench/interleave.py kept as bench/results/interleaved-*.json.

Each run gives its own rows: every case each arm timed, as the p50 of each block and
their median and range; then the goal's ratios, each taken within a block (the arms
of a block ran minutes apart at most, so the machine's load moves both sides alike)
and summed up by the median and range of the blocks; then kube-apiserver's RSS per
arm against the arm of whole devices held whole. Pure: no module of bench/ but
holds (the table cells) is imported, so the tests load this file alone.
"""

from __future__ import annotations

from typing import Any

from holds import median_and_range

Obj = dict[str, Any]
BASE_STATE, BASE_CASE = "full", "1 device"
"""The goal's yardstick: a 1-device claim on nodes 90% held whole, in the same layout."""
# (state of the arm measured, case): the goal's figures over the yardstick.
OVER_HELD_WHOLE = (
    ("core-full-1", "1 core"),
    ("core-full-1", "1 device"),
    ("core-full-1", "16 devices"),
    ("core-full-4", "1 core"),
    ("core-full-4", "1 device"),
    ("mixed", "1 core"),
    ("mixed", "1 device"),
)
# (state, case, over case): ratios within one arm.
WITHIN_ARM = (("empty", "1 core", "1 device"),)
WHOLE_DEVICES = "devices"
"""The layout that publishes whole devices alone: the memory goal's yardstick."""


def _row(label: str, what: str, values: list[float], blocks: int, fmt: str) -> str:
    each = [f"{v:{fmt}}" for v in values] + ["-"] * (blocks - len(values))
    return f"| {label} | {what} | {' | '.join(each)} | {median_and_range(values, fmt)} |"


def p50s(arm: Obj, case: str) -> list[float]:
    return [float(b["cases"][case]["p50_ms"]) for b in arm["blocks"] if case in b["cases"]]


def block_ratios(top: list[float], bottom: list[float], *, strict: bool = False) -> list[float]:
    """Each block's `top` over the same block's `bottom`; `strict`: as many of each."""
    return [a / b for a, b in zip(top, bottom, strict=strict)]


def _yardstick(arms: Obj, arm: Obj) -> tuple[str, Obj] | None:
    """The arm held whole of `arm`'s layout on the release's own scheduler."""
    for name, other in arms.items():
        same = other["layout"] == arm["layout"] and other["state"] == BASE_STATE
        if same and other["patch"] is None:
            return name, other
    return None


def run_rows(name: str, run: Obj, blocks: int) -> list[str]:
    """The rows of one kept run, in a table of `blocks` block columns."""
    arms: Obj = run["arms"]
    rows = [
        f"| **`{name}`** | {run['size']:,} nodes, {run['run'].get('kubernetes', '?')}, "
        f"{run['pods_per_block']} pods a case and block | "
        + " | ".join("" for _ in range(blocks + 2))
        + " |"
    ]
    for label, arm in arms.items():
        for case in arm["blocks"][0]["cases"] if arm["blocks"] else ():
            rows.append(_row(label, f"{case} (ms)", p50s(arm, case), blocks, ",.0f"))
    for label, arm in arms.items():
        base = _yardstick(arms, arm)
        ratios = [(s, c, None) for s, c in OVER_HELD_WHOLE] + list(WITHIN_ARM)
        for state, case, over in ratios:
            if arm["state"] != state or not p50s(arm, case):
                continue
            if over is None:
                if base is None:
                    continue
                under, what = p50s(base[1], BASE_CASE), f"{BASE_CASE}, {base[0]}"
            else:
                under, what = p50s(arm, over), over
            values = block_ratios(p50s(arm, case), under)
            rows.append(_row(label, f"{case} / {what}", values, blocks, ".2f"))
    whole = next(
        (a for a in arms.values() if a["layout"] == WHOLE_DEVICES and a["state"] == BASE_STATE),
        None,
    )
    for label, arm in arms.items():
        for key, when in (("rss_mib", "once filled"), ("rss_mib_end", "at the end")):
            if key not in arm:
                continue
            rss = float(arm[key]["kube-apiserver"])
            rows.append(_row(label, f"kube-apiserver RSS {when} (MiB)", [rss], blocks, ",.0f"))
            if whole is not None and arm is not whole:
                ratio = rss / float(whole[key]["kube-apiserver"])
                what = f"kube-apiserver RSS {when} / whole devices, 90% full"
                rows.append(_row(label, what, [ratio], blocks, ".2f"))
    return rows


def _header(runs: dict[str, Obj]) -> tuple[int, list[str]]:
    """The most blocks any kept run has, and the table's head with a column each."""
    blocks = max(
        (len(a["blocks"]) for run in runs.values() for a in run["arms"].values()), default=0
    )
    header = " | ".join(f"block {i + 1}" for i in range(blocks))
    return blocks, [
        f"| arm | figure | {header} | median | range |",
        "|---|---|" + "---|" * blocks + "---|---|",
    ]


def interleaved_table(runs: dict[str, Obj]) -> str:
    """Every kept run's rows under one header; a run's figures are compared within it."""
    blocks, lines = _header(runs)
    for name, run in runs.items():
        lines += run_rows(name, run, blocks)
    return "\n".join(lines)


def patch_table(runs: dict[str, Obj]) -> str:
    """What each patched scheduler changes, from the kept runs that measured one: the
    arm on the patched scheduler against the same layout and state on the release's,
    p50 by case, and their ratio block by block."""
    blocks, lines = _header(runs)
    for name, run in runs.items():
        arms: Obj = run["arms"]
        for label, arm in arms.items():
            if arm["patch"] is None:
                continue
            release = next(
                (
                    (n, a)
                    for n, a in arms.items()
                    if a["patch"] is None
                    and (a["layout"], a["state"]) == (arm["layout"], arm["state"])
                ),
                None,
            )
            if release is None:
                continue
            lines.append(
                f"| **`{name}`** | {run['size']:,} nodes, {run['run'].get('kubernetes', '?')} "
                "| " + " | ".join("" for _ in range(blocks + 2)) + " |"
            )
            for case in arm["blocks"][0]["cases"] if arm["blocks"] else ():
                patched, unpatched = p50s(arm, case), p50s(release[1], case)
                lines.append(_row(release[0], f"{case} (ms)", unpatched, blocks, ",.0f"))
                lines.append(_row(label, f"{case} (ms)", patched, blocks, ",.0f"))
                ratios = block_ratios(patched, unpatched)
                lines.append(_row(label, f"{case}: patched / release", ratios, blocks, ".2f"))
    return "\n".join(lines)
