"""Static checks of ResourceClaimTemplates, ResourceClaims and DeviceClasses for this driver.

Everything is checked against what the driver really publishes: the attribute
names come from building the slices of every instance type in the catalogue,
and which instance types a request can land on is found by evaluating its
selectors against those devices, not by reading the expression. Errors are
mistakes that keep a claim from ever being allocated or prepared; warnings
are requests that work only somewhere, or only on some clusters.
"""

from __future__ import annotations

import difflib
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from api.config import ConfigError, NeuronConfig, decode
from consts import DRIVER_NAME, GROUP_ATTRIBUTE_DOMAIN
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer, build_fake_node
from neuron_dra.hardware.instance_types import INSTANCE_TYPES, Shape
from neuron_dra.hardware.topology import connected_sets
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.tools.cel import CelCompileError, CelEvalError, DeviceView, compile_selector
from neuron_dra.tools.cel import referenced_attributes as cel_attributes
from neuron_dra.tools.simulate import (
    Alternative,
    ClaimSpec,
    DeviceClass,
    InputError,
    default_classes,
    load_documents,
    parse_claim_spec,
    parse_device_class,
)

Json = dict[str, Any]

OUR_DOMAINS = (DRIVER_NAME, GROUP_ATTRIBUTE_DOMAIN)
BETA_VERSIONS = ("resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2")
GROUP_PREFIX = f"{GROUP_ATTRIBUTE_DOMAIN}/devicegroup"


@dataclass(frozen=True)
class Finding:
    file: str
    where: str  # kind/name and the part of it
    message: str
    error: bool

    def __str__(self) -> str:
        level = "error" if self.error else "warning"
        return f"{self.file}: {level}: {self.where}: {self.message}"


@dataclass(frozen=True)
class Published:
    """What the driver publishes, over every instance type of the catalogue."""

    names: Mapping[str, frozenset[str]]  # domain -> attribute names
    devices: Mapping[str, tuple[DeviceView, ...]]  # instance type -> its devices
    group_sizes: Mapping[str, frozenset[int]]  # instance type -> N of devicegroupN_id


@cache
def published() -> Published:
    names: dict[str, set[str]] = {}
    devices: dict[str, tuple[DeviceView, ...]] = {}
    sizes: dict[str, frozenset[int]] = {}
    with tempfile.TemporaryDirectory(prefix="neuron-dra-lint-") as tmp:
        for instance_type, spec in INSTANCE_TYPES.items():
            unit = FakeUltraServer() if spec.ultraserver else None
            root = build_fake_node(Path(tmp) / instance_type, instance_type, ultraserver=unit)
            inventory = discover(root).inventory
            views = []
            for obj in build_slices(inventory, SliceOptions(instance_type)):
                for device in obj["spec"]["devices"]:
                    views.append(DeviceView.from_slice_device(DRIVER_NAME, device))
            devices[instance_type] = tuple(views)
            sizes[instance_type] = frozenset(inventory.connected_sets())
            for view in views:
                for domain, attrs in view.attributes.items():
                    names.setdefault(domain, set()).update(attrs)
    return Published({d: frozenset(n) for d, n in names.items()}, devices, sizes)


