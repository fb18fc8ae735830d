"""The DaemonSet speaks the driver's language: its command parses, its env names are ours.

These read the committed ``deploy/*.yaml``, the chart's output with its default values
(``make lint`` fails when they drift apart), and the chart's ``values.yaml``.
"""

from __future__ import annotations

import os
import re
import subprocess
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
from neuron_dra.agent.kubelet import probeclient
from neuron_dra.agent.kubelet.readiness import READINESS_SERVICE
from neuron_dra.agent.kubelet.sockets import socket_paths
from neuron_dra.cli import parser
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools.cel import compile_selector
from neuron_dra.tools.published import published

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "neuron-dra"
INSTALLER = REPO / "scripts" / "install-dra-driver.sh"


def daemonset() -> dict[str, Any]:
    [found] = [
        d
        for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text())
        if d and d["kind"] == "DaemonSet"
    ]
    result: dict[str, Any] = found
    return result


def plugin_container() -> dict[str, Any]:
    [container] = daemonset()["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = container
    return result


def chart_values() -> dict[str, Any]:
    result: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return result


def test_the_command_parses_with_the_real_cli() -> None:
    command = plugin_container()["command"]
    assert command[0] == "neuron-dra"
    args = parser().parse_args(command[1:])
    assert args.log_format == "json" and args.metrics_port == 9400


def test_the_charts_defaults_are_the_drivers() -> None:
    """Every flag the chart passes, with its default values, is the driver's own default:
    installing the chart decides nothing the driver would decide otherwise."""
    command = plugin_container()["command"]
    given = {arg.split("=", 1)[0].removeprefix("--").replace("-", "_") for arg in command[1:]}
    rendered, defaults = parser().parse_args(command[1:]), parser().parse_args(["run"])
    chosen = {"log_format", "metrics_port"}  # json logs and metrics in a cluster
    assert given - chosen - {"run"} == {
        "log_level",
        "health_interval",
        "health_recovery",
        "unhealthy_effect",
        "health_heartbeat_timeout",
        "metrics_auth",
        "pod_resources_interval",
        "rediscover_interval",
        "withdraw_after",
        "ultraserver_devices",
        "neuron_cores",
        "enable_device_metadata",
    }
    for dest in given - chosen - {"run"}:
        assert getattr(rendered, dest) == getattr(defaults, dest), dest


def test_every_env_name_is_one_the_driver_reads() -> None:
    known = {v for k, v in vars(consts).items() if k.startswith("ENV_")}
    names = {e["name"] for e in plugin_container()["env"]}
    assert names <= known, names - known
    assert {"NODE_NAME", "POD_UID", "CDI_ROOT", "HEALTHCHECK_PORT", "HEALTHCHECK_ADDRESS"} <= names
    assert {"PROBE_SOCKET"} <= names


def test_the_probes_ask_the_probe_socket_and_no_port() -> None:
    """The kubelet's probes run the probe client in the container, which asks the
    plugin's abstract socket: nothing another pod can reach (see `probeclient`)."""
    container = plugin_container()
    client = ["python3", "-I", "-m", probeclient.__name__]
    # Liveness asks for the default service, readiness for the registration's.
    assert container["livenessProbe"]["exec"]["command"] == client
    assert container["readinessProbe"]["exec"]["command"] == [*client, READINESS_SERVICE]
    for probe in ("livenessProbe", "readinessProbe"):
        assert {"grpc", "httpGet", "tcpSocket"}.isdisjoint(container[probe]), probe
        # The client gives up before the kubelet does, so the probe says why it failed.
        assert container[probe]["timeoutSeconds"] > probeclient.TIMEOUT_S
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PROBE_SOCKET"], env


def test_the_network_policy_admits_the_scrapers_and_not_the_health_port() -> None:
    """Pods reach the metrics port alone; the kubelet's probes of the health port come
    from the pod's own node, which a NetworkPolicy always admits, on the pod network
    where one applies."""
    [policy] = [d for d in yaml.safe_load_all((DEPLOY / "networkpolicy.yaml").read_text()) if d]
    pod = daemonset()["spec"]["template"]
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["namespace"] == daemonset()["metadata"]["namespace"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["hostNetwork"] is False
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in plugin_container()["ports"]}
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    assert set(ports) == {"healthz", "metrics"}


def test_the_charts_instance_types_are_the_catalogue() -> None:
    """values.yaml lists every instance type the driver knows (then run
    scripts/render_manifests.py); the DaemonSet's affinity is that list."""
    assert chart_values()["instanceTypes"] == list(INSTANCE_TYPES), (
        "instanceTypes of deploy/helm/neuron-dra/values.yaml must list the catalogue, in its "
        "order; then run scripts/render_manifests.py"
    )
    [term] = daemonset()["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": list(INSTANCE_TYPES),
        },
        {
            "key": "eks.amazonaws.com/compute-type",
            "operator": "NotIn",
            "values": ["fargate", "hybrid", "auto"],
        },
    ]


