"""One device as a selector sees it: the `device` variable.

Owns: `DeviceView`, built once from a ResourceSlice device entry (short
attribute names resolved to the driver's domain, typed attribute values,
capacities as quantities) and evaluated against many selectors, with its
celpy activation, in which a domain the device has nothing in reads as an
empty map.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celpy import celtypes

from neuron_dra.tools.cel.values import Quantity, Semver, Value


class _DomainMap(celtypes.MapType):
    """Outer attribute/capacity map: an unknown domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


@dataclass(frozen=True, eq=False)
class DeviceView:
    """One device as CEL sees it, built once and evaluated against many selectors."""

    driver: str
    attributes: Mapping[str, Mapping[str, Value]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    allow_multiple_allocations: bool | None = None
    name: str = ""
    _celpy: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_slice_device(cls, driver: str, device: Mapping[str, Any]) -> DeviceView:
        """From a ResourceSlice `spec.devices[]` entry; raises ValueError on malformed values."""
        attributes: dict[str, dict[str, Value]] = {}
        for qualified, typed in (device.get("attributes") or {}).items():
            domain, name = _split_qualified(qualified, driver)
            attributes.setdefault(domain, {})[name] = _attribute_value(qualified, typed)
        capacity: dict[str, dict[str, Quantity]] = {}
        for qualified, entry in (device.get("capacity") or {}).items():
            domain, name = _split_qualified(qualified, driver)
            capacity.setdefault(domain, {})[name] = Quantity.parse(str(entry["value"]))
        allow = device.get("allowMultipleAllocations")
        return cls(
            driver=driver,
            attributes=attributes,
            capacity=capacity,
            allow_multiple_allocations=None if allow is None else bool(allow),
            name=str(device.get("name", "")),
        )

    def celpy_activation(self) -> dict[str, Any]:
        """The celpy variables for this device, built on first use and kept."""
        if not self._celpy:
            fields: dict[Any, Any] = {
                celtypes.StringType("driver"): celtypes.StringType(self.driver),
                celtypes.StringType("attributes"): _DomainMap(
                    {
                        celtypes.StringType(d): celtypes.MapType(
                            {celtypes.StringType(k): v for k, v in names.items()}
                        )
                        for d, names in self.attributes.items()
                    }
                ),
                celtypes.StringType("capacity"): _DomainMap(
                    {
                        celtypes.StringType(d): celtypes.MapType(
                            {celtypes.StringType(k): v for k, v in names.items()}
                        )
                        for d, names in self.capacity.items()
                    }
                ),
            }
            if self.allow_multiple_allocations is not None:
                fields[celtypes.StringType("allowMultipleAllocations")] = celtypes.BoolType(
                    self.allow_multiple_allocations
                )
            self._celpy["device"] = celtypes.MapType(fields)
        return self._celpy


def _split_qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, short = name.partition("/")
    return (domain, short) if sep else (driver, name)


@functools.lru_cache(maxsize=4096)
def _int(value: int) -> celtypes.IntType:
    """celpy's IntType, which wraps each construction in a range check costing ~70 us: the
    same few numbers (core counts, ids) recur on every device of every simulated node."""
    return celtypes.IntType(value)


def _attribute_value(name: str, typed: Mapping[str, Any]) -> Value:
    if "int" in typed:
        return _int(int(typed["int"]))
    if "bool" in typed:
        return celtypes.BoolType(bool(typed["bool"]))
    if "string" in typed:
        return celtypes.StringType(str(typed["string"]))
    if "version" in typed:
        try:
            return Semver.parse(str(typed["version"]))
        except ValueError as error:
            raise ValueError(f"attribute {name}: parse semantic version: {error}") from None
    raise ValueError(f"attribute {name}: unsupported attribute value {dict(typed)!r}")
