"""Allocate ResourceClaims the way the kube-scheduler's DRA allocator would, offline.

Inputs are the manifests users apply: ResourceClaimTemplates and ResourceClaims
(resource.k8s.io v1, v1beta1 and v1beta2 spellings), workloads that reference
templates (Pods, Deployments and other pod-template controllers, and
LeaderWorkerSets), and DeviceClasses. The cluster is either simulated (nodes
built from fake sysfs trees through the driver's own discovery and slice
builder, so the attributes are exactly what the driver publishes) or read from
a live API server.

The allocation rules are those of the structured-parameters allocator for the
features this driver's slices use: DeviceClass and request CEL selectors,
ExactCount and All, firstAvailable subrequests, matchAttribute constraints,
devices already allocated, shared counters and device taints. All claims of a
pod land on one node. Like the scheduler, the search walks devices in slice
order and backtracks when a constraint fails; the first solution it finds in
that order is the one reported. Nodes are tried in name order and the first
that fits wins, where the scheduler would score the feasible nodes; which node
is picked may differ, what fits on a node does not.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from consts import (
    ATTR_DEVICE_ID,
    ATTR_INSTANCE_TYPE,
    ATTR_LOGICAL_NEURON_CORE,
    ATTR_NEURON_DRIVER_VERSION,
    ATTR_ULTRASERVER_MODES,
    ATTR_ULTRASERVER_NODE_ID_2,
    ATTR_ULTRASERVER_NODE_ID_4,
    ATTR_ULTRASERVER_SERVER_ID_2,
    ATTR_ULTRASERVER_SERVER_ID_4,
    CAPACITY_CORES,
    DRIVER_NAME,
)
from neuron_dra.cel import (
    CelCompileError,
    CelEvalError,
    DeviceView,
    Quantity,
    Selector,
    compile_selector,
)
from neuron_dra.claims import ClaimError, ClaimRef, plan
from neuron_dra.discovery import discover
from neuron_dra.fakenode import DEFAULT_DRIVER_VERSION, FakeUltraServer, build_fake_node
from neuron_dra.instance_types import INSTANCE_TYPES
from neuron_dra.inventory import NeuronDevice, NodeInventory, UltraServer
from neuron_dra.slices import SliceOptions, UltraServerDevices, build_slices

Json = dict[str, Any]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DEVICE_CLASS = REPO / "deploy" / "deviceclass.yaml"
RESOURCE_GROUP = "resource.k8s.io"
SEARCH_LIMIT = 1_000_000  # device placements tried per node before giving up, as a time bound
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "Job", "DaemonSet")
HOSTNAME_LABEL = "kubernetes.io/hostname"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


class InputError(ValueError):
    """The manifests or the cluster description cannot be simulated; the message says why."""


# --- What is asked for ---------------------------------------------------------------


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
            templates[(_namespace(doc), doc["metadata"]["name"])] = (where, doc)
        elif _is_resource(doc) and kind == "ResourceClaim":
            named_claims[(_namespace(doc), doc["metadata"]["name"])] = (where, doc)

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
            namespace, name = _namespace(doc), doc["metadata"]["name"]
            if ("t", namespace, name) not in referenced:
                # A template no workload uses stands for one claim made from it.
                spec = parse_claim_spec(_template_spec(doc), f"{where}: {kind} {name}")
                inputs.claims.append(Claim(namespace, name, spec, where, template=name))
        elif _is_resource(doc) and kind == "ResourceClaim":
            namespace, name = _namespace(doc), doc["metadata"]["name"]
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
    docs = yaml.safe_load_all(DEFAULT_DEVICE_CLASS.read_text())
    return [parse_device_class(d) for d in docs if d and d.get("kind") == "DeviceClass"]


def _is_resource(doc: Mapping[str, Any]) -> bool:
    return str(doc.get("apiVersion", "")).startswith(RESOURCE_GROUP + "/")


def _namespace(doc: Mapping[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("namespace") or "default")


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


# --- The cluster ----------------------------------------------------------------------

DeviceKey = tuple[str, str, str]  # driver, pool, device
CounterKey = tuple[str, str, str, str]  # driver, pool, counter set, counter


@dataclass(frozen=True)
class SimDevice:
    driver: str
    pool: str
    name: str
    view: DeviceView
    consumes: tuple[tuple[CounterKey, Fraction], ...]
    taints: tuple[Json, ...]

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)

    def attribute(self, qualified: str) -> Any:
        domain, _, name = qualified.partition("/")
        return self.view.attributes.get(domain, {}).get(name)


@dataclass
class SimNode:
    name: str
    labels: dict[str, str]
    devices: list[SimDevice]
    counters: dict[CounterKey, Fraction]
    inventory: NodeInventory | None = None

    @property
    def instance_type(self) -> str | None:
        if self.inventory is not None and self.inventory.instance_type:
            return self.inventory.instance_type
        return self.labels.get(INSTANCE_TYPE_LABEL)


def node_from_slices(
    name: str,
    slices: Sequence[Json],
    *,
    labels: Mapping[str, str] | None = None,
    inventory: NodeInventory | None = None,
) -> SimNode:
    """A node from its ResourceSlices; only each pool's newest generation counts."""
    newest: dict[tuple[str, str], int] = {}
    for obj in slices:
        spec = obj["spec"]
        pool = (spec["driver"], spec["pool"]["name"])
        newest[pool] = max(newest.get(pool, 0), int(spec["pool"].get("generation", 0)))
    devices: list[SimDevice] = []
    counters: dict[CounterKey, Fraction] = {}
    for obj in slices:
        spec = obj["spec"]
        driver, pool = spec["driver"], spec["pool"]["name"]
        if int(spec["pool"].get("generation", 0)) != newest[(driver, pool)]:
            continue
        for counter_set in spec.get("sharedCounters") or []:
            for counter, value in (counter_set.get("counters") or {}).items():
                key = (driver, pool, counter_set["name"], counter)
                counters[key] = Quantity.parse(str(value["value"])).value
        for device in spec.get("devices") or []:
            body = device.get("basic", device)  # v1beta1 slices nest fields under `basic`
            consumes = tuple(
                ((driver, pool, c["counterSet"], counter), Quantity.parse(str(v["value"])).value)
                for c in body.get("consumesCounters") or []
                for counter, v in (c.get("counters") or {}).items()
            )
            view = DeviceView.from_slice_device(driver, {"name": device["name"], **body})
            devices.append(
                SimDevice(
                    driver, pool, device["name"], view, consumes, tuple(body.get("taints") or ())
                )
            )
    if inventory is None:
        inventory = inventory_from_devices(devices)
    all_labels = {HOSTNAME_LABEL: name, **(labels or {})}
    if inventory is not None and inventory.instance_type:
        all_labels.setdefault(INSTANCE_TYPE_LABEL, inventory.instance_type)
    return SimNode(name, all_labels, devices, counters, inventory)


