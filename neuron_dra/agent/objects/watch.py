"""A watch event (`{type, object}`): its type, and the object for its kind's decoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neuron_dra.agent.objects import fields as f


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK ("" when absent)
    object: f.Obj | None  # as sent: the watched kind's decoder reads it


def decode(obj: Any) -> WatchEvent:
    """The event `obj`; ObjectError naming the field of a wrong type."""
    event = f.as_object(obj, "the watch event")
    found = event.get("object")
    return WatchEvent(
        type=f.text(event, "type", ""),
        object=None if found is None else f.obj(event, "object", ""),
    )
