"""Opaque device configuration users put in claims, under `config[].opaque.parameters`.

Decoding is strict: an unknown field, a wrong type or a value out of range is
an error that names the field and the allowed values, never a silent default,
because a typo in a claim would otherwise run a workload with the wrong
NeuronCore layout.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

CANONICAL_API_VERSION = "neuron.aws.com/v1"
# The AWS beta driver's documents use the two v1alphav1 spellings; both stay valid.
API_VERSIONS = (
    CANONICAL_API_VERSION,
    "neuron.aws.com/v1alphav1",
    "resource.neuron.aws.com/v1alphav1",
)

ApiVersion = Literal[
    "neuron.aws.com/v1", "neuron.aws.com/v1alphav1", "resource.neuron.aws.com/v1alphav1"
]


def _not_bool(value: object) -> object:
    # JSON true would otherwise pass as 1: Python's True == 1.
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean, not a number")
    return value


LogicalNeuronCore = Annotated[Literal[1, 2], BeforeValidator(_not_bool)]
UltraServerMode = Annotated[Literal[1, 2, 4], BeforeValidator(_not_bool)]


class ConfigError(ValueError):
    """Opaque parameters that are not a valid configuration; the message says why."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    apiVersion: ApiVersion  # noqa: N815 (the Kubernetes field name)


class NeuronConfig(_Config):
    """Per-claim settings for Neuron devices."""

    kind: Literal["NeuronConfig"]
    # Logical NeuronCore size: 1 exposes every physical core, 2 fuses pairs (trn2, trn3).
    logicalNeuronCore: LogicalNeuronCore | None = None  # noqa: N815


class UltraServerConfig(_Config):
    """How many UltraServer nodes a `neuron_node` device takes part with."""

    kind: Literal["UltraServerConfig"]
    ultraserverMode: UltraServerMode  # noqa: N815


DeviceConfig = NeuronConfig | UltraServerConfig
_KINDS: dict[str, type[NeuronConfig] | type[UltraServerConfig]] = {
    "NeuronConfig": NeuronConfig,
    "UltraServerConfig": UltraServerConfig,
}


def decode(parameters: object) -> DeviceConfig:
    """Decode opaque parameters (already parsed JSON) into a config, or raise ConfigError."""
    if not isinstance(parameters, dict):
        raise ConfigError(f"parameters must be an object, not {_json_type(parameters)}")
    kind = parameters.get("kind")
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ConfigError(f"kind {kind!r} is not one of {', '.join(_KINDS)}")
    try:
        return model.model_validate(parameters)
    except ValidationError as err:
        raise ConfigError(
            f"{kind}: " + "; ".join(_describe(model, e) for e in err.errors())
        ) from None


def _describe(model: type[BaseModel], error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"])
    value = error.get("input")
    if error["type"] == "extra_forbidden":
        known = ", ".join(model.model_fields)
        return f"unknown field {field!r} (known fields: {known})"
    if error["type"] == "missing":
        return f"field {field!r} is required"
    annotation = model.model_fields[str(error["loc"][0])].annotation
    allowed = [repr(a) if isinstance(a, str) else str(a) for a in _literals(annotation)]
    if allowed and error["type"] == "literal_error":
        return f"field {field!r}: {value!r} is not allowed; allowed values: {', '.join(allowed)}"
    reason = str(error.get("ctx", {}).get("error", error["msg"]))
    return f"field {field!r}: {reason}; allowed values: {', '.join(allowed)}"


def _literals(annotation: Any) -> list[Any]:
    """The allowed values of a (possibly Optional, Annotated) Literal type."""
    values: list[Any] = []
    for arg in get_args(annotation):
        if get_args(arg) or hasattr(arg, "__metadata__"):
            values.extend(_literals(arg))
        elif arg is not type(None) and not isinstance(arg, BeforeValidator):
            values.append(arg)
    return values


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number"}
    return names.get(type(value), "a number" if isinstance(value, float) else "null")
