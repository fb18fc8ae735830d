"""Claims and the pods that use them, for tests that drive the real scheduler."""

from __future__ import annotations

import itertools
from typing import Any

from neuron_dra_harness.cluster import Cluster

Obj = dict[str, Any]
_names = (f"w{i}" for i in itertools.count())


def claim_spec(count: int | None, *, group: int | None = None, cel: str | None = None) -> Obj:
    """One request: `count` devices (None: All), a CEL selector, a devicegroup constraint."""
    exactly: Obj = {"deviceClassName": "neuron.aws.com"}
    exactly |= {"allocationMode": "All"} if count is None else {"count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    spec: Obj = {"devices": {"requests": [{"name": "neurons", "exactly": exactly}]}}
    if group:
        spec["devices"]["constraints"] = [
            {"requests": ["neurons"], "matchAttribute": f"resource.aws.com/devicegroup{group}_id"}
        ]
    return spec


def submit(cluster: Cluster, spec: Obj, node: str | None = None, *, template: bool = False) -> str:
    """A pod using a claim with `spec` (pinned to `node`); returns the pod's name.

    By default the claim is created by name and the pod's reference is named like it:
    the 1.34 kubelet looks device health up by comparing the container's claim
    reference with the ResourceClaim's name. With `template`, the claim comes from a
    ResourceClaimTemplate as most workloads write it, which the 1.35 kubelet needs
    for device health (it finds the claim through the pod's resourceClaimStatuses).
    """
    name = next(_names)
    metadata = {"name": name, "namespace": "default"}
    kind = "ResourceClaimTemplate" if template else "ResourceClaim"
    body = {"spec": spec} if template else spec
    cluster.create(
        {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": metadata, "spec": body}
    )
    source = "resourceClaimTemplateName" if template else "resourceClaimName"
    pod_spec: Obj = {
        "automountServiceAccountToken": False,
        "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": name}]}}],
        "resourceClaims": [{"name": name, source: name}],
    }
    if node:
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec})
    return name


def unschedulable_reason(cluster: Cluster, pod: str, namespace: str = "default") -> str:
    """The scheduler's message for not placing `pod` (waits until it gives one)."""

    def refused(p: Obj) -> bool:
        conditions = p.get("status", {}).get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

    found = cluster.wait_for_pod(pod, namespace, predicate=refused, what="unschedulable")
    [condition] = [c for c in found["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert condition["reason"] == "Unschedulable", condition
    assert not found["spec"].get("nodeName")
    return str(condition["message"])
