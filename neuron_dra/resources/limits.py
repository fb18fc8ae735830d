"""The resource.k8s.io/v1 validation rules for ResourceSlices and their pools.

The API server is the authority: the agent lets a dry run of its real slices
decide how they are laid out, and a refused write makes it ask again. These rules
give the same answer earlier and offline, with a precise path: in the agent's log
before anything is sent, in `neuron-dra slices`, and in the tests that run every
instance type's slices through them. `tests/e2e/test_limits.py` sends a breach of
each rule to every supported release's server, dry-run, and both must refuse it;
the few rules the server does not state (those across the slices of a pool, and
one attribute under two spellings) are the ones it lists as the driver's alone.

Shared counters are the one place where releases disagree, so those rules come
per `CounterLayout`: Kubernetes 1.34 wants a device's counters in the device's
own slice, 1.35 and later refuse a slice that holds both counters and devices.
Every other rule is the strictest of the releases the driver supports (1.34 to
1.38): a node without counters publishes the same slices whatever the release,
and those slices must stay valid across a control-plane upgrade.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# 1.35+ allow 128 devices, 64 once any device has taints or consumes counters. 1.34 allows
# 128 either way; the driver keeps tainted slices to 64 there too, so they survive an
# upgrade. (Slices with counters follow `CounterRules.max_devices`.)
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALUE_LENGTH = 64
MAX_DOMAIN_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_DRIVER_NAME_LENGTH = 63
MAX_POOL_NAME_LENGTH = 253
MAX_TAINTS_PER_DEVICE = 4  # 1.34; 16 from 1.35
MAX_COUNTERS_PER_SET = 32  # 1.35+; 1.34 allows 32 counters in a slice's sets together


class CounterLayout(StrEnum):
    """Where a pool's shared counters live: each Kubernetes release accepts only one."""

    # Kubernetes 1.34: a device consumes counters of its own slice only, so the counters
    # sit in the pool's first slice, beside the devices.
    BESIDE_DEVICES = "beside-devices"
    # 1.35 and later: a slice carries counters or devices, never both, so the counters
    # get a slice of their own, the pool's first; devices may use any set of the pool.
    OWN_SLICE = "own-slice"


@dataclass(frozen=True)
class CounterRules:
    """Shared-counter limits of one layout; None where that release has no such limit."""

    separate: bool  # counters and devices never in one slice
    max_devices: int  # per slice, once a device of it consumes counters
    max_sets_per_slice: int | None
    max_counters_per_slice: int | None  # summed over the slice's counter sets
    max_counters_per_set: int | None
    max_consumptions_per_device: int | None  # counter sets one device draws on
    max_counters_per_consumption: int | None
    max_counters_per_device: int | None  # summed over the device's consumptions
    max_consumed_counters_per_slice: int | None  # summed over the slice's devices


COUNTER_RULES: dict[CounterLayout, CounterRules] = {
    # k8s.io/api v0.34 resource/v1: ResourceSliceMaxSharedCounters, ...MaxCountersPerDevice,
    # ...MaxDeviceCountersPerSlice.
    CounterLayout.BESIDE_DEVICES: CounterRules(
        separate=False,
        # 1.34's one limit. A pool in this layout is re-laid on any upgrade anyway, and
        # its devices must share the counters' slice: the more fit, the better.
        max_devices=128,
        max_sets_per_slice=None,
        max_counters_per_slice=32,
        max_counters_per_set=None,
        max_consumptions_per_device=None,
        max_counters_per_consumption=None,
        max_counters_per_device=32,
        max_consumed_counters_per_slice=1024,
    ),
    # v0.35-v0.37: ResourceSliceMaxCounterSets, ...MaxCountersPerCounterSet,
    # ...MaxDeviceCounterConsumptionsPerDevice, ...MaxCountersPerDeviceCounterConsumption.
    CounterLayout.OWN_SLICE: CounterRules(
        separate=True,
        max_devices=64,
        max_sets_per_slice=8,
        max_counters_per_slice=None,
        max_counters_per_set=MAX_COUNTERS_PER_SET,
        max_consumptions_per_device=2,
        max_counters_per_consumption=32,
        max_counters_per_device=None,
        max_consumed_counters_per_slice=None,
    ),
}

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_DNS_LABEL_PART = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL_PART}(?:\.{_DNS_LABEL_PART})*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Numbers of at most 18 digits, so they fit an int64 (1.38; earlier releases take any).
_SEMVER_NUMBER = r"(?:0|[1-9]\d{0,17})"
_SEMVER_PRE = rf"(?:{_SEMVER_NUMBER}|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(
    rf"{_SEMVER_NUMBER}\.{_SEMVER_NUMBER}\.{_SEMVER_NUMBER}"
    rf"(?:-{_SEMVER_PRE}(?:\.{_SEMVER_PRE})*)?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?"
)
_QUANTITY = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?")

