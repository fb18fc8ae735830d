"""The Node labels the driver owns, from the hardware: UltraServer placement keys for
LeaderWorkerSet's exclusive topology and PodGroup topology constraints, and
`neuron.amazonaws.com/present`, by which Neuron Observer's DaemonSet finds Neuron nodes.

The driver owns exactly `OWNED_LABELS`: it sets those the node earns and removes
those it does not, whoever wrote them, and never touches another label.
"""

from __future__ import annotations

from collections.abc import Mapping

from consts import (
    LABEL_NEURON_PRESENT,
    LABEL_ULTRASERVER_MODE,
    LABEL_ULTRASERVER_NODE_ID_2,
    LABEL_ULTRASERVER_NODE_ID_4,
    LABEL_ULTRASERVER_SERVER_ID_2,
    LABEL_ULTRASERVER_SERVER_ID_4,
)
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.devices import modes_label

ULTRASERVER_LABELS = (
    LABEL_ULTRASERVER_MODE,
    LABEL_ULTRASERVER_SERVER_ID_2,
    LABEL_ULTRASERVER_SERVER_ID_4,
    LABEL_ULTRASERVER_NODE_ID_2,
    LABEL_ULTRASERVER_NODE_ID_4,
)

OWNED_LABELS = (*ULTRASERVER_LABELS, LABEL_NEURON_PRESENT)


def owned_labels(inventory: NodeInventory) -> dict[str, str | None]:
    """Every label the driver owns, as `ultraserver_labels` gives them; `present` is
    `true` while the node has Neuron devices."""
    present = "true" if inventory.devices else None
    return ultraserver_labels(inventory) | {LABEL_NEURON_PRESENT: present}


def ultraserver_labels(inventory: NodeInventory) -> dict[str, str | None]:
    """The labels to merge into the Node; None removes a label the node no longer earns."""
    us = inventory.ultraserver
    if us is None:
        return dict.fromkeys(ULTRASERVER_LABELS)
    return {
        LABEL_ULTRASERVER_MODE: modes_label(us.modes),
        LABEL_ULTRASERVER_SERVER_ID_2: us.server_id_2,
        LABEL_ULTRASERVER_SERVER_ID_4: us.server_id_4,
        LABEL_ULTRASERVER_NODE_ID_2: _optional(us.node_id_2),
        LABEL_ULTRASERVER_NODE_ID_4: _optional(us.node_id_4),
    }


def _optional(value: int | None) -> str | None:
    """A unit the node is not in (trn3 knows only its reservation's) has no label."""
    return None if value is None else str(value)


def label_patch(
    wanted: Mapping[str, str | None], current: Mapping[str, str]
) -> dict[str, str | None]:
    """The merge patch taking `current` to `wanted` (None: absent); empty when equal."""
    return {k: v for k, v in wanted.items() if current.get(k) != v}