def inventory_from_devices(devices: Sequence[SimDevice]) -> NodeInventory | None:
    """The driver's view of a node, recovered from what it published (for live clusters)."""
    ours = [d for d in devices if d.driver == DRIVER_NAME]
    if not ours:
        return None
    attrs: dict[str, Any] = dict(ours[0].view.attributes.get(DRIVER_NAME, {}))
    neuron_devices = []
    for device in ours:
        own = device.view.attributes.get(DRIVER_NAME, {})
        if ATTR_DEVICE_ID not in own:
            continue
        cores = device.view.capacity.get(DRIVER_NAME, {}).get(CAPACITY_CORES)
        neuron_devices.append(
            NeuronDevice(int(own[ATTR_DEVICE_ID]), None if cores is None else int(cores.value), ())
        )
    ultraserver = None
    if ATTR_ULTRASERVER_SERVER_ID_4 in attrs:
        modes = str(attrs.get(ATTR_ULTRASERVER_MODES, ""))
        ultraserver = UltraServer(
            str(attrs[ATTR_ULTRASERVER_SERVER_ID_2]),
            str(attrs[ATTR_ULTRASERVER_SERVER_ID_4]),
            int(attrs[ATTR_ULTRASERVER_NODE_ID_2]),
            int(attrs[ATTR_ULTRASERVER_NODE_ID_4]),
            tuple(int(m) for m in modes.split("_") if m.isdigit()),
        )
    lnc = attrs.get(ATTR_LOGICAL_NEURON_CORE)
    return NodeInventory(
        instance_type=str(attrs[ATTR_INSTANCE_TYPE]) if ATTR_INSTANCE_TYPE in attrs else None,
        driver_version=str(attrs.get(ATTR_NEURON_DRIVER_VERSION) or "") or None,
        lnc=None if lnc is None else int(lnc),
        devices=tuple(sorted(neuron_devices, key=lambda d: d.index)),
        ultraserver=ultraserver,
    )


def simulated_nodes(
    counts: Sequence[tuple[str, int]],
    *,
    ultraserver_devices: UltraServerDevices = UltraServerDevices.BOTH,
    driver_version: str | None = None,
) -> list[SimNode]:
    """Nodes `<type>-<i>`; UltraServer nodes are grouped 4 to a server in creation order."""
    nodes = []
    with tempfile.TemporaryDirectory(prefix="neuron-dra-simulate-") as tmp:
        for instance_type, count in counts:
            if instance_type not in INSTANCE_TYPES:
                known = ", ".join(sorted(INSTANCE_TYPES))
                raise InputError(f"unknown instance type {instance_type!r}; known: {known}")
            spec = INSTANCE_TYPES[instance_type]
            for i in range(count):
                name = f"{instance_type}-{i}"
                unit = FakeUltraServer(f"us-{i // 4}", i % 4) if spec.ultraserver else None
                root = build_fake_node(
                    Path(tmp) / name,
                    instance_type,
                    ultraserver=unit,
                    driver_version=driver_version or DEFAULT_DRIVER_VERSION,
                )
                inventory = discover(root).inventory
                options = SliceOptions(name, ultraserver_devices=ultraserver_devices)
                slices = build_slices(inventory, options)
                nodes.append(node_from_slices(name, slices, inventory=inventory))
    return nodes


# --- Allocation -------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    request: str  # the request (or request/subrequest) the device was allocated for
    device: SimDevice


@dataclass(frozen=True)
class Prepared:
    env: tuple[tuple[str, str], ...]
    device_nodes: tuple[str, ...]


@dataclass
class Outcome:
    claim: Claim
    node: str | None = None
    placements: list[Placement] = field(default_factory=list)
    prepared: Prepared | None = None
    prepare_error: str | None = None
    reasons: list[str] = field(default_factory=list)  # why each node did not fit
    letter: str = ""  # short label for pictures

    @property
    def allocated(self) -> bool:
        return self.node is not None


class _NodeFailedError(Exception):
    """A node cannot take the claims, for a reason worth reporting as it stands."""


class _SearchLimitError(Exception):
    pass


