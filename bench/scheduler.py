"""Scheduling latency with the real kube-scheduler: pod creation to binding, on
clusters of simulated trn2.48xlarge nodes, with and without NeuronCores published.

Variants: `devices` (cores not published: 16 devices, 1 slice per node), `cores`
(the default LNC 2: 16 devices + 64 cores, 3 slices) and `cores-lnc1` (LNC 1: 16 +
128, 4 slices). Each gets a cluster of its own (the real kube-apiserver,
kube-scheduler and kube-controller-manager of tests/e2e, default feature gates:
partitionable devices on from 1.36). Nodes are Node objects created through the API
(Ready, 110 pods allocatable, labelled with their instance type; no kubelet behind
them) with the driver's own ResourceSlices, `build_slices` of one simulated
trn2.48xlarge in the counter layout the server asks for, created through the API by
the benchmark (no plugin process per node). The cluster grows in steps (1, 100, 500
nodes by default) and every case is measured at every step:

- `no claim`: a pod without claims, the scheduler's own cost with no DRA work;
- `1 core`: a claim for 1 NeuronCore (class neuroncore.neuron.aws.com), only where
  cores are published;
- `4 connected`: 4 devices of one devicegroup4 (class neuron.aws.com);
- `16 devices`: all 16 devices of a node (class neuron.aws.com).

Measurement: pods go one at a time, each with a ResourceClaim of its own created
beforehand (untimed). The time is taken on the client's monotonic clock just
before the pod's POST and when a watch on the namespace's pods, opened before the
first pod, delivers the first event of the pod with `spec.nodeName` set. It covers
what a user sees: the POST, the scheduler's queue and cycle (PreFilter, Filter over
the nodes it scans, Score), PreBind writing the claim's allocation, the Binding, and
the watch delivering it; the server's timestamps (creationTimestamp, PodScheduled
lastTransitionTime) have whole-second resolution only. Beside it, "algorithm": the
growth of the scheduler's scheduling_algorithm_duration_seconds sum (read from its
/metrics before the POST and after the binding) over the pod, the wall time of its
Filter and Score phases alone. After each pod the pod is deleted (grace period 0)
with its claim, and the next pod starts once the API server no longer has the claim
(the claim controller released its allocation), so every pod sees the same, empty
cluster. The cases take turns, pod by pod, so that noise on the machine hits them
alike; the first pod of each case at each step is a warm-up and is not counted. A
pod the scheduler first marks unschedulable (a stale view of a freed device) would
show as a retry; their count is reported.

Setup figures: each node's slices are created one after another by one thread
(the way an agent publishes them), 6 nodes at a time; "publish" is the time from the
first slice's POST to the last one's answer, p50 over all nodes of the variant (the
first node's, published alone, is reported too).

Growth: the scheduler filters nodes until it has found numFeasibleNodesToFind of
them (all nodes below 100; above, 50% - nodes/125 of them, at least 5% and at least
100: 230 of 500, 500 of 5,000), and filtering a node costs about the devices the
allocator examines there: it walks that node's slices only, in name order, first fit,
and evaluates the class's selectors on each device until the request is met. The
driver names each slice after its place (`build_slices`), whole devices before every
core, so a whole-device claim examines no core, and a core claim first walks past the
node's 16 devices. The p50s of each case are fitted to a + b x (nodes scanned) over
the steps, and evaluated at 5,000 nodes: an empty cluster (500 nodes scanned) and a
worst case where nearly all nodes are full and every node is scanned (5,000). A fit
holds over the scans it was measured on (1 to 230 nodes by default): the 5,000-node
figures are an extrapolation, 2-20x beyond them, that leaves out the per-pod costs
that grow with the cluster rather than with the nodes scanned (bench/scale.py
measures those).

Prints a table and writes bench/results/scheduler.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# This directory is on sys.path when the file runs as a script.
from common import RESULTS, rounded
from observe import PodWatch, SchedulerMetrics
from scalemodel import fit, nodes_to_find
from stats import percentile

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import Counters, build_fake_node
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra_harness.build import build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.workloads import claim_spec

REPO = Path(__file__).resolve().parents[1]

Obj = dict[str, Any]
INSTANCE_TYPE = "trn2.48xlarge"
NAMESPACE = "default"
RESOURCE = "resource.k8s.io/v1"
WORKERS = 6
"""Nodes set up at once."""
EXTRAPOLATE_TO = 5000


@dataclass(frozen=True)
class Variant:
    name: str
    cores: bool
    lnc: int | None = None  # None: the instance type's default (2 on trn2)


VARIANTS = {
    v.name: v
    for v in (
        Variant("devices", cores=False),
        Variant("cores", cores=True),
        Variant("cores-lnc1", cores=True, lnc=1),
    )
}


@dataclass(frozen=True)
class Case:
    name: str
    spec: Obj
    devices: int
    cores_only: bool = False


ONE_CORE: Obj = {
    "devices": {
        "requests": [
            {
                "name": "neurons",
                "exactly": {"deviceClassName": "neuroncore.neuron.aws.com", "count": 1},
            }
        ]
    }
}
CASES = (
    # The scheduler's own cost per node, with no DRA work: a pod without claims.
    Case("no claim", {}, 0),
    Case("1 core", ONE_CORE, 1, cores_only=True),
    Case("4 connected", claim_spec(4, group=4), 4),
    Case("16 devices", claim_spec(16), 16),
)


@dataclass
class NodeFactory:
    """Ready Nodes with the driver's slices of one simulated node each."""

    cluster: Cluster
    inventory: NodeInventory
    cores: bool
    layout: CounterLayout
    publish_s: list[float] = field(default_factory=list)
    slices_per_node: int = 0
    devices_per_node: int = 0

    def add(self, name: str) -> None:
        node = self.cluster.add_node(name, {"node.kubernetes.io/instance-type": INSTANCE_TYPE})
        options = SliceOptions(
            name, node["metadata"]["uid"], counter_layout=self.layout, cores=self.cores
        )
        slices = build_slices(self.inventory, options)
        started = time.monotonic()
        for obj in slices:
            self.cluster.create(obj)
        self.publish_s.append(time.monotonic() - started)
        self.slices_per_node = len(slices)
        self.devices_per_node = sum(len(s["spec"].get("devices") or []) for s in slices)

    def grow(self, first: int, last: int) -> None:
        """Nodes bench-{first} .. bench-{last - 1}, WORKERS at a time."""
        with ThreadPoolExecutor(WORKERS) as pool:
            for done in pool.map(self.add, (f"bench-{i:04d}" for i in range(first, last))):
                assert done is None


