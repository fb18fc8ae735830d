"""What is asked for: claims, templates, workloads and DeviceClasses, read from manifests.

ResourceClaimTemplates and ResourceClaims in the resource.k8s.io v1, v1beta1
and v1beta2 spellings, and the workloads that use them (Pods, Deployments and
other pod-template controllers, LeaderWorkerSets), become `Claim`s in the
order the documents give them, with the pods whose claims share a node. Pods
that ask an extended resource a DeviceClass serves (`extendedResourceName`)
get the claim the kube-scheduler makes for them.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consts import ATTR_RESOURCE_TYPE, DRIVER_NAME, RESOURCE_TYPE_CORE, RESOURCE_TYPE_DEVICE
from neuron_dra.tools import apischema, manifests

Json = dict[str, Any]

RESOURCE_GROUP = manifests.RESOURCE_GROUP
WORKLOAD_KINDS = manifests.WORKLOAD_KINDS
# Every DeviceClass also serves this name plus its own name, whatever extendedResourceName says.
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
# The Neuron device plugin's name of logical NeuronCores, served by a DeviceClass of cores.
CORE_RESOURCE = "aws.amazon.com/neuroncore"
CORE_CLASS = f"neuroncore.{DRIVER_NAME}"
# resource.k8s.io AllocationResultsMaxSize: the devices one claim's allocation holds at most.
MAX_CLAIM_DEVICES = 32


class InputError(ValueError):
    """The manifests or the cluster description cannot be simulated; the message says why."""


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    config: tuple[Json, ...] = ()
    extended_resource: str | None = None  # spec.extendedResourceName


@dataclass(frozen=True)
class Alternative:
    """One way to satisfy a request: `exactly`, or one `firstAvailable` subrequest."""

    name: str  # the request name, or "request/subrequest"
    device_class: str
    selectors: tuple[str, ...]
    all: bool
    count: int
    tolerations: tuple[Json, ...] = ()
    # adminAccess: the device may be in use by other claims, and this one does not hold it.
    admin: bool = False


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
    # The claim the scheduler makes for a pod's extended resources: (name, devices) each.
    extended: tuple[tuple[str, int], ...] = ()

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
    admin = body.get("adminAccess", False)
    if not isinstance(admin, bool):
        raise InputError(f"{where}: request {name!r}: adminAccess must be true or false")
    return Alternative(
        name=name,
        device_class=str(device_class),
        selectors=selectors,
        all=mode == "All",
        count=count,
        tolerations=tuple(body.get("tolerations") or ()),
        admin=admin,
    )


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    spec = obj.get("spec") or {}
    selectors = tuple(
        str((s.get("cel") or {}).get("expression", "")) for s in spec.get("selectors") or []
    )
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        str(obj["metadata"]["name"]),
        selectors,
        tuple(spec.get("config") or ()),
        str(extended) if extended else None,
    )


@dataclass
class Inputs:
    claims: list[Claim] = field(default_factory=list)
    classes: dict[str, DeviceClass] = field(default_factory=dict)  # declared in the inputs
    # Claims referenced by name that were not among the inputs: nothing to allocate.
    missing: list[str] = field(default_factory=list)


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
            _pod_claims(pod, where, templates, named_claims, inputs)
            claim = _extended_claim(pod, where, extended)
            if claim is not None:
                inputs.claims.append(claim)
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


def _extended_claim(pod: Json, where: str, classes: Mapping[str, str]) -> Claim | None:
    """The claim the scheduler makes for the extended resources DeviceClasses serve.

    As the kube-scheduler's DRAExtendedResource support builds it: one ExactCount
    request per container and resource, named container-<index>-request-<index of
    the resource among the container's sorted requests>, sorted by name. Init
    containers that are not sidecars run before the others and reuse their
    devices: only the largest of their shortfalls is asked on top.
    """
    spec = pod["spec"]
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    containers = [*inits, *(c for c in spec.get("containers") or [] if isinstance(c, Mapping))]
    at = f"{where}: pod {pod['metadata']['name']}"
    requested = [_requests(c, classes, at) for c in containers]
    short = [i for i in range(len(inits)) if containers[i].get("restartPolicy") != "Always"]
    made: list[tuple[str, Request]] = []
    for resource in sorted({n for r in requested for n, amount in r.items() if amount}):
        if resource not in classes:
            continue
        long_lived = {
            i: _request(requested[i], i, 0, resource, classes)
            for i in range(len(containers))
            if i not in short
        }
        made.extend((resource, r) for r in long_lived.values() if r is not None)
        widest: Request | None = None
        for i in short:
            # An init container reuses the requests of the long-lived containers after it,
            # in their order, until they cover its own amount; it asks only the rest.
            have = 0
            for j, later in long_lived.items():
                if j > i and later is not None and have < requested[i].get(resource, 0):
                    have += later.alternatives[0].count
            own = _request(requested[i], i, have, resource, classes)
            if own is not None and (widest is None or _count(own) > _count(widest)):
                widest = own
        if widest is not None:
            made.append((resource, widest))
    if not made:
        return None
    made.sort(key=lambda pair: pair[1].name)
    totals: dict[str, int] = {}
    for resource, r in made:
        totals[resource] = totals.get(resource, 0) + _count(r)
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    return Claim(
        namespace,
        f"{name}-extended-resources",
        ClaimSpec(tuple(r for _, r in made), (), ()),
        where,
        pod=f"{namespace}/{name}",
        node_selector=tuple(sorted((spec.get("nodeSelector") or {}).items())),
        extended=tuple(sorted(totals.items())),
    )


def _request(
    requested: Mapping[str, int], index: int, have: int, resource: str, classes: Mapping[str, str]
) -> Request | None:
    """Container `index`'s request for what it asks of `resource` beyond `have`, if any."""
    amount = requested.get(resource, 0)
    if amount <= have:
        return None
    name = f"container-{index}-request-{sorted(requested).index(resource)}"
    return Request(name, (Alternative(name, classes[resource], (), False, amount - have),))


