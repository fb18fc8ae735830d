"""What a simulation prints: each claim's node, devices and environment, or why not."""

from __future__ import annotations

from consts import (
    ATTR_DEVICE_ID,
    ATTR_RESOURCE_TYPE,
    DEVICE_NAME_PREFIX,
    DRIVER_NAME,
    RESOURCE_TYPE_CORE,
)
from neuron_dra.tools.simulate.allocator import Outcome
from neuron_dra.tools.simulate.claims import CORE_RESOURCE, MAX_CLAIM_DEVICES, Claim, Json
from neuron_dra.tools.simulate.nodes import SimDevice
from neuron_dra.tools.simulate.taintrules import taint_text


def outcome_json(outcome: Outcome) -> Json:
    claim = outcome.claim
    out: Json = {
        "claim": claim.key,
        "source": claim.source,
        "template": claim.template,
        "pod": claim.pod,
        **({"extendedResources": dict(claim.extended)} if claim.extended else {}),
        **({"podGroup": claim.pod_group} if claim.pod_group else {}),
        "allocated": outcome.allocated,
        "letter": outcome.letter,
    }
    if outcome.allocated:
        out["node"] = outcome.node
        out["results"] = [
            {
                "request": p.request,
                "driver": p.device.driver,
                "pool": p.device.pool,
                "device": p.device.name,
                **({"taints": _taints_json(p.device)} if p.device.taints else {}),
            }
            for p in outcome.placements
        ]
        if outcome.prepared is not None:
            out["env"] = dict(outcome.prepared.env)
            out["deviceNodes"] = list(outcome.prepared.device_nodes)
        if outcome.prepare_error:
            out["prepareError"] = outcome.prepare_error
    else:
        out["reasons"] = list(outcome.reasons)
    warnings = claim_warnings(claim)
    if warnings:
        out["warnings"] = warnings
    return out


def _taints_json(device: SimDevice) -> list[Json]:
    """The device's taints (which the request tolerates), each with its DeviceTaintRule."""
    return [
        {**taint, **({"deviceTaintRule": rule} if rule else {})}
        for taint, rule in device.taint_sources()
    ]


def _taint_lines(outcome: Outcome) -> list[str]:
    lines = []
    for placement in outcome.placements:
        for taint, rule in placement.device.taint_sources():
            source = f"DeviceTaintRule {rule}" if rule else "its slice"
            lines.append(f"  taint    {placement.device.name}: {taint_text(taint)} ({source})")
    return lines


def claim_warnings(claim: Claim) -> list[str]:
    """What the scheduler's claim for a pod's NeuronCores does not promise, or cannot do."""
    warnings = []
    for name, count in claim.extended:
        if name != CORE_RESOURCE:
            continue
        if count > MAX_CLAIM_DEVICES:
            warnings.append(
                f"{name}: {count} cannot be allocated: one claim holds at most "
                f"{MAX_CLAIM_DEVICES} devices, and each NeuronCore is one"
            )
        elif count > 1:
            warnings.append(
                f"{name}: {count} carries no constraint: any {count} NeuronCores of the node, "
                "which may span Neuron devices; for cores of one device use a "
                f"ResourceClaimTemplate with a {DRIVER_NAME}/{ATTR_DEVICE_ID} matchAttribute"
            )
    return warnings


def _cores(outcome: Outcome) -> str | None:
    """`4 NeuronCores, of neurondevice0 and neurondevice1`: the cores the claim got."""
    devices: list[str] = []
    count = 0
    for placement in outcome.placements:
        own = placement.device.view.attributes.get(DRIVER_NAME, {})
        if own.get(ATTR_RESOURCE_TYPE) != RESOURCE_TYPE_CORE:
            continue
        count += 1
        device = f"{DEVICE_NAME_PREFIX}{own.get(ATTR_DEVICE_ID)}"
        if device not in devices:
            devices.append(device)
    if not count:
        return None
    of = devices[0] if len(devices) == 1 else f"{', '.join(devices[:-1])} and {devices[-1]}"
    return f"{count} NeuronCore{'s' if count > 1 else ''}, of {of}"


def describe(outcome: Outcome) -> list[str]:
    claim = outcome.claim
    origin = f"template {claim.template}, " if claim.template else ""
    if claim.extended and claim.pod:
        asked = ", ".join(f"{name}: {count}" for name, count in claim.extended)
        origin = f"Pod {claim.pod.split('/', 1)[1]} ({asked}), "
    lines = [f"[{outcome.letter}] claim {claim.key} ({origin}{claim.source})"]
    warnings = [f"  warning  {w}" for w in claim_warnings(claim)]
    if not outcome.allocated:
        lines.append("  does not fit:")
        lines.extend(f"    {r}" for r in outcome.reasons)
        return lines + warnings
    lines.append(f"  node     {outcome.node}")
    by_request: dict[str, list[str]] = {}
    for placement in outcome.placements:
        by_request.setdefault(placement.request, []).append(placement.device.name)
    for request, devices in by_request.items():
        lines.append(f"  request  {request}: {' '.join(devices)}")
    lines.extend(_taint_lines(outcome))
    cores = _cores(outcome)
    if cores is not None:
        lines.append(f"  cores    {cores}")
    if outcome.prepared is not None:
        for name, value in outcome.prepared.env:
            lines.append(f"  env      {name}={value}")
        lines.append(f"  devices  {' '.join(outcome.prepared.device_nodes)}")
    if outcome.prepare_error:
        lines.append(f"  the driver would refuse to prepare it: {outcome.prepare_error}")
    return lines + warnings
