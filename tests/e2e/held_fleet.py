"""The pods of the random held-cores test as it knows them, the plugins it stops and
starts, and the checks made after every step: no physical core in two running
containers, no pod stuck at prepare, the pool following the checkpoint.

A pod is stuck at prepare when the scheduler allocated its claim and it still does not
run `STUCK_S` after it could have: once submitted, and its node's plugin up. The
bound, spelt out:

- the agent rewrites its slices `HELD_SETTLE_S` after a prepare or unprepare, and the
  publisher retries a failed write within `BACKOFF_MAX_S`;
- the kubelet side retries a pod whose prepare or unprepare failed after 1 s, doubling
  up to 60 s (harness/go/k8s/cmd/kubeletside); a step stops a plugin for a few
  seconds, so a pod refused meanwhile (or a force-deleted pod's claim waiting to be
  unprepared) is tried again within `KUBELET_RETRY_S` of the plugin's return.

A pod that waits beyond it is refused for good: prepare errors repeat and it never runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from signal import Signals
from typing import Any

from consts import CORE_NAME_PREFIX
from neuron_dra.agent.holdings import HELD_SETTLE_S
from neuron_dra.agent.slices.publisher import BACKOFF_MAX_S
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.cluster_api import ClusterError
from neuron_dra_harness.kubeletside import KUBELETSIDE_ERROR_ANNOTATION
from neuron_dra_harness.nodes import SimulatedNode, container_view
from tests.e2e.held_pool import checkpoint_mismatch, held_here, pool_problems
from tests.e2e.test_cores import PER_DEVICE, claim_of
from tests.e2e.test_random_allocation import parse_cores, refused

Obj = dict[str, Any]
KUBELET_RETRY_S = 16.0  # the kubelet side's fifth retry of one pod
STUCK_S = HELD_SETTLE_S + BACKOFF_MAX_S + KUBELET_RETRY_S
ADMIN_NAMESPACE = "monitoring"


@dataclass
class Tracked:
    """A pod the test submitted and expects to run or to be refused by the scheduler."""

    name: str
    node: SimulatedNode
    namespace: str = "default"
    admin: bool = False
    since: float = field(default_factory=time.monotonic)
    whole: tuple[str, ...] = ()  # the whole devices (or node device) its claim holds


@dataclass
class Fleet:
    seed: int
    nodes: dict[str, SimulatedNode]
    due: dict[str, Tracked] = field(default_factory=dict)
    running: dict[str, Tracked] = field(default_factory=dict)
    # When each node's plugin last came up; a node whose plugin is stopped is absent.
    up_since: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.up_since = dict.fromkeys(self.nodes, time.monotonic())

    @property
    def cluster(self) -> Cluster:
        return next(iter(self.nodes.values())).cluster

    def submitted(self, name: str, node: SimulatedNode, *, admin: bool = False) -> Tracked:
        namespace = ADMIN_NAMESPACE if admin else "default"
        tracked = Tracked(name, node, namespace, admin)
        self.due[name] = tracked
        return tracked

    def stop(self, node: SimulatedNode, sig: Signals) -> None:
        node.stop_plugin(sig)
        self.up_since.pop(node.name, None)

    def start(self, node: SimulatedNode) -> None:
        node.start_plugin()
        self.up_since[node.name] = time.monotonic()

    def delete(self, tracked: Tracked, *, grace: int | None) -> None:
        """Delete a running pod, gracefully (the kubelet side unprepares its claim first)
        or forced (gone at once; the claim is unprepared when the kubelet side can)."""
        self.running.pop(tracked.name, None)
        self.cluster.delete("v1", "Pod", tracked.name, tracked.namespace, grace_period=grace)
        self.cluster.wait_for_pod_gone(tracked.name, tracked.namespace, timeout=STUCK_S)

    # --- after every step -------------------------------------------------------------

    def check(self, step: int) -> None:
        self.settle(step)
        self.check_containers(step)
        for node in self.nodes.values():
            self.check_pool(node, step)

    def settle(self, step: int) -> None:
        """Wait until every pod submitted on a node whose plugin is up runs or is refused
        by the scheduler (then deleted); fail on one stuck at prepare."""
        refused_pods: list[Tracked] = []

        def settled() -> bool:
            for tracked in list(self.due.values()):
                up = self.up_since.get(tracked.node.name)
                if up is None:
                    continue
                pod = self.cluster.get_or_none("v1", "Pod", tracked.name, tracked.namespace)
                if pod is None:
                    del self.due[tracked.name]
                elif pod.get("status", {}).get("phase") == "Running":
                    del self.due[tracked.name]
                    tracked.whole = whole_devices(self.cluster, pod)
                    self.running[tracked.name] = tracked
                elif refused(pod):
                    del self.due[tracked.name]
                    refused_pods.append(tracked)
                elif time.monotonic() - max(up, tracked.since) > STUCK_S:
                    raise AssertionError(self.stuck(step, tracked, pod))
            return not any(t.node.name in self.up_since for t in self.due.values())

        self.cluster.wait_for(
            f"seed {self.seed} step {step}: pods settled", settled, timeout=2 * STUCK_S + 30
        )
        for tracked in refused_pods:
            self.cluster.delete("v1", "Pod", tracked.name, tracked.namespace)
        for tracked in refused_pods:
            self.cluster.wait_for_pod_gone(tracked.name, tracked.namespace, timeout=STUCK_S)

    def stuck(self, step: int, tracked: Tracked, pod: Obj) -> str:
        where = f"seed {self.seed} step {step}: {tracked.namespace}/{tracked.name}"
        annotations = pod["metadata"].get("annotations") or {}
        status = pod.get("status", {})
        claim = (
            claim_of(self.cluster, pod)
            if status.get("resourceClaimStatuses") or status.get("extendedResourceClaimStatus")
            else None
        )
        allocation = (claim or {}).get("status", {}).get("allocation")
        if not allocation:
            return f"{where} neither scheduled nor refused after {STUCK_S:.0f}s"
        results = [r["device"] for r in allocation["devices"]["results"]]
        return (
            f"{where} stuck at prepare for over {STUCK_S:.0f}s with {results} allocated on "
            f"{tracked.node.name} (held: {sorted(held_here(tracked.node))}): "
            f"{annotations.get(KUBELETSIDE_ERROR_ANNOTATION, 'no prepare error recorded')}"
        )

    def check_containers(self, step: int) -> None:
        """No physical core in two running containers (admin access shares on purpose);
        each container's device nodes are exactly its cores' devices."""
        seen: dict[tuple[str, int], str] = {}
        pods = {
            (p["metadata"]["namespace"], p["metadata"]["name"]): p
            for namespace in ("default", ADMIN_NAMESPACE)
            for p in self.cluster.list_objects("v1", "Pod", namespace)
        }
        for tracked in self.running.values():
            pod = pods.get((tracked.namespace, tracked.name))
            assert pod is not None, f"seed {self.seed} step {step}: {tracked.name} vanished"
            view = container_view(pod, "ctr0")
            env = dict(e.split("=", 1) for e in view["env"])
            cores = set(parse_cores(env["NEURON_RT_VISIBLE_CORES"]))
            devices = sorted({c // PER_DEVICE for c in cores})
            assert view["deviceNodes"] == [f"/dev/neuron{d}" for d in devices], (
                self.seed,
                step,
                tracked.name,
                view,
            )
            if tracked.admin:
                continue
            for core in cores:
                key = (tracked.node.name, core)
                assert key not in seen, (
                    f"seed {self.seed} step {step}: core {core} of {tracked.node.name} in "
                    f"{seen[key]} and {tracked.name}"
                )
                seen[key] = tracked.name

    def check_pool(self, node: SimulatedNode, step: int) -> None:
        """Always: every published device draws on its counters. Once the plugin has caught
        up (it is up and its republish delay passed): the pool follows the checkpoint."""
        if node.name not in self.up_since:
            return
        where = f"seed {self.seed} step {step}: {node.name}"

        def follows() -> bool:
            problems = pool_problems(node)
            assert not problems, f"{where}: {problems}"
            return checkpoint_mismatch(node) is None

        try:
            self.cluster.wait_for(
                f"{where}'s pool following its checkpoint", follows, timeout=STUCK_S
            )
        except ClusterError as exc:
            raise AssertionError(f"{where}: {checkpoint_mismatch(node)}") from exc


def whole_devices(cluster: Cluster, pod: Obj) -> tuple[str, ...]:
    """The whole devices (node device too) the pod's claim was allocated, unless admin."""
    claim = claim_of(cluster, pod)
    results = claim["status"]["allocation"]["devices"]["results"]
    return tuple(
        r["device"]
        for r in results
        if not r.get("adminAccess") and not r["device"].startswith(CORE_NAME_PREFIX)
    )
