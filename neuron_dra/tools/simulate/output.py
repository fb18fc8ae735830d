"""What a simulation prints: each claim's node, devices and environment, or why not."""

from __future__ import annotations

from neuron_dra.tools.simulate.allocator import Outcome
from neuron_dra.tools.simulate.inputs import Json


def outcome_json(outcome: Outcome) -> Json:
    claim = outcome.claim
    out: Json = {
        "claim": claim.key,
        "source": claim.source,
        "template": claim.template,
        "pod": claim.pod,
        **({"extendedResources": dict(claim.extended)} if claim.extended else {}),
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
    if claim.extended and claim.pod:
        asked = ", ".join(f"{name}: {count}" for name, count in claim.extended)
        origin = f"Pod {claim.pod.split('/', 1)[1]} ({asked}), "
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
