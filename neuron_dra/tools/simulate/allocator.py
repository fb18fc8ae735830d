"""Allocation: claims onto a cluster, as the kube-scheduler's DRA allocator would.

The rules are those of the structured-parameters allocator for the features
this driver's slices use: DeviceClass and request CEL selectors, ExactCount
and All, firstAvailable subrequests, matchAttribute constraints, devices
already allocated, shared counters and device taints. All claims of a pod land
on one node. Nodes are tried in name order and the first that fits wins, where
the scheduler would score the feasible nodes; which node is picked may differ,
what fits on a node does not. An allocated claim is then planned by the
driver's own claim planner, for the environment its containers would get.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from consts import ATTR_RESOURCE_TYPE, DRIVER_NAME, RESOURCE_TYPE_CORE
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import ClaimError, plan
from neuron_dra.tools.cel import CelCompileError, CelEvalError, Selector, compile_selector
from neuron_dra.tools.counted import counted
from neuron_dra.tools.simulate.claims import (
    MAX_CLAIM_DEVICES,
    Alternative,
    Claim,
    DeviceClass,
    InputError,
    Json,
)
from neuron_dra.tools.simulate.nodes import CounterKey, DeviceKey, SimDevice, SimNode
from neuron_dra.tools.simulate.progress import Progress, quiet
from neuron_dra.tools.simulate.search import (
    NodeFailedError,
    Placement,
    Search,
    available,
    tolerated,
)
from neuron_dra.tools.simulate.taintrules import Applied, TaintRule, apply_rules


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


class Cluster:
    """Nodes, device classes and what is already allocated; allocation mutates it."""

    def __init__(self, nodes: Sequence[SimNode], classes: Mapping[str, DeviceClass]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.classes = dict(classes)
        self.taken: dict[DeviceKey, str] = {}  # device -> who holds it
        self.used: dict[CounterKey, Fraction] = {}
        self._selectors: dict[str, Selector] = {}
        self._matches: dict[tuple[str, DeviceKey], bool | CelEvalError] = {}
        self.taint_rules: list[Applied] = []  # DeviceTaintRules, with what each tainted

    def add_taint_rules(self, rules: Sequence[TaintRule]) -> None:
        """Taint the devices each rule selects, as the scheduler does before it allocates."""
        self.taint_rules.extend(apply_rules(self.nodes, rules))

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

    def snapshot(self) -> tuple[dict[DeviceKey, str], dict[CounterKey, Fraction]]:
        """What is allocated now, for `restore`."""
        return dict(self.taken), dict(self.used)

    def restore(self, saved: tuple[dict[DeviceKey, str], dict[CounterKey, Fraction]]) -> None:
        self.taken, self.used = dict(saved[0]), dict(saved[1])

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
            raise NodeFailedError(
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
                raise NodeFailedError(
                    f"request {alt.name}: CEL runtime error on {device.name}: {err} "
                    "(the scheduler gives up on the node)"
                ) from None
            except CelCompileError as err:
                raise NodeFailedError(
                    f"request {alt.name}: selector does not compile: {err}"
                ) from None
        return out

    def candidates(self, alt: Alternative, node: SimNode) -> list[SimDevice]:
        return [d for d in self.selected(alt, node) if tolerated(d.taints, alt.tolerations)]

    # --- allocation ----------------------------------------------------------

    def allocate(self, claims: Sequence[Claim], progress: Progress = quiet) -> list[Outcome]:
        """Allocate every claim in order; claims of one pod go to one node together.

        `progress(claims done, claims)` after each pod's claims."""
        outcomes = outcomes_of(claims)
        done = 0
        for group in by_pod(outcomes):
            self.allocate_pod(group)
            done += len(group)
            progress(done, len(outcomes))
        return outcomes

    def allocate_pod(self, group: list[Outcome], nodes: Sequence[SimNode] | None = None) -> None:
        """Allocate one pod's claims together on the first of `nodes` (all: None) they fit."""
        claims = [o.claim for o in group]
        reasons = [
            f"{'the claim' if len(claims) == 1 else f'claim {c.key}'} asks for {n} devices, "
            f"more than the {MAX_CLAIM_DEVICES} one claim can hold ({_RESULTS_LIMIT}): the "
            "scheduler never allocates it"
            for c in claims
            if (n := _fewest(c)) > MAX_CLAIM_DEVICES
        ]
        if reasons:
            for outcome in group:
                outcome.reasons = reasons
            return
        for node in self.nodes if nodes is None else nodes:
            unmatched = [(k, v) for k, v in claims[0].node_selector if node.labels.get(k) != v]
            if unmatched:
                reasons.append(f"{node.name}: {NOT_SELECTED}")
                continue
            try:
                found = Search(self, node, claims).first()
            except NodeFailedError as err:
                reasons.append(f"{node.name}: {err}")
                continue
            if found is None:
                reasons.extend(f"{node.name}: {r}" for r in self.explain(node, claims))
                continue
            for outcome, placements in zip(group, found, strict=True):
                outcome.node = node.name
                outcome.placements = placements
                for placement in placements:
                    if not placement.admin:
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
            Search(self, node, [claim]).run(collect)
        except NodeFailedError:
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
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": p.request,
                                "driver": p.device.driver,
                                "pool": p.device.pool,
                                "device": p.device.name,
                            }
                            for p in ours
                        ],
                        "config": config,
                    }
                }
            },
        }
        try:
            prepared = plan(
                ClaimRef(claim.namespace, claim.name, claim.key),
                obj,
                node.inventory,
                ours[0].device.pool,
            )
        except ClaimError as err:
            outcome.prepare_error = str(err)
            return
        nodes = sorted(
            {d.dev_path for p in prepared.devices for d in p.neuron_devices},
            key=lambda p: int(p.removeprefix("/dev/neuron")),
        )
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
        if alt.all and len(selected) > MAX_CLAIM_DEVICES:
            return (
                f"allocationMode All matches {len(selected)} devices, more than the "
                f"{MAX_CLAIM_DEVICES} one claim can hold ({_RESULTS_LIMIT})"
            )
        tolerable = [d for d in selected if tolerated(d.taints, alt.tolerations)]
        free = [d for d in tolerable if self._free(d, alt.admin)]
        verb = "matches" if len(selected) == 1 else "match"
        matching = f"{counted(len(selected), 'device')} {verb} the selectors"
        untolerated = len(selected) - len(tolerable)
        if untolerated:
            matching += f" ({untolerated} with taints the request does not tolerate"
            matching += f"{_rules_of(selected, alt)})"
        blocked = [
            d
            for d in tolerable
            if (alt.admin or d.key not in self.taken) and not self._free(d, alt.admin)
        ]
        free_text = f"{len(free)} free"
        if blocked:
            free_text += f" ({len(blocked)} held through shared counters by allocated devices)"
        if alt.all:
            every = f"{matching}, {free_text}; allocationMode All needs every one of them"
            if len(free) < len(tolerable) or untolerated:
                return every
            over = self._over_counters(free)
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
        over = self._over_counters(free) if alt.count > 1 else None
        return f"{matching}, {free_text}, and together they {over}" if over else None

    def _over_counters(self, devices: Sequence[SimDevice]) -> str | None:
        """The first shared counter `devices` together consume more of than is left."""
        totals: dict[CounterKey, Fraction] = {}
        for device in devices:
            for counter, amount in device.consumes:
                totals[counter] = totals.get(counter, Fraction(0)) + amount
        for counter, amount in totals.items():
            left = self.counters_of(counter) - self.used.get(counter, Fraction(0))
            if amount > left:
                return (
                    f"consume {amount} of shared counter {counter[2]}/{counter[3]}, "
                    f"which holds {left}"
                )
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
        steps = [
            (f"DeviceClass {alt.device_class} selector `{e}`", e) for e in device_class.selectors
        ]
        steps += [(f"selector `{e}`", e) for e in alt.selectors]
        for label, expression in steps:
            kept = [d for d in left if self.matches(expression, d)]
            if len(kept) < len(left):
                parts.append(f"{label} excludes {len(left) - len(kept)}")
            left = kept
        of = counted(len(node.devices), "device")
        return f"no device matches the selectors: of {of}, " + ", ".join(parts)

    def _free(self, device: SimDevice, admin: bool) -> bool:
        return available(self, device, self.used, admin=admin)


