"""One device of a ResourceSlice: a Neuron device, a logical NeuronCore or the node
device of an UltraServer node, with the attributes and capacities claims select on
(docs/claim-authors/devices.md). Pure; `slices.build_slices` lays them out in slices.
"""

from __future__ import annotations

from typing import Any

from consts import (
    ATTR_CORE_ID,
    ATTR_DEVICE_ID,
    ATTR_DEVICE_NAME,
    ATTR_DRA_DRIVER_VERSION,
    ATTR_INSTANCE_TYPE,
    ATTR_LOGICAL_NEURON_CORE,
    ATTR_NEURON_DRIVER_VERSION,
    ATTR_NUMA_NODE,
    ATTR_PCIE_ROOT,
    ATTR_RESOURCE_TYPE,
    ATTR_SERIAL_NUMBER,
    ATTR_TOPOLOGY4_ID,
    ATTR_TOPOLOGY8_ID,
    ATTR_TOPOLOGY_X,
    ATTR_TOPOLOGY_Y,
    ATTR_ULTRASERVER_MODES,
    ATTR_ULTRASERVER_NODE_ID_2,
    ATTR_ULTRASERVER_NODE_ID_4,
    ATTR_ULTRASERVER_SERVER_ID_2,
    ATTR_ULTRASERVER_SERVER_ID_4,
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    DRA_DRIVER_VERSION,
    KUBERNETES_ATTRIBUTE_DOMAIN,
    NODE_DEVICE_NAME,
    RESOURCE_TYPE_CORE,
    RESOURCE_TYPE_DEVICE,
    RESOURCE_TYPE_NODE,
)
from neuron_dra.hardware import cores as logical
from neuron_dra.hardware import devicegroups
from neuron_dra.hardware.instance_types import Shape
from neuron_dra.hardware.inventory import NeuronDevice, NodeInventory, UltraServer
from neuron_dra.hardware.topology import torus_position
from neuron_dra.resources.nodetopology import NodeTopology

Json = dict[str, Any]


