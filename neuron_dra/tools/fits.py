"""Whether a request's count, NeuronCores and LNC fit where it can land: the rules of
`lint` that weigh one request against the instance types' published devices, as pure
functions returning what is wrong (`Problem`s: an error never fits, a warning fits only
somewhere)."""

from __future__ import annotations

from collections.abc import Sequence

from consts import (
    ATTR_DEVICE_ID,
    DRIVER_NAME,
    GROUP_ATTRIBUTE_DOMAIN,
    RESOURCE_TYPE_CORE,
    RESOURCE_TYPE_DEVICE,
    RESOURCE_TYPE_NODE,
)
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools.counted import counted
from neuron_dra.tools.opaque import Problem
from neuron_dra.tools.plugin_pods import GROUP_PREFIX
from neuron_dra.tools.published import (
    cores_by_family,
    cores_text,
    matching_kinds,
    published,
    usable,
)
from neuron_dra.tools.releases import FIRST_GATED_CORES, FIRST_WITH_CORES, Release, named
from neuron_dra.tools.simulate import CORE_CLASS, Alternative, ClaimSpec

# What selectors that can only get logical NeuronCores match.
CORES = frozenset({RESOURCE_TYPE_CORE})


def cores_note(requests: Sequence[str], release: Release | None) -> Problem | None:
    """That `requests` (alternatives) get NeuronCores only where partitionable devices are
    served: on every release but those that serve them when `release` is None."""
    if not requests or (release is not None and release >= FIRST_WITH_CORES):
        return None
    plural = len(requests) > 1
    head = (
        f"request{'s' if plural else ''} {', '.join(requests)} "
        f"ask{'' if plural else 's'} for NeuronCores, which the driver publishes only where "
        "the API server serves partitionable devices"
    )
    if release is None:
        return Problem(
            False,
            f"{head} (Kubernetes 1.36+ by default, 1.35 with the DRAPartitionableDevices "
            "feature gate, not 1.34); elsewhere the claim stays pending",
            "",
        )
    if release >= FIRST_GATED_CORES:
        return Problem(
            False,
            f"{head}: {named(release)} serves them only with the DRAPartitionableDevices "
            "feature gate; without it the claim stays pending",
            "",
        )
    return Problem(True, f"{head}, which {named(release)} never does: the claim stays pending", "")


def all_of_both_kinds(part: str) -> Problem:
    """All of a node's single devices and its whole-node device: the counters refuse it."""
    ultraservers = ", ".join(t.name for t in INSTANCE_TYPES.values() if t.ultraserver)
    return Problem(
        False,
        f"allocationMode All takes both the single devices (resourceType "
        f"'{RESOURCE_TYPE_DEVICE}') and the whole-node device ('{RESOURCE_TYPE_NODE}'): "
        f"an UltraServer node ({ultraservers}) publishing both never takes the claim, "
        "because the node device and its devices share counters (both kinds are published "
        "where the API server serves partitionable devices, Kubernetes 1.36+ by default); "
        "add the "
        f"selector \"device.attributes['{DRIVER_NAME}'].resourceType == "
        f"'{RESOURCE_TYPE_DEVICE}'\"",
        part,
    )


def class_without_cores(
    part: str, alt: Alternative, base: Sequence[str], own: Sequence[str]
) -> Problem | None:
    """A class that never hands out the cores the request's own selectors alone ask for."""
    usable_base = tuple(e for e in base if usable(e))
    if not own or matching_kinds(tuple(own)) != CORES:
        return None
    if RESOURCE_TYPE_CORE in matching_kinds(usable_base):
        return None
    return Problem(
        True,
        f"DeviceClass {alt.device_class} never hands out NeuronCores (its selectors exclude "
        f"resourceType '{RESOURCE_TYPE_CORE}'), yet the request's selectors ask for them, so "
        f"no device matches; use deviceClassName {CORE_CLASS}",
        part,
    )


def core_count(
    claim: ClaimSpec,
    alt: Alternative,
    sizes: Sequence[tuple[str, int | None, int]],
    pinned: Sequence[str],
) -> list[Problem]:
    """A count of cores against the cores of one device (matchAttribute deviceId) or node.

    `sizes` holds (instance type, LNC, cores of one device) for every core the
    selectors accept; `pinned` the instance types the request is known to land on.
    """
    part, count = f"request {alt.name}", alt.count
    one_device = any(
        c.applies(alt.name) and c.attribute == f"{DRIVER_NAME}/{ATTR_DEVICE_ID}"
        for c in claim.constraints
    )
    head = (
        f"count {count} with matchAttribute {DRIVER_NAME}/{ATTR_DEVICE_ID}: the cores must "
        "all be of one Neuron device"
    )
    if one_device and not pinned:
        largest = max((n for _, _, n in sizes), default=count)
        if count <= largest:
            return []
        everything = {t for t, _, _ in sizes} == set(INSTANCE_TYPES)
        which = "Neuron device" if everything else "device the selectors accept"
        return [
            Problem(
                True,
                f"{head}, and no {which} has more than {largest} logical NeuronCores "
                f"({cores_by_family(sizes)})",
                part,
            )
        ]
    problems = []
    for instance_type in pinned:
        numbers = [(lnc, n) for t, lnc, n in sizes if t == instance_type]
        if one_device:
            lead = f"{head}, and each {instance_type} device has"
        else:
            devices = INSTANCE_TYPES[instance_type].devices
            numbers = [(lnc, n * devices) for lnc, n in numbers]
            lead = f"count {count}: {instance_type} has only"
        problems += _cores_fit(part, count, lead, numbers)
    return problems


