"""Random pods for whole devices, NeuronCores and device-plugin-style resources, with the
plugin killed and started again between them: no physical core ever reaches two
containers, and the pool never offers a core beside its device without the counter
between them.

The plugin withdraws the cores of devices a prepared claim holds whole
(`SliceOptions.held`), and publishes them again when the claim is unprepared; the held
device keeps drawing on its counter throughout. Its knowledge of what is held comes from
its checkpoint after a restart.
That is what a bug could break, so after every step, on a trn2.48xlarge (LNC 2) of the
real scheduler and the kubelet's own DRA manager:

- containers: the logical cores every running container got (NEURON_RT_VISIBLE_CORES)
  are disjoint, and each container's device nodes are exactly its cores' devices;
- the pool, once whole: no core of a device a prepared claim holds whole is published;
  every published core's device draws on that core's counter; every published device
  always draws on its counters.

NEURON_DRA_RANDOM_SEED sets the seed (default a fixed one), NEURON_DRA_HELD_STEPS the
number of steps (default 24).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest

from consts import CORE_NAME_PREFIX, DEVICE_NAME_PREFIX, DRIVER_NAME
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.nodes import SimulatedNode, container_view, trn2_and_ultraserver
from tests.e2e.test_cores import (
    PER_DEVICE,
    WHOLE,
    claim_of,
    core_spec,
    submit,
    too_old,
)
from tests.e2e.test_extended_resources import submit as submit_extended
from tests.e2e.test_random_allocation import parse_cores, refused

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
SEED = int(os.environ.get("NEURON_DRA_RANDOM_SEED", "27"))
STEPS = int(os.environ.get("NEURON_DRA_HELD_STEPS", "24"))


@pytest.fixture(scope="module")
def node(e2e_binaries: Binaries) -> Iterator[SimulatedNode]:
    reason = too_old(e2e_binaries)
    if reason:
        pytest.skip(reason)
    with trn2_and_ultraserver(e2e_binaries, "us-h") as nodes:
        yield nodes["trn2"]


def settled(node: SimulatedNode, name: str) -> Obj | None:
    """The pod once it runs or the scheduler has refused it; None until then."""
    pod = node.cluster.get_or_none("v1", "Pod", name, "default")
    if pod is None:
        return None
    if pod.get("status", {}).get("phase") == "Running" or refused(pod):
        return pod
    return None


def check_containers(node: SimulatedNode, running: list[str]) -> None:
    seen: dict[int, str] = {}
    for name in running:
        pod = node.cluster.get("v1", "Pod", name, "default")
        view = container_view(pod, "ctr0")
        env = dict(e.split("=", 1) for e in view["env"])
        cores = set(parse_cores(env["NEURON_RT_VISIBLE_CORES"]))
        for core in cores:
            assert core not in seen, f"seed {SEED}: core {core} in {seen[core]} and {name}"
            seen[core] = name
        devices = sorted({c // PER_DEVICE for c in cores})
        assert view["deviceNodes"] == [f"/dev/neuron{d}" for d in devices], (SEED, name, view)


def check_pool(node: SimulatedNode) -> None:
    """At once: every device draws on its counters, and no core is offered beside its
    device without the counter between them. Once the plugin has caught up with its
    checkpoint: held devices have no cores, the others all theirs."""
    devices = whole_pool(node)
    for name, device in devices.items():
        assert device.get("consumesCounters"), f"seed {SEED}: {name} draws on no counter"
        if name.startswith(CORE_NAME_PREFIX):
            owner = f"{DEVICE_NAME_PREFIX}{int(name.removeprefix(CORE_NAME_PREFIX)) // PER_DEVICE}"
            assert "consumesCounters" in devices[owner], f"seed {SEED}: {name} beside {owner}"
            [consumed] = device["consumesCounters"]
            assert owner in consumed["counters"], (SEED, device)
    node.cluster.wait_for(f"seed {SEED}: the pool following the checkpoint",
                          lambda: follows_checkpoint(node))  # fmt: skip


def whole_pool(node: SimulatedNode) -> dict[str, Obj]:
    pool = node.cluster.wait_for(f"{node.name}'s pool whole", node.pool)
    return {d["name"]: d for s in pool for d in s["spec"].get("devices") or []}


def follows_checkpoint(node: SimulatedNode) -> bool:
    devices, held = whole_pool(node), held_whole(node)
    for index in range(16):
        device = devices[f"{DEVICE_NAME_PREFIX}{index}"]
        cores = {f"{CORE_NAME_PREFIX}{index * PER_DEVICE + c}" for c in range(PER_DEVICE)}
        assert device.get("consumesCounters"), f"seed {SEED}: device {index} without counters"
        if index in held and cores & set(devices):
            return False
        if index not in held and cores - set(devices):
            return False
    return True


def held_whole(node: SimulatedNode) -> set[int]:
    """Devices that prepared claims hold whole, from the plugin's checkpoint."""
    if not node.checkpoint.exists():
        return set()
    claims = json.loads(node.checkpoint.read_text())["claims"]
    return {
        int(d["device"].removeprefix(DEVICE_NAME_PREFIX))
        for claim in claims.values()
        for d in claim["devices"]
        if d["device"].startswith(DEVICE_NAME_PREFIX) and not d.get("adminAccess")
    }


def submit_random(node: SimulatedNode, rng: random.Random) -> str:
    kind = rng.choice(["devices", "cores", "neuron", "neuroncore"])
    count = rng.choice([1, 2, 3, 4])
    if kind == "devices":
        return submit(node.cluster, core_spec(count, device_class=WHOLE), node.name)
    if kind == "cores":
        return submit(node.cluster, core_spec(count), node.name)
    return submit_extended(node.cluster, f"aws.amazon.com/{kind}", count, node.name)


def test_random_pods_and_restarts_never_share_a_core(node: SimulatedNode) -> None:
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    cluster = node.cluster
    running: list[str] = []
    for step in range(STEPS):
        action = rng.random()
        if action < 0.15:
            node.stop_plugin()
            node.start_plugin()
        elif action < 0.4 and running:
            name = running.pop(rng.randrange(len(running)))
            cluster.delete("v1", "Pod", name, "default")
            cluster.wait_for_pod_gone(name, timeout=60)
        else:
            name = submit_random(node, rng)
            pod = cluster.wait_for(f"step {step}: {name} running or refused",
                                   lambda: settled(node, name), timeout=90)  # noqa: B023  # fmt: skip
            if pod.get("status", {}).get("phase") == "Running":
                running.append(name)
            else:
                cluster.delete("v1", "Pod", name, "default")
                cluster.wait_for_pod_gone(name, timeout=60)
        check_containers(node, running)
        check_pool(node)
    for name in running:
        claim = claim_of(cluster, cluster.get("v1", "Pod", name, "default"))
        results = claim["status"]["allocation"]["devices"]["results"]
        assert all(r["driver"] == DRIVER_NAME for r in results), results
        cluster.delete("v1", "Pod", name, "default")
        cluster.wait_for_pod_gone(name, timeout=60)