def whole_device(
    inventory: NodeInventory, device: NeuronDevice, groups: dict[int, str], topology: NodeTopology
) -> Json:
    attributes = _common_attributes(inventory, RESOURCE_TYPE_DEVICE, topology)
    attributes[ATTR_DEVICE_ID] = {"int": device.index}
    _put_pci(attributes, device)
    spec = inventory.spec
    if spec is not None and spec.shape is Shape.TORUS and inventory.in_topology(device):
        row, column = torus_position(device.index)
        attributes[ATTR_TOPOLOGY_X] = {"int": row}
        attributes[ATTR_TOPOLOGY_Y] = {"int": column}
    # Where the device is in a set of 4 / 8, the catalogue's or one derived from sysfs.
    for size, name in ((4, ATTR_TOPOLOGY4_ID), (8, ATTR_TOPOLOGY8_ID)):
        if size in groups:
            attributes[name] = {"int": device.index // size}
    _put_string(attributes, ATTR_SERIAL_NUMBER, device.serial_number)
    _put_string(attributes, ATTR_DEVICE_NAME, device.device_name)
    _put_groups(attributes, groups)

    capacity: Json = {}
    if device.cores is not None:
        capacity[CAPACITY_CORES] = {"value": str(device.cores)}
    if inventory.spec is not None:
        capacity[CAPACITY_MEMORY] = {"value": f"{inventory.spec.memory_gib_per_device}Gi"}
    return _named(device.name, attributes, capacity)


def core_device(
    inventory: NodeInventory,
    core: logical.LogicalCore,
    groups: dict[int, str],
    topology: NodeTopology,
) -> Json:
    attributes = _common_attributes(inventory, RESOURCE_TYPE_CORE, topology)
    attributes[ATTR_DEVICE_ID] = {"int": core.device.index}
    _put_pci(attributes, core.device)  # a core sits where its device does
    attributes[ATTR_CORE_ID] = {"int": core.index}
    # Its device's own group, so that a claim can ask for cores and the EFA interface
    # next to their device (`matchAttribute: resource.aws.com/devicegroup1_id`). The
    # larger groups' ids would cost every core 3 attributes more for claims that ask
    # whole devices anyway (bench/results/compare-core-groups-*.json).
    _put_groups(attributes, {1: groups[1]} if 1 in groups else {})
    return _named(core.name, attributes, {})


def _put_groups(attributes: Json, groups: dict[int, str]) -> None:
    for size, value in sorted(groups.items()):
        attributes[devicegroups.attribute_name(size)] = {"string": value}


def node_device(inventory: NodeInventory, ultraserver: UltraServer, topology: NodeTopology) -> Json:
    attributes = _common_attributes(inventory, RESOURCE_TYPE_NODE, topology)
    capacity: Json = {}
    cores = [d.cores for d in inventory.devices]
    if cores and all(c is not None for c in cores):
        capacity[CAPACITY_CORES] = {"value": str(sum(c for c in cores if c is not None))}
    if inventory.spec is not None:
        memory = inventory.spec.memory_gib_per_device * len(inventory.devices)
        capacity[CAPACITY_MEMORY] = {"value": f"{memory}Gi"}
    return _named(NODE_DEVICE_NAME, attributes, capacity)


def _common_attributes(
    inventory: NodeInventory, resource_type: str, topology: NodeTopology
) -> Json:
    attributes: Json = {
        ATTR_RESOURCE_TYPE: {"string": resource_type},
        ATTR_DRA_DRIVER_VERSION: {"version": DRA_DRIVER_VERSION},
    }
    _put_string(attributes, ATTR_INSTANCE_TYPE, inventory.instance_type)
    _put_string(attributes, ATTR_NEURON_DRIVER_VERSION, inventory.driver_version)
    if inventory.lnc is not None:
        attributes[ATTR_LOGICAL_NEURON_CORE] = {"int": inventory.lnc}
    ultraserver = inventory.ultraserver
    if ultraserver is not None:
        # Ids of the units of 2 and 4 nodes the node is in (a trn3 node: its reservation's).
        _put_string(attributes, ATTR_ULTRASERVER_SERVER_ID_2, ultraserver.server_id_2)
        _put_string(attributes, ATTR_ULTRASERVER_SERVER_ID_4, ultraserver.server_id_4)
        if ultraserver.node_id_2 is not None:
            attributes[ATTR_ULTRASERVER_NODE_ID_2] = {"int": ultraserver.node_id_2}
        if ultraserver.node_id_4 is not None:
            attributes[ATTR_ULTRASERVER_NODE_ID_4] = {"int": ultraserver.node_id_4}
        attributes[ATTR_ULTRASERVER_MODES] = {"string": modes_label(ultraserver.modes)}
    for name, value in topology.attributes().items():
        attributes[name] = {"string": value}
    return attributes


def _put_pci(attributes: Json, device: NeuronDevice) -> None:
    """The standard PCI placement attributes, where sysfs gave the device's PCI function."""
    if device.pcie_root is not None:
        attributes[f"{KUBERNETES_ATTRIBUTE_DOMAIN}/{ATTR_PCIE_ROOT}"] = {"string": device.pcie_root}
    if device.numa_node is not None:
        attributes[f"{KUBERNETES_ATTRIBUTE_DOMAIN}/{ATTR_NUMA_NODE}"] = {"int": device.numa_node}


def modes_label(modes: tuple[int, ...]) -> str:
    """Supported UltraServer unit sizes as the node label spells them, e.g. 1_2_4."""
    return "_".join(str(m) for m in modes)


def _put_string(attributes: Json, name: str, value: str | None) -> None:
    if value is not None:
        attributes[name] = {"string": value}


def _named(name: str, attributes: Json, capacity: Json) -> Json:
    device: Json = {"name": name, "attributes": dict(sorted(attributes.items()))}
    if capacity:
        device["capacity"] = capacity
    return device
