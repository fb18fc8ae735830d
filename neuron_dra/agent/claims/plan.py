"""What an allocated ResourceClaim means on this node: devices, configs, container env.

Pure: the ResourceClaim (decoded by `objects.claim`) and the node
inventory in, a PreparedClaim or a ClaimError out. Every rule of the opaque
configuration (LNC only where the hardware has it and only for whole devices,
UltraServerConfig only for the whole-node device of an UltraServer node) is
enforced here, with messages that name the claim, the field and the allowed
values. The rule that a device serves one claim at a time is `exclusive`'s.

A container references either the whole claim or one of its requests, and gets
the devices of what it references, so the environment that depends on the
devices (NEURON_RT_VISIBLE_CORES) is worked out for both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consts import (
    DRIVER_NAME,
    ENV_NEURON_LOGICAL_NC_CONFIG,
    ENV_NEURON_RT_ULTRASERVER_MODE,
    ENV_NEURON_RT_ULTRASERVER_NODE_ID,
    ENV_NEURON_RT_ULTRASERVER_SERVER_ID,
    ENV_NEURON_RT_VISIBLE_CORES,
    NODE_DEVICE_NAME,
)
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.objects import claim as claimobj
from neuron_dra.agent.objects.claim import AllocatedConfig, ResourceClaim
from neuron_dra.agent.objects.fields import ObjectError
from neuron_dra.hardware import cores as logical
from neuron_dra.hardware.inventory import NeuronDevice, NodeInventory

if TYPE_CHECKING:
    from api.config import DeviceConfig

# What the API server allows as a request name; such names become part of CDI device names.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# How kube-scheduler names the requests of the claim it makes for a pod's extended
# resources (DRAExtendedResource): container index (init containers first), then the
# index of the resource among the container's sorted requests.
_EXTENDED_REQUEST = re.compile(r"container-(\d+)-request-\d+")

Env = tuple[tuple[str, str], ...]


class ClaimError(ValueError):
    """The claim cannot be prepared on this node; the message is for the pod's events."""


@dataclass(frozen=True)
class PreparedDevice:
    """One allocation result: a device for a request (a device of two requests is two)."""

    request_names: tuple[str, ...]  # the top-level request first, then a subrequest if any
    pool: str
    device: str  # ResourceSlice device name
    neuron_devices: tuple[NeuronDevice, ...]  # /dev/neuronN nodes it gives the container
    admin_access: bool = False
    # A NeuronCore device: the host-global logical core numbers it gives (else every core
    # of `neuron_devices`).
    cores: tuple[int, ...] = ()


@dataclass(frozen=True)
class PreparedClaim:
    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]
    env: Env  # of a container referencing the whole claim
    # The part of `env` every container of the claim gets, whatever it references.
    common_env: Env = ()
    # Top-level request -> the rest of the env for exactly that request's devices. Empty
    # when every request has the same devices: then `common_env` is all of `env`.
    request_env: tuple[tuple[str, Env], ...] = ()


@dataclass(frozen=True)
class Holding:
    """A device prepared, or being prepared, on this node for a claim."""

    claim: ClaimRef
    pool: str
    device: str
    admin_access: bool


def decode(claim: ClaimRef, obj: Any) -> ResourceClaim:
    """`obj`, the claim as the API server answers, decoded; ClaimError naming the field
    of a wrong type.

    The API server validates claims, so a field of the wrong type means a corrupted
    object or a server this driver does not know: the user's problem to see. Decoded
    up front, any error the plan still raises is what it is, a bug of the driver's
    (logged with its traceback and counted as ``internal``).
    """
    try:
        return claimobj.decode(obj)
    except ObjectError as err:
        raise ClaimError(f"claim {claim}: malformed ResourceClaim: {err}") from None


def plan(claim: ClaimRef, obj: Any, inventory: NodeInventory, pool: str) -> PreparedClaim:
    """`plan_claim` of `obj` as the API server answers: for callers that hold the JSON
    and read nothing else of it (tools, simulations)."""
    return plan_claim(claim, decode(claim, obj), inventory, pool)


