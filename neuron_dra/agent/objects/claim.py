"""ResourceClaim (resource.k8s.io/v1): the fields the node agent reads, typed.

A prepare reads its claim's UID, its allocation (the results of every driver and the
configs that apply to them) and its annotations; the status writer reads the
allocation and the `status.devices` entries already there. Nothing else of a claim
is read, so nothing else is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuron_dra.agent.objects import fields as f


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One entry of `status.allocation.devices.results`: a device for a request."""

    request: str
    driver: str | None
    pool: str | None
    device: str
    admin_access: bool  # true only where the allocation says `adminAccess: true`


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """A config's `opaque`: the driver it is for and its parameters, as raw JSON for
    that driver's schema to decode."""

    driver: str | None
    parameters: Any


@dataclass(frozen=True, slots=True)
class AllocatedConfig:
    """One entry of `status.allocation.devices.config`."""

    source: str | None  # FromClass or FromClaim
    requests: tuple[str, ...]  # the requests it applies to; () for all
    opaque: OpaqueConfig | None


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[DeviceResult, ...]
    config: tuple[AllocatedConfig, ...]


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """One entry of `status.devices`, by the device it is about."""

    driver: str | None
    pool: str | None
    device: str | None


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str | None
    annotations: Mapping[str, str]
    allocation: Allocation | None  # None when not allocated (absent, null or empty)
    devices: tuple[DeviceStatus, ...]  # status.devices


def decode(obj: Any) -> ResourceClaim:
    """The claim `obj` (JSON as the API server answers); ObjectError naming the field
    of a wrong type."""
    claim = f.as_object(obj, "the claim")
    metadata = f.obj(claim, "metadata", "")
    status = f.obj(claim, "status", "")
    allocation = f.obj(status, "allocation", "status")
    return ResourceClaim(
        namespace=f.text(metadata, "namespace", "metadata"),
        name=f.text(metadata, "name", "metadata"),
        uid=f.opt_str(metadata, "uid", "metadata"),
        annotations=f.string_map(metadata, "annotations", "metadata"),
        allocation=_allocation(allocation) if allocation else None,
        devices=tuple(
            DeviceStatus(
                f.opt_str(entry, "driver", at),
                f.opt_str(entry, "pool", at),
                f.opt_str(entry, "device", at),
            )
            for at, entry in f.objects(status, "devices", "status")
        ),
    )


def _allocation(allocation: f.Obj) -> Allocation:
    at = "status.allocation.devices"
    devices = f.obj(allocation, "devices", "status.allocation")
    return Allocation(
        results=tuple(_result(path, r) for path, r in f.objects(devices, "results", at)),
        config=tuple(_config(path, c) for path, c in f.objects(devices, "config", at)),
    )


def _result(at: str, result: f.Obj) -> DeviceResult:
    return DeviceResult(
        request=f.text(result, "request", at),
        driver=f.opt_str(result, "driver", at),
        pool=f.opt_str(result, "pool", at),
        device=f.text(result, "device", at),
        admin_access=f.opt_bool(result, "adminAccess", at) is True,
    )


def _config(at: str, config: f.Obj) -> AllocatedConfig:
    opaque = config.get("opaque")
    decoded = None
    if opaque is not None:
        opaque = f.obj(config, "opaque", at)
        decoded = OpaqueConfig(
            f.opt_str(opaque, "driver", f"{at}.opaque"), opaque.get("parameters")
        )
    return AllocatedConfig(
        source=f.opt_str(config, "source", at),
        requests=f.strings(config, "requests", at),
        opaque=decoded,
    )