def _count(request: Request) -> int:
    return request.alternatives[0].count


def _requests(container: Mapping[str, Any], served: Container[str], where: str) -> dict[str, int]:
    """A container's resource requests as the API server defaults them: limits fill gaps.

    Every name is kept, since a request's name counts the container's sorted names;
    only the amounts of served extended resources matter, and those must be whole.
    """
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    out: dict[str, int] = {}
    for name, value in merged.items():
        amount = 0
        if name in served:
            try:
                amount = int(str(value))
            except ValueError:
                raise InputError(
                    f"{where}: container {container.get('name')}: {name}: {value!r} is not "
                    "a whole number of devices"
                ) from None
        out[str(name)] = amount
    return out


def extended_resource_classes(classes: Mapping[str, DeviceClass]) -> dict[str, str]:
    """Extended resource name -> the DeviceClass that serves it.

    When two classes name one resource the scheduler takes the newer; classes later in
    `classes` (those among the inputs come last) count as newer.
    """
    mapping = {f"{IMPLICIT_EXTENDED_PREFIX}{name}": name for name in classes}
    for device_class in classes.values():
        if device_class.extended_resource:
            mapping[device_class.extended_resource] = device_class.name
    return mapping


def default_classes() -> list[DeviceClass]:
    """The DeviceClasses the driver installs (`deploy/deviceclass.yaml`; a test keeps them equal).

    Built in, not read from deploy/: an installed `neuron-dra simulate` has no checkout.
    """
    driver = f"device.driver == '{DRIVER_NAME}'"
    kind = f"device.attributes['{DRIVER_NAME}'].{ATTR_RESOURCE_TYPE}"
    whole, core = f"{kind} == '{RESOURCE_TYPE_DEVICE}'", f"{kind} == '{RESOURCE_TYPE_CORE}'"
    return [
        DeviceClass(DRIVER_NAME, (driver, f"{kind} != '{RESOURCE_TYPE_CORE}'")),
        DeviceClass(CORE_CLASS, (driver, core)),
        *(
            DeviceClass(f"extended-resource-{name}.{DRIVER_NAME}", (driver, selector), (), resource)
            for name, selector, resource in (
                ("neuron", whole, "aws.amazon.com/neuron"),
                ("neurondevice", whole, "aws.amazon.com/neurondevice"),
                ("neuroncore", core, CORE_RESOURCE),
            )
        ),
    ]


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
