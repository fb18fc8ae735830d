"""Fleet states side by side: what a claim costs in each state and layout, measured in
one run with the arms alive at once and their cases interleaved.

An arm is a layout (bench/fleet.py), a scheduler (the release's, or one with
`bench/upstream/NAME.patch`) and a fleet state (bench/fill.py, or "empty"), written
`layout:state` or `layout:state:patch`. Each arm gets a cluster of its own (the real
kube-apiserver, kube-scheduler and kube-controller-manager, as bench/scale.py starts
them), grown to `--size` nodes and filled to its state; all of them stay up. Then the
cases (bench/pods.py) are timed in `--blocks` blocks: in each block every arm in turn
times `--pods` pods of each case, the arms' order rotated block by block. A figure
that load moves (this machine's load moves a p50 by tens of percent in minutes) moves
every arm of a block alike, so each comparison is taken within a block, between arms
measured minutes apart at most, and the blocks give its median and range.

Figures go to bench/results/interleaved.json (or `--out`) with what the run was
(bench/provenance.py: commit, driver version, load average); `python bench/tables.py`
makes docs/contributors/fleet-scale.md's `interleaved` table of the runs kept
(bench/armtable.py). It takes about an hour at 1,000 nodes and 5 arms, and half the
machine's memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# This directory is on sys.path when the file runs as a script.
from common import RESULTS, rounded
from fill import CORE_STATES, STATES, Filler
from fleet import LAYOUTS, NAMESPACE, Api, Fleet
from observe import PodWatch, SchedulerMetrics
from pods import CASES, Case, Scheduling
from provenance import DirtyTreeError, at_end, load_average
from scale import (
    DEFAULT_API_VERSIONS,
    device_classes,
    fake_inventories,
    footprint,
    metadata,
    say,
)

from neuron_dra.resources.slices import CoreLayout
from neuron_dra_harness.build import Binaries, build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.patched import patched_binaries

Obj = dict[str, Any]
EMPTY = "empty"
DEFAULT_ARMS = (
    "partitions:empty,partitions:full,partitions:core-full-1,"
    "partitions:core-full-1:allocator-cheap-checks-first,devices:full"
)


@dataclass(frozen=True)
class ArmSpec:
    """What one arm measures: a layout, a fleet state, and the scheduler's patch."""

    layout: str
    state: str
    patch: str | None = None

    @classmethod
    def parse(cls, text: str) -> ArmSpec:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"{text!r}: an arm is layout:state or layout:state:patch")
        layout, state, *patch = parts
        if layout not in LAYOUTS:
            raise ValueError(f"{text!r}: no layout {layout!r}; known: {', '.join(LAYOUTS)}")
        if state != EMPTY and state not in STATES:
            raise ValueError(f"{text!r}: no state {state!r}; known: {EMPTY}, {', '.join(STATES)}")
        if state in CORE_STATES and LAYOUTS[layout].cores is CoreLayout.OFF:
            raise ValueError(f"{text!r}: {layout} publishes no cores to fill")
        return cls(layout, state, patch[0] if patch else None)

    @property
    def name(self) -> str:
        scheduler = f" +{self.patch}" if self.patch else ""
        return f"{self.layout}{scheduler}, {self.state}"