CounterSets = dict[str, set[str]]  # counter set name -> its counter names


def validate_slice(
    obj: dict[str, Any], layout: CounterLayout = CounterLayout.BESIDE_DEVICES
) -> list[str]:
    """Every way `obj` breaks a v1 ResourceSlice rule, as 'path: problem' strings.

    With the own-slice layout a device's counter sets live in another slice of the
    pool: `validate_pool` checks those references.
    """
    rules = COUNTER_RULES[layout]
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
    # Present at all counts, as in Go: `devices: []` beside counters is refused too.
    if (
        rules.separate
        and spec.get("sharedCounters") is not None
        and spec.get("devices") is not None
    ):
        errors.append("spec: only one of sharedCounters or devices is allowed")

    counter_sets = _check_shared_counters(spec.get("sharedCounters") or [], rules, errors)
    devices = spec.get("devices") or []
    limit = MAX_DEVICES
    if any(d.get("consumesCounters") for d in devices):
        limit = rules.max_devices
    elif any(d.get("taints") for d in devices):
        limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS
    if len(devices) > limit:
        errors.append(f"spec.devices: {len(devices)} devices, at most {limit} allowed")
    names: set[str] = set()
    consumed = 0
    # Beside devices, a device may only use this slice's sets; otherwise the pool's.
    visible = None if rules.separate else counter_sets
    for i, device in enumerate(devices):
        path = f"spec.devices[{i}]"
        name = device.get("name", "")
        if not _DNS_LABEL.fullmatch(name):
            errors.append(f"{path}.name: {name!r} is not a DNS label")
        if name in names:
            errors.append(f"{path}.name: duplicate {name!r}")
        names.add(name)
        _check_device(path, device, driver, errors)
        consumed += _check_consumptions(path, device, rules, visible, errors)
    _at_most(
        "spec.devices",
        consumed,
        rules.max_consumed_counters_per_slice,
        "counter consumptions",
        errors,
    )
    return errors


def validate_pool(
    slices: Sequence[dict[str, Any]], layout: CounterLayout = CounterLayout.BESIDE_DEVICES
) -> list[str]:
    """Every rule the slices of one pool break, alone or together ('slice N: path: problem').

    Beyond each slice's own rules: one driver, node, pool and generation; a slice
    count that counts them all; device and counter set names unique in the pool;
    and, in the own-slice layout, every counter a device consumes defined in the pool.
    """
    errors = [f"slice {i}: {e}" for i, s in enumerate(slices) for e in validate_slice(s, layout)]
    specs = [s.get("spec", {}) for s in slices]
    for field in ("driver", "nodeName", "pool.name", "pool.generation"):
        outer, _, inner = field.rpartition(".")
        values = {str((spec.get(outer, {}) if outer else spec).get(inner)) for spec in specs}
        if len(values) > 1:
            errors.append(f"pool: the slices disagree on spec.{field}: {sorted(values)}")
    for i, spec in enumerate(specs):
        count = spec.get("pool", {}).get("resourceSliceCount")
        if count != len(slices):
            errors.append(
                f"slice {i}: spec.pool.resourceSliceCount: {count}, the pool has {len(slices)}"
            )

    # Names repeated inside one slice are that slice's error, reported above.
    first: dict[str, dict[str, int]] = {"sharedCounters": {}, "devices": {}}
    for i, spec in enumerate(specs):
        for field, noun in (("sharedCounters", "counter set"), ("devices", "device")):
            for j, item in enumerate(spec.get(field) or []):
                name = str(item.get("name", ""))
                if first[field].setdefault(name, i) != i:
                    errors.append(
                        f"slice {i}: spec.{field}[{j}].name: {name!r} is also in slice "
                        f"{first[field][name]}: {noun} names are unique in a pool"
                    )
    sets: CounterSets = {}
    for spec in specs:
        for counter_set in spec.get("sharedCounters") or []:
            counters = set(counter_set.get("counters") or {})
            sets.setdefault(str(counter_set.get("name", "")), counters)
    if COUNTER_RULES[layout].separate:
        for i, spec in enumerate(specs):
            for j, device in enumerate(spec.get("devices") or []):
                path = f"slice {i}: spec.devices[{j}]"
                _check_references(path, device, sets, "the pool's sharedCounters", errors)
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


