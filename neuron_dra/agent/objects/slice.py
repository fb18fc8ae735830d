"""ResourceSlice (resource.k8s.io/v1): the fields the node agent reads, typed.

The publisher pairs the node's stored slices with the ones it wants by name, the
fixed part of the name (`generateName`), the pool and its generation; a stored
taint's `timeAdded` is carried into the desired slice; the feature probes read what
a dry-run create kept of the counters and taints. The diff also compares a stored
slice's spec whole with the one it wants and starts an update from the stored
metadata: those two stay as the server answered (`spec`, `metadata`), neither read
field by field nor copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neuron_dra.agent.objects import fields as f


@dataclass(frozen=True, slots=True)
class Taint:
    key: str | None
    value: str | None
    effect: str | None
    time_added: str | None

    @property
    def identity(self) -> tuple[str | None, str | None, str | None]:
        """What makes two taints of a device the same problem: all but the time."""
        return self.key, self.value, self.effect


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    taints: tuple[Taint, ...]
    counter_sets: tuple[str, ...]  # consumesCounters[].counterSet, in order


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    generate_name: str | None
    pool: str  # spec.pool.name
    generation: int  # spec.pool.generation
    owner_references: tuple[f.Obj, ...]
    devices: tuple[Device, ...]
    shared_counters: tuple[str, ...]  # spec.sharedCounters[].name, in order
    spec: f.Obj  # as answered: compared whole with the desired spec
    metadata: f.Obj  # as answered: an update of the slice starts from it


def decode(obj: Any) -> ResourceSlice:
    """The slice `obj` (JSON as the API server answers); ObjectError naming the field of
    a wrong type."""
    piece = f.as_object(obj, "the ResourceSlice")
    metadata = f.obj(piece, "metadata", "")
    spec = f.obj(piece, "spec", "")
    pool = f.obj(spec, "pool", "spec")
    return ResourceSlice(
        name=f.text(metadata, "name", "metadata"),
        generate_name=f.opt_str(metadata, "generateName", "metadata"),
        pool=f.text(pool, "name", "spec.pool"),
        generation=f.opt_int(pool, "generation", "spec.pool") or 0,
        owner_references=tuple(o for _, o in f.objects(metadata, "ownerReferences", "metadata")),
        devices=tuple(_device(at, d) for at, d in f.objects(spec, "devices", "spec")),
        shared_counters=tuple(
            f.text(c, "name", at) for at, c in f.objects(spec, "sharedCounters", "spec")
        ),
        spec=spec,
        metadata=metadata,
    )


def _device(at: str, device: f.Obj) -> Device:
    return Device(
        name=f.text(device, "name", at),
        taints=tuple(
            Taint(
                f.opt_str(t, "key", path),
                f.opt_str(t, "value", path),
                f.opt_str(t, "effect", path),
                f.opt_str(t, "timeAdded", path),
            )
            for path, t in f.objects(device, "taints", at)
        ),
        counter_sets=tuple(
            f.text(c, "counterSet", path) for path, c in f.objects(device, "consumesCounters", at)
        ),
    )
