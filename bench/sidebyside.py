"""neuron-dra beside the Go baseline, repeated: the run the performance page's first
tables are made from (bench/sidetables.py), kept in bench/results/side-by-side.json.

Three plugins on one real kube-apiserver, each on a node of its own: neuron-dra as
installed (device metadata files and claim status on), neuron-dra with both off
(`--enable-device-metadata=false --enable-claim-status=false`), and the Go baseline
(bench/gobaseline.py). Each repeat prepares and unprepares `--claims` new claims of
each size on each plugin, one at a time, in batches of 10 whose order rotates
between the plugins, so that the load of a shared machine falls on all three alike;
then each plugin's RSS. Each repeat's p50 and p99 are kept, with the commit that ran
and the load average at the start and end (bench/provenance.py): the page gives the
median of the repeats and their spread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

# This directory is on sys.path when the file runs as a script.
from common import (
    RESULTS,
    DraClient,
    Obj,
    add_kubelet_root_flag,
    allocated_claim,
    dra_socket,
    filesystem,
    kubelet_roots,
    rounded,
    rss_mib,
)
from gobaseline import SETS, add_go_baseline
from provenance import at_end, at_start, load_average
from stats import percentile

from neuron_dra_harness.build import build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import add_simulated_node

REPO = Path(__file__).resolve().parents[1]
KEPT = RESULTS / "side-by-side.json"
BATCH = 10
OFF = ["--enable-device-metadata=false", "--enable-claim-status=false"]
PLUGINS = ("neuron", "neuron_off", "go")


async def one_size(sockets: dict[str, Path], claims: dict[str, list[Obj]]) -> dict[str, Obj]:
    """Each plugin's prepare and unprepare p50 and p99 (ms) over its claims."""
    times: dict[str, dict[str, list[float]]] = {
        who: {"prepare": [], "unprepare": []} for who in PLUGINS
    }
    async with (
        DraClient(sockets["neuron"]) as on,
        DraClient(sockets["neuron_off"]) as off,
        DraClient(sockets["go"]) as go,
    ):
        clients = {"neuron": on, "neuron_off": off, "go": go}
        count = len(claims["go"])
        for round_, first in enumerate(range(0, count, BATCH)):
            shift = round_ % len(PLUGINS)
            for who in PLUGINS[shift:] + PLUGINS[:shift]:
                prepare, unprepare = await clients[who].cycle(claims[who][first : first + BATCH])
                times[who]["prepare"] += prepare
                times[who]["unprepare"] += unprepare
    return {
        who: {
            f"{call}_{stat}_ms": percentile(samples, q)
            for call, samples in calls.items()
            for stat, q in (("p50", 0.5), ("p99", 0.99))
        }
        for who, calls in times.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=200, help="claims per size and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--allow-dirty", action="store_true", help="run uncommitted code")
    parser.add_argument("--out", type=Path, default=KEPT)
    add_kubelet_root_flag(parser)
    args = parser.parse_args()
    record = at_start(REPO, args.allow_dirty)
    repeats: list[Obj] = []
    with (
        kubelet_roots(args.kubelet_root) as roots,
        tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")),
        Cluster(build()) as cluster,
    ):
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        on = add_simulated_node(cluster, "bench-on", "trn2.48xlarge", kubelet_root=roots / "on")
        off = add_simulated_node(
            cluster, "bench-off", "trn2.48xlarge", extra_args=OFF, kubelet_root=roots / "off"
        )
        go = add_go_baseline(cluster, kubelet_root=roots / "go")
        assert on.plugin is not None and off.plugin is not None
        pids = {"neuron": on.plugin.pid, "neuron_off": off.plugin.pid, "go": go.pid}
        pools = {"neuron": on.name, "neuron_off": off.name, "go": go.name}
        sockets = {"neuron": dra_socket(on.side), "neuron_off": dra_socket(off.side)}
        sockets["go"] = go.socket
        rss_start = {who: rss_mib(pid) for who, pid in pids.items()}
        for repeat in range(args.repeats):
            sizes: dict[str, Obj] = {}
            for size, devices in SETS.items():
                claims = {
                    who: [
                        allocated_claim(
                            cluster, f"{who[0]}{who[-1]}{repeat}-{size}-{i}", pool, devices
                        )
                        for i in range(args.claims)
                    ]
                    for who, pool in pools.items()
                }
                sizes[str(size)] = asyncio.run(one_size(sockets, claims))
            rss = {who: rss_mib(pid) for who, pid in pids.items()}
            repeats.append({"sizes": sizes, "rss_mib": rss, "load_average": load_average()})
            print(f"repeat {repeat + 1}: {json.dumps(rounded(repeats[-1]))}", flush=True)
        placed = {
            "kubelet_root_fs": filesystem(roots),
            "cdi_fs": filesystem(on.cdi_dir),
            "rss_start_mib": rss_start,
        }
    result = {
        "run": at_end(record),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "claims_per_size": args.claims,
        **placed,
        "repeats": repeats,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rounded(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
