"""Containers that name more than one source of NEURON_RT_VISIBLE_CORES.

The driver sets NEURON_RT_VISIBLE_CORES for every claim (or request) that holds
its devices or NeuronCores, through the CDI devices the kubelet hands the
container (`neuron_dra/agent/claims/cdi.py`). A container that names two such
claims, or two requests of one claim, gets the devices of both, but the
runtime keeps one value of a variable given twice: the Neuron runtime sees the
cores of only one of them. Naming a whole claim is one source, whatever its
requests: the driver gives it the cores of all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from consts import ENV_NEURON_RT_VISIBLE_CORES
from neuron_dra.tools.manifests import Document
from neuron_dra.tools.published import matching_types, usable
from neuron_dra.tools.simulate import DeviceClass, InputError, parse_claim_spec, pod_specs

Key = tuple[str, str]  # namespace, name


def shared_cores_warnings(
    documents: Sequence[Document], classes: Mapping[str, DeviceClass]
) -> list[tuple[Document, str, str]]:
    """(object, where in it, message) for each container with two sources of the cores."""
    templates: dict[Key, bool] = {}
    claims: dict[Key, bool] = {}
    for document in documents:
        doc = document.body
        kind, spec = doc.get("kind"), doc.get("spec")
        if kind == "ResourceClaimTemplate" and isinstance(spec, Mapping):
            templates[_key(doc)] = _sets_cores(spec.get("spec"), classes)
        elif kind == "ResourceClaim":
            claims[_key(doc)] = _sets_cores(spec, classes)
    found: list[tuple[Document, str, str]] = []
    for document in documents:
        doc = document.body
        namespace = _key(doc)[0]
        subject = f"{doc.get('kind')} {_key(doc)[1] or '?'}"
        for where, spec in pod_specs(doc):
            setting = _setting_entries(spec, namespace, templates, claims)
            for container in _containers(spec):
                sources = _sources(container, setting)
                if len(sources) < 2:
                    continue
                at = ": ".join(
                    p for p in (subject, where, f"container {container.get('name')}") if p
                )
                found.append((document, at, _message(sources)))
    return found


def _message(sources: Sequence[str]) -> str:
    named = f"{', '.join(sources[:-1])} and {sources[-1]}"
    return (
        f"names {named}, each of which the driver gives its own {ENV_NEURON_RT_VISIBLE_CORES}: "
        "the container gets the devices of all of them but the runtime keeps one value of a "
        "variable given twice, so the Neuron runtime sees the cores of only one; ask for the "
        "devices in one claim (one request), or use one container per claim"
    )


def _setting_entries(
    spec: Mapping[str, Any],
    namespace: str,
    templates: Mapping[Key, bool],
    claims: Mapping[Key, bool],
) -> set[str]:
    """The pod's resourceClaims entries whose claims set NEURON_RT_VISIBLE_CORES."""
    names = set()
    entries = spec.get("resourceClaims")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping) or not entry.get("name"):
            continue
        template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        if (template and templates.get((namespace, str(template)))) or (
            claim and claims.get((namespace, str(claim)))
        ):
            names.add(str(entry["name"]))
    return names


def _sources(container: Mapping[str, Any], setting: set[str]) -> list[str]:
    """`claim a`, `request r of claim b`: what the container names that sets the cores."""
    resources = container.get("resources")
    named = resources.get("claims") if isinstance(resources, Mapping) else None
    requests: dict[str, set[str | None]] = {}
    for entry in named if isinstance(named, list) else []:
        if isinstance(entry, Mapping) and str(entry.get("name")) in setting:
            request = entry.get("request")
            requests.setdefault(str(entry["name"]), set()).add(str(request) if request else None)
    sources = []
    for claim, asked in requests.items():
        if None in asked:  # the whole claim: the driver gives the cores of every request
            sources.append(f"claim {claim}")
        else:
            sources += [f"request {r} of claim {claim}" for r in sorted(a for a in asked if a)]
    return sources


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = []
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        found += (
            [c for c in containers if isinstance(c, Mapping)]
            if isinstance(containers, list)
            else []
        )
    return found


def _sets_cores(spec: object, classes: Mapping[str, DeviceClass]) -> bool:
    """Whether a claim of this spec may hold a Neuron device or core."""
    if not isinstance(spec, Mapping):
        return False
    try:
        claim = parse_claim_spec(spec, "")
    except (InputError, AttributeError, TypeError):
        return False  # malformed: reported with the claim itself
    for request in claim.requests:
        for alt in request.alternatives:
            device_class = classes.get(alt.device_class)
            if device_class is None:
                continue  # a class of the cluster's: what it selects is not known here
            selectors = tuple(e for e in (*device_class.selectors, *alt.selectors) if usable(e))
            if matching_types(selectors):
                return True
    return False


def _key(doc: Mapping[str, Any]) -> Key:
    metadata = doc.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    return str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")
