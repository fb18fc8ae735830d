"""Device metadata files (KEP-5304): what a workload learns of its devices without the API.

For each request of a prepared claim the kubelet-plugin helper of
k8s.io/dynamic-resource-allocation v0.37.2 (option EnableDeviceMetadata) writes
a JSON stream, one DeviceMetadata object per API version (here only
metadata.resource.k8s.io/v1beta1), under

    <plugin data dir>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json

and a CDI spec `<driver>_metadata_<uid>_<request>.json` whose one device
(`<driver>/metadata=<uid>_<request>`) bind-mounts that file read-only at

    /var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json

or, for a claim made from a template, under `resourceclaimtemplates/<pod claim name>/`.
The device attributes published in the ResourceSlice go in each device's
`attributes`, so a launcher reads core ids, LNC and topology from the file.

This module renders those bytes exactly as the Go helper does (Go's
encoding/json: two-space indent, sorted map keys, `<`, `>` and `&` escaped);
`metadatafiles` writes, removes and sweeps them. The byte-for-byte equality is
checked against the helper itself.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.claims.cdi import check_uid, minimum_version

API_VERSION = "metadata.resource.k8s.io/v1beta1"
KIND = "DeviceMetadata"
SUBDIR = "dra-device-metadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
FILE_MODE = 0o644
DIR_MODE = 0o755
CDI_KIND = f"{DRIVER_NAME}/metadata"
CDI_PREFIX = f"{DRIVER_NAME}_metadata_"
FILE_NAME = "metadata.json"
MAX_LABEL = 63
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")

Attribute = Mapping[str, int | bool | str]
"""One attribute as the API encodes it: {"int": 2}, {"string": "x"}, {"version": "1.0.0"}."""


@dataclass(frozen=True)
class MetadataDevice:
    pool: str
    name: str
    attributes: Mapping[str, Attribute]


@dataclass(frozen=True)
class MetadataClaim:
    namespace: str
    name: str
    uid: str
    pod_claim_name: str | None
    """The pod's name for the claim when a template made it (the claim's annotation)."""

    def __post_init__(self) -> None:
        # It names a directory of the container's mount path: a DNS label, never a path.
        if self.pod_claim_name is not None:
            check_short_name(self.pod_claim_name)


def check_short_name(value: str) -> str:
    """`value` if it is a DNS label (RFC 1123: at most 63 lower-case letters, digits and
    '-', starting and ending with a letter or digit), as the API declares a pod's claim
    name and the file's `podClaimName` (`k8s-short-name`); ValueError otherwise."""
    if len(value) > MAX_LABEL or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value[:80]!r} is not a DNS label (at most {MAX_LABEL} lower-case letters, "
            "digits and '-', starting and ending with a letter or digit)"
        )
    return value


def go_json(value: Any) -> bytes:
    """Go's json.MarshalIndent(v, "", "  "): dict order kept (struct fields), so
    callers sort map keys themselves, as Go does."""
    return _go_text(value).encode()


def _go_text(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    for char, escape in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        text = text.replace(char, escape)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _check(attributes: Mapping[str, Attribute]) -> None:
    for value in attributes.values():
        if len(value) != 1 or not set(value) <= {"int", "bool", "string", "version"}:
            raise ValueError(
                f"device attribute {dict(value)!r} must have one of int, bool, string, version"
            )


# The nesting of a device in the file: object, requests, request, devices, device.
_DEVICE_INDENT = "\n" + "  " * 4


@functools.lru_cache(maxsize=512)
def _device_text(pool: str, name: str, attributes: str) -> str:
    """A device's text as it sits in the file, from its attributes' compact JSON with
    sorted keys. Cached: a device's attributes change only with the node, and the
    indenting encoder, pure Python, took 0.2 ms a device (a claim of 16: 3 ms). 512
    entries hold every device and core of the largest node (145), under 1 MiB."""
    device: dict[str, Any] = {"driver": DRIVER_NAME, "pool": pool, "name": name}
    if attributes != "{}":
        device["attributes"] = json.loads(attributes)
    return _go_text(device).replace("\n", _DEVICE_INDENT)


def encode_metadata(
    claim: MetadataClaim, request: str, devices: Sequence[MetadataDevice], generation: int = 1
) -> bytes:
    """The metadata file's bytes: one object per API version, each ending in a newline."""
    check_uid(claim.uid)
    texts = []
    for device in devices:
        _check(device.attributes)
        key = json.dumps(device.attributes, sort_keys=True, separators=(",", ":"))
        texts.append(_device_text(device.pool, device.name, key))
    req: dict[str, Any] = {"name": request}
    if devices:
        # Placeholders, each a JSON string no name can be (names are DNS labels).
        req["devices"] = [f"\0{i}\0" for i in range(len(texts))]
    obj: dict[str, Any] = {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": {
            "name": claim.name,
            "namespace": claim.namespace,
            "uid": claim.uid,
            "generation": generation,
        },
    }
    if claim.pod_claim_name is not None:
        obj["podClaimName"] = claim.pod_claim_name
    obj["requests"] = [req]
    text = _go_text(obj)
    for i, device_text in enumerate(texts):
        text = text.replace(f'"\\u0000{i}\\u0000"', device_text, 1)
    return text.encode() + b"\n"


def base_request(request: str) -> str:
    """The top-level request of `request`, which may name a subrequest ("gpus/large"):
    files and CDI devices are the top-level request's, the file's content names both."""
    return request.split("/", 1)[0]


def metadata_path(plugin_dir: Path, claim: MetadataClaim, request: str) -> Path:
    return claim_dir(plugin_dir, claim.namespace, claim.name) / base_request(request) / FILE_NAME


def claim_dir(plugin_dir: Path, namespace: str, name: str) -> Path:
    return plugin_dir / SUBDIR / f"{namespace}_{name}"


def container_path(claim: MetadataClaim, request: str) -> str:
    request = base_request(request)
    if claim.pod_claim_name:
        sub, name = "resourceclaimtemplates", claim.pod_claim_name
    else:
        sub, name = "resourceclaims", claim.name
    return f"{CONTAINER_DIR}/{sub}/{name}/{request}/{DRIVER_NAME}-metadata.json"


def cdi_spec_path(cdi_root: Path, uid: str, request: str) -> Path:
    return cdi_root / f"{CDI_PREFIX}{check_uid(uid)}_{base_request(request)}.json"


def cdi_device_id(uid: str, request: str) -> str:
    return f"{CDI_KIND}={uid}_{base_request(request)}"


def encode_cdi_spec(plugin_dir: Path, claim: MetadataClaim, request: str) -> bytes:
    """The helper's CDI spec: one device bind-mounting the file read-only (Go's
    MarshalIndent, no trailing newline)."""
    mount = {
        "hostPath": str(metadata_path(plugin_dir, claim, request)),
        "containerPath": container_path(claim, request),
        "options": ["ro", "bind"],
    }
    device = {"name": f"{claim.uid}_{base_request(request)}", "containerEdits": {"mounts": [mount]}}
    spec: dict[str, Any] = {"cdiVersion": "", "kind": CDI_KIND, "devices": [device]}
    # Go's specs-go Spec has a non-pointer ContainerEdits: always encoded, empty here.
    spec["containerEdits"] = {}
    spec["cdiVersion"] = minimum_version(spec)
    return go_json(spec)
