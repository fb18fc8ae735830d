"""Node objects of simulated nodes: created, and reported Ready as a kubelet would,
through the cluster's API (no kubelet behind them)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import cast

from neuron_dra_harness.cluster_api import ClusterApi, Obj

# Set by the TaintNodesByCondition admission plugin on every new Node; the
# node lifecycle controller would lift it once the node reports Ready.
_NOT_READY_TAINT = "node.kubernetes.io/not-ready"
JSON_PATCH = "application/json-patch+json"


class NodeObjects(ClusterApi):
    """The Node half of a cluster's API: what a kubelet would write of its Node."""

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
    ) -> Obj:
        """Create a Ready, schedulable Node object (no kubelet behind it)."""
        all_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        }
        self.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels}}
        )
        resources = {"cpu": "16", "memory": "64Gi", "pods": "110", **(allocatable or {})}
        return self.mark_ready(name, resources)

    def mark_ready(self, name: str, resources: Mapping[str, str] | None = None) -> Obj:
        """Report an existing Node Ready, as its kubelet would (with `resources` as its
        capacity and allocatable; None keeps what it has), and lift the not-ready taint."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status: Obj = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated node",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": self.version(),
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "kubeletside://0",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "kubeProxyVersion": "",
            },
        }
        if resources is not None:
            status |= {"capacity": dict(resources), "allocatable": dict(resources)}
        self.patch("v1", "Node", name, {"status": status}, subresource="status")
        return self.wait_for(f"{name} without {_NOT_READY_TAINT}", lambda: self._lift(name))

    def _lift(self, name: str) -> Obj:
        """The Node without the not-ready taint: removed by a JSON patch that fails (and is
        retried) if its taints changed meanwhile, so a taint another writer removed
        concurrently (Karpenter's, say) is never written back."""
        node = self.get("v1", "Node", name)
        for i, taint in enumerate(node.get("spec", {}).get("taints") or []):
            if taint.get("key") == _NOT_READY_TAINT:
                ops = [
                    {"op": "test", "path": f"/spec/taints/{i}", "value": taint},
                    {"op": "remove", "path": f"/spec/taints/{i}"},
                ]
                path = self.path("v1", "Node", name)
                patched = self.request("PATCH", path, ops, content_type=JSON_PATCH)
                return cast(Obj, patched)
        return node

    def version(self) -> str:
        return str(cast(Obj, self.request("GET", "/version"))["gitVersion"])
