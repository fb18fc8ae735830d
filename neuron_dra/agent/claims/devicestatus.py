"""What a prepared claim's `status.devices` says of each of its devices (pure).

The ResourceClaim's `status.devices` (KEP-4817; beta and on by default since
Kubernetes 1.33, GA in 1.37) holds one entry per allocated device, written by the
device's driver: a `Ready` condition once the device is prepared, and `data` a
monitoring tool can use without reaching the node: the Neuron devices the container
gets, their serial numbers, the NeuronCores it may use and the logical NeuronCore
size they are counted in. No `networkData`: a Neuron device has no network
interface of its own in the pod. `statuswriter` sends the entries.
"""

from __future__ import annotations

from typing import Any

from consts import DRIVER_NAME, ENV_NEURON_LOGICAL_NC_CONFIG
from neuron_dra.agent.claims.plan import PreparedClaim, PreparedDevice, format_cores
from neuron_dra.hardware import cores as logical

Entry = dict[str, Any]

READY = "Ready"
PREPARED = "Prepared"  # the Ready condition's reason: CDI spec written, checkpoint kept


def entries(prepared: PreparedClaim, lnc: int | None, at: str) -> list[Entry]:
    """One entry per device of `prepared` (a device of two requests is one entry).

    `lnc` is the node's default logical NeuronCore size (None where there is no LNC);
    a claim's NeuronConfig overrides it. `at` is the prepare's time, RFC 3339.
    """
    claim_lnc = dict(prepared.env).get(ENV_NEURON_LOGICAL_NC_CONFIG)
    size = int(claim_lnc) if claim_lnc is not None else lnc
    seen: dict[tuple[str, str], Entry] = {}
    for device in prepared.devices:
        key = (device.pool, device.device)
        if key not in seen:
            seen[key] = _entry(device, size, at)
    return list(seen.values())


def _entry(device: PreparedDevice, lnc: int | None, at: str) -> Entry:
    data: dict[str, Any] = {
        "neuronDevices": [
            {"index": n.index, "path": n.dev_path}
            | ({"serialNumber": n.serial_number} if n.serial_number else {})
            for n in device.neuron_devices
        ],
    }
    cores = _cores(device, lnc)
    if cores is not None:
        data["neuronCores"] = format_cores(cores)
    if lnc is not None:
        data["logicalNeuronCoreSize"] = lnc
    paths = ", ".join(n.dev_path for n in device.neuron_devices)
    return {
        "driver": DRIVER_NAME,
        "pool": device.pool,
        "device": device.device,
        "conditions": [
            {
                "type": READY,
                "status": "True",
                "reason": PREPARED,
                "message": f"prepared for the claim's containers: {paths}",
                "lastTransitionTime": at,
            }
        ],
        "data": data,
    }


def _cores(device: PreparedDevice, lnc: int | None) -> list[int] | None:
    """The host-global NeuronCore numbers the device gives (NEURON_RT_VISIBLE_CORES)."""
    if device.cores:
        return sorted(device.cores)
    numbers: list[int] = []
    for neuron in device.neuron_devices:
        found = logical.device_cores(neuron, lnc)
        if found is None:
            return None
        numbers += found
    return sorted(numbers)
