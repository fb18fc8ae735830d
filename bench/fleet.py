"""The simulated fleet of bench/scale.py: Node objects with the slices the driver
lays out for each, published as an agent would (bench/fill.py fills them).

A `Layout` is one way of publishing NeuronCores; the agent's current one is
`partitions`.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from consts import CORE_NAME_PREFIX, DRIVER_NAME
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import CoreLayout, SliceOptions, build_slices
from neuron_dra_harness.cluster import Cluster

Obj = dict[str, Any]
NAMESPACE = "default"
RESOURCE = "resource.k8s.io/v1"
WORKERS = 8
"""Nodes published at once."""


@dataclass(frozen=True)
class Layout:
    """One way of publishing a node: what `build_slices` is asked for."""

    name: str
    cores: CoreLayout
    lnc: int | None = None  # None: the instance type's default (2 on trn2)
    # Slices in their places (devices before cores in the allocator's walk); otherwise
    # generateName's random suffixes decide the order, as before.
    ordered: bool = True
    # What a held device or core leaves unallocatable is withdrawn, as the agent does
    # once the kubelet has prepared the claim: a held device's cores, a held core's
    # device, the node device for either.
    withhold: bool = True
    # False: only whole holds withdraw anything, as the agent did before cores did.
    withhold_for_cores: bool = True
    # DeviceClasses with one selector joining the chart's two by `&&`.
    joined_selectors: bool = False
    # The first core ahead of the whole devices in the walk; False, as the agent
    # publishes: every core after them.
    core_leads: bool = False


LAYOUTS = {
    layout.name: layout
    for layout in (
        Layout("devices", CoreLayout.OFF),
        Layout("partitions", CoreLayout.PARTITIONS),
        Layout("partitions-lnc1", CoreLayout.PARTITIONS, lnc=1),
        Layout("partitions-core-leads", CoreLayout.PARTITIONS, core_leads=True),
        # What the driver published before: random slice order, every core always.
        Layout("partitions-unordered", CoreLayout.PARTITIONS, ordered=False, withhold=False),
        Layout(
            "partitions-unordered-lnc1",
            CoreLayout.PARTITIONS,
            lnc=1,
            ordered=False,
            withhold=False,
        ),
        Layout("partitions-ordered", CoreLayout.PARTITIONS, withhold=False),
        Layout("partitions-whole-holds", CoreLayout.PARTITIONS, withhold_for_cores=False),
        Layout(
            "partitions-unordered-joined",
            CoreLayout.PARTITIONS,
            ordered=False,
            withhold=False,
            joined_selectors=True,
        ),
        Layout("capacity", CoreLayout.CAPACITY),
        Layout("capacity-lnc1", CoreLayout.CAPACITY, lnc=1),
    )
}


class Api:
    """Keep-alive HTTPS to the API server, one connection per thread: the cluster
    helper's client is too slow for tens of thousands of writes."""

    def __init__(self, cluster: Cluster) -> None:
        url = urlsplit(cluster.server)
        self._host, self._port = url.hostname or "127.0.0.1", url.port
        self._context = ssl.create_default_context(cafile=str(cluster.ca_file))
        self._headers = {
            "Authorization": f"Bearer {cluster.token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._local = threading.local()

    def call(
        self, method: str, path: str, body: Obj | None = None, ok: tuple[int, ...] = ()
    ) -> Obj:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, context=self._context, timeout=120
            )
            self._local.connection = connection
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(5):
            try:
                headers = self._headers
                if method == "PATCH":
                    headers = headers | {"Content-Type": "application/merge-patch+json"}
                connection.request(method, path, body=data, headers=headers)
                answer = connection.getresponse()
                text = answer.read()
            except OSError:
                connection.close()
                if attempt == 4:
                    raise
                continue
            if answer.status == 429 or answer.status >= 500:
                time.sleep(0.2 * (attempt + 1))  # a loaded server asks to retry
                continue
            if answer.status == 409 and attempt > 0 and method in ("POST", "PUT"):
                # The connection dropped after the server took the write, so the retry
                # met the object it made (AlreadyExists, or a resourceVersion moved by
                # it). The benchmark is the only writer: the object is the one written.
                return self.call("GET", _written(method, path, body))
            if not (200 <= answer.status < 300 or answer.status in ok):
                raise RuntimeError(f"{method} {path}: {answer.status} {text[:300]!r}")
            return json.loads(text) if text else {}
        raise RuntimeError(f"{method} {path}: still {answer.status} after retries")


def _written(method: str, path: str, body: Obj | None) -> str:
    """The path of the object a POST or PUT of `body` to `path` wrote."""
    if method == "PUT":
        return path
    name = (body or {}).get("metadata", {}).get("name")
    if not name:
        raise RuntimeError(f"POST {path}: 409 after a retry, and the object has no name")
    return f"{path}/{name}"


def slice_path(name: str | None = None) -> str:
    base = f"/apis/{RESOURCE}/resourceslices"
    return f"{base}/{name}" if name else base


def claim_path(name: str | None = None) -> str:
    base = f"/apis/{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    return f"{base}/{name}" if name else base


