"""Figures the docs quote in their prose, each made from a run kept in bench/results.

A page quotes one as `<!-- figure NAME -->TEXT<!-- end figure -->`; `python
bench/tables.py` writes TEXT from the kept runs, and `--check` fails where the text
differs, so a sentence cannot keep a figure its run no longer gives. Each figure of
an interleaved run (bench/interleave.py) is a ratio taken block by block, quoted as
the median of the blocks with their range. The summary's figures of the runs of
bench/scale.py are made in bench/fleetfigures.py and registered here with the rest.
Pure: no other module of bench/ is imported but armtable (and its holds) and
fleetfigures (and its stats), so the tests load this file alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from statistics import median
from typing import Any

from armtable import block_ratios, p50s
from fleetfigures import FLEET_FIGURES

Obj = dict[str, Any]
Figure = Callable[[dict[str, Obj]], str]
FIGURE = re.compile(
    r"(<!-- figure (?P<name>[\w.-]+) -->)(?P<body>(?:(?!<!--).)*?)(<!-- end figure -->)",
    re.DOTALL,
)
OPENING = re.compile(r"<!-- figure ")
INTERLEAVED = "interleaved-1000-1.json"
INTERLEAVED_138 = "interleaved-1000-138-1.json"
STATES_138 = "interleaved-1000-138-2.json"
STATES_137 = "interleaved-1000-3.json"
EMPTY = "partitions, empty"
ORDER_138 = "interleaved-1000-138-3.json"
LAYOUT_RUNS = (("137-2", "interleaved-1000-2.json"), ("138-4", "interleaved-1000-138-4.json"))
"""The runs with the same six arms on each release: partitions full of 1-core claims on
the release's scheduler and the cheap-checks one, capacity full of them, and the
three layouts held whole."""
LEADS, WHOLE_FIRST = "partitions, empty", "partitions-whole-first, empty"
HELD_WHOLE = ("partitions, full", "1 device")


def _quoted(values: list[float]) -> str:
    return f"{median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def block_ratio(file: str, arm: str, case: str, base: tuple[str, str]) -> Figure:
    """`arm`'s p50 of `case` over `base` (arm, case), block by block."""

    def figure(kept: dict[str, Obj]) -> str:
        arms = kept[file]["arms"]
        under = p50s(arms[base[0]], base[1])
        return _quoted(block_ratios(p50s(arms[arm], case), under, strict=True))

    return figure


def p50(file: str, arm: str, case: str) -> Figure:
    """`arm`'s p50 of `case`: the median of its blocks, in ms."""

    def figure(kept: dict[str, Obj]) -> str:
        return f"{median(p50s(kept[file]['arms'][arm], case)):,.0f} ms"

    return figure


def scale_p50(file: str, layout: str, state: str, case: str) -> Figure:
    """A case's p50 in one state of a bench/scale.py run at its one size, in ms."""

    def figure(kept: dict[str, Obj]) -> str:
        [step] = kept[file]["layouts"][layout]["sizes"].values()
        return f"{step[state][case]['p50_ms']:,.0f} ms"

    return figure


def rss_ratio(file: str, arm: str, base: str) -> Figure:
    """kube-apiserver's RSS in `arm` over `base`'s, once filled and at the end."""

    def figure(kept: dict[str, Obj]) -> str:
        arms = kept[file]["arms"]
        values = [
            arms[arm][k]["kube-apiserver"] / arms[base][k]["kube-apiserver"]
            for k in ("rss_mib", "rss_mib_end")
        ]
        return _quoted(values)

    return figure


def model_arm(arm: str, key: str, unit: str, scale: float = 1.0) -> Figure:
    """An arm's `key` in bench/models.py's run: the median of the repeats and their range."""

    def figure(kept: dict[str, Obj]) -> str:
        values = [run[key] * scale for run in kept[MODELS]["arms"][arm]]
        return f"{median(values):.1f} {unit} ({min(values):.1f}-{max(values):.1f})"

    return figure


def model_added(key: str, unit: str, scale: float = 1.0) -> Figure:
    """What the pydantic arm adds to the dataclasses arm's `key`, repeat by repeat."""

    def figure(kept: dict[str, Obj]) -> str:
        arms = kept[MODELS]["arms"]
        values = [
            (p[key] - d[key]) * scale
            for p, d in zip(arms["pydantic"], arms["dataclasses"], strict=True)
        ]
        return f"{median(values):.1f} {unit} ({min(values):.1f}-{max(values):.1f})"

    return figure