_RESULTS_LIMIT = "resource.k8s.io AllocationResultsMaxSize"
NOT_SELECTED = "does not match the pod's nodeSelector"


def _whole(device: SimDevice) -> bool:
    """A Neuron device or the node device, the units the driver withdraws around."""
    if device.driver != DRIVER_NAME:
        return False
    return bool(device.attribute(f"{DRIVER_NAME}/{ATTR_RESOURCE_TYPE}") != RESOURCE_TYPE_CORE)


def _rules_of(devices: Sequence[SimDevice], alt: Alternative) -> str:
    """`, from DeviceTaintRule a, b`: the rules whose taints `alt` does not tolerate."""
    names = []
    for device in devices:
        for taint, rule in device.taint_sources():
            if rule and rule not in names and not tolerated((taint,), alt.tolerations):
                names.append(rule)
    return f", from DeviceTaintRule {', '.join(names)}" if names else ""


def _fewest(claim: Claim) -> int:
    """The fewest devices an allocation of the claim holds (All requests counted as none)."""
    return sum(min(a.count for a in r.alternatives) for r in claim.spec.requests)


def outcomes_of(claims: Sequence[Claim]) -> list[Outcome]:
    """An outcome for each claim, nothing allocated yet, lettered in order."""
    outcomes = [Outcome(c) for c in claims]
    for i, outcome in enumerate(outcomes):
        outcome.letter = _letter(i)
    return outcomes


def by_pod(outcomes: Sequence[Outcome]) -> list[list[Outcome]]:
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
