"""Scheduling at fleet scale: the real kube-scheduler over thousands of simulated
trn2.48xlarge nodes, empty and 90% full, for each way of publishing NeuronCores.

For each layout (`--layouts`) a cluster of its own (the real kube-apiserver,
kube-scheduler and kube-controller-manager of tests/e2e, default feature gates) grows
through the sizes (`--sizes`, default 1000,2000,5000 nodes). Nodes are Node objects
(Ready, no kubelet) with the slices `neuron_dra.resources.slices.build_slices` lays
out for a simulated trn2.48xlarge, a share of them (`--ultraserver-share`) trn2u
UltraServer nodes; the benchmark publishes them itself, several nodes at a time, one
slice after another per node as an agent does. At each size:

1. **empty**: every case (below) in turn, one pod at a time, each pod with a claim of
   its own created beforehand, timed from just before the pod's POST to the watch
   event that shows it bound (client monotonic clock), then deleted with its claim;
2. **90% full**: 90% of the nodes get every device allocated, by claims whose
   allocation the benchmark writes through the status subresource as the scheduler
   would (upstream's scheduler_perf fills its clusters the same way), so the
   scheduler scans nearly every node for each pod, as in a training fleet; then the
   same cases, then a **steady** phase: short-lived pods of one kind created at a
   fixed rate (`--rate`), each deleted once bound, as clusterloader2's DRA
   steady-state test does: p50/p99 and pods/s.

Cases: a pod without claims (the scheduler's own cost), 1 device, 1 core, 4 cores
of one device, 4 connected devices (one devicegroup4), 16 devices, and a
device-plugin-style pod (`aws.amazon.com/neuron: 16`, a claim made by the scheduler).
A layout without cores skips the core cases.

What the control plane carries is reported too: slices and bytes per node, the time
to publish every node, and the RSS of kube-apiserver, etcd and kube-scheduler after
each phase. With `--profile`, a CPU profile of the scheduler over each layout's
full-cluster cases is written beside the results, with its top functions.

It takes tens of minutes and much of the machine's memory; `make bench-scale` runs
it. Progress goes to stdout, figures to bench/results/scale.json (or `--out`).
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

# This directory is on sys.path when the file runs as a script.
from common import RESULTS, percentile, rss_mib
from fleet import (
    LAYOUTS,
    NAMESPACE,
    RESOURCE,
    Api,
    Filler,
    Fleet,
    Layout,
    claim_path,
    core_capacity_class,
)
from scalemodel import measured_table, model
from scheduler import PodWatch, SchedulerMetrics, rounded
from upstream import patched_binaries

from consts import DRIVER_NAME
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import build_fake_node
from neuron_dra.resources.slices import CoreLayout
from neuron_dra_harness.build import Binaries, build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.workloads import claim_spec

REPO = Path(__file__).resolve().parents[1]

Obj = dict[str, Any]
FULL_SHARE = 0.9


@dataclass(frozen=True)
class Case:
    name: str
    devices: int  # allocation results the claim gets
    cores: int = 0  # logical cores asked for (0: whole devices)
    group: int | None = None
    extended: bool = False  # a device-plugin-style pod: no claim of its own


CASES = (
    Case("no claim", 0),
    Case("1 device", 1),
    Case("1 core", 1, cores=1),
    Case("4 cores of one device", 4, cores=4),
    Case("4 connected", 4, group=4),
    Case("16 devices", 16),
    Case("aws.amazon.com/neuron: 16", 16, extended=True),
)
STEADY = "1 device"


def claim_for(case: Case, layout: Layout, lnc: int) -> Obj:
    """The claim a user writes for `case` where `layout` is published."""
    if not case.cores:
        return claim_spec(case.devices, group=case.group)
    if layout.cores is CoreLayout.CAPACITY:
        # One share of a device: the physical cores of `cases.cores` logical ones.
        exactly = {"deviceClassName": f"neuroncore.{DRIVER_NAME}", "count": 1,
                   "capacity": {"requests": {"cores": str(case.cores * lnc)}}}  # fmt: skip
        return {"devices": {"requests": [{"name": "neurons", "exactly": exactly}]}}
    spec: Obj = {"devices": {"requests": [{"name": "neurons", "exactly": {
        "deviceClassName": f"neuroncore.{DRIVER_NAME}", "count": case.cores}}]}}  # fmt: skip
    if case.cores > 1:
        spec["devices"]["constraints"] = [
            {"requests": ["neurons"], "matchAttribute": f"{DRIVER_NAME}/deviceId"}
        ]
    return spec


@dataclass
class Scheduling:
    """Pods of each case, one at a time or at a steady rate, timed to their binding."""

    cluster: Cluster
    api: Api
    watch: PodWatch
    metrics: SchedulerMetrics
    layout: Layout
    lnc: int
    count: int = 0
    retries: int = 0

    def _submit(self, case: Case) -> str:
        self.count += 1
        name = f"p{self.count}"
        container: Obj = {"name": "c", "image": "none"}
        spec: Obj = {"automountServiceAccountToken": False, "containers": [container],
                     "terminationGracePeriodSeconds": 0}  # fmt: skip
        if case.extended:
            limits = {"aws.amazon.com/neuron": str(case.devices)}
            container["resources"] = {"limits": limits, "requests": limits}
        elif case.devices:
            claim = {"apiVersion": RESOURCE, "kind": "ResourceClaim", "metadata": {"name": name},
                     "spec": claim_for(case, self.layout, self.lnc)}  # fmt: skip
            self.api.call("POST", claim_path(), claim)
            container["resources"] = {"claims": [{"name": "neurons"}]}
            spec["resourceClaims"] = [{"name": "neurons", "resourceClaimName": name}]
        self.api.call(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec},
        )
        return name

    def _check(self, name: str, case: Case) -> None:
        if case.extended or not case.devices:
            return
        claim = self.api.call("GET", claim_path(name))
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == (1 if self.layout.cores is CoreLayout.CAPACITY and case.cores
                                else case.devices), results  # fmt: skip
        prefix = "neuroncore" if case.cores and self.layout.cores is CoreLayout.PARTITIONS \
            else "neurondevice"  # fmt: skip
        assert all(r["device"].startswith(prefix) for r in results), results

    def _release(self, name: str, case: Case) -> None:
        self.api.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}",
                      {"gracePeriodSeconds": 0})  # fmt: skip
        if case.devices and not case.extended:
            self.api.call("DELETE", claim_path(name))

    def _gone(self, name: str, case: Case) -> None:
        """The claim the pod used is deallocated and deleted (or, for a device-plugin
        pod, the pod is gone), so the next pod sees the same cluster."""
        path = claim_path(name) if case.devices and not case.extended else \
            f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"  # fmt: skip
        deadline = time.monotonic() + 60
        while self.api.call("GET", path, ok=(404,)).get("kind") not in ("Status", None):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} still there")
            time.sleep(0.01)

    def once(self, case: Case) -> tuple[float, float]:
        """One pod of `case`: ms from creation to binding, and ms of the scheduler's
        Filter and Score for it."""
        algorithm = self.metrics.algorithm_s()
        started = time.monotonic()
        name = self._submit(case)
        bound = self.watch.wait_bound(name, timeout=300)
        algorithm = (self.metrics.algorithm_s() - algorithm) * 1000
        self.retries += name in self.watch.unschedulable
        self._check(name, case)
        self._release(name, case)
        self._gone(name, case)
        return (bound - started) * 1000, algorithm

    def cases(self, cases: list[Case], pods: int) -> Obj:
        for case in cases:
            self.once(case)  # warm-up
        times: dict[str, list[tuple[float, float]]] = {c.name: [] for c in cases}
        for _ in range(pods):
            for case in cases:
                times[case.name].append(self.once(case))
        return {name: summary([t for t, _ in samples], [a for _, a in samples])
                for name, samples in times.items()}  # fmt: skip

    def steady(self, case: Case, pods: int, rate: float) -> Obj:
        """`pods` pods of `case` created `rate` a second, each released once bound."""
        names: list[str] = []
        created: dict[str, float] = {}
        releaser = ThreadPoolExecutor(2)
        done: list[float] = []

        def release(name: str) -> None:
            done.append((self.watch.wait_bound(name, timeout=600) - created[name]) * 1000)
            self._release(name, case)

        started = time.monotonic()
        futures = []
        for i in range(pods):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the steady rate itself, not a synchronisation
            now = time.monotonic()
            name = self._submit(case)
            created[name] = now
            names.append(name)
            futures.append(releaser.submit(release, name))
        for future in futures:
            future.result()
        last = max(self.watch.bound[n] for n in names)
        releaser.shutdown()
        for name in names:
            self._gone(name, case)
        figures = summary(done, [])
        figures["pods_per_s"] = pods / (last - started)
        figures["offered_per_s"] = rate
        return figures


def summary(samples: list[float], algorithm: list[float]) -> Obj:
    out: Obj = {"p50_ms": percentile(samples, 0.5), "p99_ms": percentile(samples, 0.99),
                "samples_ms": [round(s, 1) for s in samples]}  # fmt: skip
    if algorithm:
        out["algorithm_p50_ms"] = percentile(algorithm, 0.5)
    return out


def footprint(cluster: Cluster) -> Obj:
    return {c.name: round(rss_mib(c.pid)) for c in cluster.components
            if c.name in ("etcd", "kube-apiserver", "kube-scheduler") and c.alive()}  # fmt: skip


def profile(
    cluster: Cluster, seconds: int, out: Path, during: Callable[[], Obj]
) -> tuple[Obj, str]:
    """A CPU profile of the scheduler while `during` runs; its result and the profile's
    top functions."""
    [scheduler] = [c for c in cluster.components if c.name == "kube-scheduler"]
    [port] = [a.split("=", 1)[1] for a in scheduler.argv if a.startswith("--secure-port=")]
    url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
    fetch = subprocess.Popen(["curl", "-sk", "-H", f"Authorization: Bearer {cluster.token}",
                              "-o", str(out), url])  # fmt: skip
    result = during()
    fetch.wait(timeout=seconds + 60)
    top = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=25",
                          str(cluster.binaries.kube_scheduler), str(out)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return result, top.stdout or top.stderr


def run_layout(
    layout: Layout, sizes: list[int], args: argparse.Namespace, tmp: Path, binaries: Binaries
) -> Obj:
    inventories = {kind: discover(build_fake_node(tmp / f"{layout.name}-{kind}", kind,
                                                  lnc=layout.lnc)).inventory
                   for kind in ("trn2.48xlarge", "trn2u.48xlarge")}  # fmt: skip
    lnc = inventories["trn2.48xlarge"].lnc or 1
    figures: Obj = {"layout": layout.name, "lnc": lnc, "sizes": {}}
    started = time.monotonic()
    extra = {"kube-apiserver": args.apiserver_arg} if args.apiserver_arg else None
    with Cluster(binaries, extra_args=extra) as cluster:
        for obj in device_classes(layout):
            cluster.apply(obj)
        api = Api(cluster)
        fleet = Fleet(cluster, api, layout, inventories, args.ultraserver_share)
        filler = Filler(api, fleet)
        watch = PodWatch(cluster, NAMESPACE)
        metrics = SchedulerMetrics(cluster)
        scheduling = Scheduling(cluster, api, watch, metrics, layout, lnc)
        try:
            for size in sizes:
                figures["sizes"][size] = step = {"empty_fill_s": filler.empty()}
                measure_size(step, size, last=size == sizes[-1], fleet=fleet, filler=filler,
                             scheduling=scheduling, args=args)  # fmt: skip
        finally:
            watch.close()
            metrics.close()
    figures["retries"] = scheduling.retries
    figures["slices_per_node"] = fleet.slice_count
    figures["bytes_per_node"] = fleet.slice_bytes
    figures["devices_per_node"] = {k: len(v) for k, v in fleet.devices.items()}
    figures["publish_p50_ms"] = percentile(fleet.publish_s, 0.5) * 1000
    figures["publish_p99_ms"] = percentile(fleet.publish_s, 0.99) * 1000
    figures["total_s"] = time.monotonic() - started
    return figures


def measure_size(
    step: Obj,
    size: int,
    *,
    last: bool,
    fleet: Fleet,
    filler: Filler,
    scheduling: Scheduling,
    args: argparse.Namespace,
) -> None:
    """One size of one layout: grown to `size` nodes, measured empty, filled, measured
    full and steady, into `step`."""
    name, cluster = fleet.layout.name, fleet.cluster
    cases = [c for c in CASES if fleet.layout.cores is not CoreLayout.OFF or not c.cores]
    step["grow_s"] = fleet.grow(size)
    step["rss_mib_after_publish"] = footprint(cluster)
    say(f"{name}: {size} nodes published in {step['grow_s']:.0f} s, "
        f"RSS {step['rss_mib_after_publish']}")  # fmt: skip
    step["empty"] = scheduling.cases(cases, args.pods)
    say(f"{name}, {size} empty: " + brief(step["empty"]))
    step["devices_published_empty"] = sum(fleet.published.values())
    step["fill_s"] = filler.fill(FULL_SHARE)
    step["devices_published_full"] = sum(fleet.published.values())
    say(f"{name}, {size}: {len(filler.held)} nodes held in {step['fill_s']:.0f} s")
    if args.profile and last:
        out = Path(args.out).parent / f"scale-{name}-{size}.pprof"
        step["full"], step["profile_top"] = profile(
            cluster, args.profile, out, lambda: scheduling.cases(cases, args.pods)
        )
    else:
        step["full"] = scheduling.cases(cases, args.pods)
    say(f"{name}, {size} 90% full: " + brief(step["full"]))
    steady = step["steady"] = scheduling.steady(
        next(c for c in cases if c.name == STEADY), args.steady_pods, args.rate
    )
    say(f"{name}, {size} 90% full, steady {STEADY}: p50 {steady['p50_ms']:.0f} ms, "
        f"p99 {steady['p99_ms']:.0f} ms, {steady['pods_per_s']:.1f} pods/s")  # fmt: skip
    step["rss_mib_full"] = footprint(cluster)


def device_classes(layout: Layout) -> list[Obj]:
    """The chart's DeviceClasses, as `layout` wants them."""
    text = (REPO / "deploy" / "deviceclass.yaml").read_text()
    classes = [obj for obj in yaml.safe_load_all(text) if obj]
    if layout.cores is CoreLayout.CAPACITY:
        core_class = f"neuroncore.{DRIVER_NAME}"
        classes = [core_capacity_class() if c["metadata"]["name"] == core_class else c
                   for c in classes]  # fmt: skip
    if layout.joined_selectors:
        for obj in classes:
            joined = " && ".join(f"({s['cel']['expression']})" for s in obj["spec"]["selectors"])
            obj["spec"]["selectors"] = [{"cel": {"expression": joined}}]
    return classes


