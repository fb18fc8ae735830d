"""What a node of each instance type will publish, as Karpenter's DynamicResources.

Built by the agent's own slice builder (`build_slices`) on a simulated node of the
type (`simnode`), in the layout the agent chooses for the Kubernetes release. A
template carries no value only the node itself knows: such attributes are left out
of the devices and stated as attribute bindings, the devices that will share one
value on the node (docs/operators/autoscaling.md says why each is safe to omit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from consts import (
    ATTR_NETWORK_NODE_LAYERS,
    ATTR_NUMA_NODE,
    ATTR_PCIE_ROOT,
    ATTR_SERIAL_NUMBER,
    ATTR_ULTRASERVER_NODE_ID_2,
    ATTR_ULTRASERVER_NODE_ID_4,
    ATTR_ULTRASERVER_SERVER_ID_2,
    ATTR_ULTRASERVER_SERVER_ID_4,
    DRIVER_NAME,
    GROUP_ATTRIBUTE_DOMAIN,
    KUBERNETES_ATTRIBUTE_DOMAIN,
)
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.tools.releases import (
    FIRST_OWN_SLICE,
    FIRST_WITH_CORES,
    ReleaseError,
    parse_version,
)
from neuron_dra.tools.simnode import simulated_inventory

Json = dict[str, Any]

# The node a template is built on; its name is never in the output.
TEMPLATE_NODE = "template-node"
# Unqualified names are the driver's own domain, as in a slice.
NODE_SPECIFIC_OWN = frozenset(
    {
        *ATTR_NETWORK_NODE_LAYERS,
        ATTR_SERIAL_NUMBER,
        ATTR_ULTRASERVER_SERVER_ID_2,
        ATTR_ULTRASERVER_SERVER_ID_4,
        ATTR_ULTRASERVER_NODE_ID_2,
        ATTR_ULTRASERVER_NODE_ID_4,
    }
)
NODE_SPECIFIC_DOMAINS = (GROUP_ATTRIBUTE_DOMAIN,)
NODE_SPECIFIC_QUALIFIED = frozenset(
    f"{KUBERNETES_ATTRIBUTE_DOMAIN}/{n}" for n in (ATTR_PCIE_ROOT, ATTR_NUMA_NODE)
)
# Each value is unique per device: no two devices share it, so no binding says anything.
UNBOUND = frozenset({ATTR_SERIAL_NUMBER})


class TemplateError(ReleaseError):
    """A bad option: the message says which and what is accepted."""


@dataclass(frozen=True)
class Layout:
    counter_layout: CounterLayout
    cores: bool


def layout_for(version: tuple[int, int], neuron_cores: str | None) -> Layout:
    """What the agent publishes on that release: cores where partitionable devices are served."""
    counter_layout = (
        CounterLayout.OWN_SLICE if version >= FIRST_OWN_SLICE else CounterLayout.BESIDE_DEVICES
    )
    served = version >= FIRST_WITH_CORES
    if neuron_cores == "on" and not served:
        raise TemplateError(
            f"--neuron-cores on: Kubernetes {version[0]}.{version[1]} does not serve "
            "partitionable devices (1.36+); the agent publishes whole devices only"
        )
    cores = served if neuron_cores is None else neuron_cores == "on"
    return Layout(counter_layout, cores)


def is_node_specific(key: str) -> bool:
    """Whether a device attribute key (as in a slice) holds a value only the node knows."""
    domain, slash, name = key.rpartition("/")
    if not slash:
        return name in NODE_SPECIFIC_OWN
    return (
        domain in NODE_SPECIFIC_DOMAINS
        or key in NODE_SPECIFIC_QUALIFIED
        or (domain == DRIVER_NAME and name in NODE_SPECIFIC_OWN)
    )


def qualified(key: str) -> str:
    return key if "/" in key else f"{DRIVER_NAME}/{key}"


def node_slices(instance_type: str, layout: Layout, node: str = TEMPLATE_NODE) -> list[Json]:
    """The agent's slices for a simulated node of the type."""
    spec = INSTANCE_TYPES[instance_type]
    inventory = simulated_inventory(
        node,
        instance_type,
        ultraserver=FakeUltraServer() if spec.ultraserver else None,
        pci_parents=True,
    )
    options = SliceOptions(node, counter_layout=layout.counter_layout, cores=layout.cores)
    return build_slices(inventory, options)


def templates_of(slices: Iterable[Json], pool: str) -> Json:
    """DynamicResources for one instance type, from the slices of a node of it, in `pool`
    (``pool_name`` of the type)."""
    devices: list[Json] = []
    counters: list[Json] = []
    driver = DRIVER_NAME
    shared: dict[str, dict[Any, list[str]]] = {}
    for obj in slices:
        spec = obj["spec"]
        driver = spec["driver"]
        counters += spec.get("sharedCounters") or ()
        for device in spec.get("devices") or ():
            kept = {}
            for key, value in (device.get("attributes") or {}).items():
                if not is_node_specific(key):
                    kept[key] = value
                elif key not in UNBOUND:
                    seen = shared.setdefault(qualified(key), {})
                    seen.setdefault(_frozen(value), []).append(device["name"])
            devices.append({**device, "attributes": kept})
    bindings = [
        {
            "devices": [{"driver": driver, "pool": pool, "device": n} for n in names],
            "attribute": attribute,
        }
        for attribute, by_value in sorted(shared.items())
        for names in by_value.values()
        if len(names) > 1
    ]
    # Karpenter ignores the devices of a template that also has shared counters
    # (pkg/cloudprovider/dynamicresources.go): the counters get a template of their own.
    slice_templates: list[Json] = [{"driver": driver, "pool": {"name": pool}, "devices": devices}]
    if counters:
        slice_templates.append(
            {"driver": driver, "pool": {"name": pool}, "sharedCounters": counters}
        )
    return {"resourceSliceTemplates": slice_templates, "attributeBindings": bindings}


# A template's pool is that of a node not yet made: its name is a placeholder, one per
# instance type. Karpenter v1.15.0 caches whether a device matches a request by driver,
# pool and device name (pkg/scheduling/dynamicresources/allocator.go:543), not by instance
# type: under one name shared by every type, a selector's answer for the first type's
# `neurondevice0` would stand for every other type's.
POOL_PREFIX = "template-"


def pool_name(instance_type: str) -> str:
    """The placeholder pool of `instance_type`'s templates, e.g. template-trn2.48xlarge."""
    return POOL_PREFIX + instance_type


def _frozen(value: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in value.items()))


def templates(
    instance_types: Iterable[str], kubernetes_version: str, neuron_cores: str | None
) -> Json:
    """{instance type: DynamicResources} for the given types."""
    layout = layout_for(parse_version(kubernetes_version), neuron_cores)
    out: Json = {}
    for instance_type in instance_types:
        if instance_type not in INSTANCE_TYPES:
            known = ", ".join(sorted(INSTANCE_TYPES))
            raise TemplateError(f"unknown instance type {instance_type!r}; known: {known}")
        slices = node_slices(instance_type, layout)
        out[instance_type] = templates_of(slices, pool_name(instance_type))
    return out
