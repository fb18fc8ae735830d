"""Scheduling at fleet scale: the real kube-scheduler over thousands of simulated
trn2.48xlarge nodes, empty, filled several ways and churning, for each way of
publishing NeuronCores.

For each layout (`--layouts`) a cluster of its own (the real kube-apiserver,
kube-scheduler and kube-controller-manager of tests/e2e, default feature gates, and
the API versions a default API server serves: resource.k8s.io/v1 alone, where the
tests' clusters serve v1beta1 and v1beta2 too, each with a watch cache of its own,
which triples the API server's slice memory) grows
through the sizes (`--sizes`). Nodes are Node objects (Ready, no kubelet) with the
slices `neuron_dra.resources.slices.build_slices` lays out for a simulated
trn2.48xlarge, a share of them (`--ultraserver-share`) trn2u UltraServer nodes; the
benchmark publishes them itself, several nodes at a time, one slice after another per
node as an agent does (bench/fleet.py). At each size:

1. **empty**: every case (bench/pods.py) in turn, one pod at a time, each pod with a
   claim of its own created beforehand, timed from just before the pod's POST to the
   watch event that shows it bound (client monotonic clock), then deleted with its
   claim;
2. each fleet state of `--states` (bench/fill.py: "full", nine nodes in ten held whole;
   "core-full-1" and "core-full-4", nine in ten full of 1-core or 4-core claims;
   "mixed", a third held whole, a third full of 1-core claims, a third free), filled by
   claims allocated by hand, then the same cases, then the fleet emptied again. After
   "full" come a **steady** phase (short-lived 1-device pods created at `--rate`, each
   deleted once bound, as clusterloader2's DRA steady-state test does; `--steady-cases`
   adds others, "no claim" giving what the scheduler keeps up with when no pod asks
   for a device, the cases taking turns `--steady-repeats` times) and the
   **churn** phases (bench/churn.py) at each rate of `--churn-rates`: pods of each case
   of `--churn-cases` (whole devices by default; "1 core" churns core pods) living
   `--churn-life` seconds, with the agent's slice rewrites and, where the layout
   withdraws cores, again without them.

A p99 is given only where a case has 30 timed pods (`--pods`). What the control
plane carries is reported too: slices and bytes per node, the time to publish every
node, and the RSS of kube-apiserver, etcd and kube-scheduler after each phase. With
`--profile`, a CPU profile of the scheduler over the last size's cases in each state of
`--profile-states` ("full") is written beside the results, with its top functions;
with `--heap-profile`, kube-apiserver's live heap after publishing and in each state
(bench/heap.py), by the functions that allocated it.

It takes tens of minutes and much of the machine's memory; `make bench-scale` runs
it. Progress goes to stdout, figures to bench/results/scale.json (or `--out`), with
what the run was: its command, machine, full commit, driver version, load average at
start and end, date and Kubernetes release (bench/provenance.py). A tree with changes
no commit holds is refused unless `--allow-dirty`, which the result records as
`"dirty": true`. `python bench/tables.py` makes the docs' tables of the results kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

# This directory is on sys.path when the file runs as a script.
from churn import CHURN, churn
from common import RESULTS, rounded, rss_mib
from fill import CORE_STATES, STATES, Filler
from fleet import LAYOUTS, NAMESPACE, Api, Fleet, Layout, core_capacity_class
from heap import heap
from observe import Metrics, PodWatch, SchedulerMetrics
from pods import CASES, STEADY, Scheduling
from provenance import DirtyTreeError, at_end, at_start
from stats import percentile

from consts import DRIVER_NAME
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import build_fake_node
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.slices import CoreLayout
from neuron_dra_harness.build import Binaries, build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.patched import patched_binaries

REPO = Path(__file__).resolve().parents[1]
# resource.k8s.io/v1 is on by default from 1.34; this names it only to give the flag a
# value, enabling nothing the API server would not serve anyway.
DEFAULT_API_VERSIONS = "resource.k8s.io/v1=true"

Obj = dict[str, Any]


def footprint(cluster: Cluster) -> Obj:
    return {
        c.name: round(rss_mib(c.pid))
        for c in cluster.components
        if c.name in ("etcd", "kube-apiserver", "kube-scheduler") and c.alive()
    }


def profile(
    cluster: Cluster, seconds: int, out: Path, during: Callable[[], Obj]
) -> tuple[Obj, str]:
    """A CPU profile of the scheduler while `during` runs; its result and the profile's
    top functions."""
    [scheduler] = [c for c in cluster.components if c.name == "kube-scheduler"]
    [port] = [a.split("=", 1)[1] for a in scheduler.argv if a.startswith("--secure-port=")]
    url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
    fetch = subprocess.Popen(
        ["curl", "-sk", "-H", f"Authorization: Bearer {cluster.token}", "-o", str(out), url]
    )
    result = during()
    fetch.wait(timeout=seconds + 60)
    top = subprocess.run(
        [
            "go",
            "tool",
            "pprof",
            "-top",
            "-nodecount=25",
            str(cluster.binaries.kube_scheduler),
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return result, top.stdout or top.stderr


def fake_inventories(layout: Layout, tmp: Path) -> dict[str, NodeInventory]:
    """What a trn2 and a trn2u node of `layout`'s LNC discover, by instance type, from
    fake sysfs trees written under `tmp`."""
    return {
        kind: discover(
            build_fake_node(tmp / f"{layout.name}-{kind}", kind, lnc=layout.lnc)
        ).inventory
        for kind in ("trn2.48xlarge", "trn2u.48xlarge")
    }


def run_layout(
    layout: Layout, sizes: list[int], args: argparse.Namespace, tmp: Path, binaries: Binaries
) -> Obj:
    inventories = fake_inventories(layout, tmp)
    lnc = inventories["trn2.48xlarge"].lnc or 1
    figures: Obj = {"layout": layout.name, "lnc": lnc, "sizes": {}}
    started = time.monotonic()
    apiserver_args = [*args.apiserver_arg, *(["--profiling=true"] if args.heap_profile else [])]
    extra = {"kube-apiserver": apiserver_args} if apiserver_args else None
    with Cluster(binaries, runtime_config=args.runtime_config, extra_args=extra) as cluster:
        for obj in device_classes(layout):
            cluster.apply(obj)
        api = Api(cluster)
        fleet = Fleet(cluster, api, layout, inventories, args.ultraserver_share)
        watch = PodWatch(cluster, NAMESPACE)
        metrics = SchedulerMetrics(cluster)
        apiserver = Metrics(cluster, "kube-apiserver")
        run = Run(
            fleet,
            Filler(api, fleet),
            Scheduling(cluster, api, watch, metrics, layout, lnc),
            apiserver,
            args,
        )
        try:
            for size in sizes:
                figures["sizes"][size] = run.size(size, last=size == sizes[-1])
        finally:
            watch.close()
            metrics.close()
            apiserver.close()
    figures["retries"] = run.scheduling.retries
    figures["slices_per_node"] = fleet.slice_count
    figures["bytes_per_node"] = fleet.slice_bytes
    figures["devices_per_node"] = {k: len(v) for k, v in fleet.devices.items()}
    figures["publish_p50_ms"] = percentile(fleet.publish_s, 0.5) * 1000
    figures["publish_p99_ms"] = percentile(fleet.publish_s, 0.99) * 1000
    figures["total_s"] = time.monotonic() - started
    return figures


class Run:
    """The phases of one layout's cluster at each size."""

    def __init__(
        self,
        fleet: Fleet,
        filler: Filler,
        scheduling: Scheduling,
        apiserver: Metrics,
        args: argparse.Namespace,
    ) -> None:
        self.fleet, self.filler, self.scheduling = fleet, filler, scheduling
        self.apiserver, self.args = apiserver, args
        cores = fleet.layout.cores is not CoreLayout.OFF
        self.cases = [c for c in CASES if cores or not c.cores]
        self.states = [s for s in args.states.split(",") if cores or s not in CORE_STATES]

    def size(self, size: int, *, last: bool) -> Obj:
        """Grown to `size` nodes, measured empty and in each state."""
        name, cluster, args = self.fleet.layout.name, self.fleet.cluster, self.args
        step: Obj = {"grow_s": self.fleet.grow(size)}
        step["rss_mib_after_publish"] = footprint(cluster)
        say(
            f"{name}: {size} nodes published in {step['grow_s']:.0f} s, "
            f"RSS {step['rss_mib_after_publish']}"
        )
        if args.heap_profile:
            step["heap_after_publish"] = self.heap(size, "published")
        step["empty"] = self.scheduling.cases(self.cases, args.pods)
        step["devices_published_empty"] = sum(self.fleet.published.values())
        say(f"{name}, {size} empty: " + brief(step["empty"]))
        step["fill"] = {}
        for state in self.states:
            fill: Obj = {"fill_s": self.filler.fill(state)}
            step["fill"][state] = fill
            fill["claims"] = self.filler.claims
            fill["devices_published"] = sum(self.fleet.published.values())
            say(f"{name}, {size} {state}: {fill['claims']} claims in {fill['fill_s']:.0f} s")
            if args.profile and last and state in args.profile_states.split(","):
                out = Path(args.out).parent / f"scale-{name}-{size}-{state}.pprof"
                step[state], fill["profile_top"] = profile(
                    cluster, args.profile, out, lambda: self.scheduling.cases(self.cases, args.pods)
                )
            else:
                step[state] = self.scheduling.cases(self.cases, args.pods)
            say(f"{name}, {size} {state}: " + brief(step[state]))
            if state == "full":
                self.steady_and_churn(step)
            fill["rss_mib"] = footprint(cluster)
            if args.heap_profile:
                fill["heap"] = self.heap(size, state)
            fill["empty_s"] = self.filler.empty()
        return step

    def heap(self, size: int, state: str) -> Obj:
        out = Path(self.args.out).parent / f"heap-{self.fleet.layout.name}-{size}-{state}.pprof"
        figures = heap(self.fleet.cluster, out)
        say(f"kube-apiserver: live heap {figures['inuse_mib']} MiB; {figures['runtime_mib']}")
        return figures

    def steady_and_churn(self, step: Obj) -> None:
        args = self.args
        names = args.steady_cases.split(",")
        by_case: dict[str, list[Obj]] = {}
        # The cases take turns, `--steady-repeats` times, so that a load that moves
        # during the phases moves each case alike.
        for _ in range(args.steady_repeats):
            for case in (c for name in names for c in self.cases if c.name == name):
                steady = self.scheduling.steady(case, args.steady_pods, args.rate)
                by_case.setdefault(case.name, []).append(steady)
                say(
                    f"steady {case.name}: p50 {steady['p50_ms']:.0f} ms, "
                    f"{steady['pods_per_s']:.2f} pods/s of {args.rate}"
                )
        if STEADY in by_case:
            step["steady"] = by_case[STEADY][0]
        if names != [STEADY] or args.steady_repeats > 1:
            step["steady_cases"] = by_case
        step["churn"] = []
        rates = [float(r) for r in args.churn_rates.split(",") if r]
        churned = [c for c in self.cases if c.name in args.churn_cases.split(",")]
        for case, rate in ((c, r) for c in churned for r in rates):
            for rewrite in (True, False) if self.fleet.withholds else (False,):
                figures = churn(
                    self.scheduling,
                    self.fleet,
                    self.apiserver,
                    self.scheduling.metrics,
                    rate=rate,
                    seconds=args.churn_seconds,
                    life=args.churn_life,
                    rewrite=rewrite,
                    case=case,
                )
                step["churn"].append(figures)
                say(
                    f"churn {case.name} {rate}/s, rewrite {rewrite}: "
                    f"p50 {figures['p50_ms']:.0f} ms, "
                    f"{figures['pods_per_s']:.2f} pods/s, {figures['rewrites']} rewrites, "
                    f"{figures['slice_writes_per_s']:.1f} slice writes/s, "
                    f"requeued {figures['requeued']}"
                )


