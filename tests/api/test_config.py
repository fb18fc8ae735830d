from __future__ import annotations

from typing import Any

import pytest

from api.config import API_VERSIONS, ConfigError, NeuronConfig, UltraServerConfig, decode


@pytest.mark.parametrize("api_version", API_VERSIONS)
def test_every_documented_api_version_decodes(api_version: str) -> None:
    config = decode({"apiVersion": api_version, "kind": "NeuronConfig", "logicalNeuronCore": 1})
    assert config == NeuronConfig(apiVersion=api_version, kind="NeuronConfig", logicalNeuronCore=1)  # type: ignore[arg-type]


def test_ultraserver_config() -> None:
    config = decode(
        {
            "apiVersion": "resource.neuron.aws.com/v1alphav1",
            "kind": "UltraServerConfig",
            "ultraserverMode": 4,
        }
    )
    assert isinstance(config, UltraServerConfig) and config.ultraserverMode == 4


V1 = "neuron.aws.com/v1"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"apiVersion": V1, "kind": "NeuronConfig", "logicalNeuronCore": 3},
            "NeuronConfig: field 'logicalNeuronCore': 3 is not allowed; allowed values: 1, 2",
        ),
        (
            {"apiVersion": V1, "kind": "NeuronConfig", "logicalNeuronCore": "1"},
            "field 'logicalNeuronCore': '1' is not allowed; allowed values: 1, 2",
        ),
        (
            {"apiVersion": V1, "kind": "NeuronConfig", "logicalNeuronCore": True},
            "field 'logicalNeuronCore': true is a boolean, not a number; allowed values: 1, 2",
        ),
        (
            {"apiVersion": V1, "kind": "NeuronConfig", "lnc": 1},
            "NeuronConfig: unknown field 'lnc' (known fields: apiVersion, kind, logicalNeuronCore)",
        ),
        (
            {"apiVersion": "neuron.aws.com/v2", "kind": "NeuronConfig"},
            "field 'apiVersion': 'neuron.aws.com/v2' is not allowed; allowed values: "
            "'neuron.aws.com/v1', 'neuron.aws.com/v1alphav1', 'resource.neuron.aws.com/v1alphav1'",
        ),
        ({"kind": "NeuronConfig"}, "NeuronConfig: field 'apiVersion' is required"),
        (
            {"apiVersion": V1, "kind": "UltraServerConfig"},
            "UltraServerConfig: field 'ultraserverMode' is required",
        ),
        (
            {"apiVersion": V1, "kind": "UltraServerConfig", "ultraserverMode": 3},
            "field 'ultraserverMode': 3 is not allowed; allowed values: 1, 2, 4",
        ),
        (
            {"apiVersion": V1, "kind": "GpuConfig"},
            "kind 'GpuConfig' is not one of NeuronConfig, UltraServerConfig",
        ),
        ({"apiVersion": V1}, "kind None is not one of NeuronConfig, UltraServerConfig"),
        ([1, 2], "parameters must be an object, not an array"),
        ("NeuronConfig", "parameters must be an object, not a string"),
        (None, "parameters must be an object, not null"),
    ],
)
def test_bad_parameters_say_what_is_wrong(parameters: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode(parameters)
    assert message in str(caught.value)
