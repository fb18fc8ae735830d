"""Gangs: a PodGroup's pods placed all or nothing, as the kube-scheduler 1.37 does.

The GangScheduling plugin waits until `gang.minCount` pods of the group exist, then
binds none of them until `minCount` fit at once; with topology constraints
(TopologyAwareWorkloadScheduling) the group lands in one domain, the nodes sharing
the value of each label key. The simulator tries the domains in the order of their
values and keeps the first where enough pods fit; pods beyond `minCount` that do
not fit there stay unplaced, as the scheduler keeps them waiting. A group that
fits nowhere places none of its pods, and each of their claims says why.
"""

from __future__ import annotations

from collections.abc import Sequence

from neuron_dra.tools.counted import counted
from neuron_dra.tools.simulate.allocator import (
    NOT_SELECTED,
    Cluster,
    Outcome,
    by_pod,
    outcomes_of,
)
from neuron_dra.tools.simulate.inputs import Inputs
from neuron_dra.tools.simulate.nodes import SimNode
from neuron_dra.tools.simulate.podgroups import Member, PodGroup
from neuron_dra.tools.simulate.progress import Progress, quiet

Pod = list[Outcome]  # one pod's claims


def allocate(cluster: Cluster, inputs: Inputs, progress: Progress = quiet) -> list[Outcome]:
    """Allocate the inputs' claims in order, each gang's pods together at the place of
    its first pod; `progress(claims done, claims)` as `Cluster.allocate`."""
    outcomes = outcomes_of(inputs.claims)
    pods = by_pod(outcomes)
    done, seen = 0, set()
    for pod in pods:
        key = pod[0].claim.pod_group
        group = inputs.pod_groups.get(key) if key else None
        if group is None or group.min_count is None:
            cluster.allocate_pod(pod)  # a basic policy: each pod on its own
            placed = [pod]
        elif key in seen:
            continue
        else:
            seen.add(key)
            placed = [p for p in pods if p[0].claim.pod_group == key]
            place(cluster, group, placed, inputs.members.get(group.key, []))
        done += sum(len(p) for p in placed)
        progress(done, len(outcomes))
    return outcomes


def place(
    cluster: Cluster, group: PodGroup, pods: Sequence[Pod], members: Sequence[Member]
) -> None:
    """At least `min_count` of the group's pods in one domain, or none anywhere."""
    assert group.min_count is not None
    needed = group.min_count
    head = f"PodGroup {group.key} (gang.minCount {needed})"
    if len(members) < needed:
        _refuse(
            pods,
            [
                f"{head}: {counted(len(members), 'pod')} among the inputs; the scheduler "
                "waits for the rest and places none"
            ],
        )
        return
    with_claims = {p[0].claim.pod for p in pods}
    details: list[str] = []
    best = 0
    for domain, nodes in domains(cluster.nodes, group.topology):
        saved = cluster.snapshot()
        for pod in pods:
            cluster.allocate_pod(pod, nodes)
        fit = sum(all(o.allocated for o in pod) for pod in pods)
        fit += sum(
            1 for m in members if m.pod not in with_claims and any(_selects(m, n) for n in nodes)
        )
        if fit >= needed:
            return
        best = max(best, fit)
        cluster.restore(saved)
        at = f"{domain}: " if domain else ""
        for pod in pods:
            if not all(o.allocated for o in pod):
                why = [r for o in pod for r in o.reasons if not r.endswith(NOT_SELECTED)]
                details.extend(f"{at}pod {pod[0].claim.pod}: {r}" for r in why)
            for outcome in pod:
                outcome.node, outcome.placements = None, []
                outcome.prepared, outcome.prepare_error = None, None
    where = f" on nodes sharing {', '.join(group.topology)}" if group.topology else ""
    of = counted(len(members), "pod")
    summary = f"{head}: at most {best} of its {of} fit at once{where}, so none is placed"
    _refuse(pods, [summary, *details])


def domains(nodes: Sequence[SimNode], keys: Sequence[str]) -> list[tuple[str, list[SimNode]]]:
    """The nodes by their values of `keys` (`key=value, ...`), in value order; with no
    keys, one domain of every node. Nodes without one of the keys are in none."""
    if not keys:
        return [("", list(nodes))]
    by_value: dict[tuple[str, ...], list[SimNode]] = {}
    for node in nodes:
        if all(k in node.labels for k in keys):
            by_value.setdefault(tuple(node.labels[k] for k in keys), []).append(node)
    return [
        (", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True)), members)
        for values, members in sorted(by_value.items())
    ]


def _selects(member: Member, node: SimNode) -> bool:
    return all(node.labels.get(k) == v for k, v in member.node_selector)


def _refuse(pods: Sequence[Pod], reasons: list[str]) -> None:
    for pod in pods:
        for outcome in pod:
            outcome.reasons = list(reasons)