class Arm:
    """One arm's cluster, grown and filled, and the cases it times."""

    def __init__(
        self, spec: ArmSpec, args: argparse.Namespace, tmp: Path, stack: ExitStack
    ) -> None:
        tmp.mkdir()
        self.spec = spec
        layout = LAYOUTS[spec.layout]
        binaries: Binaries = patched_binaries(spec.patch) if spec.patch else build()
        inventories = fake_inventories(layout, tmp)
        lnc = inventories["trn2.48xlarge"].lnc or 1
        cluster = stack.enter_context(Cluster(binaries, runtime_config=args.runtime_config))
        for obj in device_classes(layout):
            cluster.apply(obj)
        api = Api(cluster)
        self.cluster = cluster
        self.fleet = Fleet(cluster, api, layout, inventories, args.ultraserver_share)
        watch = PodWatch(cluster, NAMESPACE)
        stack.callback(watch.close)
        metrics = SchedulerMetrics(cluster)
        stack.callback(metrics.close)
        self.scheduling = Scheduling(cluster, api, watch, metrics, layout, lnc)
        cores = layout.cores is not CoreLayout.OFF
        self.cases: list[Case] = [
            c for c in CASES if c.name in args.cases and (cores or not c.cores)
        ]
        self.figures: Obj = {
            "layout": spec.layout,
            "state": spec.state,
            "patch": spec.patch,
            "kubernetes": binaries.version,
            "grow_s": self.fleet.grow(args.size),
        }
        if spec.state != EMPTY:
            filler = Filler(api, self.fleet)
            self.figures["fill_s"] = filler.fill(spec.state)
            self.figures["claims"] = filler.claims
        self.figures["devices_published"] = sum(self.fleet.published.values())
        self.figures["bytes_per_node"] = self.fleet.slice_bytes
        self.figures["rss_mib"] = footprint(cluster)
        self.figures["blocks"] = []
        say(
            f"{spec.name}: {args.size} nodes, {self.figures.get('claims', 0)} claims, "
            f"{self.figures['devices_published']} devices published, "
            f"RSS {self.figures['rss_mib']}"
        )

    def block(self, pods: int) -> None:
        """`pods` pods of each case, timed, kept as the next block."""
        figures = self.scheduling.cases(self.cases, pods)
        self.figures["blocks"].append({"load_average": load_average(), "cases": figures})
        say(
            f"{self.spec.name}: "
            + ", ".join(f"{n} {f['p50_ms']:.0f}" for n, f in figures.items())
            + " ms p50"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="nodes in each arm's cluster")
    parser.add_argument("--arms", default=DEFAULT_ARMS, help="layout:state[:patch],...")
    parser.add_argument(
        "--cases", default=",".join(c.name for c in CASES), help="the cases timed, by name"
    )
    parser.add_argument("--blocks", type=int, default=3, help="blocks, the arms rotated each")
    parser.add_argument("--pods", type=int, default=10, help="timed pods a case, arm and block")
    parser.add_argument("--ultraserver-share", type=float, default=0.25)
    parser.add_argument("--runtime-config", default=DEFAULT_API_VERSIONS)
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help='run from a tree with uncommitted changes, recorded as "dirty": true',
    )
    parser.add_argument("--out", default=str(RESULTS / "interleaved.json"))
    args = parser.parse_args(argv)
    args.cases = set(args.cases.split(","))
    unknown = args.cases - {c.name for c in CASES}
    if unknown:
        parser.error(f"no case {', '.join(sorted(unknown))}")
    try:
        specs = [ArmSpec.parse(a) for a in args.arms.split(",")]
        run = metadata(argv, args.allow_dirty)
    except (ValueError, DirtyTreeError) as refused:
        print(f"bench/interleave.py: {refused}", file=sys.stderr)
        return 2
    run["command"] = " ".join(["python bench/interleave.py", *argv])
    began = time.monotonic()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result: Obj = {"run": run, "size": args.size, "pods_per_block": args.pods, "arms": {}}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        arms = [Arm(spec, args, Path(tmp) / str(i), stack) for i, spec in enumerate(specs)]
        for arm in arms:
            result["arms"][arm.spec.name] = arm.figures
        for block in range(args.blocks):
            turn = block % len(arms)
            for arm in arms[turn:] + arms[:turn]:
                arm.block(args.pods)
            for arm in arms:
                arm.figures["rss_mib_end"] = footprint(arm.cluster)
            result["run"] = at_end(result["run"]) | {"runtime_s": time.monotonic() - began}
            out.write_text(json.dumps(rounded(result), indent=1) + "\n")
    say(f"done in {result['run']['runtime_s']:.0f} s: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
