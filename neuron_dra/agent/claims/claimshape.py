"""The parts of a ResourceClaim the claim plan reads, checked for shape first.

The API server validates claims, so a field of the wrong type means a corrupted
object or a server this driver does not know: the user's problem to see, named
by its path. Checking up front lets the plan read fields without guarding each
one, and leaves any error the plan still raises to be what it is, a bug of the
driver's (logged with its traceback and counted as ``internal``). Plain checks
rather than a pydantic model: the agent defers pydantic to the first claim that
carries a config, and most carry none.
"""

from __future__ import annotations

from typing import Any


class ShapeError(ValueError):
    """A field of the claim has the wrong type; the message names its path."""


_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}


def _expect(value: Any, kind: type, path: str, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    # bool is an int in Python, but no field here takes both.
    if not isinstance(value, kind):
        found = "null" if value is None else type(value).__name__
        raise ShapeError(f"{path} is {found}, not {_KINDS[kind]}")


def _field(obj: dict[str, Any], key: str, kind: type, path: str) -> Any:
    value = obj.get(key)
    _expect(value, kind, f"{path}.{key}" if path else key)
    return value


def check_claim(obj: Any) -> None:
    """Raise ShapeError if a field the plan reads has the wrong type; absent ones
    are the plan's to judge (a claim not allocated, say)."""
    _expect(obj, dict, "the claim", optional=False)
    metadata = _field(obj, "metadata", dict, "") or {}
    _field(metadata, "uid", str, "metadata")
    status = _field(obj, "status", dict, "") or {}
    allocation = _field(status, "allocation", dict, "status") or {}
    devices = _field(allocation, "devices", dict, "status.allocation") or {}
    at = "status.allocation.devices"
    for i, result in enumerate(_field(devices, "results", list, at) or []):
        path = f"{at}.results[{i}]"
        _expect(result, dict, path, optional=False)
        for key in ("driver", "pool", "request", "device"):
            _field(result, key, str, path)
        _field(result, "adminAccess", bool, path)
    for i, config in enumerate(_field(devices, "config", list, at) or []):
        path = f"{at}.config[{i}]"
        _expect(config, dict, path, optional=False)
        _field(config, "source", str, path)
        for j, request in enumerate(_field(config, "requests", list, path) or []):
            _expect(request, str, f"{path}.requests[{j}]", optional=False)
        opaque = _field(config, "opaque", dict, path) or {}
        _field(opaque, "driver", str, f"{path}.opaque")
