"""Karpenter provisioning simulated Neuron nodes on a real control plane.

``KarpenterCluster`` starts the control plane (``Cluster``) with the driver's
DeviceClasses, its policy on device-plugin-style core requests and Karpenter's CRDs,
a KWOKNodeClass and the NodePool of ``examples/karpenter/nodepool.yaml`` (its node
class KWOK's), then Karpenter's operator
(``karpenter_build``) with DRA simulation on, reading the driver's catalog as
``neuron-dra templates`` prints it. KWOK's provider creates the Node object of each
NodeClaim itself; a ``NodeFollower`` then plays the machine that boots: it reports
the Node Ready and starts the kubelet side, a fake sysfs of the Node's instance type
and the real ``neuron-dra run`` (``nodes.simulate_node``), so the real slices appear
and the pod runs. When Karpenter deletes a Node, its plugin and kubelet side stop.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from consts import LABEL_INSTANCE_TYPE
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import DEFAULT_RUNTIME_CONFIG, Cluster
from neuron_dra_harness.karpenter_build import KarpenterBinary
from neuron_dra_harness.karpenter_catalog import NODE_CLASS, kwok_instance_types, node_class
from neuron_dra_harness.nodes import DEVICE_CLASSES, SimulatedNode, simulate_node
from neuron_dra_harness.processes import Component, free_port, http_ok

Obj = dict[str, Any]
# Refuses, at creation, a pod asking more aws.amazon.com/neuroncore than its instance
# types serve on DRA nodes, before Karpenter can launch a node for it.
CORE_REQUEST_POLICY = DEVICE_CLASSES.parent / "core-request-policy.yaml"
NODE_POOL_FILE = Path(__file__).resolve().parents[2] / "examples" / "karpenter" / "nodepool.yaml"
NODE_POOL_LABEL = "karpenter.sh/nodepool"
# An UltraServer has four nodes: the follower places trn2u-like nodes in launch order.
ULTRASERVER_NODES = 4
BOOT_THREADS = 4


def node_pool(consolidate_after: str = "Never") -> Obj:
    """The example NodePool, its node class the KWOKNodeClass, and `consolidate_after`."""
    pool: Obj = yaml.safe_load(NODE_POOL_FILE.read_text())
    pool["spec"]["template"]["spec"]["nodeClassRef"] = {
        "group": "karpenter.kwok.sh",
        "kind": "KWOKNodeClass",
        "name": NODE_CLASS,
    }
    pool["spec"]["disruption"]["consolidateAfter"] = consolidate_after
    return pool


def write_catalog(path: Path, kubernetes_version: str) -> dict[str, Obj]:
    """`neuron-dra templates` for every instance type, written to `path`, and returned."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuron_dra",
            "templates",
            f"--kubernetes-version={kubernetes_version}",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path.write_text(out)
    catalog: dict[str, Obj] = json.loads(out)
    return catalog


@dataclass
class Launched:
    """A Node Karpenter made and the simulated machine behind it."""

    node: SimulatedNode
    ready_at: float  # time.monotonic() when its plugin had published its pool