def plan_claim(
    claim: ClaimRef, obj: ResourceClaim, inventory: NodeInventory, pool: str
) -> PreparedClaim:
    """Work out what `obj` gives containers on this node."""
    if obj.uid != claim.uid:
        raise ClaimError(f"claim {claim}: the API server has UID {obj.uid}, a different claim")
    allocation = obj.allocation
    if allocation is None:
        raise ClaimError(f"claim {claim}: not allocated")
    results = [r for r in allocation.results if r.driver == DRIVER_NAME and r.pool == pool]
    if not results:
        raise ClaimError(f"claim {claim}: no device of {DRIVER_NAME} on pool {pool} allocated")

    configs = _configs(claim, allocation.config)
    by_name = {d.name: d for d in inventory.devices}
    prepared: list[PreparedDevice] = []
    lnc_by_request: dict[str, int | None] = {}
    ultraserver_mode: int | None = None
    seen: set[tuple[str, str]] = set()
    for result in results:
        request = result.request
        device_name = result.device
        if (request, device_name) in seen:
            continue  # listed twice: one device node, one CDI device
        seen.add((request, device_name))
        applied = [c for requests, c in configs if _applies(requests, request)]
        lnc = _last(applied, _lnc)
        mode = _last(applied, _ultraserver_mode)
        core_numbers: tuple[int, ...] = ()
        if device_name == NODE_DEVICE_NAME:
            neuron_devices = _whole_node(claim, inventory)
            if mode is not None:
                _check_mode(claim, inventory, mode)
                ultraserver_mode = mode
        else:
            if mode is not None:
                raise ClaimError(
                    f"claim {claim}: UltraServerConfig applies to request {request!r} whose "
                    f"device {device_name} is not the whole node; it is only valid for "
                    f"the {NODE_DEVICE_NAME} device (resourceType == 'neuron_node')"
                )
            device = by_name.get(device_name)
            core = None if device else logical.find(inventory, device_name)
            if core is not None:
                device, core_numbers = core.device, (core.index,)
            if device is None:
                raise ClaimError(f"claim {claim}: device {device_name} is not on this node")
            neuron_devices = (device,)
        if lnc is not None and inventory.lnc is None:
            raise ClaimError(
                f"claim {claim}: NeuronConfig.logicalNeuronCore is set for request {request!r} "
                f"but {inventory.instance_type or 'this node'} has no logical NeuronCores "
                "(LNC exists on trn2 and trn3 only); remove the field"
            )
        if lnc is not None and core_numbers:
            raise ClaimError(
                f"claim {claim}: NeuronConfig.logicalNeuronCore is set for request {request!r}, "
                f"whose device {device_name} is one logical NeuronCore of "
                f"{neuron_devices[0].name}; a core is as large as the node's LNC "
                f"({inventory.lnc}), fixed when the node boots: remove the field, or ask for "
                "whole devices (DeviceClass neuron.aws.com) to set it"
            )
        lnc_by_request[request] = lnc
        admin = result.admin_access
        names = _request_names(request)
        prepared.append(
            PreparedDevice(names, pool, device_name, neuron_devices, admin, core_numbers)
        )

    return _with_env(claim, prepared, inventory, lnc_by_request, ultraserver_mode)


def _with_env(
    claim: ClaimRef,
    prepared: list[PreparedDevice],
    inventory: NodeInventory,
    lnc_by_request: dict[str, int | None],
    ultraserver_mode: int | None,
) -> PreparedClaim:
    """The claim with the env of a container of the whole claim and of each request."""
    claim_lnc = _claim_lnc(claim, lnc_by_request, inventory.lnc)
    effective_lnc = claim_lnc if claim_lnc is not None else inventory.lnc
    common = _claim_env(inventory, claim_lnc, ultraserver_mode)
    cores = _cores_env(claim, prepared, effective_lnc)
    by_request: dict[str, list[PreparedDevice]] = {}
    by_container: dict[str, list[PreparedDevice]] = {}
    for device in prepared:
        name = device.request_names[0]
        by_request.setdefault(name, []).append(device)
        by_container.setdefault(_container_of(name), []).append(device)
    # A container gets each request it names as a CDI device of its own, and CDI keeps
    # one value of a variable given twice. The scheduler names the requests of a pod's
    # extended resources per container (`container-<i>-request-<j>`), so a container
    # asking `aws.amazon.com/neuron` and `aws.amazon.com/neuroncore` gets two requests
    # of one claim: each carries the cores of all of that container's requests.
    request_env = tuple(
        (name, _cores_env(claim, by_container[_container_of(name)], effective_lnc))
        for name in by_request
    )
    if all(env == cores for _, env in request_env):
        # Whatever a container references, it gets the same devices: one env for all.
        return PreparedClaim(claim, tuple(prepared), cores + common, cores + common)
    for name, _ in request_env:
        if not _DNS_LABEL.fullmatch(name):
            raise ClaimError(
                f"claim {claim}: malformed ResourceClaim (request name {name!r} is not a DNS label)"
            )
    return PreparedClaim(claim, tuple(prepared), cores + common, common, request_env)


def _container_of(request: str) -> str:
    """The container an extended-resource request serves; other requests stand alone."""
    match = _EXTENDED_REQUEST.fullmatch(request)
    return f"container-{match.group(1)}" if match else request


def _configs(
    claim: ClaimRef, entries: tuple[AllocatedConfig, ...]
) -> list[tuple[tuple[str, ...], DeviceConfig]]:
    """This driver's configs, class configs before claim configs so claim ones win."""
    ordered = sorted(enumerate(entries), key=lambda e: (e[1].source != "FromClass", e[0]))
    ours = [
        (i, e, e.opaque)
        for i, e in ordered
        if e.opaque is not None and e.opaque.driver == DRIVER_NAME
    ]
    if not ours:
        return []
    # Deferred to the first claim with a config: the schema's pydantic models are a fifth
    # of the agent's memory and a quarter of its imports, and most claims carry none.
    from api.config import ConfigError, decode  # noqa: PLC0415

    decoded = []
    for index, entry, opaque in ours:
        source = "DeviceClass" if entry.source == "FromClass" else "claim"
        try:
            config = decode(opaque.parameters)
        except ConfigError as err:
            raise ClaimError(f"claim {claim}: config[{index}] from the {source}: {err}") from None
        decoded.append((entry.requests, config))
    return decoded