class Cluster:
    """Nodes, device classes and what is already allocated; allocation mutates it."""

    def __init__(self, nodes: Sequence[SimNode], classes: Mapping[str, DeviceClass]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.classes = dict(classes)
        self.taken: dict[DeviceKey, str] = {}  # device -> who holds it
        self.used: dict[CounterKey, Fraction] = {}
        self._selectors: dict[str, Selector] = {}
        self._matches: dict[tuple[str, DeviceKey], bool | CelEvalError] = {}

    def node(self, name: str) -> SimNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise InputError(f"no node {name!r}; nodes: {', '.join(n.name for n in self.nodes)}")

    def take(self, node_name: str, device_name: str, holder: str) -> None:
        node = self.node(node_name)
        for device in node.devices:
            if device.name == device_name:
                self._take(device, holder)
                return
        raise InputError(f"node {node_name} has no device {device_name!r}")

    def take_key(self, key: DeviceKey, holder: str) -> None:
        for node in self.nodes:
            for device in node.devices:
                if device.key == key:
                    self._take(device, holder)
                    return

    def _take(self, device: SimDevice, holder: str) -> None:
        self.taken[device.key] = holder
        for counter, amount in device.consumes:
            self.used[counter] = self.used.get(counter, Fraction(0)) + amount

    # --- selectors -----------------------------------------------------------

    def selector(self, expression: str) -> Selector:
        compiled = self._selectors.get(expression)
        if compiled is None:
            compiled = compile_selector(expression)
            self._selectors[expression] = compiled
        return compiled

    def matches(self, expression: str, device: SimDevice) -> bool:
        """Whether the device passes; a CEL runtime error is raised as the scheduler does."""
        key = (expression, device.key)
        result = self._matches.get(key)
        if result is None:
            try:
                result = self.selector(expression).matches(device.view)
            except CelEvalError as err:
                result = err
            self._matches[key] = result
        if isinstance(result, CelEvalError):
            raise result
        return result

    def selected(self, alt: Alternative, node: SimNode) -> list[SimDevice]:
        """Devices of the node the class and request selectors accept, in slice order."""
        device_class = self.classes.get(alt.device_class)
        if device_class is None:
            raise _NodeFailedError(
                f"request {alt.name}: DeviceClass {alt.device_class} is not among the inputs "
                "nor the driver's"
            )
        expressions = [*device_class.selectors, *alt.selectors]
        out = []
        for device in node.devices:
            try:
                if all(self.matches(e, device) for e in expressions):
                    out.append(device)
            except CelEvalError as err:
                raise _NodeFailedError(
                    f"request {alt.name}: CEL runtime error on {device.name}: {err} "
                    "(the scheduler gives up on the node)"
                ) from None
            except CelCompileError as err:
                raise _NodeFailedError(
                    f"request {alt.name}: selector does not compile: {err}"
                ) from None
        return out

    def candidates(self, alt: Alternative, node: SimNode) -> list[SimDevice]:
        return [d for d in self.selected(alt, node) if tolerated(d.taints, alt.tolerations)]

    # --- allocation ----------------------------------------------------------

    def allocate(self, claims: Sequence[Claim]) -> list[Outcome]:
        """Allocate every claim in order; claims of one pod go to one node together."""
        outcomes = [Outcome(c) for c in claims]
        for i, outcome in enumerate(outcomes):
            outcome.letter = _letter(i)
        for group in _groups(outcomes):
            self._allocate_group(group)
        return outcomes

    def _allocate_group(self, group: list[Outcome]) -> None:
        claims = [o.claim for o in group]
        reasons = []
        for node in self.nodes:
            unmatched = [(k, v) for k, v in claims[0].node_selector if node.labels.get(k) != v]
            if unmatched:
                reasons.append(f"{node.name}: does not match the pod's nodeSelector")
                continue
            try:
                found = _Search(self, node, claims).first()
            except _NodeFailedError as err:
                reasons.append(f"{node.name}: {err}")
                continue
            if found is None:
                reasons.extend(f"{node.name}: {r}" for r in self.explain(node, claims))
                continue
            for outcome, placements in zip(group, found, strict=True):
                outcome.node = node.name
                outcome.placements = placements
                for placement in placements:
                    self._take(placement.device, outcome.claim.key)
                self._prepare(outcome, node)
            return
        if not self.nodes:
            reasons.append("the cluster has no nodes")
        for outcome in group:
            outcome.reasons = reasons

    def alternatives(self, claim: Claim, node_name: str, limit: int = 10_000) -> list[Json]:
        """Every allocation the claim could get on the node now: {request: device names}."""
        node = self.node(node_name)
        solutions: list[Json] = []

        def collect(found: list[list[Placement]]) -> bool:
            by_request: dict[str, list[str]] = {}
            for placement in found[0]:
                by_request.setdefault(placement.request, []).append(placement.device.name)
            solutions.append({k: sorted(v) for k, v in by_request.items()})
            return len(solutions) >= limit

        try:
            _Search(self, node, [claim]).run(collect)
        except _NodeFailedError:
            return []
        return solutions

    def _prepare(self, outcome: Outcome, node: SimNode) -> None:
        if node.inventory is None:
            return
        claim = outcome.claim
        ours = [p for p in outcome.placements if p.device.driver == DRIVER_NAME]
        if not ours:
            return
        config = []
        classes = {a.name: a.device_class for r in claim.spec.requests for a in r.alternatives}
        for placement in ours:
            device_class = self.classes.get(classes[placement.request])
            for entry in device_class.config if device_class else ():
                config.append({"source": "FromClass", "requests": [placement.request], **entry})
        config.extend({"source": "FromClaim", **entry} for entry in claim.spec.config)
        obj = {
            "metadata": {"uid": claim.key},
            "status": {"allocation": {"devices": {"results": [
                {"request": p.request, "driver": p.device.driver, "pool": p.device.pool,
                 "device": p.device.name}
                for p in ours
            ], "config": config}}},
        }  # fmt: skip
        try:
            prepared = plan(ClaimRef(claim.namespace, claim.name, claim.key), obj,
                            node.inventory, ours[0].device.pool)  # fmt: skip
        except ClaimError as err:
            outcome.prepare_error = str(err)
            return
        nodes = sorted({d.dev_path for p in prepared.devices for d in p.neuron_devices},
                       key=lambda p: int(p.removeprefix("/dev/neuron")))  # fmt: skip
        outcome.prepared = Prepared(prepared.env, tuple(nodes))

    # --- explanations --------------------------------------------------------

    def explain(self, node: SimNode, claims: Sequence[Claim]) -> list[str]:
        """Why the claims do not fit on a node where the search found nothing."""
        reasons = []
        many = sum(len(c.spec.requests) for c in claims) > 1
        for claim in claims:
            for request in claim.spec.requests:
                for alt in request.alternatives:
                    reason = self._explain_request(node, claim, alt)
                    if reason:
                        prefix = f"request {alt.name}: " if many else ""
                        reasons.append(prefix + reason)
        if not reasons:
            reasons.append(
                "each request fits alone, but not all requests of the pod's claims together"
            )
        return reasons

    def _explain_request(self, node: SimNode, claim: Claim, alt: Alternative) -> str | None:
        selected = self.selected(alt, node)
        if not selected:
            return self._explain_selectors(node, alt)
        tolerable = [d for d in selected if tolerated(d.taints, alt.tolerations)]
        free = [d for d in tolerable if self._free(d)]
        matching = f"{len(selected)} devices match the selectors"
        untolerated = len(selected) - len(tolerable)
        if untolerated:
            matching += f" ({untolerated} with taints the request does not tolerate)"
        blocked = [d for d in tolerable if d.key not in self.taken and not self._free(d)]
        free_text = f"{len(free)} free"
        if blocked:
            free_text += f" ({len(blocked)} held through shared counters by allocated devices)"
        if alt.all:
            if len(free) < len(tolerable) or untolerated:
                return f"{matching}, {free_text}; allocationMode All needs every one of them"
            return None
        if len(free) < alt.count:
            return f"{matching}, {free_text}, fewer than the {alt.count} requested"
        for constraint in claim.spec.constraints:
            if not constraint.applies(alt.name):
                continue
            groups: dict[Any, int] = {}
            lacking = 0
            for device in free:
                value = device.attribute(constraint.attribute)
                if value is None:
                    lacking += 1
                else:
                    groups[value] = groups.get(value, 0) + 1
            if max(groups.values(), default=0) < alt.count:
                text = f"{matching}, {free_text}, no {alt.count} of them share "
                text += constraint.attribute
                if lacking:
                    text += f" ({lacking} do not have it)"
                return text
        counters_left = self._counter_limited(free, alt.count)
        if counters_left is not None:
            return f"{matching}, {free_text}, {counters_left}"
        return None

    def _counter_limited(self, free: Sequence[SimDevice], count: int) -> str | None:
        totals: dict[CounterKey, Fraction] = {}
        for device in free:
            for counter, amount in device.consumes:
                totals[counter] = totals.get(counter, Fraction(0)) + amount
        for counter, amount in totals.items():
            left = self.counters_of(counter) - self.used.get(counter, Fraction(0))
            if amount > left and count > 1:
                return f"shared counter {counter[2]}/{counter[3]} has only {left} left"
        return None

    def counters_of(self, counter: CounterKey) -> Fraction:
        for node in self.nodes:
            if counter in node.counters:
                return node.counters[counter]
        return Fraction(0)

    def _explain_selectors(self, node: SimNode, alt: Alternative) -> str:
        device_class = self.classes[alt.device_class]
        left = list(node.devices)
        if not left:
            return "publishes no devices"
        parts = []
        steps = [(f"DeviceClass {alt.device_class} selector `{e}`", e)
                 for e in device_class.selectors]  # fmt: skip
        steps += [(f"selector `{e}`", e) for e in alt.selectors]
        for label, expression in steps:
            kept = [d for d in left if self.matches(expression, d)]
            if len(kept) < len(left):
                parts.append(f"{label} excludes {len(left) - len(kept)}")
            left = kept
        return f"no device matches the selectors: of {len(node.devices)} devices, " + ", ".join(
            parts
        )

    def _free(self, device: SimDevice) -> bool:
        if device.key in self.taken:
            return False
        return all(
            self.used.get(counter, Fraction(0)) + amount <= self.counters_of(counter)
            for counter, amount in device.consumes
        )


def tolerated(taints: Sequence[Json], tolerations: Sequence[Json]) -> bool:
    """NoSchedule and NoExecute taints keep a device out unless a toleration matches."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and toleration.get("value", "") == taint.get("value", "")


class _Search:
    """Backtracking over requests and devices in slice order, as the scheduler's allocator."""

    def __init__(self, cluster: Cluster, node: SimNode, claims: Sequence[Claim]) -> None:
        self.cluster = cluster
        self.node = node
        self.claims = claims
        self.chosen: list[list[Placement]] = [[] for _ in claims]
        self.in_use: set[DeviceKey] = set()
        self.used: dict[CounterKey, Fraction] = dict(cluster.used)
        # Per claim and constraint: (value, devices holding it).
        self.values: list[list[tuple[Any, int]]] = [
            [(None, 0) for _ in c.spec.constraints] for c in claims
        ]
        self.steps = 0
        self._done: Callable[[list[list[Placement]]], bool] = lambda _: True
        self._candidates: dict[str, list[SimDevice]] = {}

    def first(self) -> list[list[Placement]] | None:
        found: list[list[list[Placement]]] = []

        def keep(solution: list[list[Placement]]) -> bool:
            found.append(solution)
            return True

        self.run(keep)
        return found[0] if found else None

    def run(self, done: Callable[[list[list[Placement]]], bool]) -> None:
        self._done = done
        try:
            self._request(0, 0)
        except _SearchLimitError:
            raise _NodeFailedError(
                f"gave up after trying {SEARCH_LIMIT} device placements (the scheduler also "
                "bounds its search)"
            ) from None

    def _request(self, ci: int, ri: int) -> bool:
        if ci == len(self.claims):
            return self._done([list(c) for c in self.chosen])
        requests = self.claims[ci].spec.requests
        if ri == len(requests):
            return self._request(ci + 1, 0)
        for alt in requests[ri].alternatives:
            candidates = self._candidates.get(alt.name + f"@{ci}")
            if candidates is None:
                candidates = self.cluster.candidates(alt, self.node)
                self._candidates[alt.name + f"@{ci}"] = candidates
            if alt.all:
                if self._take_all(ci, ri, alt):
                    return True
            elif self._pick(ci, ri, alt, candidates, start=0):
                return True
        return False

    def _take_all(self, ci: int, ri: int, alt: Alternative) -> bool:
        # All means every device the selectors match on the node, tainted ones included:
        # a taint the request does not tolerate makes the request fail, as a taken device does.
        selected = self.cluster.selected(alt, self.node)
        if not selected or any(not tolerated(d.taints, alt.tolerations) for d in selected):
            return False
        added: list[SimDevice] = []
        for device in selected:
            if not self._add(ci, alt, device):
                break
            added.append(device)
        else:
            if self._request(ci, ri + 1):
                return True
        for device in reversed(added):
            self._remove(ci, alt, device)
        return False

    def _pick(
        self, ci: int, ri: int, alt: Alternative, candidates: list[SimDevice], *, start: int
    ) -> bool:
        remaining = alt.count - len([p for p in self.chosen[ci] if p.request == alt.name])
        if remaining == 0:
            return self._request(ci, ri + 1)
        # Devices are picked in increasing slice order: the scheduler's first solution is the
        # lexicographically smallest, which is this one, without visiting permutations.
        for k in range(start, len(candidates) - remaining + 1):
            device = candidates[k]
            if not self._add(ci, alt, device):
                continue
            if self._pick(ci, ri, alt, candidates, start=k + 1):
                return True
            self._remove(ci, alt, device)
        return False

    def _add(self, ci: int, alt: Alternative, device: SimDevice) -> bool:
        self.steps += 1
        if self.steps > SEARCH_LIMIT:
            raise _SearchLimitError
        if device.key in self.cluster.taken or device.key in self.in_use:
            return False
        for counter, amount in device.consumes:
            if self.used.get(counter, Fraction(0)) + amount > self.cluster.counters_of(counter):
                return False
        claim = self.claims[ci]
        values = self.values[ci]
        for i, constraint in enumerate(claim.spec.constraints):
            if not constraint.applies(alt.name):
                continue
            value = device.attribute(constraint.attribute)
            if value is None:
                return False
            held, holders = values[i]
            if holders and held != value:
                return False
        for i, constraint in enumerate(claim.spec.constraints):
            if constraint.applies(alt.name):
                held, holders = values[i]
                values[i] = (device.attribute(constraint.attribute), holders + 1)
        for counter, amount in device.consumes:
            self.used[counter] = self.used.get(counter, Fraction(0)) + amount
        self.in_use.add(device.key)
        self.chosen[ci].append(Placement(alt.name, device))
        return True

    def _remove(self, ci: int, alt: Alternative, device: SimDevice) -> None:
        self.chosen[ci].pop()
        self.in_use.discard(device.key)
        for counter, amount in device.consumes:
            self.used[counter] -= amount
        values = self.values[ci]
        for i, constraint in enumerate(self.claims[ci].spec.constraints):
            if constraint.applies(alt.name):
                held, holders = values[i]
                values[i] = (held if holders > 1 else None, holders - 1)


def _groups(outcomes: Sequence[Outcome]) -> list[list[Outcome]]:
    """Claims of one pod together, at the position of the pod's first claim."""
    groups: list[list[Outcome]] = []
    by_pod: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        pod = outcome.claim.pod
        if pod is None:
            groups.append([outcome])
        elif pod in by_pod:
            by_pod[pod].append(outcome)
        else:
            by_pod[pod] = [outcome]
            groups.append(by_pod[pod])
    return groups


def _letter(index: int) -> str:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return letters[index] if index < len(letters) else f"{letters[index % 26]}{index // 26}"


# --- Entry points ---------------------------------------------------------------------------


def parse_node_counts(values: Sequence[str]) -> list[tuple[str, int]]:
    out = []
    for value in values:
        instance_type, sep, count = value.partition("=")
        if not sep:
            count = "1"
        if not count.isdigit() or int(count) < 1:
            raise InputError(f"--node {value!r}: expected TYPE=COUNT with COUNT >= 1")
        out.append((instance_type, int(count)))
    return out


def parse_taken(values: Sequence[str]) -> list[tuple[str, str]]:
    """`NODE:DEV,DEV` -> (node, device name); a bare number N means neurondeviceN."""
    out = []
    for value in values:
        node, sep, devices = value.rpartition(":")
        if not sep or not node or not devices:
            raise InputError(f"--taken {value!r}: expected NODE:DEVICE[,DEVICE...]")
        for device in devices.split(","):
            name = f"neurondevice{device}" if device.isdigit() else device
            out.append((node, name))
    return out


def live_cluster(kubeconfig: Path) -> tuple[list[SimNode], dict[str, DeviceClass], list[Json]]:
    """Nodes, DeviceClasses and allocated ResourceClaims of a running cluster."""
    # Deferred: the Kubernetes client takes ~0.3 s to import, which only this path needs.
    from neuron_dra.apierror import ApiError  # noqa: PLC0415
    from neuron_dra.kube import Kube  # noqa: PLC0415

    kube = Kube.connect(kubeconfig)
    try:
        get = kube.list_sync
        slices = get("/apis/resource.k8s.io/v1/resourceslices")
        claims = get("/apis/resource.k8s.io/v1/resourceclaims")
        classes = {
            c.name: c
            for c in map(parse_device_class, get("/apis/resource.k8s.io/v1/deviceclasses"))
        }
        nodes_objs = get("/api/v1/nodes")
    except ApiError as err:
        raise InputError(f"reading the cluster: {err}") from None
    finally:
        kube.close()
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes_objs}
    by_node: dict[str, list[Json]] = {}
    for obj in slices:
        node = obj["spec"].get("nodeName")
        if node:  # slices for all nodes or a node selector (network devices) are not simulated
            by_node.setdefault(node, []).append(obj)
    nodes = [node_from_slices(n, s, labels=labels.get(n)) for n, s in sorted(by_node.items())]
    return nodes, classes, claims


