"""The DaemonSet speaks the driver's language: its command parses, its env names are ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import consts
from consts import ATTR_RESOURCE_TYPE, DRIVER_NAME, RESOURCE_TYPE_DEVICE, RESOURCE_TYPE_NODE
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


def test_the_driver_class_selects_every_device_of_the_driver() -> None:
    # Every template names this class: its meaning must not change.
    driver_class = device_classes()[DRIVER_NAME]
    assert driver_class["spec"] == {
        "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}}]
    }


def test_one_extended_resource_class_per_device_plugin_name() -> None:
    names = {
        d["spec"]["extendedResourceName"]: name
        for name, d in device_classes().items()
        if "extendedResourceName" in d["spec"]
    }
    assert sorted(names) == ["aws.amazon.com/neuron", "aws.amazon.com/neurondevice"]


def test_extended_resource_classes_select_whole_devices_only() -> None:
    """`aws.amazon.com/neuron: 16` must be 16 devices, never the UltraServer node device."""
    found = published().devices
    assert any(
        v.attributes[DRIVER_NAME][ATTR_RESOURCE_TYPE] == RESOURCE_TYPE_NODE
        for views in found.values()
        for v in views
    ), "no instance type publishes the node device: the check below would prove nothing"
    for name, doc in device_classes().items():
        if "extendedResourceName" not in doc["spec"]:
            continue
        selectors = [compile_selector(s["cel"]["expression"]) for s in doc["spec"]["selectors"]]
        for instance_type, views in found.items():
            for view in views:
                whole = view.attributes[DRIVER_NAME][ATTR_RESOURCE_TYPE] == RESOURCE_TYPE_DEVICE
                selected = all(s.matches(view) for s in selectors)
                assert selected == whole, (name, instance_type, view.name)