@dataclass
class Scheduling:
    """Times of pods from creation to binding, in ms, by case."""

    cluster: Cluster
    watch: PodWatch
    metrics: SchedulerMetrics
    count: int = 0
    retries: int = 0

    def once(self, case: Case) -> tuple[float, float]:
        """One pod of `case`: ms from its creation to its binding, and ms of the
        scheduler's algorithm for it."""
        self.count += 1
        name = f"sched-{self.count}"
        metadata = {"name": name, "namespace": NAMESPACE}
        container: Obj = {"name": "c", "image": "none"}
        spec: Obj = {"automountServiceAccountToken": False, "containers": [container]}
        if case.spec:
            self.cluster.create(
                {
                    "apiVersion": RESOURCE,
                    "kind": "ResourceClaim",
                    "metadata": metadata,
                    "spec": case.spec,
                }
            )
            container["resources"] = {"claims": [{"name": "neurons"}]}
            spec["resourceClaims"] = [{"name": "neurons", "resourceClaimName": name}]
        algorithm = self.metrics.algorithm_s()
        started = time.monotonic()
        self.cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
        elapsed = (self.watch.wait_bound(name, timeout=60) - started) * 1000
        algorithm = (self.metrics.algorithm_s() - algorithm) * 1000
        self.retries += name in self.watch.unschedulable
        if not case.spec:
            self.cluster.delete("v1", "Pod", name, NAMESPACE, grace_period=0)
            return elapsed, algorithm
        claim = self.cluster.get(RESOURCE, "ResourceClaim", name, NAMESPACE)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == case.devices, results
        if case.cores_only:
            assert all(r["device"].startswith("neuroncore") for r in results), results
        else:
            assert all(r["device"].startswith("neurondevice") for r in results), results
        self.cluster.delete("v1", "Pod", name, NAMESPACE, grace_period=0)
        self.cluster.delete(RESOURCE, "ResourceClaim", name, NAMESPACE)
        self.cluster.wait_for(
            f"claim {name} gone",
            lambda: self.cluster.get_or_none(RESOURCE, "ResourceClaim", name, NAMESPACE) is None,
            timeout=30,
            interval=0.01,
        )
        return elapsed, algorithm

    def cases(self, cases: list[Case], pods: int) -> dict[str, list[tuple[float, float]]]:
        """`pods` times of each case, the cases taking turns (so that noise on the
        machine hits them alike), after a warm-up pod of each."""
        for case in cases:
            self.once(case)
        times: dict[str, list[tuple[float, float]]] = {case.name: [] for case in cases}
        for _ in range(pods):
            for case in cases:
                times[case.name].append(self.once(case))
        return times


def timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def run_variant(variant: Variant, steps: list[int], pods: int, sysfs: Path) -> Obj:
    """Every case at every step of one variant; its figures."""
    root = build_fake_node(
        sysfs / variant.name, INSTANCE_TYPE, lnc=variant.lnc, counters=Counters.NONE
    )
    inventory = discover(root).inventory
    figures: Obj = {"cores": variant.cores, "lnc": variant.lnc, "steps": {}}
    started = time.monotonic()
    with Cluster(build()) as cluster:
        figures["cluster_start_s"] = time.monotonic() - started
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        layout = cluster.counter_layout()
        assert not variant.cores or layout is CounterLayout.OWN_SLICE, layout
        factory = NodeFactory(cluster, inventory, variant.cores, layout)
        # The first node alone: its publish time with nothing else going on.
        factory.add("bench-0000")
        figures["publish_alone_ms"] = factory.publish_s[0] * 1000
        figures["setup_s"] = {1: time.monotonic() - started}
        watch = PodWatch(cluster, NAMESPACE)
        metrics = SchedulerMetrics(cluster)
        scheduling = Scheduling(cluster, watch, metrics)
        try:
            have = 1
            for step in steps:
                if step > have:
                    figures["setup_s"][step] = timed(lambda: factory.grow(have, step))  # noqa: B023
                    have = step
                    print(
                        f"  {variant.name}: {step} nodes in {figures['setup_s'][step]:.1f} s",
                        flush=True,
                    )
                    time.sleep(2)  # the scheduler's and controllers' informers catch up
                measured = scheduling.cases(
                    [c for c in CASES if variant.cores or not c.cores_only], pods
                )
                figures["steps"][step] = {
                    case: {
                        "p50_ms": percentile([t for t, _ in times], 0.5),
                        "p90_ms": percentile([t for t, _ in times], 0.9),
                        "algorithm_p50_ms": percentile([a for _, a in times], 0.5),
                        "samples_ms": [round(t, 1) for t, _ in times],
                        "algorithm_samples_ms": [round(a, 1) for _, a in times],
                    }
                    for case, times in measured.items()
                }
                print(
                    f"  {variant.name}, {step} nodes: "
                    + ", ".join(
                        f"{case} p50 {f['p50_ms']:.0f} ms"
                        for case, f in figures["steps"][step].items()
                    ),
                    flush=True,
                )
        finally:
            watch.close()
            metrics.close()
        figures["retries"] = scheduling.retries
    figures["total_s"] = time.monotonic() - started
    figures["slices_per_node"] = factory.slices_per_node
    figures["devices_per_node"] = factory.devices_per_node
    figures["publish_p50_ms"] = percentile(factory.publish_s, 0.5) * 1000
    figures["publish_p90_ms"] = percentile(factory.publish_s, 0.9) * 1000
    figures["publish_nodes"] = len(factory.publish_s)
    return figures


def growth(variants: Obj) -> Obj:
    """Per variant and case: p50 (pod creation to binding, and the scheduler's algorithm
    alone) fitted to a + b x nodes scanned, and extrapolated."""
    out: Obj = {}
    scanned_at = nodes_to_find(EXTRAPOLATE_TO)
    for name, figures in variants.items():
        steps = figures["steps"]
        if len(steps) < 2:
            continue
        for case in next(iter(steps.values())):
            entry: Obj = {}
            for prefix, key in (("", "p50_ms"), ("algorithm_", "algorithm_p50_ms")):
                base, per_node = fit(
                    [(float(nodes_to_find(int(n))), cases[case][key]) for n, cases in steps.items()]
                )
                entry |= {
                    f"{prefix}base_ms": base,
                    f"{prefix}per_node_scanned_ms": per_node,
                    f"{prefix}p50_{EXTRAPOLATE_TO}_empty_ms": base + per_node * scanned_at,
                    f"{prefix}p50_{EXTRAPOLATE_TO}_all_scanned_ms": base
                    + per_node * EXTRAPOLATE_TO,
                }
            out[f"{name}/{case}"] = entry
    return out


