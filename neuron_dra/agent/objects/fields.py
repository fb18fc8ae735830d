"""Typed reads of one JSON object's fields, naming the path of a wrong type.

The helpers the object decoders share: each takes the parent object, the key and
the parent's path, and returns the field's value or its empty value when the field
is absent or null. A value of another type raises `ObjectError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

Obj = Mapping[str, Any]

EMPTY: Obj = MappingProxyType({})

_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}


class ObjectError(ValueError):
    """A field of an object has the wrong type; the message names its path."""


def path_of(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def wrong(value: Any, kind: type, path: str) -> ObjectError:
    found = "null" if value is None else type(value).__name__
    return ObjectError(f"{path} is {found}, not {_KINDS[kind]}")


def as_object(value: Any, path: str) -> Obj:
    """`value` itself, which must be an object (null too is refused)."""
    if not isinstance(value, dict):
        raise wrong(value, dict, path)
    return value


def obj(parent: Obj, key: str, path: str) -> Obj:
    value = parent.get(key)
    if value is None:
        return EMPTY
    if not isinstance(value, dict):
        raise wrong(value, dict, path_of(path, key))
    return value


def items(parent: Obj, key: str, path: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong(value, list, path_of(path, key))
    return value


def opt_str(parent: Obj, key: str, path: str) -> str | None:
    value = parent.get(key)
    if value is None or isinstance(value, str):
        return value
    raise wrong(value, str, path_of(path, key))


def text(parent: Obj, key: str, path: str) -> str:
    """A string field; '' when absent."""
    return opt_str(parent, key, path) or ""


def opt_bool(parent: Obj, key: str, path: str) -> bool | None:
    value = parent.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise wrong(value, bool, path_of(path, key))


def opt_int(parent: Obj, key: str, path: str) -> int | None:
    value = parent.get(key)
    # bool is an int in Python, but not in JSON.
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise wrong(value, int, path_of(path, key))


def strings(parent: Obj, key: str, path: str) -> tuple[str, ...]:
    """A list of strings; () when absent."""
    at = path_of(path, key)
    values = items(parent, key, path)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise wrong(value, str, f"{at}[{i}]")
    return tuple(values)


def string_map(parent: Obj, key: str, path: str) -> Mapping[str, str]:
    """A map of strings to strings (labels, annotations); empty when absent."""
    value = obj(parent, key, path)
    at = path_of(path, key)
    for name, entry in value.items():
        if not isinstance(entry, str):
            raise wrong(entry, str, f"{at}[{name!r}]")
    return value


def objects(parent: Obj, key: str, path: str) -> list[tuple[str, Obj]]:
    """A list of objects, each with its path; [] when absent."""
    at = path_of(path, key)
    found: list[tuple[str, Obj]] = []
    for i, value in enumerate(items(parent, key, path)):
        item = f"{at}[{i}]"
        if not isinstance(value, dict):
            raise wrong(value, dict, item)
        found.append((item, value))
    return found
