"""What the benchmarks share: claims allocated by hand, the kubelet's calls over a
plugin's unix socket, a bare API GET, start-up timing, percentiles and RSS."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import grpc

from api.kubelet.dra.v1 import api_pb2 as dra
from api.kubelet.dra.v1 import api_pb2_grpc as dra_grpc
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.kubeletside import KubeletSide

REPO = Path(__file__).resolve().parents[1]

RESULTS = REPO / "bench" / "results"
DRIVER = "neuron.aws.com"
ADMIN_NAMESPACE_LABEL = "resource.kubernetes.io/admin-access"
Obj = dict[str, Any]


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def add_kubelet_root_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubelet-root",
        type=Path,
        default=Path("/var/tmp"),
        help="where to make the kubelets' root directories: plugin sockets and "
        "checkpoints, on a disk as on a node (/var/lib/kubelet); default %(default)s",
    )


@contextlib.contextmanager
def kubelet_roots(parent: Path) -> Iterator[Path]:
    """A directory in `parent` for the nodes' kubelet root directories, removed after."""
    with tempfile.TemporaryDirectory(prefix="neuron-dra-bench-", dir=parent) as roots:
        yield Path(roots)


def filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on (ext4, tmpfs, ...), from the mount table."""
    resolved, best = str(path.resolve()), ("", "?")
    for line in Path("/proc/self/mounts").read_text().splitlines():
        mountpoint, kind = line.split()[1:3]
        inside = resolved == mountpoint or resolved.startswith(mountpoint.rstrip("/") + "/")
        if inside and len(mountpoint) >= len(best[0]):
            best = (mountpoint, kind)
    return best[1]


def allocated_claim(
    cluster: Cluster, name: str, node: str, devices: list[int], *, admin: bool = False
) -> Obj:
    """A ResourceClaim with an allocation written through the status subresource:
    devices `neurondevice{N}` of the pool named after `node`.

    With `admin`, the request and its results have admin access, so claims may share
    devices (the driver refuses a device another claim holds otherwise); the
    namespace must carry ADMIN_NAMESPACE_LABEL.
    """
    exactly: Obj = {"deviceClassName": DRIVER, "count": len(devices)}
    extra: Obj = {"adminAccess": True} if admin else {}
    claim = cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "neurons", "exactly": exactly | extra}]}},
        }
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "neurons",
                        "driver": DRIVER,
                        "pool": node,
                        "device": f"neurondevice{d}",
                        **extra,
                    }
                    for d in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    return cluster.request(  # type: ignore[no-any-return]
        "PUT",
        cluster.path("resource.k8s.io/v1", "ResourceClaim", name, "default") + "/status",
        claim,
    )


def dra_socket(side: KubeletSide) -> Path:
    """The DRA socket of the driver's plugin on a node: `<plugins>/<driver>/dra.sock`."""
    return side.plugins_dir / DRIVER / "dra.sock"


class DraClient:
    """The kubelet's DRA gRPC calls to one plugin, on a connection kept open."""

    def __init__(self, socket: Path) -> None:
        self._channel = grpc.aio.insecure_channel(f"unix://{socket}")
        self._stub = dra_grpc.DRAPluginStub(self._channel)

    async def __aenter__(self) -> DraClient:
        await self._channel.channel_ready()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self._channel.close()

    async def cycle(self, claims: list[Obj]) -> tuple[list[float], list[float]]:
        """Prepare then unprepare each claim in turn; the times of each call, in ms."""
        prepare, unprepare = [], []
        for obj in claims:
            meta = obj["metadata"]
            ref = dra.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
            started = time.perf_counter()
            answer = await self._stub.NodePrepareResources(
                dra.NodePrepareResourcesRequest(claims=[ref])
            )
            prepare.append((time.perf_counter() - started) * 1000)
            assert not answer.claims[meta["uid"]].error, answer.claims[meta["uid"]].error
            started = time.perf_counter()
            gone = await self._stub.NodeUnprepareResources(
                dra.NodeUnprepareResourcesRequest(claims=[ref])
            )
            unprepare.append((time.perf_counter() - started) * 1000)
            assert not gone.claims[meta["uid"]].error, gone.claims[meta["uid"]].error
        return prepare, unprepare


async def prepare_latency(socket: Path, claims: list[Obj]) -> tuple[list[float], list[float]]:
    """Per-claim NodePrepareResources and NodeUnprepareResources times, in ms."""
    async with DraClient(socket) as client:
        return await client.cycle(claims)


class BareGet:
    """GETs on one keep-alive HTTPS connection to the cluster's kube-apiserver with
    its bearer token: an API read with no client library in the way."""

    def __init__(self, cluster: Cluster) -> None:
        url = urlsplit(cluster.server)
        assert url.hostname is not None
        self._connection = http.client.HTTPSConnection(
            url.hostname,
            url.port,
            context=ssl.create_default_context(cafile=str(cluster.ca_file)),
            timeout=10,
        )
        self._headers = {"Authorization": f"Bearer {cluster.token}", "Accept": "application/json"}

    def get(self, path: str) -> bytes:
        self._connection.request("GET", path, headers=self._headers)
        answer = self._connection.getresponse()
        body = answer.read()
        assert answer.status == 200, (answer.status, body[:200])
        return body

    def close(self) -> None:
        self._connection.close()


def claim_path(claim: Obj) -> str:
    meta = claim["metadata"]
    return f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"


def stop_and_forget(stop: Callable[[], object], side: KubeletSide) -> None:
    """Stop a plugin and wait until the kubelet side has deregistered it, as a fresh node
    has nothing registered: a plugin that comes back on the same socket path before the
    kubelet's next reconcile (every second) finds its old registration still there."""
    deregistered = len(side.report_events("plugin-deregistered"))
    stop()
    started = time.monotonic()
    while len(side.report_events("plugin-deregistered")) == deregistered:
        assert time.monotonic() - started < 30, "plugin not deregistered"
        time.sleep(0.01)  # polling the kubelet side's report, not synchronisation


def time_startup(
    *,
    start: Callable[[], object],
    registration_socket: Path,
    published: Callable[[], bool],
    side: KubeletSide,
) -> dict[str, float]:
    """Seconds from calling `start` (which spawns the plugin and returns) to: its
    registration socket served, its slices published, and the kubelet side reporting
    it registered (the kubelet's reconciler polls every second)."""
    registrations = len(side.report_events("plugin-registered"))
    checks: dict[str, Callable[[], bool]] = {
        "serving": registration_socket.exists,
        "published": published,
        "registered": lambda: len(side.report_events("plugin-registered")) > registrations,
    }
    started = time.monotonic()
    start()
    pending = dict.fromkeys(checks, 0.0)
    while any(v == 0.0 for v in pending.values()):
        for phase, check in checks.items():
            if pending[phase] == 0.0 and check():
                pending[phase] = time.monotonic() - started
        assert time.monotonic() - started < 30, f"plugin not ready: {pending}"
        time.sleep(0.005)  # sampling interval of the measurement, not synchronisation
    return pending