def _cores_fit(
    part: str, count: int, lead: str, numbers: Sequence[tuple[int | None, int]]
) -> list[Problem]:
    """An error where no LNC gives `count` cores, a warning where only some do."""
    fit = [lnc for lnc, n in numbers if n >= count]
    if not numbers or len(fit) == len(numbers):
        return []
    text = f"{lead} {cores_text(numbers)}"
    if not fit:
        return [Problem(True, text, part)]
    at = alternatives([str(lnc) for lnc in fit])
    return [
        Problem(
            False, f"{text}: only nodes at LNC {at} fit it; elsewhere the claim stays pending", part
        )
    ]


def beyond_largest(part: str, count: int, types: Sequence[str]) -> Problem | None:
    """`count` devices where the selectors allow `types`: more than the largest of them has
    never fits, whichever of them the scheduler tries."""
    most = max((INSTANCE_TYPES[t].devices for t in types), default=count)
    if count <= most:
        return None
    largest = sorted(t for t in types if INSTANCE_TYPES[t].devices == most)
    named = ", ".join(largest[:3]) + (f" and {len(largest) - 3} more" if len(largest) > 3 else "")
    which = (
        "Neuron instance type" if set(types) == set(INSTANCE_TYPES) else "type the selectors allow"
    )
    return Problem(
        True,
        f"count {count}: no {which} has more than {counted(most, 'device')} (the largest: "
        f"{named}), so no node ever fits it",
        part,
    )


def device_count(part: str, count: int, instance_type: str, groups: Sequence[str]) -> list[Problem]:
    """`count` devices on `instance_type`, constrained to share the group attributes `groups`."""
    spec = INSTANCE_TYPES[instance_type]
    sizes = published().group_sizes[instance_type]
    if count > spec.devices:
        return [
            Problem(
                True,
                f"count {count}: {instance_type} has only {counted(spec.devices, 'device')}",
                part,
            )
        ]
    problems = []
    everywhere = published().names.get(GROUP_ATTRIBUTE_DOMAIN, frozenset())
    for attribute in groups:
        size_text = attribute.removeprefix(GROUP_PREFIX).removesuffix("_id")
        if not size_text.isdigit() or attribute.partition("/")[2] not in everywhere:
            continue  # never published anywhere: reported with the constraint
        size = int(size_text)
        if size not in sizes:
            problems.append(
                Problem(
                    True,
                    f"matchAttribute {attribute}: {instance_type} has no connected sets of "
                    f"{size} (sizes: {', '.join(map(str, sorted(sizes)))})",
                    part,
                )
            )
        elif count > size:
            use = f"; use {GROUP_PREFIX}{count}_id" if count in sizes else ""
            problems.append(
                Problem(
                    True,
                    f"count {count} with matchAttribute {attribute}: each value is shared by "
                    f"exactly {counted(size, 'device')}, so {count} never share one{use}",
                    part,
                )
            )
        elif count < size:
            # Name a smaller group only where this instance type publishes one.
            smaller = f" or devicegroup{count}_id" if count in sizes else ""
            problems.append(
                Problem(
                    False,
                    f"count {count} with matchAttribute {attribute}: "
                    f"{counted(count, 'device')} of a connected set of {size}, which are not "
                    f"a connected set themselves; use count {size}{smaller}",
                    part,
                )
            )
    if count not in sizes:
        # The Neuron scheduler extension refused such counts, in these words; the DRA
        # allocator would instead hand out devices that are not one connected set.
        problems.append(
            Problem(
                True,
                f"Instance type {instance_type} does not support requests for device: "
                f"{count}. Please request a different number of devices. Its connected "
                f"sets have {alternatives(sorted(sizes))} devices.",
                part,
            )
        )
    return problems


def lnc_of_cores(part: str, subject: str) -> Problem:
    """LNC set for what can only get NeuronCores."""
    return Problem(
        True,
        f"NeuronConfig.logicalNeuronCore is set, but {subject} NeuronCores: a core is as "
        "large as the node's LNC, fixed when the node boots, so the driver refuses to "
        f"prepare it; set LNC on whole devices (DeviceClass {DRIVER_NAME}) instead",
        part,
    )


def lnc(types: Sequence[str], part: str, subject: str = "the request") -> Problem | None:
    """LNC set for a request (or class) that can land on `types`."""
    without = sorted(t for t in types if not INSTANCE_TYPES[t].has_lnc)
    if not without:
        return None
    if len(without) < len(types):
        return Problem(
            False,
            f"NeuronConfig.logicalNeuronCore is set, but {subject} can land on "
            f"{', '.join(without)}, which have no logical NeuronCores; the driver "
            "refuses to prepare it there",
            part,
        )
    with_lnc = alternatives(sorted(t for t, s in INSTANCE_TYPES.items() if s.has_lnc), "and")
    return Problem(
        True,
        f"NeuronConfig.logicalNeuronCore is set, but {subject} can only land on "
        f"{', '.join(without)}, which have no logical NeuronCores, so the driver never "
        f"prepares it; only {with_lnc} have them",
        part,
    )


def alternatives(items: Sequence[object], last: str = "or") -> str:
    """`a, b or c`."""
    words = [str(s) for s in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"
