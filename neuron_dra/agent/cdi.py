"""CDI specs: how a prepared claim reaches the container runtime.

One spec file per claim, named by claim UID, since runtimes cache specs and a
reused name could hand a container another claim's devices. Device nodes sit
on per-device CDI devices; the claim's environment sits on the spec itself,
which runtimes apply once whichever of the claim's devices a container gets.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.claims import PreparedClaim
from neuron_dra.agent.dirs import CDI_DIR_MODE, ensure_dir

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


def build_spec(prepared: PreparedClaim) -> dict[str, Any]:
    uid = prepared.claim.uid
    devices = []
    for device in prepared.devices:
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
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": KIND,
        "devices": devices,
        "containerEdits": {"env": [f"{k}={v}" for k, v in prepared.env]},
    }
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
    """Write atomically: a runtime never reads a half-written spec."""
    path = spec_path(cdi_root, prepared.claim.uid)
    data = json.dumps(build_spec(prepared), indent=2, sort_keys=True).encode()
    atomic_write(path, data, mode=0o644)
    return path


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


def atomic_write(path: Path, data: bytes, *, mode: int, dir_mode: int = CDI_DIR_MODE) -> None:
    """temp file + fsync + rename + directory fsync: old or new content, never a mix."""
    ensure_dir(path.parent, dir_mode)
    # The suffix keeps runtimes (which load *.json and *.yaml) off the temp file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        Path(tmp).replace(path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
