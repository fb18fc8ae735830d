"""Manifests shared by the end-to-end tests, and the script that installs deploy/'s."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.e2e.cluster import Cluster
from tests.e2e.cluster_api import Obj

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


def run_install_script(
    cluster: Cluster,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 180.0,
) -> subprocess.CompletedProcess[str]:
    """scripts/install-dra-driver.sh against the cluster, with its kubectl."""
    environ = {
        "PATH": os.environ["PATH"],
        "KUBECTL": str(cluster.binaries.kubectl),
        "KUBECONFIG": str(cluster.kubeconfig),
        "HOME": str(cluster.workdir),  # kubectl's discovery cache stays out of the checkout
        **(env or {}),
    }
    return subprocess.run(
        [str(INSTALL_SCRIPT), *args],
        check=False, env=environ, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
