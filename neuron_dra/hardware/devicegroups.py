"""Values of the `resource.aws.com/devicegroup{N}_id` attributes.

Each value is shared by exactly the devices of one allowed connected set, so a
claim's `matchAttribute: resource.aws.com/devicegroup4_id` yields one such set.
On EFA instances the values are the AWS EFA driver's (the paired NIC's PCI
address for one device, a hash of the group's NIC addresses for more), so NICs
and Neuron devices can be matched in one claim; elsewhere they are readable
device ranges, deterministic per node.
"""

from __future__ import annotations

from consts import GROUP_ATTRIBUTE_DOMAIN, GROUP_ATTRIBUTE_TEMPLATE
from neuron_dra.hardware import efa
from neuron_dra.hardware.inventory import NodeInventory


def attribute_name(size: int) -> str:
    return f"{GROUP_ATTRIBUTE_DOMAIN}/{GROUP_ATTRIBUTE_TEMPLATE.format(size=size)}"


def group_ids(inventory: NodeInventory) -> dict[int, dict[int, str]]:
    """device index -> {set size -> group id} for every allowed connected set."""
    nics = efa.efa_addresses(inventory.instance_type) if inventory.instance_type else None
    sets_by_size = inventory.connected_sets()
    if nics is not None and any(i >= len(nics) for s in sets_by_size.get(1, ()) for i in s):
        nics = None  # more devices than the EFA table pairs: a type of another board
    ids: dict[int, dict[int, str]] = {}
    for size, sets in sets_by_size.items():
        for members in sets:
            ordered = sorted(members)
            if nics is not None:
                value = nics[ordered[0]] if size == 1 else efa.group_id([nics[i] for i in ordered])
            else:
                value = str(ordered[0]) if size == 1 else f"{ordered[0]}-{ordered[-1]}"
            for index in ordered:
                ids.setdefault(index, {})[size] = value
    return ids
