"""How the node's stored ResourceSlices differ from the desired ones, as pure functions.

The comparison is the upstream ResourceSlice controller's: what the API server
adds is copied from the stored slices first (a taint's `timeAdded`), fields the
server drops are left out, values it omits (empty lists and maps) count as
absent. Slices are paired by their place in the pool, then by content, never by
list position. Stored slices come decoded (`objects.slice`); desired ones
are the request bodies the driver builds (`resources.slices`), JSON to be sent.
The publisher (`publisher.py`) is the side-effect shell around these.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from neuron_dra.agent.apiclient.kube import Json
from neuron_dra.agent.objects.slice import ResourceSlice

# A path to a field of a slice: keys, with "[]" standing for every item of a list.
Field = tuple[str, ...]


def split_pool(
    slices: Iterable[ResourceSlice], pool: str
) -> tuple[list[ResourceSlice], list[ResourceSlice]]:
    """This node's pool, by name, and the node's slices of any other pool."""
    ordered = sorted(slices, key=lambda s: s.name)
    return [s for s in ordered if s.pool == pool], [s for s in ordered if s.pool != pool]


def adopt(
    desired: list[Json], existing: list[ResourceSlice], dropped: frozenset[Field]
) -> list[Json]:
    """The desired slices as the server would store them, given the stored ones.

    A taint keeps the `timeAdded` of the stored taint of the same device with the same
    key, value and effect: set by the server, or by an earlier run of the driver, it is
    when that problem was first published, and moving it would restart NoExecute
    tolerations. Fields the server drops are left out.
    """
    tainted = any(d.get("taints") for s in desired for d in s["spec"].get("devices") or [])
    if not tainted and not dropped:
        # Nothing to adopt: the slices as built. The copy below was a third of the time
        # a healthy node spent comparing its slices with the stored ones.
        return list(desired)
    stored = {device.name: device.taints for s in existing for device in s.devices}
    adopted = copy.deepcopy(desired)
    for s in adopted:
        for device in s["spec"].get("devices") or []:
            for taint in device.get("taints") or []:
                identity = taint.get("key"), taint.get("value"), taint.get("effect")
                for old in stored.get(device["name"], ()):
                    if old.identity == identity and old.time_added:
                        taint["timeAdded"] = old.time_added
        for found in dropped:
            _remove(s, found)
    return adopted


def same(existing: list[ResourceSlice], desired: list[Json]) -> bool:
    """Equal but for the generation, each in its place, in any order."""
    stored = (_comparable(s.spec, _owners(s), s.generate_name) for s in existing)
    wanted = (_comparable(s["spec"], _sent_owners(s), _place(s)) for s in desired)
    return sorted(stored) == sorted(wanted)


@dataclass(frozen=True)
class Pairing:
    """The writes that turn one pool's stored slices into the desired ones."""

    updates: tuple[tuple[ResourceSlice, Json], ...]  # (stored, desired)
    creates: tuple[Json, ...]
    deletes: tuple[ResourceSlice, ...]


def pair(existing: list[ResourceSlice], desired: list[Json]) -> Pairing:
    """Which stored slice becomes which desired one.

    A desired slice's place in the pool is the fixed part of its generated name, which
    orders the allocator's walk (`slices.slice_prefix`); an update cannot rename, so a
    desired slice only becomes a stored one of its place, and one with its content if
    there is such. Stored slices of no desired place (a driver that named them
    otherwise, a hand-made one) are deleted, and their places created. `existing` must
    be one pool: no update moves a slice to another pool.
    """
    left = sorted(existing, key=lambda s: s.name)
    # Each stored slice's content once, not once for every desired slice of its place.
    contents = {id(old): _content(old.spec, _owners(old)) for old in left}
    updates: list[tuple[ResourceSlice, Json]] = []
    creates: list[Json] = []
    for new in desired:
        place = _place(new)
        candidates = [old for old in left if old.generate_name == place]
        content = _content(new["spec"], _sent_owners(new))
        chosen = next((old for old in candidates if contents[id(old)] == content), None)
        if chosen is None and candidates:
            chosen = candidates[0]
        if chosen is None:
            creates.append(new)
        else:
            left.remove(chosen)
            updates.append((chosen, new))
    return Pairing(tuple(updates), tuple(creates), tuple(left))


def _place(body: Json) -> str | None:
    """The fixed part of the name of a slice the driver builds."""
    place = body["metadata"].get("generateName")
    return None if place is None else str(place)


def _sent_owners(body: Json) -> Any:
    return body["metadata"].get("ownerReferences")


def _owners(stored: ResourceSlice) -> list[Mapping[str, Any]] | None:
    # The server omits an empty list: a stored slice without owners has none at all.
    return list(stored.owner_references) or None


def with_generation(desired: list[Json], generation: int) -> list[Json]:
    """The slices of a pool at `generation`; the slices given are not changed."""
    return [
        s | {"spec": s["spec"] | {"pool": s["spec"]["pool"] | {"generation": generation}}}
        for s in desired
    ]


def replacement(old: ResourceSlice, new: Json) -> Json:
    """The update turning stored slice `old` into `new`; others' labels stay on it."""
    body = copy.deepcopy(new)
    metadata = {k: v for k, v in old.metadata.items() if k != "managedFields"}
    owners = new["metadata"].get("ownerReferences")
    if owners:
        metadata["ownerReferences"] = owners
    else:
        metadata.pop("ownerReferences", None)
    body["metadata"] = metadata
    return body


def dropped_fields(sent: Json, stored: ResourceSlice) -> frozenset[Field]:
    """Fields of `sent`'s spec that the server's answer lacks."""
    return frozenset(_missing(sent["spec"], stored.spec, ("spec",)))


def _missing(sent: Any, stored: Any, path: Field) -> set[Field]:
    if isinstance(sent, dict) and isinstance(stored, dict):
        found: set[Field] = set()
        for key, value in sent.items():
            if _empty(value):
                continue
            if _empty(stored.get(key)):
                found.add((*path, key))
            else:
                found |= _missing(value, stored[key], (*path, key))
        return found
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        # Items in the order sent: the server keeps list order.
        pairs = zip(sent, stored, strict=True)
        return set().union(*(_missing(a, b, (*path, "[]")) for a, b in pairs))
    return set()


def spelled(path: Field) -> str:
    """As the API documentation names a field: spec.devices[].consumesCounters."""
    return ".".join(path).replace(".[]", "[]")


def _remove(obj: Any, path: Field) -> None:
    if not path:
        return
    head, rest = path[0], path[1:]
    if head == "[]":
        for item in obj if isinstance(obj, list) else ():
            _remove(item, rest)
    elif isinstance(obj, dict) and head in obj:
        if rest:
            _remove(obj[head], rest)
        else:
            del obj[head]


def _empty(value: Any) -> bool:
    # What the API server omits when it serializes: it never stores them.
    return value is None or value in ([], {})


def _pruned(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if not _empty(v)}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _content(spec: Mapping[str, Any], owners: Any) -> str:
    """What a slice holds, whatever its pool's generation or size."""
    held = {k: v for k, v in spec.items() if k != "pool"}
    return json.dumps(_pruned([held, owners]), sort_keys=True)


def _comparable(spec: Mapping[str, Any], owners: Any, place: str | None) -> str:
    pool = {k: v for k, v in (spec.get("pool") or {}).items() if k != "generation"}
    return json.dumps(_pruned([{**spec, "pool": pool}, owners, place]), sort_keys=True)