def device_classes(layout: Layout) -> list[Obj]:
    """The chart's DeviceClasses, as `layout` wants them."""
    text = (REPO / "deploy" / "deviceclass.yaml").read_text()
    classes = [obj for obj in yaml.safe_load_all(text) if obj]
    if layout.cores is CoreLayout.CAPACITY:
        core_class = f"neuroncore.{DRIVER_NAME}"
        classes = [
            core_capacity_class() if c["metadata"]["name"] == core_class else c for c in classes
        ]
    if layout.joined_selectors:
        for obj in classes:
            joined = " && ".join(f"({s['cel']['expression']})" for s in obj["spec"]["selectors"])
            obj["spec"]["selectors"] = [{"cel": {"expression": joined}}]
    return classes


def brief(cases: Obj) -> str:
    return ", ".join(f"{name} {f['p50_ms']:.0f}" for name, f in cases.items()) + " ms p50"


def say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", flush=True)


def metadata(argv: list[str], allow_dirty: bool) -> Obj:
    """What a run was: its command, machine, commit (refused from a tree with changes
    unless `allow_dirty`), driver version, load average, date and Kubernetes release."""
    return {
        "command": " ".join(["python bench/scale.py", *argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "arch": platform.machine(),
            "cores": os.cpu_count(),
            "ram_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30,
            "python": platform.python_version(),
        },
        **at_start(REPO, allow_dirty),
        "kubernetes": build().version,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000", help="cluster sizes, in nodes")
    parser.add_argument("--layouts", default="devices,partitions", help=", ".join(LAYOUTS))
    parser.add_argument("--states", default=",".join(STATES), help=", ".join(STATES))
    parser.add_argument("--pods", type=int, default=30, help="timed pods per case and phase")
    parser.add_argument("--steady-pods", type=int, default=60)
    parser.add_argument(
        "--steady-cases",
        default=STEADY,
        help='cases of the steady phase, comma-separated ("no claim": the scheduler alone)',
    )
    parser.add_argument("--steady-repeats", type=int, default=1, help="turns the steady cases take")
    parser.add_argument("--rate", type=float, default=5.0, help="steady pods created a second")
    parser.add_argument("--churn-rates", default="2,8", help="churning pods created a second")
    parser.add_argument(
        "--churn-cases",
        default=CHURN.name,
        help="the cases churned, by name (bench/pods.py), each at every rate",
    )
    parser.add_argument("--churn-seconds", type=float, default=30.0)
    parser.add_argument("--churn-life", type=float, default=5.0, help="seconds a pod lives")
    parser.add_argument("--ultraserver-share", type=float, default=0.25)
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        help="seconds of scheduler CPU profile over the largest cluster's cases in a state",
    )
    parser.add_argument(
        "--profile-states",
        default="full",
        help="the fleet states whose cases --profile profiles",
    )
    parser.add_argument(
        "--heap-profile",
        action="store_true",
        help="profile kube-apiserver's live heap after publishing and in each state",
    )
    parser.add_argument(
        "--patched",
        metavar="NAME",
        help="run each layout again on a scheduler with bench/upstream/NAME.patch",
    )
    parser.add_argument(
        "--apiserver-arg",
        action="append",
        default=[],
        help="an extra kube-apiserver flag, e.g. --watch-cache-sizes=resourceslices."
        "resource.k8s.io#0 where the machine's memory does not hold its watch cache",
    )
    parser.add_argument(
        "--runtime-config",
        default=DEFAULT_API_VERSIONS,
        help="kube-apiserver's --runtime-config (default: the API server's own defaults)",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help='run from a tree with uncommitted changes, recorded as "dirty": true',
    )
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    began = time.monotonic()
    try:
        run = metadata(argv, args.allow_dirty)
    except DirtyTreeError as refused:
        print(f"bench/scale.py: {refused}", file=sys.stderr)
        return 2
    result: Obj = {
        "run": run,
        "sizes": sizes,
        "pods_per_case": args.pods,
        "ultraserver_share": args.ultraserver_share,
        "apiserver_args": args.apiserver_arg,
        "runtime_config": args.runtime_config,
        "layouts": {},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        schedulers = {"": build()}
        if args.patched:
            schedulers[f" +{args.patched}"] = patched_binaries(args.patched)
        for name in args.layouts.split(","):
            for suffix, binaries in schedulers.items():
                say(f"layout {name}{suffix}")
                result["layouts"][name + suffix] = run_layout(
                    LAYOUTS[name], sizes, args, Path(tmp), binaries
                )
                result["run"] = at_end(result["run"])
                result["run"]["runtime_s"] = time.monotonic() - began
                out.write_text(json.dumps(rounded(result), indent=1) + "\n")
    say(f"done in {result['run']['runtime_s']:.0f} s: {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
