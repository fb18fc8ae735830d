"""Benchmarks: prints a table and writes bench/results/latest.json.

Everything runs against the real thing: a real kube-apiserver (for the claim
GET in every prepare), the real `neuron-dra run` process on a simulated
trn2.48xlarge, called over its unix socket with the kubelet's protocol.

Beside it, in the same run and against the same kube-apiserver, the Go baseline
(bench/gobaseline.py): a plugin on the upstream kubeletplugin helper doing per
claim what the Kubernetes project's example DRA driver does. The two are called in
alternating batches of claims, so that noise on the machine hits both alike.

Both plugins keep their files where a node has them: the kubelet's root directory
(plugin sockets and checkpoints, /var/lib/kubelet on a node) on a disk, by
default a directory made in /var/tmp, and the CDI directory (/var/run/cdi, tmpfs
on a node) in TMPDIR. An fsync costs what it costs on that disk; with
`--kubelet-root $TMPDIR` every file is on tmpfs, where an fsync costs nothing.
The filesystems are written beside the figures.

The floor beside each figure is the unavoidable work, sampled in the same
batches: one bare API GET of the claim (a keep-alive HTTPS connection, no client
library), plus writing a file of the CDI spec's size in the CDI directory and
fsyncing a checkpoint update in the kubelet's. The same GET through the driver's
own API client is reported beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# This directory is on sys.path when the file runs as a script.
from common import (
    ADMIN_NAMESPACE_LABEL,
    RESULTS,
    BareGet,
    DraClient,
    Obj,
    add_kubelet_root_flag,
    allocated_claim,
    claim_path,
    dra_socket,
    filesystem,
    kubelet_roots,
    rss_mib,
    stop_and_forget,
    time_startup,
)
from gobaseline import SETS, GoBaseline, add_go_baseline
from stats import percentile

from neuron_dra.agent.apiclient.kube import Kube
from neuron_dra.agent.files.atomicfile import atomic_write
from neuron_dra.agent.files.dirs import CDI_DIR_MODE, PLUGIN_DIR_MODE
from neuron_dra_harness import scrape
from neuron_dra_harness.build import build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node
from neuron_dra_harness.processes import free_port

REPO = Path(__file__).resolve().parents[1]

# bench/concurrency.py imports these from here.
__all__ = ["ADMIN_NAMESPACE_LABEL", "RESULTS", "allocated_claim", "percentile", "rss_mib"]

BATCH = 10
"""Claims each plugin prepares and unprepares before the other's turn."""


def phase_totals(port: int) -> dict[str, tuple[float, float]]:
    """phase -> (seconds, count) of the plugin's prepare phases so far, from its metrics."""
    totals: dict[str, list[float]] = {}
    for sample in scrape.samples(f"http://127.0.0.1:{port}/metrics"):
        phase = sample.labels.get("phase")
        if phase and sample.name.endswith(("_sum", "_count")):
            entry = totals.setdefault(phase, [0.0, 0.0])
            entry[0 if sample.name.endswith("_sum") else 1] = sample.value
    return {phase: (seconds, count) for phase, (seconds, count) in totals.items()}


@dataclass
class Samples:
    """Per-call times in ms, by plugin and call, and of the floor's parts."""

    calls: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, values: list[float]) -> None:
        self.calls.setdefault(key, []).extend(values)


@dataclass(frozen=True)
class Dirs:
    """Where the floor writes: a CDI spec's directory and a checkpoint's."""

    cdi: Path
    checkpoint: Path


def floor_batch(
    bare: BareGet, kube: Kube, claim: Obj, *, dirs: Dirs, runs: int, samples: Samples
) -> None:
    """`runs` samples of the floor's parts: a bare GET of the claim, the same GET
    through the driver's API client, and a CDI-sized write + fsynced checkpoint update."""
    meta, path = claim["metadata"], claim_path(claim)
    spec, checkpoint = 1500, 600
    checkpoint_file = dirs.checkpoint / "checkpoint.json"
    for i in range(runs):
        started = time.perf_counter()
        bare.get(path)
        samples.add("floor_get", [(time.perf_counter() - started) * 1000])
        started = time.perf_counter()
        kube.get_resource_claim(meta["namespace"], meta["name"])
        samples.add("kube_get", [(time.perf_counter() - started) * 1000])
        started = time.perf_counter()
        spec_file = dirs.cdi / f"spec-{i}.json"
        atomic_write(spec_file, b"x" * spec, mode=0o644, dir_mode=CDI_DIR_MODE, durable=False)
        atomic_write(checkpoint_file, b"y" * checkpoint, mode=0o600, dir_mode=PLUGIN_DIR_MODE)
        samples.add("floor_write", [(time.perf_counter() - started) * 1000])


