"""What a cluster needs for the driver, read from its API server: the DRA API, the
driver's DeviceClasses and admission policies, and every Neuron node served by the
driver alone."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.objects.node import decode as decode_node
from neuron_dra.agent.slices.deviceplugin import plugin_resources
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools.doctor.verdicts import Check, fail, ok, warn

Json = dict[str, Any]
Get = Callable[[str], Json]  # GET a path; raises ApiError on an error the check reports
List = Callable[[str], list[Json]]

OLDEST = (1, 34)
CLASSES = (DRIVER_NAME, f"neuroncore.{DRIVER_NAME}")
DEFAULT_FULLNAME = "neuron-dra"


def policies(fullname: str = DEFAULT_FULLNAME) -> tuple[str, ...]:
    """The chart's admission policies (each with a binding of the same name), named
    after its full name: the release's, or its fullnameOverride."""
    kinds = ("resourceslices", "claim-status", "node-labels", "node-events")
    return tuple(f"{fullname}-{p}" for p in kinds)


POLICIES = policies()
INSTALL_FIX = "install the driver: helm install neuron-dra deploy/helm/neuron-dra (install.md)"
UNREACHABLE_FIX = (
    "check that the context is the cluster meant and that its server is reachable from "
    "here (a VPN, a bastion, the cluster's endpoint access); `kubectl get --raw /version` "
    "tries the same"
)
POLICY_API = "/apis/admissionregistration.k8s.io/v1"
FORBIDDEN_FIX = (
    "give the account doctor runs as get on it (the chart grants the plugin's service "
    "account what `neuron-dra doctor --in-cluster` reads)"
)


def cluster_checks(
    get: Get, list_: List, fullname: str = DEFAULT_FULLNAME, server: str = "the API server"
) -> list[Check]:
    """Every cluster check, each on its own: one that cannot read says so and the
    others still run. `fullname` is the chart's, which names its admission policies.
    A server that cannot be reached is one failure naming `server` (its address and
    where it came from), not one per check: the rest would fail the same way."""
    checks = []
    check: Callable[[Get, List], list[Check]]
    for name, check in (
        ("kubernetes", _server),
        ("DRA API", _dra_api),
        ("device classes", _classes),
        ("admission policies", functools.partial(_policies, names=policies(fullname))),
        ("neuron nodes", _nodes),
    ):
        try:
            checks += check(get, list_)
        except ApiError as err:
            if err.status == 0:
                checks.append(fail("API server", f"{server}: {err}", UNREACHABLE_FIX))
                break
            if err.status == 403:
                checks.append(warn(name, f"could not read: {err}", FORBIDDEN_FIX))
            else:
                checks.append(fail(name, f"not read: {err}", "see the error"))
        except Exception as err:  # a malformed answer
            checks.append(fail(name, f"not read: {err}", "see the error"))
    return checks


def _exists(get: Get, path: str) -> bool:
    """Whether GET `path` finds an object: one by name, which RBAC can grant alone."""
    try:
        get(path)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


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
    path = "/apis/resource.k8s.io/v1/deviceclasses"
    missing = [c for c in CLASSES if not _exists(get, f"{path}/{c}")]
    if missing:
        return [fail("device classes", f"missing {', '.join(missing)}", INSTALL_FIX)]
    return [ok("device classes", ", ".join(CLASSES))]


def _policies(get: Get, list_: List, names: tuple[str, ...]) -> list[Check]:
    """Each policy and its binding (a policy without one enforces nothing). None at
    all is an install without them (admissionPolicy.enabled=false); some is a broken
    one."""
    missing = [
        f"{kind} {name}"
        for name in names
        for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
        if not _exists(get, f"{POLICY_API}/{kind}/{name}")
    ]
    if len(missing) == 2 * len(names):
        return [
            warn(
                "admission policies",
                f"none of {', '.join(names)}: a plugin's token could write other nodes' "
                "slices, labels and claims' device status",
                "install with admissionPolicy.enabled=true (the chart's default)",
            )
        ]
    if missing:
        return [
            fail(
                "admission policies",
                f"missing {', '.join(missing)}: what it guards is open to every plugin's token",
                "apply the chart again (helm upgrade, or scripts/install-dra-driver.sh): "
                "it recreates them",
            )
        ]
    return [ok("admission policies", f"{', '.join(names)}, each bound")]


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
        name
        for name, node in neuron.items()
        if name in served and plugin_resources(decode_node(node))
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
