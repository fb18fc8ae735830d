"""Benchmarks: prints a table and writes bench/results/latest.json.

Everything runs against the real thing: a real kube-apiserver (for the claim
GET in every prepare), the real `neuron-dra run` process on a simulated
trn2.48xlarge, called over its unix socket with the kubelet's protocol. The
floor beside each figure is the unavoidable work measured in the same run: one
API GET of the claim, plus writing and fsyncing a file of the CDI spec's size
and a checkpoint update.
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
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from api.kubelet.dra.v1 import api_pb2 as dra  # noqa: E402
from api.kubelet.dra.v1 import api_pb2_grpc as dra_grpc  # noqa: E402
from neuron_dra.agent.cdi import atomic_write  # noqa: E402
from neuron_dra.agent.kube import Kube  # noqa: E402
from tests.e2e.build import build  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402
from tests.e2e.nodes import SimulatedNode, add_simulated_node  # noqa: E402
from tests.e2e.processes import free_port  # noqa: E402

RESULTS = REPO / "bench" / "results"
Obj = dict[str, Any]


def phase_totals(port: int) -> dict[str, tuple[float, float]]:
    """phase -> (seconds, count) of the plugin's prepare phases so far, from its metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            phase = sample.labels.get("phase")
            if phase and sample.name.endswith(("_sum", "_count")):
                entry = totals.setdefault(phase, [0.0, 0.0])
                entry[0 if sample.name.endswith("_sum") else 1] = sample.value
    return {phase: (seconds, count) for phase, (seconds, count) in totals.items()}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


ADMIN_NAMESPACE_LABEL = "resource.kubernetes.io/admin-access"


def allocated_claim(
    cluster: Cluster, name: str, node: str, devices: list[int], *, admin: bool = False
) -> Obj:
    """A ResourceClaim with an allocation written through the status subresource.

    With `admin`, the request and its results have admin access, so claims may share
    devices (the driver refuses a device another claim holds otherwise); the
    namespace must carry ADMIN_NAMESPACE_LABEL.
    """
    exactly: Obj = {"deviceClassName": "neuron.aws.com", "count": len(devices)}
    extra: Obj = {"adminAccess": True} if admin else {}
    claim = cluster.create({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "neurons", "exactly": exactly | extra}]}},
    })  # fmt: skip
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "neurons", "driver": "neuron.aws.com", "pool": node,
         "device": f"neurondevice{d}", **extra} for d in devices
    ]}, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}  # fmt: skip
    return cluster.request(  # type: ignore[no-any-return]
        "PUT",
        cluster.path("resource.k8s.io/v1", "ResourceClaim", name, "default") + "/status",
        claim,
    )


async def prepare_latency(
    node: SimulatedNode, claims: list[Obj]
) -> tuple[list[float], list[float]]:
    """Per-claim NodePrepareResources and NodeUnprepareResources times, in ms."""
    socket = node.side.plugins_dir / "neuron.aws.com" / "dra.sock"
    prepare, unprepare = [], []
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = dra_grpc.DRAPluginStub(channel)
        for obj in claims:
            meta = obj["metadata"]
            ref = dra.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
            started = time.perf_counter()
            answer = await stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[ref]))
            prepare.append((time.perf_counter() - started) * 1000)
            assert not answer.claims[meta["uid"]].error, answer.claims[meta["uid"]].error
            started = time.perf_counter()
            await stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[ref]))
            unprepare.append((time.perf_counter() - started) * 1000)
    return prepare, unprepare


