"""Node labels for UltraServer placement (LeaderWorkerSet exclusive topology)."""

from __future__ import annotations

from consts import (
    LABEL_ULTRASERVER_MODE,
    LABEL_ULTRASERVER_NODE_ID_2,
    LABEL_ULTRASERVER_NODE_ID_4,
    LABEL_ULTRASERVER_SERVER_ID_2,
    LABEL_ULTRASERVER_SERVER_ID_4,
)
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.slices import modes_label

ULTRASERVER_LABELS = (
    LABEL_ULTRASERVER_MODE,
    LABEL_ULTRASERVER_SERVER_ID_2,
    LABEL_ULTRASERVER_SERVER_ID_4,
    LABEL_ULTRASERVER_NODE_ID_2,
    LABEL_ULTRASERVER_NODE_ID_4,
)


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
