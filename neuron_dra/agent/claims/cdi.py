"""CDI specs: how a prepared claim reaches the container runtime.

One spec file per claim, named by claim UID, since runtimes cache specs and a
reused name could hand a container another claim's devices. Device nodes sit
on per-device CDI devices (`<uid>-<device>`, one per device however often the
claim lists it: runtimes refuse a spec naming a device twice). Environment
that is the same for every container of the claim sits on the spec itself,
which runtimes apply once whichever of the claim's devices a container gets.

NEURON_RT_VISIBLE_CORES depends on the devices: the kubelet gives a container
the CDI ids of the results of the request it references, or of every result
for the whole claim. When requests differ in devices, each request's cores
sit on a CDI device of its own (`<uid>.request.<request>`), named by each of
its results, and every core of the claim on `<uid>.claim`, named by one extra
result only a container of the whole claim gets (see the preparer). The CDI
spec says device env is appended to the container's; the reference CDI
package (tags.cncf.io/container-device-interface), which containerd and
CRI-O inject devices with, replaces a variable given again instead. So the
last of a container's ids that sets a variable decides it, and `<uid>.claim`
comes last. A container that names two requests of one claim gets the cores
of the last one it names: CDI has no way to merge them. The names cannot
collide: device and request names are DNS labels (no dots), UIDs have no dots
either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.claims.plan import PreparedClaim
from neuron_dra.agent.files.atomicfile import atomic_write
from neuron_dra.agent.files.dirs import CDI_DIR_MODE

VENDOR = DRIVER_NAME
CLASS = "neuron"
KIND = f"{VENDOR}/{CLASS}"
_SPEC_PREFIX = f"{VENDOR}-"
_UID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,62}")


def check_uid(uid: str) -> str:
    """A claim UID safe to use in a file name (no path separators, dots or oddities)."""
    if not _UID_RE.fullmatch(uid):
        raise ValueError(f"claim UID {uid!r} is not a Kubernetes UID")
    return uid


def spec_path(cdi_root: Path, uid: str) -> Path:
    return cdi_root / f"{_SPEC_PREFIX}{check_uid(uid)}.json"


def device_id(uid: str, device: str) -> str:
    """Fully qualified CDI device id for the kubelet."""
    return f"{KIND}={uid}-{device}"


def request_device_id(uid: str, request: str) -> str:
    """CDI id of the env of one request's devices."""
    return f"{KIND}={uid}.request.{request}"


def claim_device_id(uid: str) -> str:
    """CDI id of the env of every device of the claim."""
    return f"{KIND}={uid}.claim"


def _env(env: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{k}={v}" for k, v in env]


def build_spec(prepared: PreparedClaim) -> dict[str, Any]:
    uid = prepared.claim.uid
    devices = []
    named: set[str] = set()
    for device in prepared.devices:
        if device.device in named:
            continue  # a device of two requests
        named.add(device.device)
        nodes = []
        for neuron in device.neuron_devices:
            node: dict[str, Any] = {"path": neuron.dev_path, "permissions": "rw"}
            if neuron.major_minor is not None:
                node |= {
                    "type": "c",
                    "major": neuron.major_minor[0],
                    "minor": neuron.major_minor[1],
                }
            nodes.append(node)
        devices.append({"name": f"{uid}-{device.device}", "containerEdits": {"deviceNodes": nodes}})
    for request, env in prepared.request_env:
        devices.append({"name": f"{uid}.request.{request}", "containerEdits": {"env": _env(env)}})
    if prepared.request_env:
        whole = [kv for kv in prepared.env if kv not in prepared.common_env]
        devices.append({"name": f"{uid}.claim", "containerEdits": {"env": _env(whole)}})
    spec: dict[str, Any] = {"cdiVersion": "", "kind": KIND, "devices": devices}
    if prepared.common_env:
        spec["containerEdits"] = {"env": _env(prepared.common_env)}
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def minimum_version(spec: dict[str, Any]) -> str:
    """The lowest cdiVersion whose schema has every feature the spec uses.

    Runtimes reject specs that claim a version lower than their features need,
    and old runtimes reject versions newer than they know, so aim exactly.
    """
    edits = [spec.get("containerEdits", {})] + [d["containerEdits"] for d in spec["devices"]]
    if any(d["name"][:1].isdigit() for d in spec["devices"]) or any(
        "hostPath" in n for e in edits for n in e.get("deviceNodes", [])
    ):
        return "0.5.0"
    return "0.3.0"


def write_spec(cdi_root: Path, prepared: PreparedClaim) -> Path:
    """Write atomically: a runtime never reads a half-written spec.

    Not fsynced: a spec serves this boot only. A crash of the plugin leaves it intact
    in the page cache; a crash of the kernel means a reboot, after which the plugin
    removes every spec of the previous boot (the checkpoint's boot marker names it).
    """
    path = spec_path(cdi_root, prepared.claim.uid)
    atomic_write(
        path, encode_spec(build_spec(prepared)), mode=0o644, dir_mode=CDI_DIR_MODE, durable=False
    )
    return path


def encode_spec(spec: dict[str, Any]) -> bytes:
    """The spec file's bytes: deterministic, so a retried prepare writes the same file."""
    # Compact: with `indent`, `json` encodes in Python instead of C, several times slower.
    return json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()


def remove_spec(cdi_root: Path, uid: str) -> bool:
    """Delete the claim's spec; False when there was none."""
    try:
        spec_path(cdi_root, uid).unlink()
    except FileNotFoundError:
        return False
    return True


def spec_uids(cdi_root: Path) -> set[str]:
    """UIDs of every claim this driver has a spec for."""
    try:
        names = [p.name for p in cdi_root.iterdir()]
    except FileNotFoundError:
        return set()
    uids = (
        n[len(_SPEC_PREFIX) : -len(".json")]
        for n in names
        if n.startswith(_SPEC_PREFIX) and n.endswith(".json")
    )
    # A name that is not a UID is no spec of ours, whoever put it there.
    return {uid for uid in uids if _UID_RE.fullmatch(uid)}
