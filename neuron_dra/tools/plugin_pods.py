"""Pods asking the Neuron device plugin's resources: what DRA nodes make of them.

`lint` reads Pods, and the pod templates of workloads, for these names only.
On DRA nodes the kube-scheduler turns them into one claim per pod from the
DeviceClass that names them as its extendedResourceName (deploy/deviceclass.yaml):
whole devices for `aws.amazon.com/neuron` and `aws.amazon.com/neurondevice`,
logical NeuronCores for `aws.amazon.com/neuroncore`. Every finding is a warning:
nodes running the device plugin still serve the pod the old way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from consts import ATTR_DEVICE_ID, DRIVER_NAME, GROUP_ATTRIBUTE_DOMAIN
from neuron_dra.tools.core_requests import mismatch
from neuron_dra.tools.counted import counted
from neuron_dra.tools.releases import FIRST_EXTENDED, Release, named
from neuron_dra.tools.simulate import CORE_CLASS, CORE_RESOURCE, MAX_CLAIM_DEVICES, pod_specs

GROUP_PREFIX = f"{GROUP_ATTRIBUTE_DOMAIN}/devicegroup"
# The Neuron device plugin's names of whole devices.
DEVICE_RESOURCES = ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice")


def pod_warnings(
    subject: str, doc: Mapping[str, Any], release: Release | None = None
) -> list[tuple[str, str]]:
    """(where, message) for each device-plugin resource a container of the pod asks, as on
    `release` (on every release when None)."""
    warnings: list[tuple[str, str]] = []
    for where, spec in pod_specs(doc):
        for field in ("initContainers", "containers"):
            containers = spec.get(field)
            for container in containers if isinstance(containers, list) else []:
                if not isinstance(container, Mapping):
                    continue
                at = ": ".join(
                    p for p in (subject, where, f"container {container.get('name')}") if p
                )
                asked = _extended_resources(container)
                for name, amount in asked.items():
                    warnings.extend((at, message) for message in _messages(name, amount, release))
                claims = _claims(container)
                if asked and claims:
                    warnings.append((at, _MIXED.format(", ".join(asked), ", ".join(claims))))
        # A container asking more than a claim holds has its own warning already.
        why = mismatch(spec) if release is None or release >= FIRST_EXTENDED else None
        if why and not any(
            m.startswith(f"{CORE_RESOURCE}: ") and "ever allocate" in m for _, m in warnings
        ):
            warnings.append((": ".join(p for p in (subject, where) if p), why))
    return warnings


# One container, Neuron devices from two claims: it gets the devices of both, but CDI
# keeps one value of a variable given twice, so NEURON_RT_VISIBLE_CORES names the cores
# of one of them, whichever the kubelet's map order puts last. The driver gives the
# union where it sees both (two extended resources of one container share a claim).
_MIXED = (
    "{} and the claims {} in one container: if those claims hold Neuron devices too, the "
    "container gets every device but NEURON_RT_VISIBLE_CORES of only one source (CDI "
    "keeps one value of a variable given twice); ask one way, in one claim"
)


def _claims(container: Mapping[str, Any]) -> list[str]:
    resources = container.get("resources")
    claims = resources.get("claims") if isinstance(resources, Mapping) else None
    return [str(c.get("name")) for c in claims or [] if isinstance(c, Mapping) and c.get("name")]


def _messages(name: str, amount: str, release: Release | None) -> list[str]:
    if release is not None and release < FIRST_EXTENDED:
        return [
            f"{name}: {amount}: {named(release)} does not serve extended resources from DRA "
            "drivers, so only nodes running the Neuron device plugin serve it"
        ]
    served = "on Kubernetes 1.36+ (DRA nodes)" if release is None else "on DRA nodes"
    if name in DEVICE_RESOURCES:
        devices = counted(amount, "device")
        return [
            f"{name}: {amount} is served through extended resources {served} and carries no "
            f"connected-set constraint: any {devices} of the node, "
            "not a connected group; for a connected set use a ResourceClaimTemplate with a "
            f"{GROUP_PREFIX}N_id matchAttribute"
        ]
    cores = counted(amount, "NeuronCore")
    messages = [
        f"{name}: {amount} is served through extended resources {served} and carries no "
        f"constraint: any {cores} of the node, which may "
        "span Neuron devices; for cores of one device use a ResourceClaimTemplate of "
        f"DeviceClass {CORE_CLASS} with a {DRIVER_NAME}/{ATTR_DEVICE_ID} matchAttribute"
    ]
    if amount.isdigit() and int(amount) > MAX_CLAIM_DEVICES:
        messages.append(
            f"{name}: {amount} is more than DRA nodes ever allocate: the scheduler's claim for "
            f"the pod holds at most {MAX_CLAIM_DEVICES} devices, one per NeuronCore; only nodes "
            "running the Neuron device plugin can serve it"
        )
    return messages


def _extended_resources(container: Mapping[str, Any]) -> dict[str, str]:
    """The Neuron resources a container asks, from its limits, else its requests."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    found: dict[str, str] = {}
    for field in ("requests", "limits"):  # limits win: requests default to them
        values = resources.get(field)
        if isinstance(values, Mapping):
            for name, amount in values.items():
                if name in (*DEVICE_RESOURCES, CORE_RESOURCE):
                    found[str(name)] = str(amount)
    return found