def brief(cases: Obj) -> str:
    return ", ".join(f"{name} {f['p50_ms']:.0f}" for name, f in cases.items()) + " ms p50"


def say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,5000", help="cluster sizes, in nodes")
    parser.add_argument("--layouts", default="devices,partitions,partitions-lnc1",
                        help=", ".join(LAYOUTS))  # fmt: skip
    parser.add_argument("--pods", type=int, default=10, help="timed pods per case and phase")
    parser.add_argument("--steady-pods", type=int, default=60)
    parser.add_argument("--rate", type=float, default=5.0, help="steady pods created a second")
    parser.add_argument("--ultraserver-share", type=float, default=0.25)
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        help="seconds of scheduler CPU profile over the largest full cluster",
    )
    parser.add_argument(
        "--patched",
        metavar="NAME",
        help="run each layout again on a scheduler with bench/upstream/NAME.patch",
    )
    parser.add_argument(
        "--apiserver-arg", action="append", default=[],
        help="an extra kube-apiserver flag, e.g. --watch-cache-sizes=resourceslices."
        "resource.k8s.io#0 where the machine's memory does not hold its watch cache",
    )  # fmt: skip
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    started = time.monotonic()
    result: Obj = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB, "
        f"Python {platform.python_version()}",
        "kubernetes": build().version,
        "sizes": sizes,
        "pods_per_case": args.pods,
        "ultraserver_share": args.ultraserver_share,
        "apiserver_args": args.apiserver_arg,
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
                result["runtime_s"] = time.monotonic() - started
                result["model"] = model(result)
                out.write_text(json.dumps(rounded(result), indent=2) + "\n")
    written = json.loads(out.read_text())  # sizes as the JSON keys the tables read
    print(measured_table(written, list(written["layouts"])))
    say(f"done in {result['runtime_s']:.0f} s: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
