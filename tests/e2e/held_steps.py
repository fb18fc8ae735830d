"""The random steps of the held-cores test, each aimed at a window where what a node
publishes and what its claims hold may disagree: plugins stopped with SIGTERM or
SIGKILL (also right after a pod is bound, mid-prepare), pods force-deleted, a claim
deallocated while its device is published in its held form and the device claimed
again before the plugin returns, admin-access claims over devices in use, nodes filled
with core claims and drained at once."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from signal import SIGKILL, SIGTERM

from consts import CORE_NAME_PREFIX, DEVICE_NAME_PREFIX, NODE_DEVICE_NAME
from neuron_dra_harness.nodes import SimulatedNode
from tests.e2e.held_fleet import ADMIN_NAMESPACE, STUCK_S, Fleet
from tests.e2e.held_pool import DEVICES, whole_pool
from tests.e2e.test_cores import (
    NODE_DEVICE,
    PER_DEVICE,
    WHOLE,
    claim_of,
    core_spec,
    on_device,
    submit,
)
from tests.e2e.test_extended_resources import submit as submit_extended
from tests.e2e.test_random_allocation import refused

Step = Callable[[Fleet, random.Random], None]
_admin_names = (f"a{i}" for i in itertools.count())


def a_node(fleet: Fleet, rng: random.Random) -> SimulatedNode:
    return fleet.nodes[rng.choice(sorted(fleet.nodes))]


def ultraserver(node: SimulatedNode) -> bool:
    return node.instance_type.startswith("trn2u")


def index_of(device: str) -> int:
    return int(device.removeprefix(DEVICE_NAME_PREFIX))


def selector(device: str) -> str:
    """A CEL selector for the whole device (or the node device) `device`."""
    return NODE_DEVICE if device == NODE_DEVICE_NAME else on_device(index_of(device))


def submit_random(fleet: Fleet, rng: random.Random) -> None:
    """A whole-device, core, node-device or device-plugin-style pod."""
    node = a_node(fleet, rng)
    kinds = ["devices", "cores", "cores", "neuron", "neuroncore"]
    kind = rng.choice([*kinds, "node"] if ultraserver(node) else kinds)
    count = rng.choice([1, 2, 3, 4])
    if kind == "devices":
        name = submit(fleet.cluster, core_spec(count, device_class=WHOLE), node.name)
    elif kind == "cores":
        name = submit(fleet.cluster, core_spec(count), node.name)
    elif kind == "node":
        name = submit(fleet.cluster, core_spec(1, device_class=WHOLE, cel=NODE_DEVICE), node.name)
    else:
        name = submit_extended(fleet.cluster, f"aws.amazon.com/{kind}", count, node.name)
    fleet.submitted(name, node)


def delete_one(fleet: Fleet, rng: random.Random) -> None:
    """A running pod deleted, gracefully or forced (grace 0)."""
    if not fleet.running:
        return submit_random(fleet, rng)
    tracked = fleet.running[rng.choice(sorted(fleet.running))]
    fleet.delete(tracked, grace=rng.choice([None, 0]))
    return None


def drain(fleet: Fleet, rng: random.Random) -> None:
    """Every pod of a node deleted at once: a burst of unprepares, one republish."""
    node = a_node(fleet, rng)
    doomed = [t for t in fleet.running.values() if t.node is node]
    grace = rng.choice([None, 0])
    for tracked in doomed:
        fleet.running.pop(tracked.name)
        fleet.cluster.delete("v1", "Pod", tracked.name, tracked.namespace, grace_period=grace)
    for tracked in doomed:
        fleet.cluster.wait_for_pod_gone(tracked.name, tracked.namespace, timeout=STUCK_S)


def fill(fleet: Fleet, rng: random.Random) -> None:
    """A node filled with core claims (more cores asked than it has): 2- and 4-core pods,
    some device-plugin-style, submitted at once."""
    node = a_node(fleet, rng)
    asked = 0
    while asked <= DEVICES * PER_DEVICE:
        count = rng.choice([2, 4])
        if rng.random() < 0.25:
            name = submit_extended(fleet.cluster, "aws.amazon.com/neuroncore", count, node.name)
        else:
            name = submit(fleet.cluster, core_spec(count), node.name)
        fleet.submitted(name, node)
        asked += count


def restart(fleet: Fleet, rng: random.Random) -> None:
    """A plugin stopped with SIGTERM or SIGKILL and started again."""
    node = a_node(fleet, rng)
    fleet.stop(node, rng.choice([SIGTERM, SIGKILL]))
    fleet.start(node)


def kill_in_prepare(fleet: Fleet, rng: random.Random) -> None:
    """A whole-device or core pod, its plugin SIGKILLed as soon as the pod is bound: the
    kubelet side is preparing it, or about to."""
    node = a_node(fleet, rng)
    spec = core_spec(
        rng.choice([1, 2]), device_class=rng.choice([WHOLE, "neuroncore.neuron.aws.com"])
    )
    name = submit(fleet.cluster, spec, node.name)
    fleet.submitted(name, node)
    fleet.cluster.wait_for(
        f"{name} bound or refused",
        lambda: (
            (p := fleet.cluster.get("v1", "Pod", name, "default"))["spec"].get("nodeName")
            or refused(p)
        ),
    )
    fleet.stop(node, SIGKILL)
    fleet.start(node)


def deallocate_held(fleet: Fleet, rng: random.Random) -> None:
    """The window of a claim deallocated while its device is published held: with the
    plugin stopped, a whole-device pod is force-deleted with its claim, a new claim for
    the same device is allocated; the plugin starts, and core claims on that device
    follow at once, while the node still unprepares the old claim and prepares the new."""
    holders = [t for t in fleet.running.values() if t.whole]
    if not holders:
        return submit_random(fleet, rng)
    tracked = holders[rng.randrange(len(holders))]
    node, cluster = tracked.node, fleet.cluster
    device = tracked.whole[rng.randrange(len(tracked.whole))]
    claim = claim_of(cluster, cluster.get("v1", "Pod", tracked.name, "default"))
    fleet.stop(node, rng.choice([SIGTERM, SIGKILL]))
    fleet.delete(tracked, grace=0)
    claim_name = claim["metadata"]["name"]
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", claim_name, "default")
    cluster.wait_for(
        f"claim {claim_name} deallocated and gone",
        lambda: (
            cluster.get_or_none("resource.k8s.io/v1", "ResourceClaim", claim_name, "default")
            is None
        ),
    )
    index = (
        rng.randrange(DEVICES) if device == NODE_DEVICE_NAME else int(device[len("neurondevice") :])
    )
    cel = NODE_DEVICE if device == NODE_DEVICE_NAME else on_device(index)
    again = submit(cluster, core_spec(1, device_class=WHOLE, cel=cel), node.name)
    fleet.submitted(again, node)
    cluster.wait_for(
        f"{again} bound or refused",
        lambda: (
            (p := cluster.get("v1", "Pod", again, "default"))["spec"].get("nodeName") or refused(p)
        ),
    )
    fleet.start(node)
    index = rng.randrange(DEVICES) if device == NODE_DEVICE_NAME else index_of(device)
    # The window: the old claim unprepared before the new one is prepared, the device's
    # cores published again beside it. Core claims come the moment they are.
    cores = {f"{CORE_NAME_PREFIX}{index * PER_DEVICE + c}" for c in range(PER_DEVICE)}
    cluster.wait_for(
        f"{again} running or the cores of device {index} published",
        lambda: (
            cluster.get("v1", "Pod", again, "default").get("status", {}).get("phase") == "Running"
            or cores & set(whole_pool(node) or ())
        ),
        timeout=STUCK_S,
    )
    for _ in range(rng.choice([1, 2])):
        fleet.submitted(submit(cluster, core_spec(1, cel=on_device(index)), node.name), node)
    return None


def admin(fleet: Fleet, rng: random.Random) -> None:
    """An admin-access claim (monitoring) on a device, often one in use. Where a device
    draws on counters another claim uses, the 1.37 allocator refuses it: it stays
    pending, as expected, and is deleted like any refused pod."""
    node = a_node(fleet, rng)
    in_use = [d for t in fleet.running.values() if t.node is node for d in t.whole]
    if in_use and rng.random() < 0.7:
        device = rng.choice(in_use)
    elif ultraserver(node) and rng.random() < 0.2:
        device = NODE_DEVICE_NAME
    else:
        device = f"neurondevice{rng.randrange(DEVICES)}"
    cel = (
        NODE_DEVICE if device == NODE_DEVICE_NAME else on_device(int(device[len("neurondevice") :]))
    )
    spec = core_spec(1, device_class=WHOLE, cel=cel)
    spec["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    name = next(_admin_names)
    metadata = {"name": name, "namespace": ADMIN_NAMESPACE}
    fleet.cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": metadata,
            "spec": {"spec": spec},
        }
    )
    fleet.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "automountServiceAccountToken": False,
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "containers": [
                    {
                        "name": "ctr0",
                        "image": "none",
                        "resources": {"claims": [{"name": "neurons"}]},
                    }
                ],
                "resourceClaims": [{"name": "neurons", "resourceClaimTemplateName": name}],
            },
        }
    )
    fleet.submitted(name, node, admin=True)


# Each step with its weight.
STEPS: tuple[tuple[Step, float], ...] = (
    (submit_random, 0.34),
    (delete_one, 0.2),
    (restart, 0.1),
    (kill_in_prepare, 0.06),
    (deallocate_held, 0.12),
    (admin, 0.08),
    (fill, 0.04),
    (drain, 0.06),
)


def pick(rng: random.Random) -> Step:
    steps, weights = zip(*STEPS, strict=True)
    step: Step = rng.choices(steps, weights)[0]
    return step