async def interleaved(
    cluster: Cluster,
    sockets: dict[str, Path],
    claims: dict[str, list[Obj]],
    bare: BareGet,
    dirs: Dirs,
) -> Samples:
    """Prepare and unprepare every claim, each plugin its own, in alternating batches
    (which plugin goes first alternating too), with a batch of floor samples after
    each round."""
    samples = Samples()
    kube = Kube.connect(cluster.kubeconfig)
    floor_claim = claims["neuron"][0]
    try:
        # Connections set up before timing anything.
        bare.get(claim_path(floor_claim))
        kube.get_resource_claim(
            floor_claim["metadata"]["namespace"], floor_claim["metadata"]["name"]
        )
        async with DraClient(sockets["neuron"]) as neuron, DraClient(sockets["go"]) as go:
            clients = {"neuron": neuron, "go": go}
            count = len(claims["neuron"])
            for round_, first in enumerate(range(0, count, BATCH)):
                order = ["neuron", "go"] if round_ % 2 == 0 else ["go", "neuron"]
                for who in order:
                    batch = claims[who][first : first + BATCH]
                    prepare, unprepare = await clients[who].cycle(batch)
                    samples.add(f"{who}_prepare", prepare)
                    samples.add(f"{who}_unprepare", unprepare)
                floor_batch(
                    bare,
                    kube,
                    floor_claim,
                    dirs=dirs,
                    runs=min(BATCH, count - first),
                    samples=samples,
                )
    finally:
        kube.close()
    return samples


def neuron_startup_once(cluster: Cluster, node: SimulatedNode) -> dict[str, float]:
    """One cold start of `neuron-dra run`: its slices deleted first, as on a fresh node."""
    stop_and_forget(node.stop_plugin, node.side)
    for obj in node.slices():
        cluster.delete("resource.k8s.io/v1", "ResourceSlice", obj["metadata"]["name"])
    return time_startup(
        start=lambda: node.start_plugin(wait=False),
        registration_socket=node.side.registry_dir / "neuron.aws.com-reg.sock",
        published=lambda: bool(node.slices()),
        side=node.side,
    )


def startup(cluster: Cluster, node: SimulatedNode, go: GoBaseline, runs: int) -> dict[str, float]:
    """Median seconds from spawning each plugin to: its registration socket served,
    its slices published (deleted before each start, as on a fresh node), and the
    kubelet side reporting it registered; the two plugins' starts alternate."""
    neuron_runs, go_runs = [], []
    for _ in range(runs):
        neuron_runs.append(neuron_startup_once(cluster, node))
        go_runs.append(go.startup_once())
    figures: dict[str, float] = {}
    for prefix, measured in (("", neuron_runs), ("go_", go_runs)):
        for phase in measured[0]:
            figures[f"{prefix}startup_{phase}_s"] = statistics.median(r[phase] for r in measured)
    return figures


def ratios(figures: dict[str, Any]) -> dict[str, float]:
    """neuron-dra over the Go baseline, and each over the floor."""
    out: dict[str, float] = {}
    for size in SETS:
        for call in ("prepare", "unprepare"):
            for stat in ("p50", "p99"):
                key = f"{call}_{size}_{stat}"
                out[f"{key}_over_go"] = figures[f"{key}_ms"] / figures[f"go_{key}_ms"]
    out["go_prepare_over_floor"] = figures["go_prepare_16_p50_ms"] / figures["prepare_floor_ms"]
    out["rss_after_cycles_over_go"] = (
        figures["rss_after_cycles_mib"] / figures["go_rss_after_cycles_mib"]
    )
    out["startup_over_go"] = figures["startup_s"] / figures["go_startup_s"]
    return out