def take_allocated(cluster: Cluster, claims: Sequence[Json]) -> None:
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        holder = f"{_namespace(claim)}/{claim['metadata']['name']}"
        for result in (allocation.get("devices") or {}).get("results") or []:
            cluster.take_key((result["driver"], result["pool"], result["device"]), holder)


def simulate(files: Sequence[Path], cluster: Cluster) -> list[Outcome]:
    """Allocate the claims the files stand for on `cluster`, in order."""
    inputs = read_inputs(load_documents(files))
    for device_class in default_classes():
        cluster.classes.setdefault(device_class.name, device_class)
    # Classes among the inputs win over the cluster's, as applying them would make them.
    cluster.classes.update(inputs.classes)
    return cluster.allocate(inputs.claims)


# --- Output ---------------------------------------------------------------------------------


def outcome_json(outcome: Outcome) -> Json:
    claim = outcome.claim
    out: Json = {
        "claim": claim.key,
        "source": claim.source,
        "template": claim.template,
        "pod": claim.pod,
        "allocated": outcome.allocated,
        "letter": outcome.letter,
    }
    if outcome.allocated:
        out["node"] = outcome.node
        out["results"] = [
            {"request": p.request, "driver": p.device.driver, "pool": p.device.pool,
             "device": p.device.name}
            for p in outcome.placements
        ]  # fmt: skip
        if outcome.prepared is not None:
            out["env"] = dict(outcome.prepared.env)
            out["deviceNodes"] = list(outcome.prepared.device_nodes)
        if outcome.prepare_error:
            out["prepareError"] = outcome.prepare_error
    else:
        out["reasons"] = list(outcome.reasons)
    return out