def _check_shared_counters(
    sets: list[dict[str, Any]], rules: CounterRules, errors: list[str]
) -> CounterSets:
    found: CounterSets = {}
    total = 0
    _at_most("spec.sharedCounters", len(sets), rules.max_sets_per_slice, "counter sets", errors)
    for i, counter_set in enumerate(sets):
        path = f"spec.sharedCounters[{i}]"
        name = counter_set.get("name", "")
        if not _DNS_LABEL.fullmatch(name) or name in found:
            errors.append(f"{path}.name: {name!r} is not a unique DNS label")
        counters = counter_set.get("counters") or {}
        if not counters:
            errors.append(f"{path}.counters: required")
        _at_most(f"{path}.counters", len(counters), rules.max_counters_per_set, "counters", errors)
        for counter, value in counters.items():
            _check_counter(f"{path}.counters[{counter}]", counter, value, errors)
        total += len(counters)
        found[name] = set(counters)
    _at_most("spec.sharedCounters", total, rules.max_counters_per_slice, "counters", errors)
    return found


def _check_device(path: str, device: dict[str, Any], driver: str, errors: list[str]) -> None:
    attributes = device.get("attributes", {})
    capacity = device.get("capacity", {})
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        errors.append(
            f"{path}: {len(attributes)} attributes + {len(capacity)} capacities, at most 32"
        )
    # The API server takes `x` beside `<driver>/x`, but CEL then sees whichever of the
    # two Go's map order puts last, and `matchAttribute` the qualified one.
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


def _check_consumptions(
    path: str,
    device: dict[str, Any],
    rules: CounterRules,
    visible: CounterSets | None,
    errors: list[str],
) -> int:
    """The device's counter consumptions; `visible`: the sets it may use (None: not known here)."""
    consumptions = device.get("consumesCounters") or []
    _at_most(
        f"{path}.consumesCounters",
        len(consumptions),
        rules.max_consumptions_per_device,
        "counter sets",
        errors,
    )
    used_sets: set[str] = set()
    total = 0
    for j, consumption in enumerate(consumptions):
        cpath = f"{path}.consumesCounters[{j}]"
        counter_set = consumption.get("counterSet", "")
        if not _DNS_LABEL.fullmatch(counter_set):
            errors.append(f"{cpath}.counterSet: {counter_set!r} is not a DNS label")
        if counter_set in used_sets:
            errors.append(f"{cpath}.counterSet: {counter_set!r} listed twice")
        used_sets.add(counter_set)
        counters = consumption.get("counters") or {}
        if not counters:
            errors.append(f"{cpath}.counters: required")
        _at_most(
            f"{cpath}.counters",
            len(counters),
            rules.max_counters_per_consumption,
            "counters",
            errors,
        )
        for counter, value in counters.items():
            _check_counter(f"{cpath}.counters[{counter}]", counter, value, errors)
        total += len(counters)
    _at_most(f"{path}.consumesCounters", total, rules.max_counters_per_device, "counters", errors)
    if visible is not None:
        _check_references(path, device, visible, "spec.sharedCounters", errors)
    return total


def _check_references(
    path: str, device: dict[str, Any], sets: CounterSets, where: str, errors: list[str]
) -> None:
    for j, consumption in enumerate(device.get("consumesCounters") or []):
        cpath = f"{path}.consumesCounters[{j}]"
        counter_set = consumption.get("counterSet", "")
        if counter_set not in sets:
            errors.append(f"{cpath}.counterSet: {counter_set!r} is not in {where}")
            continue
        for counter in consumption.get("counters") or {}:
            if counter not in sets[counter_set]:
                errors.append(f"{cpath}.counters[{counter}]: not a counter of {counter_set!r}")


def _at_most(path: str, found: int, limit: int | None, what: str, errors: list[str]) -> None:
    if limit is not None and found > limit:
        errors.append(f"{path}: {found} {what}, at most {limit} allowed")


def _check_qualified_name(path: str, name: str, errors: list[str]) -> None:
    if name.count("/") > 1:  # refused from 1.38; earlier releases take it
        errors.append(f"{path}: {name!r} has more than one slash")
        return
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
        errors.append(
            f"{path}.version: {item!r} is not a semantic version with numbers of at most 18 digits"
        )


def _check_counter(path: str, name: str, value: dict[str, Any], errors: list[str]) -> None:
    if not _DNS_LABEL.fullmatch(name):
        errors.append(f"{path}: {name!r} is not a DNS label")
    if not _QUANTITY.fullmatch(str(value.get("value", ""))):
        errors.append(f"{path}.value: {value!r} is not a quantity")
