"""The DaemonSet speaks the driver's language: its command parses, its env names are ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import consts
from neuron_dra.cli import parser

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