def table(result: Obj) -> str:
    variants: Obj = result["variants"]
    names = list(variants)
    header = ["case", "nodes"] + [f"{n}: p50 / p90 (algorithm) ms" for n in names]
    rows = [header]
    steps = sorted({int(s) for v in variants.values() for s in v["steps"]})
    for case in CASES:
        for step in steps:
            row = [case.name, str(step)]
            for name in names:
                cell = variants[name]["steps"].get(step, {}).get(case.name)
                row.append(
                    "-"
                    if cell is None
                    else f"{cell['p50_ms']:.0f} / {cell['p90_ms']:.0f} "
                    f"({cell['algorithm_p50_ms']:.0f})"
                )
            rows.append(row)
    for label, key, unit in (
        ("devices (slices) per node", None, ""),
        ("slices publish, 1 node alone", "publish_alone_ms", "ms"),
        ("slices publish p50 / p90", "publish", "ms"),
        ("cluster start", "cluster_start_s", "s"),
        ("setup to 1 node (incl. start)", 1, "s"),
        *((f"setup {a} -> {b} nodes", b, "s") for a, b in itertools.pairwise(steps)),
        ("total", "total_s", "s"),
    ):
        row = [label, ""]
        for name in names:
            v = variants[name]
            if key is None:
                row.append(f"{v['devices_per_node']} ({v['slices_per_node']})")
            elif key == "publish":
                row.append(f"{v['publish_p50_ms']:.1f} / {v['publish_p90_ms']:.1f} {unit}")
            elif isinstance(key, int):
                row.append(f"{v['setup_s'][key]:.1f} {unit}" if key in v["setup_s"] else "")
            else:
                row.append(f"{v[key]:.1f} {unit}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.append("")
    lines.append(
        f"p50 = a + b x nodes scanned (least squares); at {EXTRAPOLATE_TO} nodes "
        f"({nodes_to_find(EXTRAPOLATE_TO)} scanned when empty, all when nearly full):"
    )
    for key, g in result["growth"].items():
        lines.append(
            f"  {key:<22} {g['base_ms']:5.1f} + {g['per_node_scanned_ms']:5.3f} ms/node "
            f"(algorithm {g['algorithm_base_ms']:5.1f} + "
            f"{g['algorithm_per_node_scanned_ms']:5.3f}); {EXTRAPOLATE_TO} nodes: "
            f"{g[f'p50_{EXTRAPOLATE_TO}_empty_ms']:.0f} ms empty, "
            f"{g[f'p50_{EXTRAPOLATE_TO}_all_scanned_ms']:.0f} ms all scanned"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=15, help="timed pods per case and step")
    parser.add_argument("--steps", default="1,100,500", help="cluster sizes, in nodes")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=", ".join(VARIANTS))
    parser.add_argument("--no-write", action="store_true", help="do not write scheduler.json")
    args = parser.parse_args()
    steps = sorted({int(s) for s in args.steps.split(",")})
    assert steps[0] >= 1, steps

    started = time.monotonic()
    load = os.getloadavg()[0]
    variants: Obj = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        for name in args.variants.split(","):
            print(f"{name}:", flush=True)
            variants[name] = run_variant(VARIANTS[name], steps, args.pods, Path(tmp))
    cluster_version = build().version
    result: Obj = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "kubernetes": cluster_version,
        "instance_type": INSTANCE_TYPE,
        "pods_per_case": args.pods,
        "load_average_at_start": load,
        "variants": variants,
    }
    result["growth"] = growth(variants)
    result["runtime_s"] = time.monotonic() - started
    print()
    print(table(result))
    print(f"\nruntime {result['runtime_s']:.0f} s")
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "scheduler.json").write_text(json.dumps(rounded(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
