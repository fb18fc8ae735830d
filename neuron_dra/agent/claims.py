"""What an allocated ResourceClaim means on this node: devices, configs, container env.

Pure: the ResourceClaim object (as the API server returns it) and the node
inventory in, a PreparedClaim or a ClaimError out. Every rule of the opaque
configuration (LNC only where the hardware has it, UltraServerConfig only for
the whole-node device of an UltraServer node) is enforced here, with messages
that name the claim, the field and the allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.config import ConfigError, DeviceConfig, NeuronConfig, UltraServerConfig, decode
from consts import (
    DRIVER_NAME,
    ENV_NEURON_LOGICAL_NC_CONFIG,
    ENV_NEURON_RT_ULTRASERVER_MODE,
    ENV_NEURON_RT_ULTRASERVER_NODE_ID,
    ENV_NEURON_RT_ULTRASERVER_SERVER_ID,
    ENV_NEURON_RT_VISIBLE_CORES,
    NODE_DEVICE_NAME,
)
from neuron_dra.hardware.inventory import NeuronDevice, NodeInventory

# UltraServerConfig.ultraserverMode (nodes in the unit) -> the Neuron runtime's mode enum.
RUNTIME_ULTRASERVER_MODE = {4: 1, 2: 2, 1: 4}  # X4=1, X2H=2, X1=4


class ClaimError(ValueError):
    """The claim cannot be prepared on this node; the message is for the pod's events."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str  # ResourceSlice device name
    neuron_devices: tuple[NeuronDevice, ...]  # /dev/neuronN nodes it gives the container


@dataclass(frozen=True)
class PreparedClaim:
    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]
    env: tuple[tuple[str, str], ...]  # for every container using any device of the claim


def plan(
    claim: ClaimRef, obj: dict[str, Any], inventory: NodeInventory, pool: str
) -> PreparedClaim:
    """Work out what `obj` (a ResourceClaim) gives containers on this node."""
    try:
        return _plan(claim, obj, inventory, pool)
    except (AttributeError, TypeError) as err:
        # The API server validates claims, so a wrong type here is a corrupted object.
        raise ClaimError(f"claim {claim}: malformed ResourceClaim ({err})") from None


def _plan(
    claim: ClaimRef, obj: dict[str, Any], inventory: NodeInventory, pool: str
) -> PreparedClaim:
    uid = obj.get("metadata", {}).get("uid")
    if uid != claim.uid:
        raise ClaimError(f"claim {claim}: the API server has UID {uid}, a different claim")
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"claim {claim}: not allocated")
    devices_section = allocation.get("devices") or {}
    results = [
        r
        for r in devices_section.get("results") or []
        if r.get("driver") == DRIVER_NAME and r.get("pool") == pool
    ]
    if not results:
        raise ClaimError(f"claim {claim}: no device of {DRIVER_NAME} on pool {pool} allocated")

    configs = _configs(claim, devices_section.get("config") or [])
    by_name = {d.name: d for d in inventory.devices}
    prepared = []
    lnc_by_request: dict[str, int | None] = {}
    ultraserver_mode: int | None = None
    for result in results:
        request = str(result.get("request", ""))
        applied = [c for requests, c in configs if _applies(requests, request)]
        lnc = _last(applied, NeuronConfig, "logicalNeuronCore")
        mode = _last(applied, UltraServerConfig, "ultraserverMode")
        device_name = str(result.get("device", ""))
        if device_name == NODE_DEVICE_NAME:
            neuron_devices = _whole_node(claim, inventory)
            if mode is not None:
                _check_mode(claim, inventory, mode)
                ultraserver_mode = mode
        else:
            if mode is not None:
                raise ClaimError(
                    f"claim {claim}: UltraServerConfig applies to request {request!r} whose "
                    f"device {device_name} is a single Neuron device; it is only valid for "
                    f"the {NODE_DEVICE_NAME} device (resourceType == 'neuron_node')"
                )
            device = by_name.get(device_name)
            if device is None:
                raise ClaimError(f"claim {claim}: device {device_name} is not on this node")
            neuron_devices = (device,)
        if lnc is not None and inventory.lnc is None:
            raise ClaimError(
                f"claim {claim}: NeuronConfig.logicalNeuronCore is set for request {request!r} "
                f"but {inventory.instance_type or 'this node'} has no logical NeuronCores "
                "(LNC exists on trn2 only); remove the field"
            )
        lnc_by_request[request] = lnc
        prepared.append(PreparedDevice(_request_names(request), pool, device_name, neuron_devices))

    lncs = set(lnc_by_request.values())
    if len(lncs) > 1:
        raise ClaimError(
            f"claim {claim}: requests set different logicalNeuronCore values {lnc_by_request}; "
            "containers of one claim share one NeuronCore layout"
        )
    claim_lnc = lncs.pop() if lncs else None
    env = _env(claim, inventory, prepared, claim_lnc, ultraserver_mode)
    return PreparedClaim(claim, tuple(prepared), env)


