"""A simulated node's inventory, built in memory from the instance-type catalogue.

What the driver's discovery reads from the sysfs tree `build_fake_node` writes
for the same node (a test compares the two for every instance type and
option), without writing the tree: `lint` and `simulate` need the inventory
only, and a tree of a trn2.48xlarge is some 500 files, seconds for the 25
that `lint` needs on a disk-backed $TMPDIR.
"""

from __future__ import annotations

import hashlib

from neuron_dra.hardware import topology
from neuron_dra.hardware.fakenode import (
    DEFAULT_DRIVER_VERSION,
    ELECTED_MODES,
    FAKE_MAJOR,
    RESERVED_MODES,
    SILICON,
    FakeUltraServer,
    fake_pci_function,
)
from neuron_dra.hardware.instance_types import DEFAULT_LNC, INSTANCE_TYPES, InstanceType
from neuron_dra.hardware.inventory import (
    NeuronDevice,
    NodeInventory,
    UltraServer,
    with_runtime_modes,
)


def simulated_inventory(
    name: str,
    instance_type: str,
    *,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    lnc: int | None = None,
    ultraserver: FakeUltraServer | None = None,
    pci_parents: bool = False,
) -> NodeInventory:
    """discover(build_fake_node(<dir>/`name`, `instance_type`, ...)).inventory, in memory.

    The arguments are build_fake_node's; `name` is the tree's directory name, which
    seeds the serial numbers. Raises ValueError where build_fake_node would.
    """
    spec = INSTANCE_TYPES.get(instance_type)
    if spec is None:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise ValueError(f"unknown instance type {instance_type!r}; known: {known}")
    if lnc is not None and not spec.has_lnc:
        raise ValueError(f"{instance_type} has no logical NeuronCores; --lnc does not apply")
    if ultraserver is not None and ultraserver.modes is not None:
        raise ValueError("a simulated inventory has the modes the driver offers its unit")
    silicon = SILICON[spec.pci_device_id]
    seed = int(hashlib.sha256(f"{name}/{instance_type}".encode()).hexdigest()[:8], 16)
    devices = []
    for index in range(spec.devices):
        pcie_root, numa_node = None, None
        if pci_parents:
            pcie_root, numa_node = fake_pci_function(index)[0], index * 2 // spec.devices
        devices.append(
            NeuronDevice(
                index=index,
                cores=spec.cores_per_device,
                neighbours=topology.neighbours(spec.shape, spec.devices, index),
                serial_number=f"{seed << 32 | index:016x}" if silicon.generation > 1 else None,
                device_name=silicon.name,
                major_minor=(FAKE_MAJOR, index),
                pcie_root=pcie_root,
                numa_node=numa_node,
            )
        )
    return NodeInventory(
        instance_type=instance_type,
        driver_version=driver_version,
        lnc=(DEFAULT_LNC if lnc is None else lnc) if spec.has_lnc else None,
        devices=tuple(devices),
        ultraserver=_ultraserver(spec, ultraserver or FakeUltraServer())
        if spec.ultraserver
        else None,
    )


def _ultraserver(spec: InstanceType, unit: FakeUltraServer) -> UltraServer:
    """What discovery reads from the `ultraserver_mode` and unit files build_fake_node
    writes for `unit` when the unit names no modes."""
    if spec.reservation:
        pair, four = unit.nodes == 2, unit.nodes == 4
        membership = UltraServer(
            server_id_2=unit.server_id if pair else None,
            server_id_4=unit.server_id if four else None,
            node_id_2=unit.node_id if pair else None,
            node_id_4=unit.node_id if four else None,
            reservation_id=unit.server_id,
        )
        return with_runtime_modes(membership, RESERVED_MODES[unit.nodes])
    membership = UltraServer(
        server_id_2=f"{unit.server_id}-{unit.node_id // 2}",
        server_id_4=unit.server_id,
        node_id_2=unit.node_id % 2,
        node_id_4=unit.node_id,
    )
    return with_runtime_modes(membership, ELECTED_MODES)
