"""Opaque configs of a claim or DeviceClass as `lint` reads them: this driver's decoded
with the plugin's own rules (api/config.py), another driver's left to it unless it
looks meant for this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.config import ConfigError, NeuronConfig, decode
from consts import DRIVER_NAME

Json = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    error: bool
    message: str
    part: str


def check(
    entries: Sequence[Json], names: set[str], in_claim: bool
) -> tuple[set[str], list[Problem]]:
    """The requests a NeuronConfig sets LNC for (`*`: all), and what is wrong."""
    lnc: set[str] = set()
    problems: list[Problem] = []
    for i, entry in enumerate(entries):
        part = f"config[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(Problem(True, f"is a {json_type(entry)}, not a mapping", part))
            continue
        for request in entry.get("requests") or []:
            if in_claim and request not in names:
                message = f"names request {request!r}, which the claim does not have"
                problems.append(Problem(True, message, part))
        opaque = entry.get("opaque") or {}
        if not isinstance(opaque, Mapping):
            continue
        if opaque.get("driver") != DRIVER_NAME:
            problems += _foreign(opaque, part)
            continue
        try:
            config = decode(opaque.get("parameters"))
        except ConfigError as err:
            problems.append(Problem(True, f"opaque.parameters: {err}", part))
            continue
        if isinstance(config, NeuronConfig) and config.logicalNeuronCore is not None:
            lnc.update(entry.get("requests") or names or {"*"})
    return lnc, problems


def _foreign(opaque: Mapping[str, Any], part: str) -> list[Problem]:
    """A config for another driver is that driver's; one whose parameters are ours (or
    whose driver name is a near miss, like the device plugin's domain) is applied by
    no driver, so the claim runs without it."""
    driver = str(opaque.get("driver"))
    parameters = opaque.get("parameters")
    kind = parameters.get("kind") if isinstance(parameters, Mapping) else None
    if kind not in ("NeuronConfig", "UltraServerConfig") and "neuron" not in driver.lower():
        return []
    message = (
        f"opaque config for driver {driver!r}: the Neuron driver is {DRIVER_NAME!r}, and no "
        "driver applies a config addressed to another, so the claim runs without it"
    )
    return [Problem(False, message, part)]


def sets_lnc(entries: Sequence[Json]) -> bool:
    """Whether opaque configs (of a DeviceClass) set LNC; their errors are the class's."""
    for entry in entries:
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if isinstance(opaque, Mapping) and opaque.get("driver") == DRIVER_NAME:
            try:
                config = decode(opaque.get("parameters"))
            except ConfigError:
                continue
            if isinstance(config, NeuronConfig) and config.logicalNeuronCore is not None:
                return True
    return False


def json_type(value: object) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )
