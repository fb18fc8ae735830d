"""ResourceClaims, ResourceClaimTemplates and DeviceClasses checked against the schema
Kubernetes publishes for them, as strictly as `kubectl apply --validate=strict` has the
API server check them for unknown fields: a v1beta1-shaped request under
resource.k8s.io/v1, or a template whose claim spec is not under `spec.spec`, is refused
there and so here. Wrong types and missing fields `lint` already reports in its own
words, naming the request; this adds what nothing else sees.

The schemas are the OpenAPI v3 of the newest supported release
(`resource.k8s.io.json`, written by scripts/extract_api_schemas.py), validated with
jsonschema; the Kubernetes-specific rules beyond the schema (name formats, list
limits, CEL) stay the API server's and `lint`'s own.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).with_name("resource.k8s.io.json")
GROUP = "resource.k8s.io"


def problems(doc: Mapping[str, Any]) -> list[str]:
    """The unknown fields the API server would refuse in `doc` ('path: unknown field x');
    [] for objects of other kinds or versions."""
    group, _, version = str(doc.get("apiVersion")).rpartition("/")
    kind = str(doc.get("kind"))
    if group != GROUP or _validator(version, kind) is None:
        return []
    return list(_problems(version, kind, json.dumps(_skeleton(doc), sort_keys=True)))


def _skeleton(value: object) -> object:
    """`value` with every key and list length kept and each scalar replaced by one of its
    type: what the unknown-field check sees, since the schemas branch on types only (no
    enum, pattern or const). Objects alike but for their values (names, counts,
    expressions) are checked once: a file of thousands of claims repeats a few shapes,
    and validating one takes a millisecond or more."""
    if isinstance(value, Mapping):
        return {str(k): _skeleton(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_skeleton(v) for v in value]
    if value is None:
        return None
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return type(value)()
    return ""


@functools.lru_cache(maxsize=256)
def _problems(version: str, kind: str, skeleton: str) -> tuple[str, ...]:
    validator = _validator(version, kind)
    found = []
    for error in validator.iter_errors(json.loads(skeleton)) if validator else ():
        if error.validator != "additionalProperties":
            continue
        path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in error.absolute_path)
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        fields = f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}"
        found.append(f"{path.replace('.[', '[') or '(top level)'}: {fields}")
    return tuple(sorted(found))


def versions() -> tuple[str, ...]:
    """The resource.k8s.io versions there are schemas of: `v1`, `v1beta1`, ..."""
    return tuple(_versions())


@functools.cache
def _versions() -> dict[str, Any]:
    versions: dict[str, Any] = json.loads(SCHEMAS.read_text())["versions"]
    return versions


@functools.cache
def _validator(version: str, kind: str) -> Draft202012Validator | None:
    served = _versions().get(version)
    if served is None or kind not in served["kinds"]:
        return None
    schemas = {name: _strict(schema) for name, schema in served["schemas"].items()}
    root = {"$ref": f"#/components/schemas/{served['kinds'][kind]}"}
    return Draft202012Validator({**root, "components": {"schemas": schemas}})


def _strict(node: Any) -> Any:
    """Unknown fields refused, as --validate=strict does, except where Kubernetes keeps
    them (opaque parameters)."""
    if isinstance(node, dict):
        strict = {k: _strict(v) for k, v in node.items()}
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            strict.setdefault("additionalProperties", False)
        return strict
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node
