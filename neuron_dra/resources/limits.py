"""The resource.k8s.io/v1 (Kubernetes 1.34) validation rules for ResourceSlices.

Used before anything is published, so a slice the API server would reject is
caught with a precise path in the driver's own log, and by tests that run every
instance type's slices through it.
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALUE_LENGTH = 64
MAX_DOMAIN_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_DRIVER_NAME_LENGTH = 63
MAX_POOL_NAME_LENGTH = 253
MAX_SHARED_COUNTERS = 32
MAX_COUNTERS_PER_DEVICE = 32
MAX_DEVICE_COUNTERS_PER_SLICE = 1024
MAX_TAINTS_PER_DEVICE = 4

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_DNS_LABEL_PART = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL_PART}(?:\.{_DNS_LABEL_PART})*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
_QUANTITY = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?")


def validate_slice(obj: dict[str, Any]) -> list[str]:
    """Every way `obj` breaks a v1 ResourceSlice rule, as 'path: problem' strings."""
    errors: list[str] = []
    spec = obj.get("spec", {})
    driver = spec.get("driver", "")
    if len(driver) > MAX_DRIVER_NAME_LENGTH or not _DNS_SUBDOMAIN.fullmatch(driver):
        errors.append(f"spec.driver: {driver!r} is not a DNS subdomain of at most 63 characters")
    _check_pool(spec.get("pool", {}), errors)
    selectors = [
        k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)
    ]
    if len(selectors) != 1:
        errors.append(f"spec: exactly one node selection field must be set, found {selectors}")

    counter_sets = _check_shared_counters(spec.get("sharedCounters", []), errors)
    devices = spec.get("devices", [])
    limited = any(d.get("taints") or d.get("consumesCounters") for d in devices)
    limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if limited else MAX_DEVICES
    if len(devices) > limit:
        errors.append(f"spec.devices: {len(devices)} devices, at most {limit} allowed")
    names: set[str] = set()
    consumptions = 0
    for i, device in enumerate(devices):
        path = f"spec.devices[{i}]"
        name = device.get("name", "")
        if not _DNS_LABEL.fullmatch(name):
            errors.append(f"{path}.name: {name!r} is not a DNS label")
        if name in names:
            errors.append(f"{path}.name: duplicate {name!r}")
        names.add(name)
        consumptions += _check_device(path, device, driver, counter_sets, errors)
    if consumptions > MAX_DEVICE_COUNTERS_PER_SLICE:
        errors.append(f"spec.devices: {consumptions} counter consumptions, at most 1024 allowed")
    return errors


def _check_pool(pool: dict[str, Any], errors: list[str]) -> None:
    name = pool.get("name", "")
    if (
        not name
        or len(name) > MAX_POOL_NAME_LENGTH
        or not all(_DNS_SUBDOMAIN.fullmatch(part) for part in name.split("/"))
    ):
        errors.append(f"spec.pool.name: {name!r} is not '/'-separated DNS subdomains")
    if not isinstance(pool.get("generation"), int) or pool["generation"] < 0:
        errors.append("spec.pool.generation: must be a non-negative integer")
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count < 1:
        errors.append("spec.pool.resourceSliceCount: must be a positive integer")


def _check_shared_counters(sets: list[dict[str, Any]], errors: list[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    total = 0
    for i, counter_set in enumerate(sets):
        name = counter_set.get("name", "")
        if not _DNS_LABEL.fullmatch(name) or name in found:
            errors.append(f"spec.sharedCounters[{i}].name: {name!r} is not a unique DNS label")
        counters = counter_set.get("counters", {})
        for counter, value in counters.items():
            _check_counter(f"spec.sharedCounters[{i}].counters[{counter}]", counter, value, errors)
        total += len(counters)
        found[name] = set(counters)
    if total > MAX_SHARED_COUNTERS:
        errors.append(f"spec.sharedCounters: {total} counters, at most 32 allowed")
    return found


def _check_device(
    path: str,
    device: dict[str, Any],
    driver: str,
    counter_sets: dict[str, set[str]],
    errors: list[str],
) -> int:
    attributes = device.get("attributes", {})
    capacity = device.get("capacity", {})
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        errors.append(
            f"{path}: {len(attributes)} attributes + {len(capacity)} capacities, at most 32"
        )
    for kind, entries in (("attributes", attributes), ("capacity", capacity)):
        seen: set[str] = set()
        for name in entries:
            full = name if "/" in name else f"{driver}/{name}"
            if full in seen:
                errors.append(f"{path}.{kind}[{name}]: same name as another entry")
            seen.add(full)
            _check_qualified_name(f"{path}.{kind}[{name}]", name, errors)
    for name, value in attributes.items():
        _check_attribute(f"{path}.attributes[{name}]", value, errors)
    for name, value in capacity.items():
        if not _QUANTITY.fullmatch(str(value.get("value", ""))):
            errors.append(f"{path}.capacity[{name}].value: {value!r} is not a quantity")
    if len(device.get("taints", [])) > MAX_TAINTS_PER_DEVICE:
        errors.append(f"{path}.taints: more than {MAX_TAINTS_PER_DEVICE}")

    consumptions = 0
    used_sets: set[str] = set()
    for j, consumption in enumerate(device.get("consumesCounters", [])):
        cpath = f"{path}.consumesCounters[{j}]"
        counter_set = consumption.get("counterSet", "")
        if counter_set in used_sets:
            errors.append(f"{cpath}.counterSet: {counter_set!r} listed twice")
        used_sets.add(counter_set)
        if counter_set not in counter_sets:
            errors.append(f"{cpath}.counterSet: {counter_set!r} is not in spec.sharedCounters")
        for counter, value in consumption.get("counters", {}).items():
            _check_counter(f"{cpath}.counters[{counter}]", counter, value, errors)
            if counter not in counter_sets.get(counter_set, set()):
                errors.append(f"{cpath}.counters[{counter}]: not a counter of {counter_set!r}")
            consumptions += 1
    if consumptions > MAX_COUNTERS_PER_DEVICE:
        errors.append(f"{path}.consumesCounters: {consumptions} counters, at most 32")
    return consumptions


def _check_qualified_name(path: str, name: str, errors: list[str]) -> None:
    domain, _, identifier = name.rpartition("/")
    if domain and (len(domain) > MAX_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.fullmatch(domain)):
        errors.append(f"{path}: domain {domain!r} is not a DNS subdomain of at most 63 characters")
    if len(identifier) > MAX_ID_LENGTH or not _C_IDENTIFIER.fullmatch(identifier):
        errors.append(f"{path}: {identifier!r} is not a C identifier of at most 32 characters")


def _check_attribute(path: str, value: dict[str, Any], errors: list[str]) -> None:
    kinds = [k for k in ("int", "bool", "string", "version") if k in value]
    if len(kinds) != 1 or len(value) != 1:
        errors.append(f"{path}: exactly one of int, bool, string, version must be set")
        return
    kind = kinds[0]
    item = value[kind]
    if kind == "int":
        if not isinstance(item, int) or isinstance(item, bool) or not -(2**63) <= item < 2**63:
            errors.append(f"{path}.int: {item!r} is not an int64")
    elif kind == "bool":
        if not isinstance(item, bool):
            errors.append(f"{path}.bool: {item!r} is not a bool")
    elif not isinstance(item, str) or len(item) > MAX_VALUE_LENGTH:
        errors.append(f"{path}.{kind}: not a string of at most {MAX_VALUE_LENGTH} characters")
    elif kind == "version" and not _SEMVER.fullmatch(item):
        errors.append(f"{path}.version: {item!r} is not a semantic version")


def _check_counter(path: str, name: str, value: dict[str, Any], errors: list[str]) -> None:
    if not _DNS_LABEL.fullmatch(name):
        errors.append(f"{path}: {name!r} is not a DNS label")
    if not _QUANTITY.fullmatch(str(value.get("value", ""))):
        errors.append(f"{path}.value: {value!r} is not a quantity")
