"""PodGroups: pods the scheduler places together, all or nothing (gangs).

A pod joins a PodGroup with `spec.schedulingGroup.podGroupName` (Kubernetes 1.37,
scheduling.k8s.io v1beta1 or v1alpha3, with the GenericWorkload feature). With a
`gang` policy the scheduler's GangScheduling plugin binds none of the group's pods
until `minCount` of them fit at once; with `schedulingConstraints.topology`
(TopologyAwareWorkloadScheduling) they must also share the value of each label key
on their nodes. A `basic` policy places each pod on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuron_dra.tools.simulate.claims import InputError, Json


@dataclass(frozen=True)
class PodGroup:
    namespace: str
    name: str
    source: str  # file:line
    min_count: int | None  # None: a basic policy, no gang
    topology: tuple[str, ...] = ()  # node label keys every member's node shares

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Member:
    """A pod of a group: whether it fits anywhere needs only its nodeSelector, when it
    has no claim to allocate."""

    pod: str  # namespace/name
    node_selector: tuple[tuple[str, str], ...]


def parse_pod_group(doc: Mapping[str, Any], where: str) -> PodGroup:
    metadata = doc.get("metadata") or {}
    name = str(metadata.get("name") or "")
    at = f"{where}: PodGroup {name or '?'}"
    if not name:
        raise InputError(f"{at}: metadata.name is missing")
    spec = doc.get("spec") or {}
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang")
    if ("gang" in policy) == ("basic" in policy):
        raise InputError(f"{at}: spec.schedulingPolicy needs exactly one of basic and gang")
    min_count = None
    if gang is not None:
        min_count = (gang or {}).get("minCount")
        if not isinstance(min_count, int) or isinstance(min_count, bool) or min_count < 1:
            raise InputError(
                f"{at}: spec.schedulingPolicy.gang.minCount must be a positive integer"
            )
    keys = []
    for index, entry in enumerate((spec.get("schedulingConstraints") or {}).get("topology") or []):
        key = entry.get("key") if isinstance(entry, Mapping) else None
        if not isinstance(key, str) or not key:
            raise InputError(f"{at}: spec.schedulingConstraints.topology[{index}] has no key")
        keys.append(key)
    namespace = str(metadata.get("namespace") or "default")
    return PodGroup(namespace, name, where, min_count, tuple(keys))


def pod_group_of(pod: Json) -> str | None:
    """`namespace/name` of the PodGroup a pod joins, if any."""
    group = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
    return f"{pod['metadata']['namespace']}/{group}" if group else None