def _applies(requests: tuple[str, ...], request: str) -> bool:
    return not requests or request in requests or request.split("/", 1)[0] in requests


def _request_names(request: str) -> tuple[str, ...]:
    # Containers reference the top-level request even when a subrequest was chosen.
    parent = request.split("/", 1)[0]
    return (parent,) if parent == request else (parent, request)


# What a config sets a field to, as a one-tuple; None where it does not set it.
Setting = tuple[int | None] | None


def _lnc(config: DeviceConfig) -> Setting:
    """NeuronConfig's logicalNeuronCore, where `config` sets it."""
    from api.config import NeuronConfig  # noqa: PLC0415

    if isinstance(config, NeuronConfig) and "logicalNeuronCore" in config.model_fields_set:
        return (config.logicalNeuronCore,)
    return None


def _ultraserver_mode(config: DeviceConfig) -> Setting:
    """UltraServerConfig's ultraserverMode, where `config` sets it."""
    from api.config import UltraServerConfig  # noqa: PLC0415

    if isinstance(config, UltraServerConfig) and "ultraserverMode" in config.model_fields_set:
        return (config.ultraserverMode,)
    return None


def _last(configs: list[DeviceConfig], setting: Callable[[DeviceConfig], Setting]) -> int | None:
    """The value of the last config that sets the field `setting` reads."""
    value = None
    for config in configs:
        found = setting(config)
        if found is not None:
            value = found[0]
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


def _claim_lnc(
    claim: ClaimRef, by_request: dict[str, int | None], default: int | None
) -> int | None:
    """The logical NeuronCore size the requests set, None when none sets one.

    Containers of one claim share one NeuronCore layout, so the requests must agree
    on the size each would run with: one without a config runs with the node's default.
    """
    effective = {r: default if lnc is None else lnc for r, lnc in by_request.items()}
    if len(set(effective.values())) > 1:
        groups: dict[int | None, list[str]] = {}
        for request, size in effective.items():
            groups.setdefault(size, []).append(request)
        parts: list[str] = []
        for size, requests in groups.items():
            many = len(requests) > 1
            names = " and ".join([", ".join(requests[:-1]), requests[-1]] if many else requests)
            defaulted = all(by_request[r] is None for r in requests)
            said = f"{size} (the node's default)" if defaulted else str(size)
            if not parts:
                said = f"{'ask' if many else 'asks'} for logical NeuronCore size {said}"
            else:
                said = f"for {said}"
            parts.append(f"request{'s' if many else ''} {names} {said}")
        raise ClaimError(
            f"claim {claim}: {', '.join(parts)}; the requests of one claim share one "
            "NeuronCore layout"
        )
    explicit = {lnc for lnc in by_request.values() if lnc is not None}
    return explicit.pop() if explicit else None


def _cores_env(claim: ClaimRef, prepared: Iterable[PreparedDevice], lnc: int | None) -> Env:
    """NEURON_RT_VISIBLE_CORES for exactly the Neuron devices and cores of `prepared`."""
    cores: set[int] = set()
    for device in prepared:
        if device.cores:
            cores.update(device.cores)
            continue
        for neuron in device.neuron_devices:
            numbers = logical.device_cores(neuron, lnc)
            if numbers is None:
                raise ClaimError(
                    f"claim {claim}: core count of neuron{neuron.index} is unknown (see the "
                    "driver's discovery log), so NEURON_RT_VISIBLE_CORES cannot be computed"
                )
            cores.update(numbers)
    return ((ENV_NEURON_RT_VISIBLE_CORES, format_cores(sorted(cores))),)


def _claim_env(inventory: NodeInventory, lnc: int | None, ultraserver_mode: int | None) -> Env:
    """The env that does not depend on which of the claim's devices a container gets."""
    env = []
    if lnc is not None:
        env.append((ENV_NEURON_LOGICAL_NC_CONFIG, str(lnc)))
    if ultraserver_mode is not None and inventory.ultraserver is not None:
        # ultraserverMode counts nodes; the runtime takes its own mode number, and the
        # ids of the node's unit of that many nodes (none for a single node).
        us = inventory.ultraserver
        env.append((ENV_NEURON_RT_ULTRASERVER_MODE, str(us.runtime_mode(ultraserver_mode))))
        unit = us.unit(ultraserver_mode)
        if unit is not None:
            env += [
                (ENV_NEURON_RT_ULTRASERVER_SERVER_ID, unit[0]),
                (ENV_NEURON_RT_ULTRASERVER_NODE_ID, str(unit[1])),
            ]
    return tuple(env)


def format_cores(cores: list[int]) -> str:
    """`4-7` for a contiguous run, otherwise an ascending comma list as the device plugin gave."""
    if cores and cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
    return ",".join(map(str, cores))
