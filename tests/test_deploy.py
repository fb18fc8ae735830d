"""The DaemonSet speaks the driver's language: its command parses, its env names are ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import consts
from consts import (
    ATTR_RESOURCE_TYPE,
    DRIVER_NAME,
    RESOURCE_TYPE_CORE,
    RESOURCE_TYPE_DEVICE,
    RESOURCE_TYPE_NODE,
)
from neuron_dra.cli import parser
from neuron_dra.tools.cel import compile_selector
from neuron_dra.tools.published import published

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def plugin_container() -> dict[str, Any]:
    [daemonset] = [
        d
        for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text())
        if d and d["kind"] == "DaemonSet"
    ]
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = container
    return result


def test_the_command_parses_with_the_real_cli() -> None:
    command = plugin_container()["command"]
    assert command[0] == "neuron-dra"
    args = parser().parse_args(command[1:])
    assert args.log_format == "json" and args.metrics_port == 9400


def test_every_env_name_is_one_the_driver_reads() -> None:
    known = {v for k, v in vars(consts).items() if k.startswith("ENV_")}
    names = {e["name"] for e in plugin_container()["env"]}
    assert names <= known, names - known
    assert {"NODE_NAME", "POD_UID", "CDI_ROOT", "HEALTHCHECK_PORT", "HEALTHCHECK_ADDRESS"} <= names


def test_the_probe_and_the_health_port_agree() -> None:
    container = plugin_container()
    port = {e["name"]: e.get("value") for e in container["env"]}["HEALTHCHECK_PORT"]
    assert container["livenessProbe"]["grpc"]["port"] == int(port)


def device_classes() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "deviceclass.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d}


def kind_of(view: Any) -> str:
    return str(view.attributes[DRIVER_NAME][ATTR_RESOURCE_TYPE])


# Each class, and the resourceType of the devices it hands out: whole devices only for the
# device plugin's names (`aws.amazon.com/neuron: 16` must be 16 devices, never the
# UltraServer node device), NeuronCores only for its cores.
KINDS = {
    DRIVER_NAME: {RESOURCE_TYPE_DEVICE, RESOURCE_TYPE_NODE},
    f"neuroncore.{DRIVER_NAME}": {RESOURCE_TYPE_CORE},
    f"extended-resource-neuron.{DRIVER_NAME}": {RESOURCE_TYPE_DEVICE},
    f"extended-resource-neurondevice.{DRIVER_NAME}": {RESOURCE_TYPE_DEVICE},
    f"extended-resource-neuroncore.{DRIVER_NAME}": {RESOURCE_TYPE_CORE},
}


def test_one_extended_resource_class_per_device_plugin_name() -> None:
    names = {
        d["spec"]["extendedResourceName"]: name
        for name, d in device_classes().items()
        if "extendedResourceName" in d["spec"]
    }
    assert sorted(names) == [
        "aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "aws.amazon.com/neurondevice",
    ]  # fmt: skip


def test_each_class_selects_exactly_its_kinds_of_device() -> None:
    # Every template names `neuron.aws.com`: it keeps meaning whole devices and the node
    # device when cores are published beside them.
    found = published().devices
    kinds = {kind_of(v) for views in found.values() for v in views}
    assert kinds == {RESOURCE_TYPE_DEVICE, RESOURCE_TYPE_NODE, RESOURCE_TYPE_CORE}, (
        "some kind is published by no instance type: the check below would prove less"
    )
    classes = device_classes()
    assert sorted(classes) == sorted(KINDS)
    for name, doc in classes.items():
        selectors = [compile_selector(s["cel"]["expression"]) for s in doc["spec"]["selectors"]]
        assert selectors[0].expression == f"device.driver == '{DRIVER_NAME}'"
        for instance_type, views in found.items():
            for view in views:
                selected = all(s.matches(view) for s in selectors)
                assert selected == (kind_of(view) in KINDS[name]), (name, instance_type, view.name)
