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

from consts import DRIVER_NAME
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import ClaimError, plan
from neuron_dra.tools.cel import CelCompileError, CelEvalError, Selector, compile_selector
from neuron_dra.tools.simulate.claims import (
    MAX_CLAIM_DEVICES,
    Alternative,
    Claim,
    DeviceClass,
    InputError,
    Json,
)
from neuron_dra.tools.simulate.explain import RESULTS_LIMIT, explain
from neuron_dra.tools.simulate.nodes import CounterKey, DeviceKey, SimDevice, SimNode
from neuron_dra.tools.simulate.progress import Progress, quiet
from neuron_dra.tools.simulate.search import (
    NodeFailedError,
    Placement,
    Search,
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
            f"more than the {MAX_CLAIM_DEVICES} one claim can hold ({RESULTS_LIMIT}): the "
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
                reasons.extend(f"{node.name}: {r}" for r in explain(self, node, claims))
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

    def counters_of(self, counter: CounterKey) -> Fraction:
        for node in self.nodes:
            if counter in node.counters:
                return node.counters[counter]
        return Fraction(0)


NOT_SELECTED = "does not match the pod's nodeSelector"


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
