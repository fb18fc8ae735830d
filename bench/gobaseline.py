"""The Go baseline: a DRA plugin on the upstream kubeletplugin helper doing per claim
what the Kubernetes project's example DRA driver does, beside neuron-dra.

The plugin is drastub (harness/go/k8s/cmd/drastub) in its benchmark mode
(--checkpoint-file): the helper GETs the claim; prepare reads the checkpoint,
writes the claim's CDI spec with the CDI library (temp file + rename, no fsync)
and the checkpoint (temp file, fsync, rename); unprepare removes the spec and
writes the checkpoint. It runs for a node of its own with its own kubelet side and
kubelet-plugin directories, publishing `neurondevice0..15` in the pool named after
the node, so `common.allocated_claim` claims for that node are its to prepare.
Its client-side API rate limit is off, as neuron-dra has none.

Run alone, it prints the baseline's figures; bench/run.py interleaves them with
neuron-dra's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

# This directory is on sys.path when the file runs as a script, as bench/run.py is.
from common import (
    DRIVER,
    add_kubelet_root_flag,
    allocated_claim,
    dra_socket,
    kubelet_roots,
    prepare_latency,
    rss_mib,
    stop_and_forget,
    time_startup,
)
from stats import percentile

from neuron_dra_harness.build import build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.kubeletside import KubeletSide
from neuron_dra_harness.nodes import PluginNode
from neuron_dra_harness.processes import Component

REPO = Path(__file__).resolve().parents[1]

NODE = "bench-go"
DEVICES = 16
SETS = {1: [0], 4: [4, 5, 6, 7], 16: list(range(16))}


@dataclass
class GoBaseline(PluginNode):
    """drastub in benchmark mode for one node, with that node's kubelet side."""

    cluster: Cluster
    name: str
    side: KubeletSide
    plugin: Component | None = None

    @property
    def socket(self) -> Path:
        return dra_socket(self.side)

    @property
    def registration_socket(self) -> Path:
        return self.side.registry_dir / f"{DRIVER}-reg.sock"

    @property
    def checkpoint(self) -> Path:
        return self.side.plugins_dir / DRIVER / "checkpoint.json"

    @property
    def pid(self) -> int:
        assert self.plugin is not None
        return self.plugin.pid

    def start(self, *, wait: bool = True) -> Component:
        argv = [
            str(self.cluster.binaries.drastub),
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--node-name={self.name}",
            f"--driver={DRIVER}",
            f"--root-dir={self.side.root_dir}",
            f"--cdi-dir={self.side.cdi_dir}",
            f"--devices={DEVICES}",
            "--device-prefix=neurondevice",
            f"--checkpoint-file={self.checkpoint}",
            # client-go's default limit (the example driver's too) of 5 requests/s,
            # burst 10, would hold back-to-back prepares to 200 ms each: the
            # comparison is of the work, and neuron-dra has no such limit.
            "--kube-api-qps=-1",
        ]
        return self.launch("gobaseline", argv, wait=wait)

    def startup_once(self) -> dict[str, float]:
        """One cold start, as on a fresh node: its slices deleted first."""
        stop_and_forget(self.stop_plugin, self.side)
        for obj in self.slices():
            self.cluster.delete("resource.k8s.io/v1", "ResourceSlice", obj["metadata"]["name"])
        # A socket left by the stopped process must not count as served.
        self.registration_socket.unlink(missing_ok=True)
        return time_startup(
            start=lambda: self.start(wait=False),
            registration_socket=self.registration_socket,
            published=lambda: bool(self.slices()),
            side=self.side,
        )


def add_go_baseline(
    cluster: Cluster, name: str = NODE, kubelet_root: Path | None = None
) -> GoBaseline:
    """A Node object, its kubelet side, and drastub in benchmark mode, published."""
    cluster.add_node(name)
    baseline = GoBaseline(cluster, name, cluster.start_kubelet_side(name, root_dir=kubelet_root))
    baseline.start()
    return baseline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=200, help="claims per device count")
    parser.add_argument("--startup-runs", type=int, default=5)
    add_kubelet_root_flag(parser)
    args = parser.parse_args()
    figures: dict[str, float] = {}
    with kubelet_roots(args.kubelet_root) as roots, Cluster(build()) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        go = add_go_baseline(cluster, kubelet_root=roots / "go")
        figures["go_rss_start_mib"] = rss_mib(go.pid)
        for size, devices in SETS.items():
            claims = [
                allocated_claim(cluster, f"g{size}-{i}", go.name, devices)
                for i in range(args.claims)
            ]
            prepare, unprepare = asyncio.run(prepare_latency(go.socket, claims))
            figures[f"go_prepare_{size}_p50_ms"] = percentile(prepare, 0.5)
            figures[f"go_prepare_{size}_p99_ms"] = percentile(prepare, 0.99)
            figures[f"go_unprepare_{size}_p50_ms"] = percentile(unprepare, 0.5)
            figures[f"go_unprepare_{size}_p99_ms"] = percentile(unprepare, 0.99)
        figures["go_rss_after_cycles_mib"] = rss_mib(go.pid)
        runs = [go.startup_once() for _ in range(args.startup_runs)]
        for phase in runs[0]:
            figures[f"go_startup_{phase}_s"] = statistics.median(r[phase] for r in runs)
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