def test_tolerations_as_the_aws_driver() -> None:
    tolerations = daemonset()["spec"]["template"]["spec"]["tolerations"]
    assert tolerations == [
        {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {
            "key": "sagemaker.amazonaws.com/node-health-status",
            "operator": "Equal",
            "value": "Unschedulable",
            "effect": "NoSchedule",
        },
    ]


def test_only_the_drivers_own_plugin_directory_is_mounted() -> None:
    """Sockets, checkpoint and publisher lock live in <plugins>/neuron.aws.com, mounted at
    the same path inside as on the host, since the plugin tells the kubelet its paths."""
    container = plugin_container()
    env = {e["name"]: e.get("value") for e in container["env"]}
    registry = Path(env["KUBELET_REGISTRAR_DIRECTORY_PATH"])
    plugins = Path(env["KUBELET_PLUGINS_DIRECTORY_PATH"])
    registration, dra = socket_paths(registry, plugins, "uid")
    mounts = {m["name"]: Path(m["mountPath"]) for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in daemonset()["spec"]["template"]["spec"]["volumes"]}
    own = plugins / DRIVER_NAME
    assert dra.parent == own and registration.parent == registry
    host_paths = {
        path: volumes[name]["hostPath"]
        for name, path in mounts.items()
        if "hostPath" in volumes[name]
    }
    assert host_paths[own] == {"path": str(own), "type": "DirectoryOrCreate"}
    assert host_paths[registry] == {"path": str(registry), "type": "Directory"}
    # Nothing above the driver's directory: other drivers' sockets stay out of reach.
    assert not [p for p in mounts.values() if p != own and own.is_relative_to(p)]


def test_the_installer_applies_every_manifest_once() -> None:
    script = INSTALLER.read_text()
    listed: list[str] = []
    for array in ("CLUSTER_MANIFESTS", "NAMESPACED_MANIFESTS"):
        found = re.search(rf"^readonly {array}=\(([^)]*)\)$", script, re.MULTILINE)
        assert found, array
        listed += found[1].split()
    assert sorted(listed) == sorted(p.name for p in DEPLOY.glob("*.yaml"))
    assert listed.index("namespace.yaml") == 0


def test_the_installer_runs_the_kubectl_on_path(tmp_path: Path) -> None:
    """As the docs run it: no KUBECTL, kubectl found on PATH (here a stand-in that records
    its arguments and reaches no cluster). The script calls it and says the cluster is
    out of reach, instead of calling itself until bash crashes (exit 139)."""
    stub_dir, calls = tmp_path / "bin", tmp_path / "calls"
    stub_dir.mkdir()
    stub = stub_dir / "kubectl"
    stub.write_text(f'#!/bin/sh\necho "$*" >>{calls}\necho "no cluster here" >&2\nexit 1\n')
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "KUBECTL"}
    env |= {"PATH": f"{stub_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(INSTALLER), "registry.invalid/neuron-dra:1.0.0", "--timeout", "300s"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert "cannot reach the cluster of context '(none)'" in result.stderr, result.stderr
    assert "no cluster here" in result.stderr
    assert calls.read_text().splitlines() == [
        "config current-context",
        "version --request-timeout=15s -o json",
    ]


def test_a_rolling_update_waits_for_a_registered_pod() -> None:
    spec = daemonset()["spec"]
    assert spec["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert spec["minReadySeconds"] >= 5


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
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "aws.amazon.com/neurondevice",
    ]


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


def test_a_default_install_asks_scrapers_for_a_token() -> None:
    """/metrics names the namespace, pod, container and claim of every workload holding a
    device: by default the plugin answers only a bearer token the API server vouches for,
    of a user allowed to get /metrics, with the RBAC to ask and a role to bind scrapers to.
    The driver's own default is the same, for a plugin run without the chart."""
    assert parser().parse_args(plugin_container()["command"][1:]).metrics_auth == "kubernetes"
    assert parser().parse_args(["run"]).metrics_auth == "kubernetes"
    rbac = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]
    roles = {d["metadata"]["name"]: d for d in rbac if d["kind"] == "ClusterRole"}
    granted = {
        (resource, verb)
        for rule in roles["neuron-dra"]["rules"]
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }
    assert {("tokenreviews", "create"), ("subjectaccessreviews", "create")} <= granted
    assert roles["neuron-dra-metrics-reader"]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
