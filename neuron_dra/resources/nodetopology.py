"""Where a node sits in the EC2 network, from its Node object's labels.

EKS labels each node with the network nodes above it, `topology.k8s.aws/network-node-layer-1`
(the top of the hierarchy) down to `-3`, or `-4` on instance types with a fourth layer.
The driver republishes them as device attributes, so one CEL selector can keep a
workload's devices within one part of the network. A node reads them from its Node
object, not from sysfs or the instance metadata service: these are pure functions of
the labels, and the agent calls them on every read of its Node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from consts import ATTR_NETWORK_NODE_LAYERS, LABEL_NETWORK_NODE_LAYER_PREFIX

MAX_VALUE_LENGTH = 63  # a label value's; the string attribute limit (64) is larger
# A label value as the API server accepts it; an empty one says nothing and is left out.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class NodeTopology:
    """The node's network nodes by layer (1 is the top); a layer without a label is absent."""

    network_node_layers: tuple[tuple[int, str], ...] = ()

    def attributes(self) -> dict[str, str]:
        """Short attribute name -> value, e.g. {'networkNodeLayer3': 'nn-...'}."""
        return {
            ATTR_NETWORK_NODE_LAYERS[layer - 1]: value for layer, value in self.network_node_layers
        }


def label_name(layer: int) -> str:
    return f"{LABEL_NETWORK_NODE_LAYER_PREFIX}{layer}"


def from_labels(labels: Mapping[str, str] | None) -> tuple[NodeTopology, tuple[str, ...]]:
    """The topology the labels give, and a problem line for each label left out."""
    layers = []
    problems = []
    for layer in range(1, len(ATTR_NETWORK_NODE_LAYERS) + 1):
        name = label_name(layer)
        value = (labels or {}).get(name)
        if value is None:
            continue
        if len(value) > MAX_VALUE_LENGTH or not _LABEL_VALUE.fullmatch(value):
            shown = value if len(value) <= 40 else value[:37] + "..."
            problems.append(
                f"Node label {name}={shown!r} is not a label value of 1 to {MAX_VALUE_LENGTH} "
                f"characters: {ATTR_NETWORK_NODE_LAYERS[layer - 1]} is not published"
            )
            continue
        layers.append((layer, value))
    return NodeTopology(tuple(layers)), tuple(problems)