@dataclass
class NodeFollower:
    """Plays the machines behind Karpenter's Nodes (see the module's docstring): boots
    run on a pool of threads, so one slow boot delays no other; a machine powers off
    once its Node, being deleted, has no pod left (Karpenter drained it), or is gone.

    The pool's threads live until ``close``: a process is started with a parent-death
    signal, which Linux sends when the *thread* that started it ends."""

    cluster: Cluster
    interval: float = 0.2
    launched: dict[str, Launched] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    _booting: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _boots: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(BOOT_THREADS, thread_name_prefix="boot")
    )
    _count: int = 0
    _ultraservers: int = 0

    def start(self) -> None:
        self._spawn("node-follower", self._run)

    def stop(self) -> None:
        """Stop following; the machines stay on."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def close(self) -> None:
        """End the boot threads, once their processes are stopped."""
        self._boots.shutdown(wait=True, cancel_futures=True)

    def check(self) -> None:
        """Raise the first error the follower met."""
        if self.errors:
            raise self.errors[0]

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._reporting(target), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _reporting(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by check()
                self.errors.append(exc)

        return run

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except BaseException as exc:  # reported by check(); the loop goes on
                self.errors.append(exc)

    def step(self) -> None:
        nodes = self.cluster.list_objects("v1", "Node", label_selector=NODE_POOL_LABEL)
        present = {n["metadata"]["name"] for n in nodes}
        for node in nodes:
            name = node["metadata"]["name"]
            deleting = bool(node["metadata"].get("deletionTimestamp"))
            with self._lock:
                new = name not in self.launched and name not in self._booting
                if new and not deleting:
                    self._booting.add(name)
                    it = node["metadata"]["labels"][LABEL_INSTANCE_TYPE]
                    self._boots.submit(self._reporting(functools.partial(self._boot, name, it)))
            if deleting and name in self.launched and not self._pods_on(name):
                self._power_off(name)
        for name in set(self.launched) - present:
            self._power_off(name)

    def _pods_on(self, name: str) -> bool:
        """Whether a pod of any namespace is bound to the Node."""
        query: dict[str, str | int | bool] = {"fieldSelector": f"spec.nodeName={name}", "limit": 1}
        found: Obj = self.cluster.request("GET", "/api/v1/pods", query=query)
        return bool(found.get("items"))

    def _boot(self, name: str, instance_type: str) -> None:
        with self._lock:
            self._count += 1
            # A short root: the plugin's sockets live below it (107 bytes at most).
            root = self.cluster.workdir / "n" / str(self._count)
            ultraserver = None
            if INSTANCE_TYPES[instance_type].ultraserver:
                server, position = divmod(self._ultraservers, ULTRASERVER_NODES)
                self._ultraservers += 1
                ultraserver = FakeUltraServer(f"us-{server}", position)
        try:
            self.cluster.mark_ready(name)
            node = simulate_node(
                self.cluster, name, instance_type, ultraserver=ultraserver, kubelet_root=root
            )
            with self._lock:
                self.launched[name] = Launched(node, time.monotonic())
        finally:
            with self._lock:
                self._booting.discard(name)

    def _power_off(self, name: str) -> None:
        with self._lock:
            launched = self.launched.pop(name, None)
        if launched is not None:
            launched.node.stop_plugin()
            self.cluster.stop_kubelet_side(name)


@dataclass
class KarpenterCluster:
    """A running control plane with Karpenter and the node follower."""

    cluster: Cluster
    karpenter: Component
    follower: NodeFollower
    catalog: dict[str, Obj]

    def nodes(self) -> list[Obj]:
        """The Nodes Karpenter made that still exist."""
        return self.cluster.list_objects("v1", "Node", label_selector=NODE_POOL_LABEL)

    def node_claims(self) -> list[Obj]:
        return self.cluster.list_objects("karpenter.sh/v1", "NodeClaim")

    def karpenter_log(self) -> str:
        return self.karpenter.log_path.read_text(errors="replace")


def _apply_crds(cluster: Cluster, karpenter: KarpenterBinary) -> None:
    for path in karpenter.crds:
        for crd in cluster.apply_yaml(path.read_text()):
            name = crd["metadata"]["name"]

            def established(crd_name: str = name) -> bool:
                got = cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd_name)
                conditions = got.get("status", {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

            cluster.wait_for(f"CRD {name} established", established)


def _ready_node_class(cluster: Cluster) -> None:
    """The KWOKNodeClass, reported Ready (no controller of KWOK's does so)."""
    cluster.create(node_class())
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": now,
        "observedGeneration": 1,
    }
    cluster.patch(
        "karpenter.kwok.sh/v1alpha1",
        "KWOKNodeClass",
        NODE_CLASS,
        {"status": {"conditions": [condition]}},
        subresource="status",
    )


def start_karpenter(
    cluster: Cluster, karpenter: KarpenterBinary, catalog: Path, instance_types: Path
) -> Component:
    """Karpenter's operator against `cluster`, DRA simulation on; waits until ready."""
    health = free_port()
    env = {
        "KUBECONFIG": str(cluster.kubeconfig),
        "DISABLE_LEADER_ELECTION": "true",
        "IGNORE_DRA_REQUESTS": "false",
        "NEURON_CATALOG_PATH": str(catalog),
        "INSTANCE_TYPES_FILE_PATH": str(instance_types),
        "METRICS_PORT": str(free_port()),
        "HEALTH_PROBE_PORT": str(health),
        "LOG_LEVEL": "debug",
    }
    component = cluster.start_process("karpenter", [str(karpenter.operator)], env=env)
    cluster.wait_for(
        "karpenter /readyz", lambda: http_ok(f"http://127.0.0.1:{health}/readyz"), timeout=60
    )
    return component


@contextmanager
def karpenter_cluster(
    binaries: Binaries,
    karpenter: KarpenterBinary,
    *,
    consolidate_after: str = "Never",
    feature_gates: Mapping[str, bool] | None = None,
    runtime_config: str = DEFAULT_RUNTIME_CONFIG,
) -> Iterator[KarpenterCluster]:
    """The control plane (with `feature_gates` and `runtime_config`), Karpenter and the
    node follower, stopped on exit."""
    follower: NodeFollower | None = None
    try:
        with Cluster(
            binaries, feature_gates=feature_gates, runtime_config=runtime_config
        ) as cluster:
            follower = NodeFollower(cluster)
            yield from _running(cluster, follower, karpenter, consolidate_after)
    finally:
        if follower is not None:
            follower.close()


def _running(
    cluster: Cluster, follower: NodeFollower, karpenter: KarpenterBinary, consolidate_after: str
) -> Iterator[KarpenterCluster]:
    cluster.apply_yaml(DEVICE_CLASSES.read_text())
    cluster.apply_yaml(CORE_REQUEST_POLICY.read_text())
    _apply_crds(cluster, karpenter)
    catalog_path = cluster.workdir / "karpenter-catalog.json"
    catalog = write_catalog(catalog_path, f"1.{cluster.binaries.minor}")
    types_path = cluster.workdir / "karpenter-instance-types.json"
    types_path.write_text(json.dumps(kwok_instance_types(sorted(catalog))))
    _ready_node_class(cluster)
    cluster.create(node_pool(consolidate_after))
    component = start_karpenter(cluster, karpenter, catalog_path, types_path)
    follower.start()
    try:
        yield KarpenterCluster(cluster, component, follower, catalog)
    finally:
        follower.stop()
