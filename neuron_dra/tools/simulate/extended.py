"""The claim the kube-scheduler makes for a pod's extended resources.

A pod that asks an extended resource a DeviceClass serves (`extendedResourceName`, or
the name every DeviceClass serves implicitly) gets one claim with a request per
container and resource, as the scheduler's DRAExtendedResource support builds it.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from neuron_dra.tools.simulate.claims import (
    Alternative,
    Claim,
    ClaimSpec,
    DeviceClass,
    InputError,
    Json,
    Request,
)

# Every DeviceClass also serves this name plus its own name, whatever extendedResourceName says.
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"


def extended_claim(pod: Json, where: str, classes: Mapping[str, str]) -> Claim | None:
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
