"""DeviceTaintRules: a taint on every device a rule selects, as the scheduler sees it.

The kube-scheduler's ResourceSlice tracker adds each rule's taint to the devices its
`deviceSelector` names by driver, pool and device name (each optional, all must
match), as if the driver had published the taint; the allocator then keeps a
device whose NoSchedule or NoExecute taint a request does not tolerate out of
reach, and ignores effect None. A rule without a selector selects nothing
(Kubernetes 1.37; the alpha of 1.34-1.36 tainted every device). The selector's
`deviceClassName` and CEL `selectors` of the alpha were removed in 1.35: a rule
that still has them is refused, since what it selects cannot be told.

Rules come as resource.k8s.io v1 (Kubernetes 1.37), v1beta2 (1.36) or v1alpha3
(1.34-1.35), from the input files or a live cluster.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neuron_dra.tools.simulate.claims import RESOURCE_GROUP, InputError, Json
from neuron_dra.tools.simulate.nodes import TAINT_RULE_VERSIONS as VERSIONS
from neuron_dra.tools.simulate.nodes import SimDevice, SimNode

KIND = "DeviceTaintRule"
EFFECTS = ("None", "NoSchedule", "NoExecute")
REMOVED_SELECTORS = ("deviceClassName", "selectors")
# A label name: an optional DNS subdomain prefix, then a name of at most 63 characters.
_LABEL_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class TaintRule:
    name: str
    source: str  # file:line, or `cluster` for a rule read from the API server
    taint: Json  # key, value, effect
    selects: bool  # False: no deviceSelector, which selects no device
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def applies(self, device: SimDevice) -> bool:
        return (
            self.selects
            and self.driver in (None, device.driver)
            and self.pool in (None, device.pool)
            and self.device in (None, device.name)
        )

    @property
    def taint_text(self) -> str:
        return taint_text(self.taint)


@dataclass(frozen=True)
class Applied:
    """A rule and the devices it tainted: (node, device name) each."""

    rule: TaintRule
    devices: tuple[tuple[str, str], ...]


def is_taint_rule(doc: Mapping[str, Any]) -> bool:
    return doc.get("kind") == KIND and str(doc.get("apiVersion", "")).startswith(
        RESOURCE_GROUP + "/"
    )


def taint_text(taint: Mapping[str, Any]) -> str:
    """`key=value:Effect`, as kubectl writes a node's taint; `key:Effect` without a value."""
    value = taint.get("value")
    return f"{taint.get('key')}{f'={value}' if value else ''}:{taint.get('effect')}"


def parse_taint_rule(doc: Mapping[str, Any], source: str) -> TaintRule:
    """A DeviceTaintRule document -> TaintRule; an InputError says what the API server
    would refuse, or what simulate cannot tell."""
    metadata = doc.get("metadata") or {}
    name = str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""
    where = f"{source}: {KIND} {name or '?'}"
    version = str(doc.get("apiVersion")).rpartition("/")[2]
    if version not in VERSIONS:
        known = ", ".join(f"{RESOURCE_GROUP}/{v}" for v in VERSIONS)
        raise InputError(f"{where}: apiVersion {doc.get('apiVersion')}: Kubernetes serves {known}")
    if not name:
        raise InputError(f"{where}: metadata.name is missing")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise InputError(f"{where}: spec is missing")
    taint = spec.get("taint")
    if not isinstance(taint, Mapping):
        raise InputError(f"{where}: spec.taint is missing")
    key, effect = taint.get("key"), taint.get("effect")
    if not isinstance(key, str) or not _LABEL_NAME.match(key) or len(key) > 316:
        raise InputError(f"{where}: spec.taint.key {key!r} is not a label name")
    if effect not in EFFECTS:
        raise InputError(
            f"{where}: spec.taint.effect {effect!r}: expected one of {', '.join(EFFECTS)}"
        )
    value = taint.get("value", "")
    if not isinstance(value, str):
        raise InputError(f"{where}: spec.taint.value must be a string")
    selector = spec.get("deviceSelector")
    if selector is None:
        return TaintRule(name, source, {"key": key, "value": value, "effect": effect}, False)
    if not isinstance(selector, Mapping):
        raise InputError(f"{where}: spec.deviceSelector must be a mapping")
    removed = [f for f in REMOVED_SELECTORS if f in selector]
    if removed:
        raise InputError(
            f"{where}: spec.deviceSelector.{removed[0]} was removed in Kubernetes 1.35 "
            "(the API server drops it), so what the rule selects cannot be told; "
            "select by driver, pool and device"
        )
    fields = {}
    for field in ("driver", "pool", "device"):
        given = selector.get(field)
        if given is not None and (not isinstance(given, str) or not given):
            raise InputError(f"{where}: spec.deviceSelector.{field} must be a non-empty string")
        fields[field] = given
    return TaintRule(
        name,
        source,
        {"key": key, "value": value, "effect": effect},
        True,
        fields["driver"],
        fields["pool"],
        fields["device"],
    )


def apply_rules(nodes: Sequence[SimNode], rules: Sequence[TaintRule]) -> list[Applied]:
    """Add each rule's taint to the devices it selects, in the rules' order (the nodes'
    devices are replaced by tainted copies); what each rule tainted."""
    tainted: dict[str, list[tuple[str, str]]] = {r.name: [] for r in rules}
    for node in nodes:
        for index, device in enumerate(node.devices):
            matching = [r for r in rules if r.applies(device)]
            if not matching:
                continue
            node.devices[index] = dataclasses.replace(
                device,
                taints=(*device.taints, *(r.taint for r in matching)),
                rules=(*device.rules, *(r.name for r in matching)),
            )
            for rule in matching:
                tainted[rule.name].append((node.name, device.name))
    return [Applied(r, tuple(tainted[r.name])) for r in rules]


def describe_applied(applied: Applied) -> str:
    """One line: what the rule taints, or why it taints nothing."""
    rule = applied.rule
    head = f"DeviceTaintRule {rule.name} ({rule.source}) {rule.taint_text}"
    if not rule.selects:
        return f"{head}: no deviceSelector, so no device (Kubernetes 1.37)"
    if not applied.devices:
        return f"{head}: selects no device of the cluster"
    shown = [f"{node}/{device}" for node, device in applied.devices[:8]]
    more = len(applied.devices) - len(shown)
    count = len(applied.devices)
    listed = " ".join(shown) + (f" and {more} more" if more else "")
    return f"{head}: taints {count} device{'s' if count > 1 else ''}: {listed}"


def applied_json(applied: Applied) -> Json:
    rule = applied.rule
    return {
        "name": rule.name,
        "source": rule.source,
        "taint": dict(rule.taint),
        "selector": {
            k: v
            for k, v in (("driver", rule.driver), ("pool", rule.pool), ("device", rule.device))
            if v is not None
        }
        if rule.selects
        else None,
        "devices": [{"node": n, "device": d} for n, d in applied.devices],
    }
