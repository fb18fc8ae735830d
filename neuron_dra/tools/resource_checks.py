"""The checks of one ResourceClaimTemplate, ResourceClaim or DeviceClass that `lint`
runs: its selectors against what the driver publishes, its requests, constraints and
opaque configs. Each problem is a `Finding`; a malformed part is reported and left
out, so the checks that do not depend on it still run."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from consts import DRIVER_NAME, RESOURCE_TYPE_DEVICE, RESOURCE_TYPE_NODE
from neuron_dra.tools import fits, opaque
from neuron_dra.tools.cel import CelCompileError, compile_selector
from neuron_dra.tools.celhints import equals_for_assignment, guarded
from neuron_dra.tools.manifests import Path as FieldPath
from neuron_dra.tools.opaque import Problem
from neuron_dra.tools.plugin_pods import GROUP_PREFIX
from neuron_dra.tools.published import (
    OUR_DOMAINS,
    lacking,
    matching_cores,
    matching_kinds,
    matching_types,
    narrow,
    node_specific,
    published,
    suggest,
    unpublished,
    usable,
)
from neuron_dra.tools.releases import FIRST_GATED_CORES, Release
from neuron_dra.tools.simulate import (
    MAX_CLAIM_DEVICES,
    Alternative,
    ClaimSpec,
    Constraint,
    DeviceClass,
    InputError,
    Request,
    parse_claim_spec,
)

Json = dict[str, Any]
BOTH_KINDS = frozenset({RESOURCE_TYPE_DEVICE, RESOURCE_TYPE_NODE})
RESULTS_LIMIT = "resource.k8s.io AllocationResultsMaxSize"
# The parts findings name: `request NAME`, `request NAME: selectors[I]`, a class's
# `selectors[I]`, `constraints[I]`.
_SELECTOR_PART = re.compile(r"(?:request (\S+?))?(?:(?:: )?selectors\[(\d+)\])?")
_CONSTRAINT_PART = re.compile(r"constraints\[(\d+)\]")


@dataclass(frozen=True)
class Finding:
    file: str
    where: str  # kind/name and the part of it; empty for the file as a whole
    message: str
    error: bool
    line: int | None = None  # the field's, else where the object (or file's problem) starts

    def __str__(self) -> str:
        level = "error" if self.error else "warning"
        at = self.file if self.line is None else f"{self.file}:{self.line}"
        return ": ".join(p for p in (at, level, self.where, self.message) if p)


class Checker:
    """Collects the findings of one object, part by part."""

    def __init__(
        self,
        file: str,
        where: str,
        classes: Mapping[str, DeviceClass],
        instance_types: Sequence[str],
        line: int | None = None,
        *,
        release: Release | None = None,
        lines: Mapping[FieldPath, int] | None = None,
        spec: FieldPath = ("spec",),
    ) -> None:
        self.file = file
        self.release = release
        self.lines = lines or {}
        self.spec = spec  # where the claim's (or the class's) spec is in the object
        self.request_paths: dict[str, FieldPath] = {}  # request (alternative) -> its fields
        self.line = line
        self.where = where
        self.classes = classes
        self.instance_types = tuple(instance_types)
        self.findings: list[Finding] = []
        # Per request alternative: the instance types it can land on, and those it is pinned to.
        self.types: dict[str, tuple[str, ...]] = {}
        self.pinned: dict[str, tuple[str, ...]] = {}
        self.unreadable: set[str] = set()  # requests that exist but could not be read
        self.cores: list[str] = []  # requests (alternatives) that can only get NeuronCores

    def error(self, message: str, part: str = "") -> None:
        line = self._line(part, message)
        self.findings.append(Finding(self.file, self._at(part), message, True, line))

    def warn(self, message: str, part: str = "") -> None:
        line = self._line(part, message)
        self.findings.append(Finding(self.file, self._at(part), message, False, line))

    def _line(self, part: str, message: str) -> int | None:
        """The line of the field `part` names (and, for a count, of the count), where
        the YAML reader saw it; else the object's."""
        path: FieldPath | None = None
        if not part:
            pass  # the object as a whole
        elif found := _SELECTOR_PART.fullmatch(part):
            name, index = found.groups()
            base = self.request_paths.get(name) if name else self.spec
            if base is not None:
                path = (*base, "selectors", int(index), "cel", "expression") if index else base
                if not index and message.startswith("count "):
                    path = (*path, "count")
        elif found := _CONSTRAINT_PART.fullmatch(part):
            path = (*self.spec, "devices", "constraints", int(found.group(1)))
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.line

    def _at(self, part: str) -> str:
        return f"{self.where}: {part}" if part else self.where

    def report(self, *problems: Problem | None) -> None:
        for problem in problems:
            if problem is not None:
                (self.error if problem.error else self.warn)(problem.message, problem.part)

    def mapping(self, value: object, field: str) -> Mapping[str, Any]:
        """`value` if it is a mapping; anything else but null is an error and reads as empty."""
        if isinstance(value, Mapping):
            return value
        if value is not None:
            self.error(f"{field} is a {opaque.json_type(value)}, not a mapping")
        return {}

    # --- selectors ------------------------------------------------------------

    def selectors(
        self, part: str, expressions: Sequence[str], base: Sequence[str] = ()
    ) -> tuple[tuple[str, ...], bool, tuple[str, ...]]:
        """Instance types the usable selectors (and `base`) accept, whether all were usable,
        and the usable `expressions`.

        A selector that does not compile or names an attribute never published
        is reported and left out, so the rest still tells where the request can
        land: the types of the full set are among those.
        """
        accepted = [e for e in base if usable(e)]
        own: list[str] = []
        unknown: list[tuple[str, str, str]] = []
        clean = True
        for i, expression in enumerate(expressions):
            at = f"{part}selectors[{i}]"
            try:
                compile_selector(expression)
            except CelCompileError as err:
                fixed = equals_for_assignment(expression)
                tip = f"; did you mean {fixed!r} (== compares, = is not CEL)?" if fixed else ""
                self.error(f"CEL {err}{tip}", at)
                clean = False
                continue
            missing = unpublished(expression)
            unknown.extend((at, domain, name) for domain, name in missing)
            if missing:
                clean = False
            else:
                # The scheduler stops at the first selector a device fails: only devices
                # the class's and the earlier selectors accept ever evaluate this one.
                self._unguarded(expression, (*accepted, *own), at)
                own.append(expression)
        accepted += own
        types = matching_types(tuple(accepted))
        pinned = self.instance_types or (types if narrow(types) else ())
        known = published().names_on(pinned)
        for at, domain, name in unknown:
            hint = suggest(name, known.get(domain, ()))
            tip = f"; did you mean {hint!r}?" if hint else ""
            self.error(f"attribute {domain}/{name} is never published by the driver{tip}", at)
        return types, clean, tuple(own)

    def _unguarded(self, expression: str, before: tuple[str, ...], at: str) -> None:
        """An attribute read bare where some device `before` accepts lacks it."""
        missing = lacking(expression, before)
        if not missing or node_specific((expression,)):
            return  # node-specific attributes get a warning of their own
        fixed = guarded(expression, missing)
        names = ", ".join(f"{d}/{n}" for d, n in sorted(missing))
        tip = f"; did you mean {fixed!r}?" if fixed else ""
        self.warn(
            f"{names} is not published on every device the class and the earlier selectors "
            "accept: on one without "
            f"it the selector is a CEL runtime error, which fails the pod's scheduling{tip}",
            at,
        )

    # --- device classes -------------------------------------------------------

    def device_class(self, device_class: DeviceClass) -> None:
        types, _, own = self.selectors("", device_class.selectors)
        if self.configs(device_class.config, set(), None):
            if types and matching_kinds(own) == fits.CORES:
                self.report(fits.lnc_of_cores("", "the class selects"))
            else:
                self.report(fits.lnc(self.instance_types or types, "", "the class"))

    # --- claims ---------------------------------------------------------------

    def claim_spec(self, spec: Mapping[str, Any]) -> ClaimSpec:
        """The claim's requests and constraints; each malformed one is reported and left out."""
        devices = self.mapping(spec.get("devices"), "devices")
        requests: list[Request] = []
        for i, entry in enumerate(devices.get("requests") or []):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if not name:
                self.error(f"requests[{i}] has no name")
                continue
            self._request_paths(str(name), entry, (*self.spec, "devices", "requests", i))
            try:
                # One request at a time, so one malformed request hides no other.
                requests.extend(parse_claim_spec({"devices": {"requests": [entry]}}, "-").requests)
            except InputError as err:
                self.error(str(err).removeprefix("-: "))
                self.unreadable.add(str(name))
            except AttributeError as err:  # the parser reads fields of what must be mappings
                found = opaque.json_type(err.obj)
                self.error(f"request {name!r} is malformed: a {found} where a mapping belongs")
                self.unreadable.add(str(name))
        known = {r.name for r in requests} | {a.name for r in requests for a in r.alternatives}
        constraints = []
        for i, entry in enumerate(devices.get("constraints") or []):
            attribute = entry.get("matchAttribute") if isinstance(entry, Mapping) else None
            if not attribute:
                continue  # distinctAttribute and future kinds are not published by this driver
            listed = tuple(str(r) for r in entry.get("requests") or ())
            for request in listed:
                if request not in known and request.split("/", 1)[0] not in self.unreadable:
                    self.error(f"names unknown request {request!r}", f"constraints[{i}]")
            qualified = attribute if "/" in attribute else f"{DRIVER_NAME}/{attribute}"
            constraints.append(Constraint(listed, qualified))
        config = tuple(devices.get("config") or ())
        return ClaimSpec(tuple(requests), tuple(constraints), config)

    def _request_paths(self, name: str, entry: Mapping[str, Any], path: FieldPath) -> None:
        """Where the request's fields are: under `exactly` in v1, the request itself in
        the betas, and each of its `firstAvailable` subrequests."""
        self.request_paths[name] = (*path, "exactly") if "exactly" in entry else path
        for j, sub in enumerate(entry.get("firstAvailable") or ()):
            if isinstance(sub, Mapping) and sub.get("name"):
                self.request_paths[f"{name}/{sub['name']}"] = (*path, "firstAvailable", j)

    def claim(self, claim: ClaimSpec) -> None:
        names = {r.name for r in claim.requests} | {
            a.name for r in claim.requests for a in r.alternatives
        }
        names |= self.unreadable  # reported already; a config naming one is not wrong too
        start = len(self.findings)
        for request in claim.requests:
            for alt in request.alternatives:
                self.request(claim, alt)
        note = fits.cores_note(self.cores, self.release)
        if note is not None:
            # One note for the claim, ahead of what its requests were found to get wrong.
            self.findings.insert(
                start, Finding(self.file, self.where, note.message, note.error, self.line)
            )
        counts = [min(a.count for a in r.alternatives) for r in claim.requests]
        if sum(counts) > MAX_CLAIM_DEVICES >= max(counts, default=0):
            self.error(
                f"the requests ask for {sum(counts)} devices together: a claim holds at most "
                f"{MAX_CLAIM_DEVICES} ({RESULTS_LIMIT}), so the scheduler never allocates it; "
                "split them over several claims"
            )
        for i, constraint in enumerate(claim.constraints):
            self._constraint(f"constraints[{i}]", constraint)
        lnc_requests = self.configs(claim.config, names, claim)
        for request in claim.requests:
            for alt in request.alternatives:
                device_class = self.classes.get(alt.device_class)
                from_class = device_class is not None and opaque.sets_lnc(device_class.config)
                if not (from_class or lnc_requests & {"*", request.name, alt.name}):
                    continue
                if alt.name in self.cores:
                    self.report(fits.lnc_of_cores(f"request {alt.name}", "the request asks for"))
                else:
                    types = self.instance_types or self.types[alt.name]
                    self.report(fits.lnc(types, f"request {alt.name}"))

    def request(self, claim: ClaimSpec, alt: Alternative) -> None:
        part = f"request {alt.name}"
        device_class = self.classes.get(alt.device_class)
        if device_class is None:
            self.warn(
                f"DeviceClass {alt.device_class} is neither the driver's ({DRIVER_NAME}) nor "
                "among the inputs; it must exist in the cluster",
                part,
            )
        base = device_class.selectors if device_class else ()
        types, clean, own = self.selectors(f"{part}: ", alt.selectors, base)
        pinned = self.instance_types or (types if narrow(types) else ())
        self.types[alt.name], self.pinned[alt.name] = types, pinned
        if not types:
            if node_specific((*base, *own)):
                self.warn(
                    "the selectors compare values each node publishes for itself (its "
                    "network layers, PCIe roots, serial numbers): which nodes match is not "
                    "checked here. Where a device lacks the attribute a bare comparison is a "
                    "CEL runtime error that fails the pod's scheduling: guard it with has()",
                    part,
                )
            elif clean:
                wrong_class = fits.class_without_cores(part, alt, base, own)
                self.report(wrong_class)
                if wrong_class is None:
                    self.warn("no device of any Neuron instance type matches the selectors", part)
            return
        usable_base = tuple(e for e in base if usable(e))
        cores = matching_kinds((*usable_base, *own)) == fits.CORES
        if cores:
            self.cores.append(alt.name)
        if not alt.all and alt.count > MAX_CLAIM_DEVICES:
            self.error(
                f"count {alt.count}: a claim holds at most {MAX_CLAIM_DEVICES} devices "
                f"({RESULTS_LIMIT}), so the scheduler never allocates it; split the request "
                "over several claims",
                part,
            )
            return
        if cores and not alt.all:
            sizes = matching_cores((*usable_base, *own))
            self.report(*fits.core_count(claim, alt, sizes, pinned))
            return
        both = matching_kinds((*usable_base, *own)) >= BOTH_KINDS
        if alt.all and both and (self.release is None or self.release >= FIRST_GATED_CORES):
            self.report(fits.all_of_both_kinds(part))
        if alt.all:
            return
        if not pinned:
            # Not pinned to a type, yet bounded by the largest the selectors allow.
            self.report(fits.beyond_largest(part, alt.count, types))
            return
        groups = [
            c.attribute
            for c in claim.constraints
            if c.applies(alt.name) and c.attribute.startswith(GROUP_PREFIX)
        ]
        for instance_type in pinned:
            self.report(*fits.device_count(part, alt.count, instance_type, groups))

    def _constraint(self, part: str, constraint: Constraint) -> None:
        domain, _, attribute = constraint.attribute.partition("/")
        if domain not in OUR_DOMAINS or attribute in published().names.get(domain, ()):
            return
        # Suggest only what every instance type the constrained requests are pinned to has.
        pinned = {t for alt, types in self.pinned.items() if constraint.applies(alt) for t in types}
        hint = suggest(attribute, published().names_on(sorted(pinned)).get(domain, ()))
        tip = f"; did you mean {domain}/{hint}?" if hint else ""
        self.error(
            f"matchAttribute {constraint.attribute} is never published by the driver, "
            f"so no device satisfies the constraint{tip}",
            part,
        )

    # --- configs --------------------------------------------------------------

    def configs(
        self, entries: Sequence[Json], names: set[str], claim: ClaimSpec | None
    ) -> set[str]:
        """Check opaque configs; returns the requests a NeuronConfig sets LNC for."""
        lnc, problems = opaque.check(entries, names, claim is not None)
        self.report(*problems)
        return lnc
