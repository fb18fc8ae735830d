"""What a cluster needs for the driver, read from its API server: the DRA API, the
driver's DeviceClasses and admission policies, and every Neuron node served by the
driver alone."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.slices.deviceplugin import plugin_resources
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools.doctor.verdicts import Check, fail, ok, warn

Json = dict[str, Any]
Get = Callable[[str], Json]  # GET a path; raises on an error the check reports
List = Callable[[str], list[Json]]

OLDEST = (1, 34)
CLASSES = (DRIVER_NAME, f"neuroncore.{DRIVER_NAME}")
POLICIES = ("neuron-dra-resourceslices", "neuron-dra-claim-status", "neuron-dra-node-labels")
INSTALL_FIX = "install the driver: helm install neuron-dra deploy/helm/neuron-dra (install.md)"


def cluster_checks(get: Get, list_: List) -> list[Check]:
    """Every cluster check, each on its own: one that cannot read says so and the
    others still run."""
    checks = []
    for check in (_server, _dra_api, _classes, _policies, _nodes):
        try:
            checks += check(get, list_)
        except Exception as err:  # an API error, or a server without the resource
            checks.append(fail(check.__name__.strip("_"), f"not read: {err}", "see the error"))
    return checks


def _server(get: Get, list_: List) -> list[Check]:
    version = get("/version")
    git = str(version.get("gitVersion", "?"))
    found = re.match(r"v?(\d+)\.(\d+)", git)
    if found is None or (int(found[1]), int(found[2])) < OLDEST:
        return [fail("kubernetes", f"API server {git}", "the driver needs Kubernetes 1.34+")]
    return [ok("kubernetes", f"API server {git}")]


def _dra_api(get: Get, list_: List) -> list[Check]:
    group = get("/apis/resource.k8s.io")
    versions = [v["version"] for v in group.get("versions") or []]
    if "v1" not in versions:
        return [
            fail(
                "DRA API",
                f"resource.k8s.io serves {', '.join(versions) or 'nothing'}, not v1",
                "Kubernetes 1.34 or later serves resource.k8s.io/v1",
            )
        ]
    return [ok("DRA API", f"resource.k8s.io {', '.join(versions)}")]


def _classes(get: Get, list_: List) -> list[Check]:
    names = {c["metadata"]["name"] for c in list_("/apis/resource.k8s.io/v1/deviceclasses")}
    missing = [c for c in CLASSES if c not in names]
    if missing:
        return [fail("device classes", f"missing {', '.join(missing)}", INSTALL_FIX)]
    return [ok("device classes", ", ".join(CLASSES))]


def _policies(get: Get, list_: List) -> list[Check]:
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    names = {p["metadata"]["name"] for p in list_(path)}
    missing = [p for p in POLICIES if p not in names]
    if missing:
        return [
            warn(
                "admission policies",
                f"missing {', '.join(missing)}: a plugin's token could write other nodes' "
                "slices, labels and claims' device status",
                "install with admissionPolicy.enabled=true (the chart's default)",
            )
        ]
    return [ok("admission policies", ", ".join(POLICIES))]


def _nodes(get: Get, list_: List) -> list[Check]:
    nodes = list_("/api/v1/nodes")
    neuron = {
        n["metadata"]["name"]: n
        for n in nodes
        if (n["metadata"].get("labels") or {}).get("node.kubernetes.io/instance-type")
        in INSTANCE_TYPES
    }
    served = {
        s["spec"].get("nodeName")
        for s in list_(
            f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver={DRIVER_NAME}"
        )
    }
    checks = []
    unserved = sorted(set(neuron) - served)
    if not neuron:
        checks.append(
            warn(
                "neuron nodes",
                "no node of a Neuron instance type",
                "label nodes node.kubernetes.io/instance-type, as EC2 nodes are",
            )
        )
    elif unserved:
        checks.append(
            fail(
                "neuron nodes",
                f"{len(unserved)} of {len(neuron)} publish no devices: {', '.join(unserved[:10])}",
                "see the plugin pod of each: kubectl -n neuron-dra get pods -o wide",
            )
        )
    else:
        checks.append(ok("neuron nodes", f"{len(neuron)} publish their devices"))
    both = sorted(
        name for name, node in neuron.items() if name in served and plugin_resources(node)
    )
    if both:
        checks.append(
            fail(
                "device plugin",
                f"the Neuron device plugin also serves {', '.join(both[:10])}: two pods "
                "could get one device",
                "keep the device plugin's DaemonSet off the driver's nodes "
                "(docs/operators/migration.md)",
            )
        )
    else:
        checks.append(ok("device plugin", "no node served by both the driver and the plugin"))
    return checks