MODELS = "models.json"
CORE_FULL = "partitions, core-full-1"
CORE_FULL_4 = "partitions, core-full-4"
MIXED = "partitions, mixed"
PATCHED = "partitions +allocator-cheap-checks-first, core-full-1"
CAPACITY_CORE_FULL = "capacity, core-full-1"
CAPACITY_HELD_WHOLE = ("capacity, full", "1 device")
INTERLEAVED_FIGURES: dict[str, Figure] = {
    "core-full-1-core": block_ratio(INTERLEAVED, CORE_FULL, "1 core", HELD_WHOLE),
    "core-full-1-device": block_ratio(INTERLEAVED, CORE_FULL, "1 device", HELD_WHOLE),
    "core-full-16-devices": block_ratio(INTERLEAVED, CORE_FULL, "16 devices", HELD_WHOLE),
    "patched-1-core": block_ratio(INTERLEAVED, PATCHED, "1 core", HELD_WHOLE),
    "patched-1-device": block_ratio(INTERLEAVED, PATCHED, "1 device", HELD_WHOLE),
    "patched-over-release-1-core": block_ratio(
        INTERLEAVED, PATCHED, "1 core", (CORE_FULL, "1 core")
    ),
    "patched-over-release-1-device": block_ratio(
        INTERLEAVED, PATCHED, "1 device", (CORE_FULL, "1 device")
    ),
    "held-whole-1-device": p50(INTERLEAVED, *HELD_WHOLE),
    "whole-devices-1-device": p50(INTERLEAVED, "devices, full", "1 device"),
    "held-whole-over-whole-devices": block_ratio(
        INTERLEAVED, "partitions, full", "1 device", ("devices, full", "1 device")
    ),
    "empty-1-core": block_ratio(
        INTERLEAVED, "partitions, empty", "1 core", ("partitions, empty", "1 device")
    ),
    "rss-core-full": rss_ratio(INTERLEAVED, CORE_FULL, "devices, full"),
    "rss-held-whole": rss_ratio(INTERLEAVED, "partitions, full", "devices, full"),
    "rss-empty": rss_ratio(INTERLEAVED, "partitions, empty", "devices, full"),
    "core-full-1-core-138": block_ratio(INTERLEAVED_138, CORE_FULL, "1 core", HELD_WHOLE),
    "core-full-1-device-138": block_ratio(INTERLEAVED_138, CORE_FULL, "1 device", HELD_WHOLE),
    "empty-1-core-138": block_ratio(
        INTERLEAVED_138, "partitions, empty", "1 core", ("partitions, empty", "1 device")
    ),
    "rss-core-full-138": rss_ratio(INTERLEAVED_138, CORE_FULL, "devices, full"),
    "core-full-4-1-core-138": block_ratio(STATES_138, CORE_FULL_4, "1 core", HELD_WHOLE),
    "core-full-4-1-device-138": block_ratio(STATES_138, CORE_FULL_4, "1 device", HELD_WHOLE),
    "mixed-1-core-138": block_ratio(STATES_138, MIXED, "1 core", HELD_WHOLE),
    "mixed-1-device-138": block_ratio(STATES_138, MIXED, "1 device", HELD_WHOLE),
    "rss-core-full-4-138": rss_ratio(STATES_138, CORE_FULL_4, "devices, full"),
    "rss-mixed-138": rss_ratio(STATES_138, MIXED, "devices, full"),
    "rss-held-whole-138": rss_ratio(STATES_138, "partitions, full", "devices, full"),
    **{
        f"{slug}-137-3": figure
        for slug, figure in (
            ("core-full-4-1-core", block_ratio(STATES_137, CORE_FULL_4, "1 core", HELD_WHOLE)),
            ("core-full-4-1-device", block_ratio(STATES_137, CORE_FULL_4, "1 device", HELD_WHOLE)),
            ("mixed-1-core", block_ratio(STATES_137, MIXED, "1 core", HELD_WHOLE)),
            ("mixed-1-device", block_ratio(STATES_137, MIXED, "1 device", HELD_WHOLE)),
            ("empty-1-core", block_ratio(STATES_137, EMPTY, "1 core", (EMPTY, "1 device"))),
            ("rss-core-full-4", rss_ratio(STATES_137, CORE_FULL_4, "devices, full")),
            ("rss-mixed", rss_ratio(STATES_137, MIXED, "devices, full")),
            ("rss-empty", rss_ratio(STATES_137, EMPTY, "devices, full")),
        )
    },
    **{
        f"core-leads-{slug}-{release}": block_ratio(file, LEADS, case, (WHOLE_FIRST, case))
        for release, file in (("138", ORDER_138),)
        for slug, case in (
            ("1-core", "1 core"),
            ("1-device", "1 device"),
            ("4-connected", "4 connected"),
            ("16-devices", "16 devices"),
        )
    },
    **{
        f"{arm}-empty-1-core-{release}": block_ratio(file, layout, "1 core", (layout, "1 device"))
        for release, file in (("138", ORDER_138),)
        for arm, layout in (("core-leads", LEADS), ("whole-first", WHOLE_FIRST))
    },
    **{
        f"core-leads-16-devices-over-devices-{release}": block_ratio(
            file, LEADS, "16 devices", ("devices, empty", "16 devices")
        )
        for release, file in (("138", ORDER_138),)
    },
    **{
        f"{name}-{slug}-{run}": block_ratio(file, arm, case, base)
        for run, file in LAYOUT_RUNS
        for slug, case in (("1-core", "1 core"), ("1-device", "1 device"))
        for name, arm, base in (
            ("release", CORE_FULL, HELD_WHOLE),
            ("patched", PATCHED, HELD_WHOLE),
            ("patched-over-release", PATCHED, (CORE_FULL, case)),
            ("capacity", CAPACITY_CORE_FULL, CAPACITY_HELD_WHOLE),
            ("capacity-over-partitions", CAPACITY_CORE_FULL, HELD_WHOLE),
        )
    },
    **{
        f"capacity-held-whole-over-partitions-{run}": block_ratio(
            file, *CAPACITY_HELD_WHOLE, HELD_WHOLE
        )
        for run, file in LAYOUT_RUNS
    },
    **{
        f"rss-{slug}-{run}": rss_ratio(file, arm, "devices, full")
        for run, file in LAYOUT_RUNS
        for slug, arm in (
            ("core-full", CORE_FULL),
            ("held-whole", "partitions, full"),
            ("capacity-core-full", CAPACITY_CORE_FULL),
            ("capacity-held-whole", CAPACITY_HELD_WHOLE[0]),
        )
    },
    "capacity-held-whole-137": scale_p50("holds-1000-2.json", "capacity", "full", "1 device"),
    "partitions-held-whole-137": scale_p50("holds-1000-2.json", "partitions", "full", "1 device"),
    "capacity-held-whole-138": scale_p50("holds-1000-138-1.json", "capacity", "full", "1 device"),
    "partitions-held-whole-138": scale_p50(
        "holds-1000-138-1.json", "partitions", "full", "1 device"
    ),
    "models-rss-dataclasses": model_arm("dataclasses", "rss_mib", "MiB"),
    "models-rss-pydantic": model_arm("pydantic", "rss_mib", "MiB"),
    "models-rss-added": model_added("rss_mib", "MiB"),
    "models-import-dataclasses": model_arm("dataclasses", "import_s", "ms", 1000),
    "models-import-added": model_added("import_s", "ms", 1000),
    "models-decode-dataclasses": model_arm("dataclasses", "decode_us", "µs"),
    "models-decode-pydantic": model_arm("pydantic", "decode_us", "µs"),
}
if shared := INTERLEAVED_FIGURES.keys() & FLEET_FIGURES.keys():
    # One name quoting two figures would quote whichever was registered last.
    raise ValueError(f"figures named twice: {', '.join(sorted(shared))}")
FIGURES: dict[str, Figure] = {**INTERLEAVED_FIGURES, **FLEET_FIGURES}


def render_figures(page: str, kept: dict[str, Obj]) -> str:
    """`page` with every quoted figure made again from `kept` (runs by file name)."""

    def quote(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in FIGURES:
            raise ValueError(f"no figure named {name!r}: {', '.join(FIGURES)}")
        return f"{match[1]}{FIGURES[name](kept)}{match[4]}"

    opened, closed = len(OPENING.findall(page)), len(FIGURE.findall(page))
    if opened != closed:
        raise ValueError(
            f"{opened - closed} of {opened} quoted figures have no "
            "`<!-- end figure -->` right after their text"
        )
    return FIGURE.sub(quote, page)


def stale_figures(page: str, kept: dict[str, Obj]) -> list[str]:
    """The names of the figures of `page` that differ from what the runs give."""
    made = [m["body"] for m in FIGURE.finditer(render_figures(page, kept))]
    return [
        m["name"] for m, body in zip(FIGURE.finditer(page), made, strict=True) if m["body"] != body
    ]
