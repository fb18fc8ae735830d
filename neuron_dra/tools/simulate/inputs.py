"""What is asked for: claims, templates, workloads and DeviceClasses, read from manifests.

ResourceClaimTemplates and ResourceClaims in the resource.k8s.io v1, v1beta1
and v1beta2 spellings, and the workloads that use them (Pods, Deployments and
other pod-template controllers, LeaderWorkerSets), become `Claim`s in the
order the documents give them, with the pods whose claims share a node.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from consts import DRIVER_NAME

Json = dict[str, Any]

RESOURCE_GROUP = "resource.k8s.io"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "Job", "DaemonSet")


class InputError(ValueError):
    """The manifests or the cluster description cannot be simulated; the message says why."""


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    config: tuple[Json, ...] = ()


@dataclass(frozen=True)
class Alternative:
    """One way to satisfy a request: `exactly`, or one `firstAvailable` subrequest."""

    name: str  # the request name, or "request/subrequest"
    device_class: str
    selectors: tuple[str, ...]
    all: bool
    count: int
    tolerations: tuple[Json, ...] = ()


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Alternative, ...]


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request of the claim
    attribute: str  # fully qualified, domain/name

    def applies(self, request: str) -> bool:
        if not self.requests:
            return True
        parent = request.split("/", 1)[0]
        return parent in self.requests or request in self.requests


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[Json, ...]


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    spec: ClaimSpec
    source: str  # file the claim (or its template) came from
    template: str | None = None
    pod: str | None = None  # claims of one pod share its node
    node_selector: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_claim_spec(spec: Mapping[str, Any], where: str) -> ClaimSpec:
    """A ResourceClaim `spec` in any resource.k8s.io version -> ClaimSpec."""
    devices = spec.get("devices") or {}
    requests = []
    for index, entry in enumerate(devices.get("requests") or []):
        name = str(entry.get("name") or "")
        if not name:
            raise InputError(f"{where}: requests[{index}] has no name")
        if "firstAvailable" in entry:
            subs = entry.get("firstAvailable") or []
            if not subs:
                raise InputError(f"{where}: request {name!r}: firstAvailable is empty")
            alternatives = tuple(
                _alternative(f"{name}/{sub.get('name', i)}", sub, where)
                for i, sub in enumerate(subs)
            )
        else:
            # v1 and v1beta2 nest the fields under `exactly`; v1beta1 has them at the top.
            body = entry.get("exactly") if "exactly" in entry else entry
            alternatives = (_alternative(name, body or {}, where),)
        requests.append(Request(name, alternatives))
    names = {r.name for r in requests} | {a.name for r in requests for a in r.alternatives}
    constraints = []
    for entry in devices.get("constraints") or []:
        attribute = entry.get("matchAttribute")
        if not attribute:
            continue  # distinctAttribute and future kinds are not published by this driver
        for request in entry.get("requests") or []:
            if request not in names:
                raise InputError(f"{where}: constraint names unknown request {request!r}")
        qualified = attribute if "/" in attribute else f"{DRIVER_NAME}/{attribute}"
        constraints.append(Constraint(tuple(entry.get("requests") or ()), qualified))
    return ClaimSpec(tuple(requests), tuple(constraints), tuple(devices.get("config") or ()))


def _alternative(name: str, body: Mapping[str, Any], where: str) -> Alternative:
    mode = body.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise InputError(f"{where}: request {name!r}: unknown allocationMode {mode!r}")
    count = body.get("count", 1) if mode == "ExactCount" else 0
    if (
        not isinstance(count, int)
        or isinstance(count, bool)
        or (mode == "ExactCount" and count < 1)
    ):
        raise InputError(f"{where}: request {name!r}: count must be a positive integer")
    device_class = body.get("deviceClassName")
    if not device_class:
        raise InputError(f"{where}: request {name!r} names no deviceClassName")
    selectors = tuple(
        str((s.get("cel") or {}).get("expression", "")) for s in body.get("selectors") or []
    )
    return Alternative(
        name=name,
        device_class=str(device_class),
        selectors=selectors,
        all=mode == "All",
        count=count,
        tolerations=tuple(body.get("tolerations") or ()),
    )


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    spec = obj.get("spec") or {}
    selectors = tuple(
        str((s.get("cel") or {}).get("expression", "")) for s in spec.get("selectors") or []
    )
    return DeviceClass(str(obj["metadata"]["name"]), selectors, tuple(spec.get("config") or ()))


@dataclass
class Inputs:
    claims: list[Claim] = field(default_factory=list)
    classes: dict[str, DeviceClass] = field(default_factory=dict)  # declared in the inputs
    # Claims referenced by name that were not among the inputs: nothing to allocate.
    missing: list[str] = field(default_factory=list)


def load_documents(paths: Iterable[Path]) -> list[tuple[str, Json]]:
    """(file, document) for every non-empty YAML document, in order."""
    docs: list[tuple[str, Json]] = []
    for path in paths:
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except (OSError, yaml.YAMLError) as err:
            raise InputError(f"{path}: {err}") from None
        for doc in loaded:
            if isinstance(doc, dict) and doc.get("kind"):
                if doc.get("kind") == "List":
                    docs.extend((str(path), item) for item in doc.get("items") or [])
                else:
                    docs.append((str(path), doc))
    return docs


def read_inputs(docs: Sequence[tuple[str, Json]]) -> Inputs:
    """Claims to allocate, in the order the documents give them."""
    inputs = Inputs()
    templates: dict[tuple[str, str], tuple[str, Json]] = {}
    named_claims: dict[tuple[str, str], tuple[str, Json]] = {}
    for where, doc in docs:
        kind = doc.get("kind")
        if _is_resource(doc) and kind == "DeviceClass":
            device_class = parse_device_class(doc)
            inputs.classes[device_class.name] = device_class
        elif _is_resource(doc) and kind == "ResourceClaimTemplate":
            templates[(namespace_of(doc), doc["metadata"]["name"])] = (where, doc)
        elif _is_resource(doc) and kind == "ResourceClaim":
            named_claims[(namespace_of(doc), doc["metadata"]["name"])] = (where, doc)

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
            _pod_claims(pod, where, templates, named_claims, inputs)
    return inputs


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


def default_classes() -> list[DeviceClass]:
    """The DeviceClass the driver installs (`deploy/deviceclass.yaml`; a test keeps them equal)."""
    return [DeviceClass(DRIVER_NAME, (f"device.driver == '{DRIVER_NAME}'",))]


def namespace_of(doc: Mapping[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("namespace") or "default")


def _is_resource(doc: Mapping[str, Any]) -> bool:
    return str(doc.get("apiVersion", "")).startswith(RESOURCE_GROUP + "/")


def _template_spec(template: Mapping[str, Any]) -> Json:
    return dict(((template.get("spec") or {}).get("spec")) or {})


def _pods(doc: Json) -> Iterator[Json]:
    """The pods a workload document stands for, named as their controllers name them."""
    kind = doc.get("kind")
    metadata = doc.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name") or kind)
    spec = doc.get("spec") or {}
    if kind == "Pod" and doc.get("apiVersion") == "v1":
        yield _pod(name, namespace, spec)
    elif kind in WORKLOAD_KINDS and spec.get("template"):
        # DaemonSets have one pod per node; one stands for them here.
        replicas = spec.get("parallelism", 1) if kind == "Job" else spec.get("replicas", 1)
        for i in range(int(replicas)):
            suffix = str(i) if kind == "StatefulSet" else f"{i:05d}"
            yield _pod(f"{name}-{suffix}", namespace, spec["template"].get("spec") or {})
    elif kind == "LeaderWorkerSet":
        template = spec.get("leaderWorkerTemplate") or {}
        size = int(template.get("size", 1))
        worker = (template.get("workerTemplate") or {}).get("spec") or {}
        leader = (template.get("leaderTemplate") or {}).get("spec") or worker
        for group in range(int(spec.get("replicas", 1))):
            yield _pod(f"{name}-{group}", namespace, leader)
            for member in range(1, size):
                yield _pod(f"{name}-{group}-{member}", namespace, worker)


def _pod(name: str, namespace: str, spec: Json) -> Json:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
