"""ResourceClaims, ResourceClaimTemplates and DeviceClasses of resource.k8s.io/v1beta1 or
v1beta2 rewritten as resource.k8s.io/v1, the rules of the API server's own conversion.

Kubernetes 1.38 removes v1beta1 and 1.39 v1beta2 (`zz_generated.prerelease-lifecycle.go`
of `k8s.io/api` resource/v1beta1 and v1beta2); no `--runtime-config` serves them again,
so a manifest still in either fails with 404. The shapes differ in one place: a v1beta1
request holds its device class, selectors, mode, count, admin access, tolerations,
capacity and derived attributes itself, where v1 and v1beta2 hold them under `exactly`
(`pkg/apis/resource/v1beta1/conversion.go` of `k8s.io/kubernetes`: `exactly` is made
when any of them is set, a count of 0 and an empty mode counting as unset;
`firstAvailable` and its subrequests are the same in every version). Every other field
of the three kinds is spelled the same in v1beta1, v1beta2 and v1.

The rewrite works on the tree a YAML reader built, in place, so that a round-tripping
reader keeps the comments and key order around what moves; `converted` does it on a
copy. Opaque configs are left as written and checked with the plugin's own decoder
(`opaque`), since a conversion is the moment a claim is looked at again.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from neuron_dra.tools import apischema, opaque

GROUP = apischema.GROUP
V1 = f"{GROUP}/v1"
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
# Each beta version, the release that stops serving it, and the one from which it is
# served only when enabled (`--runtime-config`).
REMOVED_IN = {f"{GROUP}/v1beta1": "1.38", f"{GROUP}/v1beta2": "1.39"}
OFF_BY_DEFAULT_FROM = "1.34"
# A v1beta1 request's fields that v1 holds under `exactly`, in v1's order.
EXACT_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
    "derivedAttributes",
)


@dataclass(frozen=True)
class Message:
    """What is wrong (error) or worth knowing (warning) about one object; `where` is
    the part of it, empty for the whole object."""

    error: bool
    where: str
    message: str


def removal(version: str, file: str) -> str:
    """For lint and simulate: when Kubernetes stops serving `version`, and the command
    that rewrites `file` as v1."""
    command = "neuron-dra convert -" if file == "<stdin>" else f"neuron-dra convert {file}"
    return (
        f"apiVersion {version} is served only when enabled "
        f"(--runtime-config={version}=true) from Kubernetes {OFF_BY_DEFAULT_FROM}, and "
        f"removed in {REMOVED_IN[version]}, where no flag serves it again; "
        f"`{command}` prints it as {V1}"
    )


def beta(doc: Mapping[str, Any]) -> bool:
    """Whether `doc` is one of the three kinds in a version `convert` rewrites."""
    return doc.get("kind") in KINDS and doc.get("apiVersion") in REMOVED_IN


def converted(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[Message]]:
    """`doc` as v1, a copy (`doc` itself unchanged), and what is wrong with it."""
    out = copy.deepcopy(dict(doc))
    return out, to_v1(out)


def to_v1(doc: MutableMapping[str, Any]) -> list[Message]:
    """Rewrite `doc`, a ResourceClaim, ResourceClaimTemplate or DeviceClass of v1beta1 or
    v1beta2 that the caller owns, as v1 in place; what is wrong with it, an error where v1
    has no place for a field. Objects of other kinds or versions are left alone."""
    if not beta(doc):
        return []
    version = str(doc["apiVersion"])
    messages = [
        Message(True, problem, f"{version} has no such field, and {V1} no place for it")
        for problem in apischema.problems(doc)
    ]
    kind = doc["kind"]
    spec = doc.get("spec")
    at = "spec"
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec, Mapping) else None
        at = "spec.spec"
    if not isinstance(spec, MutableMapping):
        return [*messages, Message(True, at, "is missing or not a mapping")]
    requests: object = None
    if kind == "DeviceClass":
        messages += _configs(spec.get("config"), at, set(), in_claim=False)
    elif isinstance(devices := spec.get("devices"), MutableMapping):
        requests = devices.get("requests") if version.endswith("v1beta1") else None
        messages += _requests(requests, f"{at}.devices", move=False)
        names = _request_names(devices.get("requests"))
        messages += _configs(devices.get("config"), f"{at}.devices", names, in_claim=True)
    if any(m.error for m in messages):
        return messages  # left as it was: half a conversion would hide what is wrong
    _requests(requests, f"{at}.devices", move=True)
    doc["apiVersion"] = V1
    # A safety net: nothing the rewrite leaves should be unknown to v1.
    messages += [Message(True, p, f"no place for it in {V1}") for p in apischema.problems(doc)]
    return messages


def _requests(requests: object, at: str, *, move: bool) -> list[Message]:
    """What keeps v1beta1 requests from v1 (`move` False), or the requests rewritten."""
    if not isinstance(requests, list):
        return []
    messages: list[Message] = []
    for i, request in enumerate(requests):
        if isinstance(request, MutableMapping):
            messages += _request(request, f"{at}.requests[{i}]", move)
    return messages


def _request(request: MutableMapping[str, Any], at: str, move: bool) -> list[Message]:
    """A v1beta1 request's own device fields moved under `exactly`, where the first of them
    stood, in the order written."""
    present = [k for k in request if k in EXACT_FIELDS and request[k] is not None]
    if not any(_set(k, request[k]) for k in present):
        for key in [k for k in request if k in EXACT_FIELDS and move]:
            del request[key]  # nulls, a count of 0, an empty mode: v1beta1's "unset"
        return []
    if request.get("firstAvailable") is not None:
        return [
            Message(
                True,
                at,
                f"has both firstAvailable and {', '.join(present)}; v1 takes either exactly "
                "or firstAvailable (the API server refuses this request in v1beta1 too)",
            )
        ]
    if not move:
        return []
    keys = list(request)
    position = keys.index(present[0])
    exactly = _empty_like(request)
    for key in keys:
        if key in EXACT_FIELDS:
            value = request.pop(key)
            if value is not None:
                exactly[key] = value
                _move_comment(request, exactly, key)
    _insert(request, position, "exactly", exactly)
    return []


def _move_comment(source: object, target: object, key: str) -> None:
    """The comment at the end of `key`'s line moved with it: a round-tripping reader
    keeps it on the mapping that held the key (ruamel.yaml's `ca.items`)."""
    held, holder = getattr(source, "ca", None), getattr(target, "ca", None)
    if held is not None and holder is not None and key in held.items:
        holder.items[key] = held.items.pop(key)


def _set(key: str, value: object) -> bool:
    """Upstream's test of a v1beta1 request field being set (Go's zero values are not)."""
    if key == "count":
        return value != 0
    if key == "allocationMode":
        return value != ""
    return True


def _empty_like(mapping: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """An empty mapping of `mapping`'s type: a round-tripping reader's own, which it
    knows how to write with comments."""
    return type(mapping)()


def _insert(mapping: MutableMapping[str, Any], position: int, key: str, value: object) -> None:
    """`key` put at `position` of `mapping`'s order: with the mapping's own `insert`
    where it has one (ruamel.yaml's CommentedMap, which keeps comments), else by
    moving the keys after it to the end."""
    insert = getattr(mapping, "insert", None)
    if callable(insert):
        insert(position, key, value)
        return
    after = list(mapping)[position:]
    mapping[key] = value
    for moved in after:
        mapping[moved] = mapping.pop(moved)


def _request_names(requests: object) -> set[str]:
    if not isinstance(requests, list):
        return set()
    names = set()
    for request in requests:
        if isinstance(request, Mapping):
            names.add(str(request.get("name")))
            for sub in request.get("firstAvailable") or []:
                if isinstance(sub, Mapping):
                    names.add(f"{request.get('name')}/{sub.get('name')}")
    return names


def _configs(entries: object, at: str, names: set[str], *, in_claim: bool) -> list[Message]:
    """The opaque configs of a claim or class, as the plugin will decode them."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        return [Message(True, f"{at}.config", "is not a list")]
    _, problems = opaque.check(entries, names, in_claim)
    return [Message(p.error, f"{at}.{p.part}", p.message) for p in problems]
