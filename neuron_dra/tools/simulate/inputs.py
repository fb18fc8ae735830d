"""What is asked for: claims, templates, workloads and DeviceClasses, read from manifests.

ResourceClaimTemplates and ResourceClaims in the resource.k8s.io v1, v1beta1
and v1beta2 spellings, and the workloads that use them (Pods, Deployments and
other pod-template controllers, LeaderWorkerSets), become `Claim`s in the
order the documents give them, with the pods whose claims share a node. Pods
that ask an extended resource a DeviceClass serves (`extendedResourceName`)
get the claim the kube-scheduler makes for them (`extended`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_dra.tools import apischema, manifests
from neuron_dra.tools.simulate.claims import (
    RESOURCE_GROUP,
    Claim,
    DeviceClass,
    InputError,
    Json,
    parse_claim_spec,
    parse_device_class,
)
from neuron_dra.tools.simulate.extended import extended_claim, extended_resource_classes
from neuron_dra.tools.simulate.podgroups import Member, PodGroup, parse_pod_group, pod_group_of

WORKLOAD_KINDS = manifests.WORKLOAD_KINDS


@dataclass
class Inputs:
    claims: list[Claim] = field(default_factory=list)
    classes: dict[str, DeviceClass] = field(default_factory=dict)  # declared in the inputs
    # Claims referenced by name that were not among the inputs: nothing to allocate.
    missing: list[str] = field(default_factory=list)
    pod_groups: dict[str, PodGroup] = field(default_factory=dict)  # by namespace/name
    members: dict[str, list[Member]] = field(default_factory=dict)  # each group's pods


def load_documents(paths: Iterable[Path]) -> list[tuple[str, Json]]:
    """(file:line, object) for every object the files give the simulator, in order.

    Anything in them the simulator cannot read (`manifests`) is an InputError naming
    each problem's file and line: nothing is left out of a simulation in silence.
    """
    documents, problems = manifests.read_all(paths)
    if problems:
        raise InputError("\n".join(map(str, problems)))
    return [(d.where, d.body) for d in documents]


def read_inputs(
    docs: Sequence[tuple[str, Json]], known_classes: Mapping[str, DeviceClass] | None = None
) -> Inputs:
    """Claims to allocate, in the order the documents give them.

    `known_classes` are the cluster's DeviceClasses: with those among the inputs they
    decide which extended resources of pods the scheduler turns into a claim.
    """
    inputs = Inputs()
    templates: dict[tuple[str, str], tuple[str, Json]] = {}
    named_claims: dict[tuple[str, str], tuple[str, Json]] = {}
    for where, doc in docs:
        kind = doc.get("kind")
        for problem in apischema.problems(doc):
            # What the API server would refuse never reaches the scheduler.
            name = (doc.get("metadata") or {}).get("name") or "?"
            raise InputError(f"{where}: {kind} {name}: {problem}")
        if _is_resource(doc) and kind == "DeviceClass":
            device_class = parse_device_class(doc)
            inputs.classes[device_class.name] = device_class
        elif _is_resource(doc) and kind == "ResourceClaimTemplate":
            templates[(namespace_of(doc), doc["metadata"]["name"])] = (where, doc)
        elif _is_resource(doc) and kind == "ResourceClaim":
            named_claims[(namespace_of(doc), doc["metadata"]["name"])] = (where, doc)
        elif kind == manifests.POD_GROUP_KIND:
            group = parse_pod_group(doc, where)
            inputs.pod_groups[group.key] = group
    extended = extended_resource_classes({**(known_classes or {}), **inputs.classes})

    referenced = set()
    for _, doc in docs:
        for pod in _pods(doc):
            for entry in pod["spec"].get("resourceClaims") or []:
                namespace = pod["metadata"]["namespace"]
                if entry.get("resourceClaimTemplateName"):
                    referenced.add(("t", namespace, entry["resourceClaimTemplateName"]))
                if entry.get("resourceClaimName"):
                    referenced.add(("c", namespace, entry["resourceClaimName"]))

    for where, doc in docs:
        kind = doc.get("kind")
        if _is_resource(doc) and kind == "ResourceClaimTemplate":
            namespace, name = namespace_of(doc), doc["metadata"]["name"]
            if ("t", namespace, name) not in referenced:
                # A template no workload uses stands for one claim made from it.
                spec = parse_claim_spec(_template_spec(doc), f"{where}: {kind} {name}")
                inputs.claims.append(Claim(namespace, name, spec, where, template=name))
        elif _is_resource(doc) and kind == "ResourceClaim":
            namespace, name = namespace_of(doc), doc["metadata"]["name"]
            if ("c", namespace, name) not in referenced:
                spec = parse_claim_spec(doc.get("spec") or {}, f"{where}: {kind} {name}")
                inputs.claims.append(Claim(namespace, name, spec, where))
        for pod in _pods(doc):
            first = len(inputs.claims)
            _pod_claims(pod, where, templates, named_claims, inputs)
            claim = extended_claim(pod, where, extended)
            if claim is not None:
                inputs.claims.append(claim)
            _join_group(pod, where, first, inputs)
    return inputs


def _join_group(pod: Json, where: str, first: int, inputs: Inputs) -> None:
    """The pod's claims from `first` on carry the PodGroup it joins, which counts it."""
    group = pod_group_of(pod)
    if group is None:
        return
    if group not in inputs.pod_groups:
        raise InputError(
            f"{where}: pod {pod['metadata']['name']} joins PodGroup {group}, which is not "
            "among the inputs (the scheduler keeps its pods waiting for it)"
        )
    selector = tuple(sorted((pod["spec"].get("nodeSelector") or {}).items()))
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    inputs.members.setdefault(group, []).append(Member(key, selector))
    for index in range(first, len(inputs.claims)):
        inputs.claims[index] = dataclasses.replace(inputs.claims[index], pod_group=group)


