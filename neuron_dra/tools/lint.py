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

What differs between Kubernetes releases (cores, extended resources, the beta APIs'
removal) is said for every release unless one is given (`--kubernetes-version`); then
only what holds on it, an error where the claim never works there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from neuron_dra.tools import apischema, convert, manifests
from neuron_dra.tools.counted import counted
from neuron_dra.tools.plugin_pods import pod_warnings
from neuron_dra.tools.pod_claims import shared_cores_warnings
from neuron_dra.tools.releases import Release, named, parse_version
from neuron_dra.tools.resource_checks import Checker, Finding
from neuron_dra.tools.simulate import DeviceClass, default_classes, parse_device_class

__all__ = ["Finding", "findings_json", "lint_document", "lint_files", "summary"]

Json = dict[str, Any]

KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass")


def lint_files(
    files: Sequence[Path], instance_types: Sequence[str] = (), release: Release | None = None
) -> list[Finding]:
    """Every finding of every file, file by file in the order given, object by object
    within one (each finding at its field's line); on `release` only what applies there,
    on every release when None."""
    documents, problems = manifests.read_all(files)
    classes = {c.name: c for c in default_classes()}
    for document in documents:
        doc = document.body
        if doc.get("kind") == "DeviceClass" and _name(doc):
            device_class = _device_class(doc)
            if device_class is not None:
                classes[device_class.name] = device_class
    # Each finding with the line of what it is in: the object's, or the file problem's.
    found = [(p.line, Finding(p.file, "", p.message, True, p.line)) for p in problems]
    for document in documents:
        found += (
            (document.line, finding)
            for finding in lint_document(
                document.file,
                document.body,
                classes,
                instance_types,
                document.line,
                release=release,
                lines=document.lines,
            )
        )
    found += (
        (document.line, Finding(document.file, where, message, False, document.line))
        for document, where, message in shared_cores_warnings(documents, classes)
    )
    order = {manifests.file_name(path): i for i, path in enumerate(files)}
    # Stable: the findings of one object keep the order they were found in.
    found.sort(key=lambda pair: (order.get(pair[1].file, 0), pair[0] or 0))
    return [finding for _, finding in found]


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
    *,
    release: Release | None = None,
    lines: Mapping[manifests.Path, int] | None = None,
) -> list[Finding]:
    kind = str(doc.get("kind"))
    if not _resource(doc):
        warnings = pod_warnings(f"{kind} {_name(doc) or '?'}", doc, release)
        return [Finding(file, where, message, False, line) for where, message in warnings]
    if kind not in KINDS:
        return []
    name = _name(doc)
    spec_path: manifests.Path = ("spec", "spec") if kind == "ResourceClaimTemplate" else ("spec",)
    checker = Checker(
        file,
        f"{kind} {name or '?'}",
        classes,
        instance_types,
        line,
        release=release,
        lines=lines,
        spec=spec_path,
    )
    for problem in apischema.problems(doc):
        checker.error(problem)
    metadata = doc.get("metadata")
    if not name and not (isinstance(metadata, Mapping) and metadata.get("generateName")):
        checker.error("metadata.name is missing")
    if convert.beta(doc):
        version = str(doc.get("apiVersion"))
        removed = parse_version(convert.REMOVED_IN[version])
        if release is not None and release >= removed:
            checker.error(
                f"{named(release)} no longer serves {version}: {convert.removal(version, file)}"
            )
        else:
            checker.warn(convert.removal(version, file))
    spec = checker.mapping(doc.get("spec"), "spec")
    if kind == "DeviceClass":
        checker.device_class(parse_device_class({"metadata": {"name": name}, "spec": spec}))
        return checker.findings
    if kind == "ResourceClaimTemplate":
        spec = checker.mapping(spec.get("spec"), "spec.spec")
    checker.claim(checker.claim_spec(spec))
    return checker.findings
