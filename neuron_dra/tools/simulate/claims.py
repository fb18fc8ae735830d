"""What a claim asks for: requests, their alternatives and constraints, and DeviceClasses.

ResourceClaim specs in the resource.k8s.io v1, v1beta1 and v1beta2 spellings become
`ClaimSpec`s; DeviceClasses become `DeviceClass`es, the driver's own built in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from consts import ATTR_RESOURCE_TYPE, DRIVER_NAME, RESOURCE_TYPE_CORE, RESOURCE_TYPE_DEVICE
from neuron_dra.tools import manifests

Json = dict[str, Any]

RESOURCE_GROUP = manifests.RESOURCE_GROUP
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
    pod_group: str | None = None  # namespace/name of the PodGroup its pod joins

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
