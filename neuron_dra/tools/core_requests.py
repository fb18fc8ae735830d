"""Device-plugin-style NeuronCore requests against what DRA nodes of a type serve.

A pod asking `aws.amazon.com/neuroncore: N` with no claim is served on DRA nodes by
the DeviceClass whose extendedResourceName that is: N logical NeuronCores (on trn2
and trn3 at LNC 2, one per two physical cores), in one claim of at most 32 devices.
Karpenter counts the name in physical NeuronCores, as the AWS provider gives each
type's capacity from EC2's NeuronInfo: it launches a type whose physical count fits
N, and if the type's logical count does not, the pod never runs on the node bought
for it. The instance types a pod allows are read as the chart's core-request policy
(deploy/helm/neuron-dra/templates/core-request-policy.yaml) reads them: its
nodeSelector and required node affinity on node.kubernetes.io/instance-type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from consts import LABEL_INSTANCE_TYPE
from neuron_dra.hardware.instance_types import DEFAULT_LNC, INSTANCE_TYPES
from neuron_dra.tools.simulate import CORE_RESOURCE, MAX_CLAIM_DEVICES


def served(lnc: int = DEFAULT_LNC) -> dict[str, int]:
    """NeuronCores one pod can get through the extended resource on a DRA node of each
    type whose trn2 and trn3 nodes run at `lnc`."""
    return {
        name: min(MAX_CLAIM_DEVICES, t.devices * t.cores_per_device // (lnc if t.has_lnc else 1))
        for name, t in INSTANCE_TYPES.items()
    }


def allowed_types(spec: Mapping[str, Any]) -> list[str]:
    """The known instance types a pod spec's node selection admits (all of them when it
    names none)."""
    selector = spec.get("nodeSelector")
    selected = selector.get(LABEL_INSTANCE_TYPE) if isinstance(selector, Mapping) else None
    terms = _terms(spec)
    return [
        name
        for name in sorted(INSTANCE_TYPES)
        if (selected is None or selected == name)
        and (not terms or any(_admits(term, name) for term in terms))
    ]


def asked(spec: Mapping[str, Any]) -> int:
    """NeuronCores the pod's claim asks: its containers' together, or one init
    container's, whichever is more."""

    def cores(field: str) -> list[int]:
        containers = spec.get(field)
        return (
            [_count(c) for c in containers if isinstance(c, Mapping)]
            if isinstance(containers, list)
            else []
        )

    return max([sum(cores("containers")), *cores("initContainers")])


def mismatch(spec: Mapping[str, Any], lnc: int = DEFAULT_LNC) -> str | None:
    """Why no type the pod allows serves its NeuronCores on a DRA node; None when one
    does, or when it asks none."""
    count = asked(spec)
    types = allowed_types(spec)
    if not count or not types:
        return None
    table = served(lnc)
    most = max(table[t] for t in types)
    if count <= most:
        return None
    named = ", ".join(types) if len(types) <= 3 else "any Neuron instance type"
    physical = max(INSTANCE_TYPES[t].devices * INSTANCE_TYPES[t].cores_per_device for t in types)
    bought = (
        f"Karpenter counts {CORE_RESOURCE} in physical NeuronCores ({physical} on "
        f"{'it' if len(types) == 1 else 'the largest'}) and would launch a node that never "
        "runs the pod"
        if count <= physical
        else "no node of these types ever runs it"
    )
    return (
        f"{CORE_RESOURCE}: {count} is more than DRA nodes of {named} serve (at most {most} "
        f"logical NeuronCores at LNC {lnc}, {MAX_CLAIM_DEVICES} a pod); {bought}; the chart's "
        "core-request policy refuses it at creation"
    )


def _count(container: Mapping[str, Any]) -> int:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return 0
    for field in ("limits", "requests"):  # limits win: requests default to them
        values = resources.get(field)
        if isinstance(values, Mapping) and CORE_RESOURCE in values:
            amount = str(values[CORE_RESOURCE])
            return int(amount) if amount.isdigit() else 0
    return 0


def _terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    node = (
        spec.get("affinity", {}).get("nodeAffinity", {})
        if isinstance(spec.get("affinity"), Mapping)
        else {}
    )
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node, Mapping)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return [t for t in terms if isinstance(t, Mapping)] if isinstance(terms, list) else []


def _admits(term: Mapping[str, Any], name: str) -> bool:
    for expression in term.get("matchExpressions") or []:
        if not isinstance(expression, Mapping) or expression.get("key") != LABEL_INSTANCE_TYPE:
            continue
        values = expression.get("values") or []
        if expression.get("operator") == "In" and name not in values:
            return False
        if expression.get("operator") == "NotIn" and name in values:
            return False
    return True