def _pod_claims(
    pod: Json,
    where: str,
    templates: Mapping[tuple[str, str], tuple[str, Json]],
    named_claims: Mapping[tuple[str, str], tuple[str, Json]],
    inputs: Inputs,
) -> None:
    namespace, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    selector = tuple(sorted((pod["spec"].get("nodeSelector") or {}).items()))
    for entry in pod["spec"].get("resourceClaims") or []:
        template_name = entry.get("resourceClaimTemplateName")
        claim_name = entry.get("resourceClaimName")
        if template_name:
            found = templates.get((namespace, template_name))
            if found is None:
                raise InputError(
                    f"{where}: pod {pod_name} references ResourceClaimTemplate "
                    f"{namespace}/{template_name}, which is not among the inputs"
                )
            source, template = found
            spec = parse_claim_spec(_template_spec(template), f"{source}: {template_name}")
            inputs.claims.append(
                Claim(
                    namespace,
                    f"{pod_name}-{entry['name']}",
                    spec,
                    source,
                    template=template_name,
                    pod=f"{namespace}/{pod_name}",
                    node_selector=selector,
                )
            )
        elif claim_name:
            key = (namespace, claim_name)
            if key not in named_claims:
                inputs.missing.append(f"{namespace}/{claim_name}")
                continue
            if any(c.namespace == namespace and c.name == claim_name for c in inputs.claims):
                continue  # a claim shared by pods is allocated once, for its first pod
            source, obj = named_claims[key]
            spec = parse_claim_spec(obj.get("spec") or {}, f"{source}: {claim_name}")
            inputs.claims.append(
                Claim(
                    namespace,
                    claim_name,
                    spec,
                    source,
                    pod=f"{namespace}/{pod_name}",
                    node_selector=selector,
                )
            )


def namespace_of(doc: Mapping[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("namespace") or "default")


def _is_resource(doc: Mapping[str, Any]) -> bool:
    return str(doc.get("apiVersion", "")).startswith(RESOURCE_GROUP + "/")


def _template_spec(template: Mapping[str, Any]) -> Json:
    return dict(((template.get("spec") or {}).get("spec")) or {})


def pod_specs(doc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(where in the document, pod spec) of a Pod or of a workload's pod templates."""
    kind = doc.get("kind")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if kind == "Pod":
        return [("", spec)]
    templates: list[tuple[str, object]] = []
    if kind in WORKLOAD_KINDS:
        templates.append(("spec.template", spec.get("template")))
    elif kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        templates.append(("spec.jobTemplate.spec.template", job.get("template")))
    elif kind == "LeaderWorkerSet":
        lws = spec.get("leaderWorkerTemplate") or {}
        for part in ("leaderTemplate", "workerTemplate"):
            templates.append((f"spec.leaderWorkerTemplate.{part}", lws.get(part)))
    found = []
    for where, template in templates:
        pod_spec = template.get("spec") if isinstance(template, Mapping) else None
        if isinstance(pod_spec, Mapping):
            found.append((where, pod_spec))
    return found


def _pods(doc: Json) -> Iterator[Json]:
    """The pods a workload document stands for, named as their controllers name them."""
    kind = doc.get("kind")
    metadata = doc.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name") or kind)
    spec = doc.get("spec") or {}
    if kind == "Pod" and doc.get("apiVersion") != "v1":
        return
    if kind == "LeaderWorkerSet":
        template = spec.get("leaderWorkerTemplate") or {}
        size = int(template.get("size", 1))
        worker = (template.get("workerTemplate") or {}).get("spec") or {}
        leader = (template.get("leaderTemplate") or {}).get("spec") or worker
        for group in range(int(spec.get("replicas", 1))):
            yield _pod(f"{name}-{group}", namespace, leader)
            for member in range(1, size):
                yield _pod(f"{name}-{group}-{member}", namespace, worker)
        return
    for _, pod_spec in pod_specs(doc):
        if kind == "Pod":
            yield _pod(name, namespace, dict(pod_spec))
            continue
        # DaemonSets have one pod per node; one stands for them here, as one run of a CronJob
        # stands for its schedule.
        if kind == "CronJob":
            replicas = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("parallelism", 1)
        elif kind == "Job":
            replicas = spec.get("parallelism", 1)
        else:
            replicas = spec.get("replicas", 1)
        for i in range(int(replicas)):
            suffix = str(i) if kind == "StatefulSet" else f"{i:05d}"
            yield _pod(f"{name}-{suffix}", namespace, dict(pod_spec))


def _pod(name: str, namespace: str, spec: Json) -> Json:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
