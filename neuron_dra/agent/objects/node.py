"""Node (v1): the fields the node agent reads of its own Node, typed.

The agent follows its Node for its labels (the network topology it publishes, the
labels it owns), its UID (the owner of its ResourceSlices) and its allocatable
resources (a Neuron device plugin serving the node). Nothing else is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuron_dra.agent.objects import fields as f


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    uid: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, str]  # status.allocatable: resource name -> quantity


def decode(obj: Any) -> Node:
    """The Node `obj` (JSON as the API server answers); ObjectError naming the field of
    a wrong type."""
    node = f.as_object(obj, "the Node")
    metadata = f.obj(node, "metadata", "")
    status = f.obj(node, "status", "")
    return Node(
        name=f.text(metadata, "name", "metadata"),
        uid=f.text(metadata, "uid", "metadata"),
        labels=f.string_map(metadata, "labels", "metadata"),
        allocatable=f.string_map(status, "allocatable", "status"),
    )
