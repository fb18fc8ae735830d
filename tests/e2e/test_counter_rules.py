"""A device allocated while a claim held it whole, under every counter rule: the
scheduler never puts a claim beside it on one of its cores.

While a claim holds a device whole, the agent withdraws what shares a counter with it
(its cores). A claim can be deallocated and another allocated to the same device before
the agent has caught up (the agent slow or stopped, the pod force-deleted); an allocator
that records each device's counter consumption when it allocates it
(NEURON_DRA_SCHEDULER_PATCH=counters-at-allocation) records what the device drew on in
that form. Were the held form to draw on no counter, the cores published again later
would be free to the scheduler beside the device allocated whole, and refused at
prepare. The held device keeps its counters, so the cores wait, on every scheduler.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.nodes import SimulatedNode, trn2_and_ultraserver
from neuron_dra_harness.workloads import unschedulable_reason
from tests.e2e.test_cores import (
    PER_DEVICE,
    V1,
    WHOLE,
    allocated,
    claim_of_pending,
    core_spec,
    cores_held_by,
    on_device,
    published_now,
    run,
    submit,
    too_old,
)

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
# Refused at prepare: the claim stays allocated and never held.
REFUSED = {"apiVersion": V1, "kind": "NeuronConfig", "lnc": 1}


@pytest.fixture(scope="module")
def node(e2e_binaries: Binaries) -> Iterator[SimulatedNode]:
    reason = too_old(e2e_binaries)
    if reason:
        pytest.skip(reason)
    with trn2_and_ultraserver(e2e_binaries, "us-r") as nodes:
        yield nodes["trn2"]


def cores_of_3(node: SimulatedNode) -> set[str] | None:
    """Device 3's cores the whole pool publishes; None while it is being rewritten."""
    published = published_now(node)
    return None if published is None else set(cores_held_by(["neurondevice3"])) & set(published)


def test_a_device_allocated_while_held_keeps_its_cores_from_other_claims(
    node: SimulatedNode,
) -> None:
    cluster = node.cluster
    first, _, claim = run(node, core_spec(1, device_class=WHOLE, cel=on_device(3)))
    cluster.wait_for("device 3's cores withdrawn", lambda: cores_of_3(node) == set())
    assert node.plugin is not None
    pid = node.plugin.process.pid
    os.kill(pid, signal.SIGSTOP)  # the agent cannot follow: the held form stays published
    try:
        cluster.delete("v1", "Pod", first, "default", grace_period=0)
        name = claim["metadata"]["name"]
        cluster.wait_for(
            "the first claim deallocated",
            lambda: (
                (c := cluster.get_or_none("resource.k8s.io/v1", "ResourceClaim", name, "default"))
                is None
                or not c.get("status", {}).get("allocation")
            ),
        )
        second = submit(
            cluster, core_spec(1, device_class=WHOLE, cel=on_device(3), config=REFUSED), node.name
        )
        claim_name = claim_of_pending(cluster, second)["metadata"]["name"]
        held = cluster.wait_for(
            "the second claim allocated",
            lambda: (
                c
                if (c := cluster.get("resource.k8s.io/v1", "ResourceClaim", claim_name, "default"))
                .get("status", {})
                .get("allocation")
                else None
            ),
        )
        assert allocated(held) == ["neurondevice3"]
    finally:
        os.kill(pid, signal.SIGCONT)
    # The first claim unprepared, the second refused at prepare: nothing holds device 3
    # on the node, and its cores are published again, while the second claim has it.
    cluster.wait_for(
        "device 3's cores published again",
        lambda: cores_of_3(node) == set(cores_held_by(["neurondevice3"])),
    )
    cores = submit(cluster, core_spec(PER_DEVICE, cel=on_device(3)), node.name)
    reason = unschedulable_reason(cluster, cores)
    assert "cannot allocate all claims" in reason, reason
    for pod in (second, cores):
        cluster.delete("v1", "Pod", pod, "default", grace_period=0)