def _configs(claim: ClaimRef, entries: list[Any]) -> list[tuple[list[str], DeviceConfig]]:
    """This driver's configs, class configs before claim configs so claim ones win."""
    ordered = sorted(enumerate(entries), key=lambda e: (e[1].get("source") != "FromClass", e[0]))
    decoded = []
    for index, entry in ordered:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != DRIVER_NAME:
            continue
        source = "DeviceClass" if entry.get("source") == "FromClass" else "claim"
        try:
            config = decode(opaque.get("parameters"))
        except ConfigError as err:
            raise ClaimError(f"claim {claim}: config[{index}] from the {source}: {err}") from None
        decoded.append((list(entry.get("requests") or []), config))
    return decoded


def _applies(requests: list[str], request: str) -> bool:
    return not requests or request in requests or request.split("/", 1)[0] in requests


def _request_names(request: str) -> tuple[str, ...]:
    # Containers reference the top-level request even when a subrequest was chosen.
    parent = request.split("/", 1)[0]
    return (parent,) if parent == request else (parent, request)


def _last(configs: list[DeviceConfig], kind: type[DeviceConfig], field: str) -> Any:
    value = None
    for config in configs:
        if isinstance(config, kind) and field in config.model_fields_set:
            value = getattr(config, field)
    return value


def _whole_node(claim: ClaimRef, inventory: NodeInventory) -> tuple[NeuronDevice, ...]:
    if inventory.ultraserver is None:
        raise ClaimError(
            f"claim {claim}: device {NODE_DEVICE_NAME} needs UltraServer membership, "
            "which this node does not report"
        )
    return inventory.devices


def _check_mode(claim: ClaimRef, inventory: NodeInventory, mode: int) -> None:
    assert inventory.ultraserver is not None
    supported = inventory.ultraserver.modes
    if mode not in supported:
        raise ClaimError(
            f"claim {claim}: UltraServerConfig.ultraserverMode {mode} is not supported by this "
            f"UltraServer; supported: {', '.join(map(str, supported))}"
        )


def _env(
    claim: ClaimRef,
    inventory: NodeInventory,
    prepared: list[PreparedDevice],
    lnc: int | None,
    ultraserver_mode: int | None,
) -> tuple[tuple[str, str], ...]:
    devices = sorted({d.index: d for p in prepared for d in p.neuron_devices}.items())
    effective_lnc = lnc if lnc is not None else inventory.lnc
    cores: list[int] = []
    for index, device in devices:
        if device.cores is None:
            raise ClaimError(
                f"claim {claim}: core count of neuron{index} is unknown (see the driver's "
                "discovery log), so NEURON_RT_VISIBLE_CORES cannot be computed"
            )
        per_device = device.cores // (effective_lnc or 1)
        cores.extend(range(index * per_device, (index + 1) * per_device))
    env = [(ENV_NEURON_RT_VISIBLE_CORES, format_cores(cores))]
    if lnc is not None:
        env.append((ENV_NEURON_LOGICAL_NC_CONFIG, str(lnc)))
    if ultraserver_mode is not None and inventory.ultraserver is not None:
        us = inventory.ultraserver
        env.append(
            (ENV_NEURON_RT_ULTRASERVER_MODE, str(RUNTIME_ULTRASERVER_MODE[ultraserver_mode]))
        )
        if ultraserver_mode == 4:
            env += [(ENV_NEURON_RT_ULTRASERVER_SERVER_ID, us.server_id_4),
                    (ENV_NEURON_RT_ULTRASERVER_NODE_ID, str(us.node_id_4))]  # fmt: skip
        elif ultraserver_mode == 2:
            env += [(ENV_NEURON_RT_ULTRASERVER_SERVER_ID, us.server_id_2),
                    (ENV_NEURON_RT_ULTRASERVER_NODE_ID, str(us.node_id_2))]  # fmt: skip
    return tuple(env)


def format_cores(cores: list[int]) -> str:
    """`4-7` for a contiguous run, otherwise an ascending comma list as the device plugin gave."""
    if cores and cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
    return ",".join(map(str, cores))
