"""Concurrency and memory figures, merged into bench/results/latest.json.

Against the real thing, as bench/run.py: a real kube-apiserver and the real
`neuron-dra run` on a simulated trn2.48xlarge, called over its unix socket, its
kubelet root directory on a disk and CDI on tmpfs (`--kubelet-root`).

- 200 claims prepared at once: one NodePrepareResources call per claim, all in
  flight together (a node starting many pods); total time and per-claim p99.
- RSS of the plugin after 10,000 prepare/unprepare cycles (the same 50 claims,
  200 rounds) and its growth over those cycles: a leak shows here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from common import add_kubelet_root_flag, filesystem, kubelet_roots
from run import ADMIN_NAMESPACE_LABEL, RESULTS, allocated_claim, percentile, rss_mib

from api.kubelet.dra.v1 import api_pb2 as dra
from api.kubelet.dra.v1 import api_pb2_grpc as dra_grpc

# This directory is on sys.path when the file runs as a script, as bench/run.py is.
from neuron_dra_harness.build import build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node

REPO = Path(__file__).resolve().parents[1]

Obj = dict[str, Any]


def claim_of(obj: Obj) -> dra.Claim:
    meta = obj["metadata"]
    return dra.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])


async def timed_prepare(stub: dra_grpc.DRAPluginAsyncStub, claim: dra.Claim) -> float:
    started = time.perf_counter()
    answer = await stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]))
    elapsed = time.perf_counter() - started
    error = answer.claims[claim.uid].error
    assert not error, error
    return elapsed


async def unprepare(stub: dra_grpc.DRAPluginAsyncStub, claim: dra.Claim) -> None:
    answer = await stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[claim]))
    error = answer.claims[claim.uid].error
    assert not error, error


def socket_of(node: SimulatedNode) -> str:
    return f"unix://{node.side.plugins_dir / 'neuron.aws.com' / 'dra.sock'}"


async def concurrent(node: SimulatedNode, claims: list[dra.Claim]) -> tuple[float, list[float]]:
    """(total seconds, per-claim seconds) of preparing every claim at once."""
    async with grpc.aio.insecure_channel(socket_of(node)) as channel:
        stub = dra_grpc.DRAPluginStub(channel)
        started = time.perf_counter()
        each = await asyncio.gather(*(timed_prepare(stub, c) for c in claims))
        total = time.perf_counter() - started
        await asyncio.gather(*(unprepare(stub, c) for c in claims))
    return total, list(each)


async def cycles(node: SimulatedNode, claims: list[dra.Claim], rounds: int) -> None:
    """Prepare, then unprepare, every claim, `rounds` times (claims of a round at once)."""
    async with grpc.aio.insecure_channel(socket_of(node)) as channel:
        stub = dra_grpc.DRAPluginStub(channel)
        for _ in range(rounds):
            await asyncio.gather(*(timed_prepare(stub, c) for c in claims))
            await asyncio.gather(*(unprepare(stub, c) for c in claims))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrent", type=int, default=200, help="claims prepared at once")
    parser.add_argument("--cycle-claims", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=200)
    add_kubelet_root_flag(parser)
    args = parser.parse_args()

    figures: dict[str, Any] = {}
    with kubelet_roots(args.kubelet_root) as roots, Cluster(build()) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        node = add_simulated_node(cluster, "bench", "trn2.48xlarge", kubelet_root=roots / "bench")
        figures["concurrency_kubelet_root_fs"] = filesystem(roots)
        assert node.plugin is not None
        # More claims than devices: only admin access lets claims share a device.
        cluster.patch(
            "v1", "Namespace", "default", {"metadata": {"labels": {ADMIN_NAMESPACE_LABEL: "true"}}}
        )
        claims = [
            claim_of(allocated_claim(cluster, f"conc-{i}", "bench", [i % 16], admin=True))
            for i in range(args.concurrent)
        ]
        total, each = asyncio.run(concurrent(node, claims))
        figures[f"concurrent_{args.concurrent}_s"] = total
        figures[f"concurrent_{args.concurrent}_p99_ms"] = percentile(each, 0.99) * 1000

        reused = claims[: args.cycle_claims]
        asyncio.run(cycles(node, reused, 1))  # warm: every code path and buffer in use
        before = rss_mib(node.plugin.pid)
        asyncio.run(cycles(node, reused, args.rounds))
        after = rss_mib(node.plugin.pid)
        done = len(reused) * args.rounds
        label = "10k" if done == 10_000 else str(done)
        figures[f"rss_after_{label}_mib"] = after
        figures[f"rss_growth_{label}_mib"] = after - before

    rounded: dict[str, Any] = {
        k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    latest = RESULTS / "latest.json"
    # Read-modify-write: the other benchmarks' figures stay.
    merged = json.loads(latest.read_text()) if latest.exists() else {}
    latest.write_text(json.dumps(merged | rounded, indent=2) + "\n")

    width = max(map(len, rounded))
    for key, value in rounded.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
