"""Why claims do not fit on a node: the words `simulate` prints for each node.

Once the search finds no allocation, each request is checked on its own: which
selectors exclude the devices, how many are taken, tainted (and by which
DeviceTaintRule), held through shared counters, or short of a shared attribute.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from neuron_dra.tools.counted import counted
from neuron_dra.tools.simulate.claims import MAX_CLAIM_DEVICES, Alternative, Claim
from neuron_dra.tools.simulate.nodes import CounterKey, SimDevice, SimNode
from neuron_dra.tools.simulate.search import Allocated, available, tolerated

RESULTS_LIMIT = "resource.k8s.io AllocationResultsMaxSize"


def explain(cluster: Allocated, node: SimNode, claims: Sequence[Claim]) -> list[str]:
    """Why the claims do not fit on a node where the search found nothing."""
    reasons = []
    many = sum(len(c.spec.requests) for c in claims) > 1
    for claim in claims:
        for request in claim.spec.requests:
            for alt in request.alternatives:
                reason = _explain_request(cluster, node, claim, alt)
                if reason:
                    prefix = f"request {alt.name}: " if many else ""
                    reasons.append(prefix + reason)
    if not reasons:
        reasons.append("each request fits alone, but not all requests of the pod's claims together")
    return reasons


def _explain_request(
    cluster: Allocated, node: SimNode, claim: Claim, alt: Alternative
) -> str | None:
    selected = cluster.selected(alt, node)
    if not selected:
        return _explain_selectors(cluster, node, alt)
    if alt.all and len(selected) > MAX_CLAIM_DEVICES:
        return (
            f"allocationMode All matches {len(selected)} devices, more than the "
            f"{MAX_CLAIM_DEVICES} one claim can hold ({RESULTS_LIMIT})"
        )
    tolerable = [d for d in selected if tolerated(d.taints, alt.tolerations)]
    free = [d for d in tolerable if _free(cluster, d, alt.admin)]
    verb = "matches" if len(selected) == 1 else "match"
    matching = f"{counted(len(selected), 'device')} {verb} the selectors"
    untolerated = len(selected) - len(tolerable)
    if untolerated:
        matching += f" ({untolerated} with taints the request does not tolerate"
        matching += f"{_rules_of(selected, alt)})"
    blocked = [
        d
        for d in tolerable
        if (alt.admin or d.key not in cluster.taken) and not _free(cluster, d, alt.admin)
    ]
    free_text = f"{len(free)} free"
    if blocked:
        free_text += f" ({len(blocked)} held through shared counters by allocated devices)"
    if alt.all:
        every = f"{matching}, {free_text}; allocationMode All needs every one of them"
        if len(free) < len(tolerable) or untolerated:
            return every
        over = _over_counters(cluster, free)
        return f"{every}, and together they {over}" if over else None
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
                text += f" ({lacking} {'does' if lacking == 1 else 'do'} not have it)"
            return text
    over = _over_counters(cluster, free) if alt.count > 1 else None
    return f"{matching}, {free_text}, and together they {over}" if over else None


def _over_counters(cluster: Allocated, devices: Sequence[SimDevice]) -> str | None:
    """The first shared counter `devices` together consume more of than is left."""
    totals: dict[CounterKey, Fraction] = {}
    for device in devices:
        for counter, amount in device.consumes:
            totals[counter] = totals.get(counter, Fraction(0)) + amount
    for counter, amount in totals.items():
        left = cluster.counters_of(counter) - cluster.used.get(counter, Fraction(0))
        if amount > left:
            return (
                f"consume {amount} of shared counter {counter[2]}/{counter[3]}, which holds {left}"
            )
    return None


def _explain_selectors(cluster: Allocated, node: SimNode, alt: Alternative) -> str:
    device_class = cluster.classes[alt.device_class]
    left = list(node.devices)
    if not left:
        return "publishes no devices"
    parts = []
    steps = [(f"DeviceClass {alt.device_class} selector `{e}`", e) for e in device_class.selectors]
    steps += [(f"selector `{e}`", e) for e in alt.selectors]
    for label, expression in steps:
        kept = [d for d in left if cluster.matches(expression, d)]
        if len(kept) < len(left):
            parts.append(f"{label} excludes {len(left) - len(kept)}")
        left = kept
    of = counted(len(node.devices), "device")
    return f"no device matches the selectors: of {of}, " + ", ".join(parts)


def _free(cluster: Allocated, device: SimDevice, admin: bool) -> bool:
    return available(cluster, device, cluster.used, admin=admin)


def _rules_of(devices: Sequence[SimDevice], alt: Alternative) -> str:
    """`, from DeviceTaintRule a, b`: the rules whose taints `alt` does not tolerate."""
    names = []
    for device in devices:
        for taint, rule in device.taint_sources():
            if rule and rule not in names and not tolerated((taint,), alt.tolerations):
                names.append(rule)
    return f", from DeviceTaintRule {', '.join(names)}" if names else ""
