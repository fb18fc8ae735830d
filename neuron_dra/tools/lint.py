"""Static checks of ResourceClaimTemplates, ResourceClaims and DeviceClasses for this driver.

Everything is checked against what the driver really publishes: the attribute
names come from building the slices of every instance type in the catalogue,
and which instance types a request can land on is found by evaluating its
selectors against those devices, not by reading the expression. Errors are
mistakes that keep a claim from ever being allocated or prepared; warnings
are requests that work only somewhere, or only on some clusters.

Every problem of every file is reported: a malformed request, selector, file
or DeviceClass is a finding, and the checks that do not depend on it still run.

Requests for logical NeuronCores (resourceType neuron_core) get a note that
cores are published only where partitionable devices are served, and the
rules of cores: no LNC of their own, at most 32 to a claim, no more of one
device than it has. Pods (and the pod templates of workloads) are read for the
device plugin's extended resources only (`plugin_pods`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consts import (
    ATTR_DEVICE_ID,
    DRIVER_NAME,
    GROUP_ATTRIBUTE_DOMAIN,
    RESOURCE_TYPE_CORE,
    RESOURCE_TYPE_DEVICE,
    RESOURCE_TYPE_NODE,
)
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools import apischema, manifests, opaque
from neuron_dra.tools.cel import CelCompileError, compile_selector
from neuron_dra.tools.counted import counted
from neuron_dra.tools.plugin_pods import GROUP_PREFIX, pod_warnings
from neuron_dra.tools.pod_claims import shared_cores_warnings
from neuron_dra.tools.published import (
    OUR_DOMAINS,
    cores_by_family,
    cores_text,
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
from neuron_dra.tools.simulate import (
    CORE_CLASS,
    MAX_CLAIM_DEVICES,
    Alternative,
    ClaimSpec,
    Constraint,
    DeviceClass,
    InputError,
    Request,
    default_classes,
    parse_claim_spec,
    parse_device_class,
)

Json = dict[str, Any]

BETA_VERSIONS = ("resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2")
KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass")
CORES = frozenset({RESOURCE_TYPE_CORE})
BOTH_KINDS = frozenset({RESOURCE_TYPE_DEVICE, RESOURCE_TYPE_NODE})
RESULTS_LIMIT = "resource.k8s.io AllocationResultsMaxSize"


@dataclass(frozen=True)
class Finding:
    file: str
    where: str  # kind/name and the part of it; empty for the file as a whole
    message: str
    error: bool
    line: int | None = None  # where the object (or the file's problem) starts

    def __str__(self) -> str:
        level = "error" if self.error else "warning"
        at = self.file if self.line is None else f"{self.file}:{self.line}"
        return ": ".join(p for p in (at, level, self.where, self.message) if p)


def lint_files(files: Sequence[Path], instance_types: Sequence[str] = ()) -> list[Finding]:
    """Every finding of every file, file by file in the order given, by line within one."""
    documents, problems = manifests.read_all(files)
    classes = {c.name: c for c in default_classes()}
    for document in documents:
        doc = document.body
        if doc.get("kind") == "DeviceClass" and _name(doc):
            device_class = _device_class(doc)
            if device_class is not None:
                classes[device_class.name] = device_class
    findings = [Finding(p.file, "", p.message, True, p.line) for p in problems]
    for document in documents:
        findings += lint_document(
            document.file, document.body, classes, instance_types, document.line
        )
    findings += [
        Finding(document.file, where, message, False, document.line)
        for document, where, message in shared_cores_warnings(documents, classes)
    ]
    order = {manifests.file_name(path): i for i, path in enumerate(files)}
    # Stable: the findings of one object keep the order they were found in.
    return sorted(findings, key=lambda f: (order.get(f.file, 0), f.line or 0))


def summary(findings: Sequence[Finding]) -> str:
    """`1 error, 2 warnings`."""
    errors = sum(f.error for f in findings)
    return f"{counted(errors, 'error')}, {counted(len(findings) - errors, 'warning')}"


def findings_json(findings: Sequence[Finding]) -> dict[str, Any]:
    """`lint -o json`: every finding as an object, and the counts."""
    errors = sum(f.error for f in findings)
    return {
        "findings": [
            {
                "file": f.file,
                "line": f.line,
                "level": "error" if f.error else "warning",
                "where": f.where,
                "message": f.message,
            }
            for f in findings
        ],
        "errors": errors,
        "warnings": len(findings) - errors,
    }


def _resource(doc: Mapping[str, Any]) -> bool:
    return str(doc.get("apiVersion", "")).startswith("resource.k8s.io/")


def _name(doc: Mapping[str, Any]) -> str | None:
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return str(name) if name else None


def _device_class(doc: Mapping[str, Any]) -> DeviceClass | None:
    return parse_device_class(doc) if isinstance(doc.get("spec") or {}, Mapping) else None


def lint_document(
    file: str,
    doc: Json,
    classes: Mapping[str, DeviceClass],
    instance_types: Sequence[str] = (),
    line: int | None = None,
) -> list[Finding]:
    kind = str(doc.get("kind"))
    if not _resource(doc):
        warnings = pod_warnings(f"{kind} {_name(doc) or '?'}", doc)
        return [Finding(file, where, message, False, line) for where, message in warnings]
    if kind not in KINDS:
        return []
    name = _name(doc)
    checker = _Checker(file, f"{kind} {name or '?'}", classes, instance_types, line)
    for problem in apischema.problems(doc):
        checker.error(problem)
    metadata = doc.get("metadata")
    if not name and not (isinstance(metadata, Mapping) and metadata.get("generateName")):
        checker.error("metadata.name is missing")
    version = str(doc.get("apiVersion"))
    if version in BETA_VERSIONS:
        checker.warn(
            f"apiVersion {version}: Kubernetes 1.34 serves it only when enabled "
            f"(--runtime-config={version}=true); use resource.k8s.io/v1"
        )
    spec = checker.mapping(doc.get("spec"), "spec")
    if kind == "DeviceClass":
        checker.device_class(parse_device_class({"metadata": {"name": name}, "spec": spec}))
        return checker.findings
    if kind == "ResourceClaimTemplate":
        spec = checker.mapping(spec.get("spec"), "spec.spec")
    checker.claim(checker.claim_spec(spec))
    return checker.findings


class _Checker:
    def __init__(
        self,
        file: str,
        where: str,
        classes: Mapping[str, DeviceClass],
        instance_types: Sequence[str],
        line: int | None = None,
    ) -> None:
        self.file = file
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
        self.findings.append(Finding(self.file, self._at(part), message, True, self.line))

    def warn(self, message: str, part: str = "") -> None:
        self.findings.append(Finding(self.file, self._at(part), message, False, self.line))

    def _at(self, part: str) -> str:
        return f"{self.where}: {part}" if part else self.where

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
                self.error(f"CEL {err}", at)
                clean = False
                continue
            missing = unpublished(expression)
            unknown.extend((at, domain, name) for domain, name in missing)
            if missing:
                clean = False
            else:
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

    # --- device classes -------------------------------------------------------

    def device_class(self, device_class: DeviceClass) -> None:
        types, _, own = self.selectors("", device_class.selectors)
        if self.configs(device_class.config, set(), None):
            if types and matching_kinds(own) == CORES:
                self._lnc_of_cores("", "the class selects")
            else:
                self._lnc(self.instance_types or types, "", "the class")

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

    def claim(self, claim: ClaimSpec) -> None:
        names = {r.name for r in claim.requests} | {
            a.name for r in claim.requests for a in r.alternatives
        }
        names |= self.unreadable  # reported already; a config naming one is not wrong too
        start = len(self.findings)
        for request in claim.requests:
            for alt in request.alternatives:
                self.request(claim, alt)
        if self.cores:
            # One note for the claim, ahead of what its requests were found to get wrong.
            plural = len(self.cores) > 1
            self.findings.insert(
                start,
                Finding(
                    self.file,
                    self.where,
                    (
                        f"request{'s' if plural else ''} {', '.join(self.cores)} "
                        f"ask{'' if plural else 's'} for NeuronCores, which the driver "
                        "publishes only where the API server serves partitionable devices "
                        "(Kubernetes 1.36+ by default, 1.35 with the "
                        "DRAPartitionableDevices feature gate, not 1.34); elsewhere the "
                        "claim stays pending"
                    ),
                    False,
                    self.line,
                ),
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
                    self._lnc_of_cores(f"request {alt.name}", "the request asks for")
                else:
                    self._lnc(self.instance_types or self.types[alt.name], f"request {alt.name}")

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
            elif clean and not self._class_without_cores(part, alt, base, own):
                self.warn("no device of any Neuron instance type matches the selectors", part)
            return
        usable_base = tuple(e for e in base if usable(e))
        cores = matching_kinds((*usable_base, *own)) == CORES
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
            self._core_count(claim, alt, matching_cores((*usable_base, *own)), pinned)
            return
        if alt.all and matching_kinds((*usable_base, *own)) >= BOTH_KINDS:
            self._all_of_both_kinds(part)
        if alt.all or not pinned:
            return
        groups = [
            c.attribute
            for c in claim.constraints
            if c.applies(alt.name) and c.attribute.startswith(GROUP_PREFIX)
        ]
        for instance_type in pinned:
            self._count(part, alt.count, instance_type, groups)

    def _all_of_both_kinds(self, part: str) -> None:
        """All of a node's single devices and its whole-node device: the counters refuse it."""
        ultraservers = ", ".join(t.name for t in INSTANCE_TYPES.values() if t.ultraserver)
        self.warn(
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

    def _class_without_cores(
        self, part: str, alt: Alternative, base: Sequence[str], own: Sequence[str]
    ) -> bool:
        """Report a class that never hands out cores asked for by selectors that want only them."""
        usable_base = tuple(e for e in base if usable(e))
        if not own or matching_kinds(tuple(own)) != CORES:
            return False
        if RESOURCE_TYPE_CORE in matching_kinds(usable_base):
            return False
        self.error(
            f"DeviceClass {alt.device_class} never hands out NeuronCores (its selectors exclude "
            f"resourceType '{RESOURCE_TYPE_CORE}'), yet the request's selectors ask for them, so "
            f"no device matches; use deviceClassName {CORE_CLASS}",
            part,
        )
        return True

    def _core_count(
        self,
        claim: ClaimSpec,
        alt: Alternative,
        sizes: Sequence[tuple[str, int | None, int]],
        pinned: Sequence[str],
    ) -> None:
        """A count of cores against the cores of one device (matchAttribute deviceId) or node."""
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
            if count > largest:
                everything = {t for t, _, _ in sizes} == set(INSTANCE_TYPES)
                which = "Neuron device" if everything else "device the selectors accept"
                self.error(
                    f"{head}, and no {which} has more than {largest} logical NeuronCores "
                    f"({cores_by_family(sizes)})",
                    part,
                )
            return
        for instance_type in pinned:
            numbers = [(lnc, n) for t, lnc, n in sizes if t == instance_type]
            if one_device:
                self._cores_fit(
                    part, count, f"{head}, and each {instance_type} device has", numbers
                )
            else:
                devices = INSTANCE_TYPES[instance_type].devices
                numbers = [(lnc, n * devices) for lnc, n in numbers]
                self._cores_fit(part, count, f"count {count}: {instance_type} has only", numbers)

    def _cores_fit(
        self, part: str, count: int, lead: str, numbers: Sequence[tuple[int | None, int]]
    ) -> None:
        """An error where no LNC gives `count` cores, a warning where only some do."""
        fit = [lnc for lnc, n in numbers if n >= count]
        if not numbers or len(fit) == len(numbers):
            return
        text = f"{lead} {cores_text(numbers)}"
        if not fit:
            self.error(text, part)
            return
        at = _alternatives([str(lnc) for lnc in fit])
        self.warn(f"{text}: only nodes at LNC {at} fit it; elsewhere the claim stays pending", part)

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

    def _count(self, part: str, count: int, instance_type: str, groups: list[str]) -> None:
        spec = INSTANCE_TYPES[instance_type]
        sizes = published().group_sizes[instance_type]
        if count > spec.devices:
            self.error(
                f"count {count}: {instance_type} has only {counted(spec.devices, 'device')}", part
            )
            return
        everywhere = published().names.get(GROUP_ATTRIBUTE_DOMAIN, frozenset())
        for attribute in groups:
            size_text = attribute.removeprefix(GROUP_PREFIX).removesuffix("_id")
            if not size_text.isdigit() or attribute.partition("/")[2] not in everywhere:
                continue  # never published anywhere: reported with the constraint
            size = int(size_text)
            if size not in sizes:
                self.error(
                    f"matchAttribute {attribute}: {instance_type} has no connected sets of "
                    f"{size} (sizes: {', '.join(map(str, sorted(sizes)))})",
                    part,
                )
            elif count > size:
                use = f"; use {GROUP_PREFIX}{count}_id" if count in sizes else ""
                self.error(
                    f"count {count} with matchAttribute {attribute}: each value is shared by "
                    f"exactly {counted(size, 'device')}, so {count} never share one{use}",
                    part,
                )
            elif count < size:
                # Name a smaller group only where this instance type publishes one.
                smaller = f" or devicegroup{count}_id" if count in sizes else ""
                devices = counted(count, "device")
                self.warn(
                    f"count {count} with matchAttribute {attribute}: {devices} of a "
                    f"connected set of {size}, which are not a connected set themselves; "
                    f"use count {size}{smaller}",
                    part,
                )
        if count not in sizes:
            # The Neuron scheduler extension refused such counts, in these words; the DRA
            # allocator would instead hand out devices that are not one connected set.
            self.error(
                f"Instance type {instance_type} does not support requests for device: "
                f"{count}. Please request a different number of devices. Its connected "
                f"sets have {_alternatives(sorted(sizes))} devices.",
                part,
            )

    # --- configs --------------------------------------------------------------

    def configs(
        self, entries: Sequence[Json], names: set[str], claim: ClaimSpec | None
    ) -> set[str]:
        """Check opaque configs; returns the requests a NeuronConfig sets LNC for."""
        lnc, problems = opaque.check(entries, names, claim is not None)
        for problem in problems:
            (self.error if problem.error else self.warn)(problem.message, problem.part)
        return lnc

    def _lnc_of_cores(self, part: str, subject: str) -> None:
        self.error(
            f"NeuronConfig.logicalNeuronCore is set, but {subject} NeuronCores: a core is as "
            "large as the node's LNC, fixed when the node boots, so the driver refuses to "
            f"prepare it; set LNC on whole devices (DeviceClass {DRIVER_NAME}) instead",
            part,
        )

    def _lnc(self, types: Sequence[str], part: str, subject: str = "the request") -> None:
        """LNC set for a request (or class) that can land on `types`."""
        without = sorted(t for t in types if not INSTANCE_TYPES[t].has_lnc)
        if not without:
            return
        if len(without) < len(types):
            self.warn(
                f"NeuronConfig.logicalNeuronCore is set, but {subject} can land on "
                f"{', '.join(without)}, which have no logical NeuronCores; the driver "
                "refuses to prepare it there",
                part,
            )
            return
        with_lnc = _alternatives(sorted(t for t, s in INSTANCE_TYPES.items() if s.has_lnc), "and")
        self.error(
            f"NeuronConfig.logicalNeuronCore is set, but {subject} can only land on "
            f"{', '.join(without)}, which have no logical NeuronCores, so the driver never "
            f"prepares it; only {with_lnc} have them",
            part,
        )


def _alternatives(items: Sequence[object], last: str = "or") -> str:
    words = [str(s) for s in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"