@dataclass
class Fleet:
    """The cluster's simulated nodes: Node objects and their slices."""

    cluster: Cluster
    api: Api
    layout: Layout
    inventories: dict[str, NodeInventory]  # by instance type
    ultraserver_share: float
    nodes: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # node -> instance type
    publish_s: list[float] = field(default_factory=list)
    slice_count: dict[str, int] = field(default_factory=dict)
    slice_bytes: dict[str, int] = field(default_factory=dict)
    devices: dict[str, list[Obj]] = field(default_factory=dict)  # by instance type
    uids: dict[str, str] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)
    slice_names: dict[str, list[str]] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)  # node -> devices it publishes
    # Per rewrite of a published node: seconds from its first slice write's answer to
    # its last one's, while the pool's slices are of two generations.
    incomplete_s: list[float] = field(default_factory=list)
    held: dict[str, frozenset[str]] = field(default_factory=dict)  # node -> held whole

    def instance_type(self, index: int) -> str:
        # Every k-th node an UltraServer node, spread evenly over the fleet.
        if self.ultraserver_share and index % round(1 / self.ultraserver_share) == 0:
            return "trn2u.48xlarge"
        return "trn2.48xlarge"

    def add(self, index: int) -> None:
        name = f"n{index:05d}"
        kind = self.instance_type(index)
        node = self.api.call(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "node.kubernetes.io/instance-type": kind,
                    },
                },
            },
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        resources = {"cpu": "192", "memory": "2048Gi", "pods": "110"}
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.37.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "none://0",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "kubeProxyVersion": "",
            },
        }
        self.api.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": status})
        # The TaintNodesByCondition admission's not-ready taint: the node lifecycle
        # controller would lift it; do it here.
        self.api.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
        self.uids[name] = node["metadata"]["uid"]
        self.kinds[name] = kind
        started = time.monotonic()
        slices = self.publish(name, frozenset())
        self.publish_s.append(time.monotonic() - started)
        self.slice_count[kind] = len(slices)
        self.slice_bytes[kind] = sum(len(json.dumps(s, separators=(",", ":"))) for s in slices)
        self.devices[kind] = [d for s in slices for d in s["spec"].get("devices") or []]

    @property
    def withholds(self) -> bool:
        return self.layout.withhold and self.layout.cores is CoreLayout.PARTITIONS

    def _withheld(self, held: frozenset[str]) -> frozenset[str]:
        """What of `held` the layout withdraws for."""
        if not self.layout.withhold:
            return frozenset()
        if not self.layout.withhold_for_cores:
            return frozenset(h for h in held if not h.startswith(CORE_NAME_PREFIX))
        return held

    def publish(self, name: str, held: frozenset[str]) -> list[Obj]:
        """The node's slices, the devices named in `held` held whole, one after another
        as the agent writes them, in a new generation."""
        generation = self.generations.get(name, 0) + 1
        self.generations[name] = generation
        options = SliceOptions(
            name,
            self.uids[name],
            generation,
            cores=self.layout.cores,
            counter_layout=CounterLayout.OWN_SLICE,
            held=self._withheld(held),
            core_leads=self.layout.core_leads,
        )
        slices = build_slices(self.inventories[self.kinds[name]], options)
        if not self.layout.ordered:
            for obj in slices:
                obj["metadata"]["generateName"] = f"{name}-{DRIVER_NAME}-"
        self.published[name] = sum(len(s["spec"].get("devices") or []) for s in slices)
        # As the agent's publisher: each slice replaces the stored one of its place, in
        # place; places no longer wanted are deleted.
        old = self.slice_names.get(name, [])
        self.held[name] = held
        names, answered = [], []
        for index, obj in enumerate(slices):
            if index < len(old):
                obj["metadata"]["name"] = old[index]
                self.api.call("PUT", slice_path(old[index]), obj)
                names.append(old[index])
            else:
                names.append(self.api.call("POST", slice_path(), obj)["metadata"]["name"])
            answered.append(time.monotonic())
        for gone in old[len(slices) :]:
            self.api.call("DELETE", slice_path(gone), ok=(404,))
            answered.append(time.monotonic())
        if old:
            self.incomplete_s.append(answered[-1] - answered[0])
        self.slice_names[name] = names
        return slices

    def grow(self, size: int) -> float:
        started = time.monotonic()
        first = len(self.nodes)
        with ThreadPoolExecutor(WORKERS) as pool:
            for _ in pool.map(self.add, range(first, size)):
                pass
        self.nodes += [f"n{i:05d}" for i in range(first, size)]
        return time.monotonic() - started


def core_capacity_class() -> Obj:
    """The core class where cores are capacity: a share of a whole device."""
    return {
        "apiVersion": RESOURCE,
        "kind": "DeviceClass",
        "metadata": {"name": f"neuroncore.{DRIVER_NAME}"},
        "spec": {
            "selectors": [
                {"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}},
                {
                    "cel": {
                        "expression": f"device.attributes['{DRIVER_NAME}'].resourceType"
                        " == 'neuron_device'"
                    }
                },
            ]
        },
    }