def describe(outcome: Outcome) -> list[str]:
    claim = outcome.claim
    origin = f"template {claim.template}, " if claim.template else ""
    lines = [f"[{outcome.letter}] claim {claim.key} ({origin}{claim.source})"]
    if not outcome.allocated:
        lines.append("  does not fit:")
        lines.extend(f"    {r}" for r in outcome.reasons)
        return lines
    lines.append(f"  node     {outcome.node}")
    by_request: dict[str, list[str]] = {}
    for placement in outcome.placements:
        by_request.setdefault(placement.request, []).append(placement.device.name)
    for request, devices in by_request.items():
        lines.append(f"  request  {request}: {' '.join(devices)}")
    if outcome.prepared is not None:
        for name, value in outcome.prepared.env:
            lines.append(f"  env      {name}={value}")
        lines.append(f"  devices  {' '.join(outcome.prepared.device_nodes)}")
    if outcome.prepare_error:
        lines.append(f"  the driver would refuse to prepare it: {outcome.prepare_error}")
    return lines


def copy_cluster(cluster: Cluster) -> Cluster:
    """An independent copy, to try allocations without changing the original."""
    clone = Cluster(cluster.nodes, cluster.classes)
    clone.taken = dict(cluster.taken)
    clone.used = dict(cluster.used)
    return clone
