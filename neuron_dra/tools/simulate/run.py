"""A simulation from start to end: the cluster's allocations so far, then the claims
the input documents stand for, allocated in order."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from neuron_dra.tools.manifests import POD_GROUP_KIND
from neuron_dra.tools.simulate import gangs
from neuron_dra.tools.simulate.allocator import Cluster, Outcome
from neuron_dra.tools.simulate.claims import Json, default_classes
from neuron_dra.tools.simulate.inputs import load_documents, namespace_of, read_inputs
from neuron_dra.tools.simulate.podgroups import parse_pod_group
from neuron_dra.tools.simulate.progress import Progress, quiet
from neuron_dra.tools.simulate.taintrules import is_taint_rule, parse_taint_rule


def take_allocated(cluster: Cluster, claims: Sequence[Json]) -> None:
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        holder = f"{namespace_of(claim)}/{claim['metadata']['name']}"
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("adminAccess"):
                continue  # holds nothing: others may have the device too
            cluster.take_key((result["driver"], result["pool"], result["device"]), holder)


def check_documents(docs: Sequence[tuple[str, Json]]) -> None:
    """Raise the InputError of the first DeviceTaintRule or PodGroup that cannot be
    read: the command line checks them before it builds any node."""
    for where, doc in docs:
        if is_taint_rule(doc):
            parse_taint_rule(doc, where)
        elif doc.get("kind") == POD_GROUP_KIND:
            parse_pod_group(doc, where)


def simulate(files: Sequence[Path], cluster: Cluster, progress: Progress = quiet) -> list[Outcome]:
    """Allocate the claims the files stand for on `cluster`, in order."""
    return simulate_documents(load_documents(files), cluster, progress)


def simulate_documents(
    docs: Sequence[tuple[str, Json]], cluster: Cluster, progress: Progress = quiet
) -> list[Outcome]:
    """`simulate` of documents already read (`load_documents`): the command line reads
    its files before it builds any node, so a bad file fails at once. DeviceTaintRules
    among them taint the cluster's devices before any claim is allocated."""
    for device_class in default_classes():
        cluster.classes.setdefault(device_class.name, device_class)
    inputs = read_inputs(docs, cluster.classes)
    cluster.add_taint_rules([parse_taint_rule(d, where) for where, d in docs if is_taint_rule(d)])
    # Classes among the inputs win over the cluster's, as applying them would make them.
    cluster.classes.update(inputs.classes)
    return gangs.allocate(cluster, inputs, progress)