def side_by_side(figures: dict[str, Any]) -> str:
    """neuron-dra, the Go baseline, the floor and their ratio, one line per figure."""
    rows = [("", "neuron-dra", "Go", "floor", "ndra/Go")]

    def row(label: str, key: str, floor: float | None = None, go_key: str | None = None) -> None:
        ours, theirs = figures[key], figures[go_key or f"go_{key}"]
        rows.append(
            (
                label,
                f"{ours:.2f}",
                f"{theirs:.2f}",
                "" if floor is None else f"{floor:.2f}",
                f"{ours / theirs:.2f}",
            )
        )

    for size in SETS:
        row(f"prepare {size} dev p50 ms", f"prepare_{size}_p50_ms", figures["prepare_floor_ms"])
        row(f"prepare {size} dev p99 ms", f"prepare_{size}_p99_ms")
        row(f"unprepare {size} dev p50 ms", f"unprepare_{size}_p50_ms")
        row(f"unprepare {size} dev p99 ms", f"unprepare_{size}_p99_ms")
    row("RSS after start MiB", "rss_start_mib")
    row("RSS after cycles MiB", "rss_after_cycles_mib")
    for phase in ("serving", "published", "registered"):
        row(f"start to {phase} s", f"startup_{phase}_s")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.append(
        f"floor = bare API GET {figures['floor_api_get_ms']:.2f} ms + writes (checkpoint fsynced) "
        f"{figures['floor_write_fsync_ms']:.2f} ms; the driver's client GET "
        f"{figures['floor_kube_client_get_ms']:.2f} ms"
    )
    lines.append(f"kubelet root on {figures['kubelet_root_fs']}, CDI on {figures['cdi_fs']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=400, help="claims per device count")
    parser.add_argument("--startup-runs", type=int, default=5)
    add_kubelet_root_flag(parser)
    args = parser.parse_args()

    # The directories outlive the cluster, whose processes write in them until it stops.
    with (
        kubelet_roots(args.kubelet_root) as roots,
        tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as cdi_tmp,
        Cluster(build()) as cluster,
    ):
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        port = free_port()
        node = add_simulated_node(
            cluster,
            "bench",
            "trn2.48xlarge",
            extra_args=[f"--metrics-port={port}", "--metrics-auth=none"],
            kubelet_root=roots / "bench",
        )
        assert node.plugin is not None
        figures: dict[str, Any] = {
            "kubelet_root_fs": filesystem(roots),
            "cdi_fs": filesystem(node.cdi_dir),
            "rss_start_mib": rss_mib(node.plugin.pid),
        }
        go = add_go_baseline(cluster, kubelet_root=roots / "go")
        figures["go_rss_start_mib"] = rss_mib(go.pid)
        sockets = {"neuron": dra_socket(node.side), "go": go.socket}
        bare = BareGet(cluster)
        floor = Samples()
        dirs = Dirs(cdi=Path(cdi_tmp), checkpoint=roots)
        for size, devices in SETS.items():
            claims = {
                who: [
                    allocated_claim(cluster, f"{prefix}{size}-{i}", pool, devices)
                    for i in range(args.claims)
                ]
                for who, prefix, pool in (("neuron", "c", node.name), ("go", "g", go.name))
            }
            before = phase_totals(port)
            samples = asyncio.run(interleaved(cluster, sockets, claims, bare, dirs))
            after = phase_totals(port)
            for phase, (seconds, count) in after.items():
                spent, done = (
                    seconds - before.get(phase, (0, 0))[0],
                    count - before.get(phase, (0, 0))[1],
                )
                figures[f"prepare_{size}_{phase}_mean_ms"] = spent / done * 1000 if done else 0.0
            for who, prefix in (("neuron", ""), ("go", "go_")):
                for call in ("prepare", "unprepare"):
                    times = samples.calls[f"{who}_{call}"]
                    figures[f"{prefix}{call}_{size}_p50_ms"] = percentile(times, 0.5)
                    figures[f"{prefix}{call}_{size}_p99_ms"] = percentile(times, 0.99)
            for key in ("floor_get", "kube_get", "floor_write"):
                floor.add(key, samples.calls[key])
        bare.close()
        figures["rss_after_cycles_mib"] = rss_mib(node.plugin.pid)
        figures["go_rss_after_cycles_mib"] = rss_mib(go.pid)
        figures["prepare_p50_ms"] = figures["prepare_16_p50_ms"]
        figures["prepare_p99_ms"] = figures["prepare_16_p99_ms"]
        figures["floor_api_get_ms"] = statistics.median(floor.calls["floor_get"])
        figures["floor_kube_client_get_ms"] = statistics.median(floor.calls["kube_get"])
        figures["floor_write_fsync_ms"] = statistics.median(floor.calls["floor_write"])
        figures["prepare_floor_ms"] = figures["floor_api_get_ms"] + figures["floor_write_fsync_ms"]
        figures["prepare_over_floor"] = figures["prepare_p50_ms"] / figures["prepare_floor_ms"]
        figures |= startup(cluster, node, go, args.startup_runs)
        # Ready to be registered and published: the part the driver controls.
        for prefix in ("", "go_"):
            figures[f"{prefix}startup_s"] = max(
                figures[f"{prefix}startup_serving_s"], figures[f"{prefix}startup_published_s"]
            )
        figures |= ratios(figures)

    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "claims_per_size": args.claims,
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    latest = RESULTS / "latest.json"
    # Merged, so figures of the other benchmarks (bench/cel.py) stay.
    merged = json.loads(latest.read_text()) if latest.exists() else {}
    latest.write_text(json.dumps(merged | result, indent=2) + "\n")
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print()
    print(side_by_side(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