async def floor_ms(cluster: Cluster, claim: Obj, runs: int) -> tuple[float, float]:
    """(API GET of the claim, fsynced CDI-sized write + checkpoint update), medians in ms."""
    kube = Kube.connect(cluster.kubeconfig)
    gets, writes = [], []
    meta = claim["metadata"]
    spec_size, checkpoint_size = 1500, 600
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        for i in range(runs):
            started = time.perf_counter()
            await kube.get_resource_claim(meta["namespace"], meta["name"])
            gets.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            atomic_write(Path(tmp) / f"spec-{i}.json", b"x" * spec_size, mode=0o644)
            atomic_write(Path(tmp) / "checkpoint.json", b"y" * checkpoint_size, mode=0o600)
            writes.append((time.perf_counter() - started) * 1000)
    kube.close()
    return statistics.median(gets), statistics.median(writes)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def startup(cluster: Cluster, node: SimulatedNode, runs: int) -> dict[str, float]:
    """Median seconds from spawning the process to: its registration socket served,
    its slices published (deleted before each start, as on a fresh node), and the
    kubelet side reporting it registered (the kubelet's reconciler polls every second)."""
    phases: dict[str, list[float]] = {"serving": [], "published": [], "registered": []}
    socket = node.side.registry_dir / "neuron.aws.com-reg.sock"
    for _ in range(runs):
        node.stop_plugin()
        for obj in node.slices():
            cluster.delete("resource.k8s.io/v1", "ResourceSlice", obj["metadata"]["name"])
        registrations = len(node.side.report_events("plugin-registered"))

        def registered(before: int = registrations) -> bool:
            return len(node.side.report_events("plugin-registered")) > before

        started = time.monotonic()
        node.start_plugin(wait=False)
        pending = dict.fromkeys(phases, 0.0)
        checks: dict[str, Callable[[], bool]] = {
            "serving": socket.exists,
            "published": lambda: bool(node.slices()),
            "registered": registered,
        }
        while any(v == 0.0 for v in pending.values()):
            for phase, check in checks.items():
                if pending[phase] == 0.0 and check():
                    pending[phase] = time.monotonic() - started
            assert time.monotonic() - started < 30, f"plugin not ready: {pending}"
            time.sleep(0.005)  # sampling interval of the measurement, not synchronisation
        for phase, value in pending.items():
            phases[phase].append(value)
    return {f"startup_{k}_s": statistics.median(v) for k, v in phases.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=200, help="claims per device count")
    parser.add_argument("--startup-runs", type=int, default=5)
    args = parser.parse_args()

    with Cluster(build()) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        port = free_port()
        node = add_simulated_node(
            cluster, "bench", "trn2.48xlarge", extra_args=[f"--metrics-port={port}"]
        )
        assert node.plugin is not None
        rss_start = rss_mib(node.plugin.pid)
        figures: dict[str, Any] = {}
        sets = {1: [0], 4: [4, 5, 6, 7], 16: list(range(16))}
        for size, devices in sets.items():
            claims = [allocated_claim(cluster, f"c{size}-{i}", "bench", devices)
                      for i in range(args.claims)]  # fmt: skip
            before = phase_totals(port)
            prepare, unprepare = asyncio.run(prepare_latency(node, claims))
            after = phase_totals(port)
            for phase, (seconds, count) in after.items():
                spent, done = (
                    seconds - before.get(phase, (0, 0))[0],
                    count - before.get(phase, (0, 0))[1],
                )
                figures[f"prepare_{size}_{phase}_mean_ms"] = spent / done * 1000 if done else 0.0
            figures[f"prepare_{size}_p50_ms"] = percentile(prepare, 0.5)
            figures[f"prepare_{size}_p99_ms"] = percentile(prepare, 0.99)
            figures[f"unprepare_{size}_p50_ms"] = percentile(unprepare, 0.5)
            figures[f"unprepare_{size}_p99_ms"] = percentile(unprepare, 0.99)
        get_ms, write_ms = asyncio.run(floor_ms(cluster, claims[0], args.claims))
        figures["rss_start_mib"] = rss_start
        figures["rss_after_cycles_mib"] = rss_mib(node.plugin.pid)
        figures["prepare_p50_ms"] = figures["prepare_16_p50_ms"]
        figures["prepare_p99_ms"] = figures["prepare_16_p99_ms"]
        figures["floor_api_get_ms"] = get_ms
        figures["floor_write_fsync_ms"] = write_ms
        figures["prepare_floor_ms"] = get_ms + write_ms
        figures["prepare_over_floor"] = figures["prepare_p50_ms"] / figures["prepare_floor_ms"]
        figures |= startup(cluster, node, args.startup_runs)
        # Ready to be registered and published: the part the driver controls.
        figures["startup_s"] = max(figures["startup_serving_s"], figures["startup_published_s"])

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
