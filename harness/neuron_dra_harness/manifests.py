"""Manifests shared by the end-to-end tests, and the script that installs deploy/'s."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.cluster_api import Obj

INSTALL_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-dra-driver.sh"

DRIVER = "neuron.aws.com"


def resource_slice(node: str, devices: int = 4) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"neuron-{i}", "attributes": {"index": {"int": i}}} for i in range(devices)
            ],
        },
    }


def device_class(name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


MONITORING_GROUP = "monitoring.coreos.com"


def install_monitoring_crds(cluster: Cluster) -> None:
    """ServiceMonitor and PrometheusRule (monitoring.coreos.com/v1) with schemas that take
    anything, so that the chart's monitoring objects apply: the API server's own checks
    (namespaced, names, labels) run, the Prometheus Operator's schemas and controller do not."""
    for kind, plural in (
        ("ServiceMonitor", "servicemonitors"),
        ("PrometheusRule", "prometheusrules"),
    ):
        name = f"{plural}.{MONITORING_GROUP}"
        if cluster.get_or_none("apiextensions.k8s.io/v1", "CustomResourceDefinition", name):
            continue
        cluster.create(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {
                    "group": MONITORING_GROUP,
                    "scope": "Namespaced",
                    "names": {
                        "kind": kind,
                        "listKind": f"{kind}List",
                        "plural": plural,
                        "singular": kind.lower(),
                    },
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    ],
                },
            }
        )

        def established(name: str = name) -> bool:
            crd = cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            # A new CRD's status.conditions is null until the controller first looks at it.
            conditions = (crd.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        cluster.wait_for(f"the {kind} CRD established", established)


def claim_spec(device_class_name: str, count: int = 2) -> Obj:
    return {
        "devices": {
            "requests": [
                {
                    "name": "neuron",
                    "exactly": {
                        "deviceClassName": device_class_name,
                        "count": count,
                        "selectors": [
                            {"cel": {"expression": (f'device.attributes["{DRIVER}"].index >= 1')}}
                        ],
                    },
                }
            ]
        }
    }


def pod(name: str, namespace: str, node: str, claim: Obj) -> Obj:
    """A pod pinned to ``node`` that uses one claim in its only container.
    ``claim`` is the PodResourceClaim source (resourceClaimName or
    resourceClaimTemplateName)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "resources": {"claims": [{"name": "neuron"}]},
                }
            ],
            "resourceClaims": [{"name": "neuron", **claim}],
        },
    }


def allocated_devices(claim: Obj) -> list[Obj]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def install_environment(cluster: Cluster) -> dict[str, str]:
    """PATH with the cluster's kubectl first, and its KUBECONFIG: how an operator's shell
    finds kubectl. KUBECTL is not set."""
    path = f"{cluster.binaries.kubectl.parent}{os.pathsep}{os.environ['PATH']}"
    return {"PATH": path, "KUBECONFIG": str(cluster.kubeconfig)}


def run_install_script(
    cluster: Cluster,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 180.0,
) -> subprocess.CompletedProcess[str]:
    """scripts/install-dra-driver.sh against the cluster as the docs run it: the cluster's
    kubectl found on PATH, no KUBECTL (unless ``env`` sets it)."""
    environ = {
        **install_environment(cluster),
        "HOME": str(cluster.workdir),  # kubectl's discovery cache stays out of the checkout
        **(env or {}),
    }
    return subprocess.run(
        [str(INSTALL_SCRIPT), *args],
        check=False,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
