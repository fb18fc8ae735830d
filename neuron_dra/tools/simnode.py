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
    FAKE_MAJOR,
    SILICON,
    FakeUltraServer,
    fake_pci_function,
)
from neuron_dra.hardware.instance_types import DEFAULT_LNC, INSTANCE_TYPES, InstanceType
from neuron_dra.hardware.inventory import (
    RUNTIME_MODE_NODES,
    NeuronDevice,
    NodeInventory,
    UltraServer,
)

# What build_fake_node writes as `ultraserver_mode` when the unit says nothing.
_ELECTED_MODES = (1, 3, 4)  # X4, X2V, X1
_RESERVED_MODES = {4: (1, 3, 4), 2: (3, 4)}


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
    if spec.reservation:
        pair, four = unit.nodes == 2, unit.nodes == 4
        found = UltraServer(
            server_id_2=unit.server_id if pair else None,
            server_id_4=unit.server_id if four else None,
            node_id_2=unit.node_id if pair else None,
            node_id_4=unit.node_id if four else None,
            modes=(1,),
            reservation_id=unit.server_id,
        )
        written = _RESERVED_MODES[unit.nodes]
    else:
        found = UltraServer(
            server_id_2=f"{unit.server_id}-{unit.node_id // 2}",
            server_id_4=unit.server_id,
            node_id_2=unit.node_id % 2,
            node_id_4=unit.node_id,
            modes=(1,),
        )
        written = _ELECTED_MODES
    if unit.modes is not None:
        raise ValueError("a simulated inventory has the modes the driver offers its unit")
    runtime = written
    sizes = {RUNTIME_MODE_NODES[m] for m in runtime}
    modes = tuple(n for n in (1, 2, 4) if n == 1 or (n in sizes and found.unit(n)))
    return UltraServer(
        found.server_id_2,
        found.server_id_4,
        found.node_id_2,
        found.node_id_4,
        modes,
        runtime,
        found.reservation_id,
    )
