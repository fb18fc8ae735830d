"""Random pods for whole devices, NeuronCores, the UltraServer node device, admin access
and device-plugin-style resources on a trn2.48xlarge and a trn2u.48xlarge node (LNC 2),
with plugins killed and started again between them, on the real scheduler and the
kubelet's own DRA manager: no physical core ever reaches two containers, no pod is left
stuck at prepare, and each pool follows its plugin's checkpoint.

The plugin withdraws what shares a counter with a device a prepared claim holds whole
(its cores, the node device) and publishes it again once the claim is unprepared; its
knowledge of what is held comes from its checkpoint after a restart, and the scheduler
may allocate while a plugin is down or behind. The steps (`held_steps`) aim at those
windows; after each, `held_fleet.Fleet.check` asserts:

- containers: the logical cores of every running container (NEURON_RT_VISIBLE_CORES)
  are disjoint but for admin access, and its device nodes are exactly its cores' devices;
- no pod whose claim is allocated waits to run longer than `held_fleet.STUCK_S` (the
  agent's republish delay and the kubelet side's retries) once its plugin is up;
- the pool (`held_pool`): every published device draws on its counters, and once the
  plugin has caught up, exactly what the checkpoint leaves free is published.

NEURON_DRA_RANDOM_SEED sets the first seed (default 27), NEURON_DRA_HELD_SEEDS how many
seeds (default 3), NEURON_DRA_HELD_STEPS the steps of each (default 12); `make
test-held-long` runs many more.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from functools import partial

import pytest

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.nodes import SimulatedNode, trn2_and_ultraserver
from tests.e2e.held_fleet import ADMIN_NAMESPACE, STUCK_S, Fleet
from tests.e2e.held_pool import held_here
from tests.e2e.held_steps import pick
from tests.e2e.test_cores import too_old

pytestmark = pytest.mark.e2e

FIRST_SEED = int(os.environ.get("NEURON_DRA_RANDOM_SEED", "27"))
SEEDS = int(os.environ.get("NEURON_DRA_HELD_SEEDS", "3"))
STEPS = int(os.environ.get("NEURON_DRA_HELD_STEPS", "12"))


@pytest.fixture(scope="module")
def nodes(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    reason = too_old(e2e_binaries)
    if reason:
        pytest.skip(reason)
    with trn2_and_ultraserver(e2e_binaries, "us-h") as nodes:
        cluster = nodes["trn2"].cluster
        cluster.create_namespace(ADMIN_NAMESPACE)
        admin = {"resource.kubernetes.io/admin-access": "true"}
        cluster.patch("v1", "Namespace", ADMIN_NAMESPACE, {"metadata": {"labels": admin}})
        yield nodes


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + SEEDS))
def test_random_pods_and_kills_never_share_a_core(
    nodes: dict[str, SimulatedNode], seed: int
) -> None:
    rng = random.Random(seed)
    fleet = Fleet(seed, nodes)
    for step in range(STEPS):
        action, began = pick(rng), time.monotonic()
        action(fleet, rng)
        fleet.check(step)
        print(f"seed {seed} step {step}: {action.__name__} {time.monotonic() - began:.1f}s")
    # Everything deleted: nothing is held and every pool is whole and free again.
    for tracked in list(fleet.running.values()):
        fleet.delete(tracked, grace=None)
    fleet.check(STEPS)
    for node in nodes.values():
        fleet.cluster.wait_for(
            f"{node.name} holds nothing", partial(holds_nothing, node), timeout=STUCK_S
        )


def holds_nothing(node: SimulatedNode) -> bool:
    return not held_here(node)