def suggest(name: str, known: Iterable[str]) -> str | None:
    """The closest published name; case is ignored, as typos often get it wrong."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def lint_files(files: Sequence[Path], instance_types: Sequence[str] = ()) -> list[Finding]:
    try:
        docs = load_documents(files)
    except InputError as err:
        return [Finding(str(files[0]) if files else "-", "input", str(err), True)]
    classes = {c.name: c for c in default_classes()}
    for _, doc in docs:
        if doc.get("kind") == "DeviceClass" and _resource(doc):
            device_class = parse_device_class(doc)
            classes[device_class.name] = device_class
    findings: list[Finding] = []
    for where, doc in docs:
        findings.extend(lint_document(where, doc, classes, instance_types))
    return findings


def _resource(doc: Mapping[str, Any]) -> bool:
    return str(doc.get("apiVersion", "")).startswith("resource.k8s.io/")


def lint_document(
    file: str,
    doc: Json,
    classes: Mapping[str, DeviceClass],
    instance_types: Sequence[str] = (),
) -> list[Finding]:
    kind = str(doc.get("kind"))
    if not _resource(doc) or kind not in ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass"):
        return []
    name = str((doc.get("metadata") or {}).get("name", "?"))
    checker = _Checker(file, f"{kind} {name}", classes, instance_types)
    version = str(doc.get("apiVersion"))
    if version in BETA_VERSIONS:
        checker.warn(
            f"apiVersion {version}: Kubernetes 1.34 serves it only when enabled "
            f"(--runtime-config={version}=true); use resource.k8s.io/v1"
        )
    if kind == "DeviceClass":
        device_class = parse_device_class(doc)
        for i, expression in enumerate(device_class.selectors):
            checker.selector(f"selectors[{i}]", expression)
        checker.configs(device_class.config, set(), None)
        return checker.findings
    spec = (
        ((doc.get("spec") or {}).get("spec") or {})
        if kind == "ResourceClaimTemplate"
        else (doc.get("spec") or {})
    )
    try:
        claim = parse_claim_spec(spec, "spec")
    except InputError as err:
        checker.error(str(err))
        return checker.findings
    checker.claim(claim)
    return checker.findings


class _Checker:
    def __init__(
        self,
        file: str,
        where: str,
        classes: Mapping[str, DeviceClass],
        instance_types: Sequence[str],
    ) -> None:
        self.file = file
        self.where = where
        self.classes = classes
        self.instance_types = tuple(instance_types)
        self.findings: list[Finding] = []

    def error(self, message: str, part: str = "") -> None:
        self.findings.append(Finding(self.file, self._at(part), message, True))

    def warn(self, message: str, part: str = "") -> None:
        self.findings.append(Finding(self.file, self._at(part), message, False))

    def _at(self, part: str) -> str:
        return f"{self.where}: {part}" if part else self.where

    # --- selectors ------------------------------------------------------------

    def selector(self, part: str, expression: str) -> bool:
        """Compile and check the names; False when evaluating it would tell nothing more."""
        try:
            compile_selector(expression)
        except CelCompileError as err:
            self.error(f"CEL {err}", part)
            return False
        known = published().names
        clean = True
        for domain, name in sorted(cel_attributes(expression)):
            if domain in OUR_DOMAINS and name not in known.get(domain, frozenset()):
                hint = suggest(name, known.get(domain, ()))
                tip = f"; did you mean {hint!r}?" if hint else ""
                self.error(f"attribute {domain}/{name} is never published by the driver{tip}", part)
                clean = False
        return clean

    # --- claims ---------------------------------------------------------------

    def claim(self, claim: ClaimSpec) -> None:
        names = {r.name for r in claim.requests} | {
            a.name for r in claim.requests for a in r.alternatives
        }
        for request in claim.requests:
            for alt in request.alternatives:
                self.request(claim, alt)
        for i, constraint in enumerate(claim.constraints):
            domain, _, attribute = constraint.attribute.partition("/")
            known = published().names.get(domain, frozenset())
            if domain in OUR_DOMAINS and attribute not in known:
                hint = suggest(attribute, known)
                tip = f"; did you mean {domain}/{hint}?" if hint else ""
                self.error(
                    f"matchAttribute {constraint.attribute} is never published by the driver, "
                    f"so no device satisfies the constraint{tip}",
                    f"constraints[{i}]",
                )
        lnc_requests = self.configs(claim.config, names, claim)
        if lnc_requests:
            self._lnc_types(claim, lnc_requests)

    def request(self, claim: ClaimSpec, alt: Alternative) -> None:
        part = f"request {alt.name}"
        device_class = self.classes.get(alt.device_class)
        if device_class is None:
            self.warn(
                f"DeviceClass {alt.device_class} is neither the driver's ({DRIVER_NAME}) nor "
                "among the inputs; it must exist in the cluster",
                part,
            )
        expressions = list(device_class.selectors if device_class else ())
        usable = True
        for i, expression in enumerate(alt.selectors):
            usable = self.selector(f"{part}: selectors[{i}]", expression) and usable
        if not usable:
            return
        types = self._types(expressions + list(alt.selectors))
        if not types:
            self.warn("no device of any Neuron instance type matches the selectors", part)
            return
        pinned = self.instance_types or (
            types if len(types) < len(INSTANCE_TYPES) and _narrow(types) else ()
        )
        if alt.all or not pinned:
            return
        groups = [
            c.attribute for c in claim.constraints
            if c.applies(alt.name) and c.attribute.startswith(GROUP_PREFIX)
        ]  # fmt: skip
        for instance_type in pinned:
            self._count(part, alt.count, instance_type, groups)

    def _count(self, part: str, count: int, instance_type: str, groups: list[str]) -> None:
        spec = INSTANCE_TYPES[instance_type]
        sizes = published().group_sizes[instance_type]
        if count > spec.devices:
            self.error(f"count {count}: {instance_type} has only {spec.devices} devices", part)
            return
        for attribute in groups:
            size_text = attribute.removeprefix(GROUP_PREFIX).removesuffix("_id")
            if not size_text.isdigit():
                continue
            size = int(size_text)
            if size not in sizes:
                published_sizes = ", ".join(map(str, sorted(sizes)))
                self.error(
                    f"matchAttribute {attribute}: {instance_type} has no connected sets of "
                    f"{size} (sizes: {published_sizes})",
                    part,
                )
            elif count > size:
                self.error(
                    f"count {count} with matchAttribute {attribute}: each value is shared by "
                    f"exactly {size} devices, so {count} never share one",
                    part,
                )
            elif count < size:
                self.warn(
                    f"count {count} with matchAttribute {attribute}: {count} devices of a "
                    f"connected set of {size}, which are not a connected set themselves; "
                    f"use count {size} or devicegroup{count}_id",
                    part,
                )
        if spec.shape is Shape.TORUS and count not in connected_sets(spec.shape, spec.devices):
            self.warn(
                f"Instance type {instance_type} does not support requests for device: "
                f"{count}. Please request a different number of devices.",
                part,
            )

    def _types(self, expressions: list[str]) -> list[str]:
        """Instance types with at least one device every expression accepts."""
        selectors = [compile_selector(e) for e in expressions]
        out = []
        for instance_type, views in published().devices.items():
            for view in views:
                try:
                    if all(s.matches(view) for s in selectors):
                        out.append(instance_type)
                        break
                except CelEvalError:
                    continue
        return out

    # --- configs --------------------------------------------------------------

    def configs(
        self, entries: Sequence[Json], names: set[str], claim: ClaimSpec | None
    ) -> set[str]:
        """Check opaque configs; returns the requests a NeuronConfig sets LNC for."""
        lnc: set[str] = set()
        for i, entry in enumerate(entries):
            part = f"config[{i}]"
            for request in entry.get("requests") or []:
                if claim is not None and request not in names:
                    self.error(f"names request {request!r}, which the claim does not have", part)
            opaque = entry.get("opaque") or {}
            if opaque.get("driver") != DRIVER_NAME:
                continue
            try:
                config = decode(opaque.get("parameters"))
            except ConfigError as err:
                self.error(f"opaque.parameters: {err}", part)
                continue
            if isinstance(config, NeuronConfig) and config.logicalNeuronCore is not None:
                lnc.update(entry.get("requests") or names or {"*"})
        return lnc

    def _lnc_types(self, claim: ClaimSpec, requests: set[str]) -> None:
        for request in claim.requests:
            for alt in request.alternatives:
                if not (requests & {"*", request.name, alt.name}):
                    continue
                device_class = self.classes.get(alt.device_class)
                expressions = [*(device_class.selectors if device_class else ()), *alt.selectors]
                try:
                    types = self.instance_types or tuple(self._types(expressions))
                except CelCompileError:
                    continue
                without = sorted(t for t in types if not INSTANCE_TYPES[t].has_lnc)
                if without:
                    self.warn(
                        "NeuronConfig.logicalNeuronCore is set, but the request can land on "
                        f"{', '.join(without)}, which have no logical NeuronCores; the driver "
                        "refuses to prepare it there",
                        f"request {alt.name}",
                    )


def _narrow(types: Sequence[str]) -> bool:
    """Whether the selectors pin the hardware: every matching type is of one shape and size."""
    shapes = {(INSTANCE_TYPES[t].shape, INSTANCE_TYPES[t].devices) for t in types}
    return len(shapes) == 1
