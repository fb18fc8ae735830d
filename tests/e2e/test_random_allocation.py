"""Random sequences of claims for NeuronCores, whole devices and the UltraServer node
device, allocated by the real scheduler and prepared by the real plugin, with the
invariants checked after every round.

One cluster, two nodes: a trn2u.48xlarge UltraServer member (16 devices, 64 logical
cores at LNC 2 and `neuronnode`) and a trn2.48xlarge (no node device). Each step,
drawn from a seeded `random.Random`, either submits a pod pinned to one node with a
claim for k cores (sometimes on one device: matchAttribute deviceId), for k whole
devices (sometimes within one connected set: matchAttribute devicegroup4_id) or for
the node device, or deletes one of the node's prepared pods. A round is one step per
node, begun on both nodes before either is waited for: the nodes' pools are
independent, so each node still sees its steps strictly in order.

A model holds, per node, the (Neuron device, logical core) units of every prepared
claim. It predicts whether each submitted claim fits; the scheduler must agree, and
what it grants must be free in the model. After every round:

- allocations: across all allocated ResourceClaims no device name appears twice in a
  pool, and expanded into (device, core) units no unit is held twice; the allocated
  claims are exactly the model's, unit for unit;
- containers: every prepared container's NEURON_RT_VISIBLE_CORES is exactly its
  claim's cores, disjoint from every other container's on the node, and its device
  nodes are exactly the devices of those cores;
- the driver: each node's checkpoint holds exactly the model's claims with their
  devices, and its CDI specs are exactly those claims' (so a deleted pod's spec is
  gone and its claim is no longer prepared).

NEURON_DRA_RANDOM_SEED sets the seed (default: a fixed one, so `make test` is the same
run each time; printed, and named in every failure);
NEURON_DRA_RANDOM_STEPS the number of steps (default 240).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

import pytest

from consts import (
    ATTRIBUTE_DOMAIN,
    CORE_NAME_PREFIX,
    DEVICE_NAME_PREFIX,
    DRIVER_NAME,
    NODE_DEVICE_NAME,
)
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.kubeletside import KUBELETSIDE_CDI_ANNOTATION, KUBELETSIDE_ERROR_ANNOTATION
from neuron_dra_harness.nodes import SimulatedNode, trn2_and_ultraserver
from tests.e2e.test_cores import too_old

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
Unit = tuple[int, int]  # (Neuron device index, host-global logical core number)

SEED_ENV = "NEURON_DRA_RANDOM_SEED"
DEFAULT_SEED = 3786359362  # 122 allocations, 6 refusals, 122 deletions in 240 steps
STEPS_ENV = "NEURON_DRA_RANDOM_STEPS"
DEFAULT_STEPS = 240
NS = "default"
CONTAINER = "ctr0"
GROUP4 = "resource.aws.com/devicegroup4_id"
DEVICE_ID = f"{ATTRIBUTE_DOMAIN}/deviceId"
# How long a step may take: to be prepared, or (where the model says the claim fits yet
# the scheduler said no, e.g. before it saw a deallocation) to be scheduled after all.
PREPARE_TIMEOUT = 60.0
CHANGE_OF_MIND = 20.0

_names = (f"r{i}" for i in itertools.count())


# --------------------------------------------------------------------- topology


def _attribute(device: Obj, name: str) -> Any:
    attributes = device.get("attributes") or {}
    value = attributes.get(name, attributes.get(f"{ATTRIBUTE_DOMAIN}/{name}"))
    return None if value is None else next(iter(value.values()))


@dataclass(frozen=True)
class Topology:
    """What a node publishes, as units: which cores each device has, its connected
    set of 4, and whether the node device is there."""

    node: str
    cores_of: dict[int, frozenset[int]]
    device_of_core: dict[int, int]
    group4: dict[int, str]
    node_device: bool

    @classmethod
    def of(cls, node: SimulatedNode) -> Topology:
        cores_of: dict[int, set[int]] = {}
        device_of_core: dict[int, int] = {}
        group4: dict[int, str] = {}
        names = set()
        slices = node.cluster.wait_for(f"the whole pool of {node.name}", node.pool)
        for device in (d for s in slices for d in s["spec"].get("devices") or []):
            name = device["name"]
            names.add(name)
            kind = _attribute(device, "resourceType")
            if kind == "neuron_core":
                core, index = int(_attribute(device, "coreId")), int(_attribute(device, "deviceId"))
                assert name == f"{CORE_NAME_PREFIX}{core}"
                cores_of.setdefault(index, set()).add(core)
                device_of_core[core] = index
            elif kind == "neuron_device":
                index = int(_attribute(device, "deviceId"))
                assert name == f"{DEVICE_NAME_PREFIX}{index}"
                group4[index] = str(device["attributes"][GROUP4]["string"])
        assert set(cores_of) == set(group4), f"{node.name}: cores of devices not published"
        return cls(
            node.name,
            {d: frozenset(c) for d, c in cores_of.items()},
            device_of_core,
            group4,
            NODE_DEVICE_NAME in names,
        )

    @property
    def all_units(self) -> frozenset[Unit]:
        return frozenset((d, c) for d, cores in self.cores_of.items() for c in cores)

    def units(self, device: str) -> frozenset[Unit]:
        """The units a published device stands for."""
        if device == NODE_DEVICE_NAME:
            assert self.node_device, f"{self.node} has no {NODE_DEVICE_NAME}"
            return self.all_units
        if device.startswith(CORE_NAME_PREFIX):
            core = int(device.removeprefix(CORE_NAME_PREFIX))
            return frozenset({(self.device_of_core[core], core)})
        index = int(device.removeprefix(DEVICE_NAME_PREFIX))
        return frozenset((index, c) for c in self.cores_of[index])

    def free_devices(self, free: frozenset[Unit]) -> list[int]:
        return sorted(d for d in self.cores_of if all((d, c) in free for c in self.cores_of[d]))


# --------------------------------------------------------------------- requests

Kind = Literal["cores", "devices", "node"]


@dataclass(frozen=True)
class Ask:
    """One request: `count` of `kind`, all on one device (`deviceId`) or in one
    connected set of 4 (`group4`) when `match` says so."""

    kind: Kind
    count: int = 1
    match: Literal["deviceId", "group4"] | None = None

    def __str__(self) -> str:
        return f"{self.count} {self.kind}" + (f" matching {self.match}" if self.match else "")

    def claim_spec(self) -> Obj:
        if self.kind == "cores":
            exactly: Obj = {"deviceClassName": "neuroncore.neuron.aws.com", "count": self.count}
        else:
            kind = "neuron_device" if self.kind == "devices" else "neuron_node"
            exactly = {
                "deviceClassName": "neuron.aws.com",
                "count": self.count,
                "selectors": [
                    {
                        "cel": {
                            "expression": (
                                f"device.attributes['{ATTRIBUTE_DOMAIN}'].resourceType == '{kind}'"
                            )
                        }
                    }
                ],
            }
        spec: Obj = {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}
        if self.match:
            attribute = DEVICE_ID if self.match == "deviceId" else GROUP4
            spec["devices"]["constraints"] = [{"requests": ["r"], "matchAttribute": attribute}]
        return spec

    def fits(self, topo: Topology, free: frozenset[Unit]) -> bool:
        """Whether the model has room for it."""
        if self.kind == "node":
            return topo.node_device and free == topo.all_units
        if self.kind == "cores":
            if self.match == "deviceId":
                return any(
                    sum((d, c) in free for c in cores) >= self.count
                    for d, cores in topo.cores_of.items()
                )
            return len(free) >= self.count
        devices = topo.free_devices(free)
        if self.match == "group4":
            return any(n >= self.count for n in Counter(topo.group4[d] for d in devices).values())
        return len(devices) >= self.count

    def check_grant(self, topo: Topology, names: list[str]) -> None:
        """What the scheduler granted is what was asked for."""
        assert len(names) == self.count, names
        if self.kind == "node":
            assert names == [NODE_DEVICE_NAME], names
            return
        prefix = CORE_NAME_PREFIX if self.kind == "cores" else DEVICE_NAME_PREFIX
        assert all(n.startswith(prefix) for n in names), names
        devices = {d for n in names for d, _ in topo.units(n)}
        if self.match == "deviceId":
            assert len(devices) == 1, names
        if self.match == "group4":
            assert len({topo.group4[d] for d in devices}) == 1, names


def random_ask(rng: random.Random, topo: Topology, empty: bool) -> Ask:
    """A request for the node `topo`; the node device more often where it is empty."""
    r = rng.random()
    if topo.node_device and (r < 0.06 or (empty and r < 0.35)):
        return Ask("node")
    if rng.random() < 0.55:
        if rng.random() < 0.4:
            return Ask("cores", rng.randint(1, 4), "deviceId")
        return Ask("cores", rng.choice([1, 1, 2, 3, 4, 5, 6, 8, 12, 16]))
    if rng.random() < 0.3:
        return Ask("devices", rng.choice([2, 4, 4]), "group4")
    return Ask("devices", rng.choice([1, 1, 2, 2, 3, 4, 6]))


# --------------------------------------------------------------------- the run


def parse_cores(text: str) -> list[int]:
    """NEURON_RT_VISIBLE_CORES: `4-7`, `3`, `0,5,9-11`."""
    cores: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def refused(pod: Obj) -> Obj | None:
    """The pod's PodScheduled condition when the scheduler said no."""
    conditions = pod.get("status", {}).get("conditions") or []
    return next(
        (c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), None
    )


@dataclass
class Held:
    """A prepared pod and what its claim holds."""

    pod: str
    node: str
    ask: Ask
    uid: str
    devices: tuple[str, ...]
    units: frozenset[Unit]


@dataclass
class Submitted:
    pod: str
    node: str
    ask: Ask
    fits: bool
    refused_at: float | None = None


@dataclass
class Tally:
    steps: int = 0
    allocated: Counter[Kind] = field(default_factory=Counter)
    unschedulable: Counter[Kind] = field(default_factory=Counter)
    deleted: int = 0
    late: int = 0  # refused first, scheduled once the scheduler caught up
    most_held: Counter[str] = field(default_factory=Counter)


class Run:
    def __init__(self, nodes: dict[str, SimulatedNode], seed: int) -> None:
        self.nodes = nodes
        self.cluster: Cluster = next(iter(nodes.values())).cluster
        self.seed = seed
        self.rng = random.Random(seed)
        self.topo = {name: Topology.of(node) for name, node in nodes.items()}
        self.held: dict[str, Held] = {}
        self.tally = Tally()
        self.log: list[str] = []
        self.draining: set[str] = set()  # nodes whose pods go, one a step, until none is left
        self.again: dict[str, Ask] = {}  # what a node's next step asks: a deleted pod's ask

    # -- model

    def free(self, node: str) -> frozenset[Unit]:
        taken = [u for h in self.held.values() if h.node == node for u in h.units]
        return self.topo[node].all_units - frozenset(taken)

    def on(self, node: str) -> list[Held]:
        return sorted((h for h in self.held.values() if h.node == node), key=lambda h: h.pod)

    def fail(self, message: str) -> NoReturn:
        recent = "\n".join(self.log[-30:])
        pytest.fail(f"seed {self.seed} ({SEED_ENV}={self.seed}): {message}\nlast steps:\n{recent}")

    # -- one step on a node

    def begin(self, node: str) -> Submitted | Held:
        """Draw and start one step on `node`: a deletion or a submission."""
        topo, mine = self.topo[node], self.on(node)
        used = 1 - len(self.free(node)) / len(topo.all_units)
        # Now and then the node device's node is emptied step by step, so that it can go.
        if topo.node_device and mine and self.rng.random() < 0.03:
            self.draining.add(node)
        if mine and (node in self.draining or self.rng.random() < 0.1 + 0.5 * used):
            victim = self.rng.choice(mine)
            self.log.append(
                f"{self.tally.steps}: delete {victim.pod} on {node} ({victim.ask}: "
                f"{','.join(victim.devices)})"
            )
            self.cluster.delete("v1", "Pod", victim.pod, NS)
            self.tally.steps += 1
            # Often the next step asks for the same again: what was freed must fit.
            if self.rng.random() < 0.3:
                self.again[node] = victim.ask
            return victim
        again = self.again.pop(node) if node in self.again else None
        if node in self.draining:
            self.draining.discard(node)
            ask = Ask("node")
        else:
            ask = again or random_ask(self.rng, topo, empty=not mine)
        name = next(_names)
        fits = ask.fits(topo, self.free(node))
        self.log.append(
            f"{self.tally.steps}: {name} on {node}: {ask} (model: {'fits' if fits else 'no room'})"
        )
        self.cluster.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NS},
                "spec": ask.claim_spec(),
            }
        )
        self.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": CONTAINER,
                            "image": "none",
                            "resources": {"claims": [{"name": "c"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "c", "resourceClaimName": name}],
                },
            }
        )
        self.tally.steps += 1
        return Submitted(name, node, ask, fits)

    def finish(self, step: Submitted | Held) -> None:
        if isinstance(step, Held):
            self.finish_delete(step)
        else:
            self.finish_submit(step)

    def finish_submit(self, step: Submitted) -> None:
        deadline = time.monotonic() + PREPARE_TIMEOUT
        while True:
            pod = self.cluster.get("v1", "Pod", step.pod, NS)
            annotations = pod["metadata"].get("annotations") or {}
            if KUBELETSIDE_ERROR_ANNOTATION in annotations:
                self.fail(
                    f"{step.pod} ({step.ask}) on {step.node} failed to prepare: "
                    f"{annotations[KUBELETSIDE_ERROR_ANNOTATION]}"
                )
            if pod["spec"].get("nodeName") and not step.fits:
                claim = self.cluster.get("resource.k8s.io/v1", "ResourceClaim", step.pod, NS)
                self.fail(
                    f"{step.pod} ({step.ask}) was scheduled to {pod['spec']['nodeName']}, "
                    f"yet the model has no room for it: free "
                    f"{sorted(self.free(step.node))}; allocation "
                    f"{claim.get('status', {}).get('allocation')}"
                )
            if KUBELETSIDE_CDI_ANNOTATION in annotations:
                self.prepared(step, pod)
                return
            refusal = refused(pod)
            now = time.monotonic()
            if refusal is not None and not pod["spec"].get("nodeName"):
                assert refusal["reason"] == "Unschedulable", refusal
                if not step.fits:
                    self.log.append(f"   {step.pod} unschedulable: {refusal.get('message')}")
                    self.tally.unschedulable[step.ask.kind] += 1
                    self.remove(step.pod, step.node, None)
                    return
                step.refused_at = step.refused_at or now
                if now - step.refused_at > CHANGE_OF_MIND:
                    free = sorted(self.free(step.node))
                    self.fail(
                        f"{step.pod} ({step.ask}) on {step.node} fits the model but the "
                        f"scheduler refuses it for {CHANGE_OF_MIND:.0f}s: "
                        f"{refusal.get('message')}; free {free}"
                    )
            if now > deadline:
                self.fail(
                    f"{step.pod} ({step.ask}) on {step.node}: neither prepared nor "
                    f"refused after {PREPARE_TIMEOUT:.0f}s: {pod.get('status')}"
                )
            time.sleep(0.05)

    def prepared(self, step: Submitted, pod: Obj) -> None:
        assert pod["spec"]["nodeName"] == step.node
        topo = self.topo[step.node]
        claim = self.cluster.get("resource.k8s.io/v1", "ResourceClaim", step.pod, NS)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert {(r["driver"], r["pool"]) for r in results} == {(DRIVER_NAME, step.node)}, results
        names = [r["device"] for r in results]
        step.ask.check_grant(topo, names)
        units = frozenset(u for n in names for u in topo.units(n))
        assert sum(len(topo.units(n)) for n in names) == len(units), f"{names} overlap"
        free = self.free(step.node)
        if not units <= free:
            self.fail(
                f"{step.pod} ({step.ask}) got {names}, but "
                f"{sorted(units - free)} are held by "
                f"{[h.pod for h in self.on(step.node) if h.units & units]}"
            )
        if step.refused_at is not None:
            self.tally.late += 1
        self.held[step.pod] = Held(
            step.pod, step.node, step.ask, claim["metadata"]["uid"], tuple(names), units
        )
        self.tally.allocated[step.ask.kind] += 1
        self.log.append(f"   {step.pod} prepared: {','.join(names)}")

    def finish_delete(self, held: Held) -> None:
        self.remove(held.pod, held.node, held.uid)
        del self.held[held.pod]
        self.tally.deleted += 1

    def remove(self, pod: str, node: str, uid: str | None) -> None:
        """Delete the pod (already asked when `uid` is set) and its claim; a prepared
        claim is unprepared first: CDI spec gone, out of the checkpoint."""
        if uid is None:
            self.cluster.delete("v1", "Pod", pod, NS)
        self.cluster.wait_for_pod_gone(pod, NS, timeout=PREPARE_TIMEOUT)
        if uid is not None:
            simulated = self.nodes[node]
            spec = f"{DRIVER_NAME}-{uid}.json"
            if spec in simulated.cdi_files():
                self.fail(f"{pod} is gone from {node} but its CDI spec {spec} is not")
            if uid in simulated.checkpointed():
                self.fail(f"{pod} is gone from {node} but its claim {uid} is still checkpointed")
        self.cluster.delete("resource.k8s.io/v1", "ResourceClaim", pod, NS)
        self.cluster.wait_for(
            f"claim {pod} deleted",
            lambda: (
                self.cluster.get_or_none("resource.k8s.io/v1", "ResourceClaim", pod, NS) is None
            ),
            timeout=PREPARE_TIMEOUT,
        )

    # -- the invariants

    def check(self) -> None:
        self.check_allocations()
        self.check_containers()
        self.check_driver()
        for node in self.topo:
            held = len(self.topo[node].all_units) - len(self.free(node))
            self.tally.most_held[node] = max(self.tally.most_held[node], held)

    def check_allocations(self) -> None:
        """No device twice in a pool, no (device, core) unit twice; exactly the model's."""
        seen: dict[tuple[str, str], str] = {}
        units: dict[tuple[str, Unit], str] = {}
        allocated: dict[str, frozenset[Unit]] = {}
        for claim in self.cluster.list_objects("resource.k8s.io/v1", "ResourceClaim", NS):
            name = claim["metadata"]["name"]
            allocation = claim.get("status", {}).get("allocation")
            if not allocation:
                continue
            mine: set[Unit] = set()
            for result in allocation["devices"]["results"]:
                key = (result["pool"], result["device"])
                if key in seen:
                    self.fail(f"{key[1]} of pool {key[0]} is allocated to {seen[key]} and {name}")
                seen[key] = name
                for unit in self.topo[result["pool"]].units(result["device"]):
                    if (result["pool"], unit) in units:
                        self.fail(
                            f"{result['pool']}: device {unit[0]} core {unit[1]} is "
                            f"allocated to {units[result['pool'], unit]} and to {name} "
                            f"({result['device']})"
                        )
                    units[result["pool"], unit] = name
                    mine.add(unit)
            allocated[name] = frozenset(mine)
        model = {h.pod: h.units for h in self.held.values()}
        if allocated != model:
            extra = sorted(set(allocated) - set(model))
            missing = sorted(set(model) - set(allocated))
            differ = sorted(n for n in set(model) & set(allocated) if model[n] != allocated[n])
            self.fail(
                f"allocated claims differ from the model: not in the model {extra}, "
                f"not allocated {missing}, other units {differ}"
            )

    def check_containers(self) -> None:
        """Each prepared container sees exactly its claim's cores, disjoint from every
        other container's on the node, and exactly the device nodes of those cores."""
        pods = {p["metadata"]["name"]: p for p in self.cluster.list_objects("v1", "Pod", NS)}
        if set(pods) != set(self.held):
            self.fail(f"pods {sorted(pods)} are not the prepared ones {sorted(self.held)}")
        claimed: dict[tuple[str, int], str] = {}
        for name, held in sorted(self.held.items()):
            topo = self.topo[held.node]
            annotations = pods[name]["metadata"].get("annotations") or {}
            view = json.loads(annotations[KUBELETSIDE_CDI_ANNOTATION])[CONTAINER]
            env = dict(e.split("=", 1) for e in view["env"])
            cores = parse_cores(env["NEURON_RT_VISIBLE_CORES"])
            if len(set(cores)) != len(cores) or cores != sorted(cores):
                self.fail(f"{name}: NEURON_RT_VISIBLE_CORES={env['NEURON_RT_VISIBLE_CORES']}")
            if set(cores) != {c for _, c in held.units}:
                self.fail(
                    f"{name} ({held.ask}, {','.join(held.devices)}) sees cores {cores}, "
                    f"its claim holds {sorted(c for _, c in held.units)}"
                )
            for core in cores:
                if (held.node, core) in claimed:
                    self.fail(
                        f"{held.node}: core {core} is visible to {claimed[held.node, core]} "
                        f"and to {name}"
                    )
                claimed[held.node, core] = name
            devices = sorted({topo.device_of_core[c] for c in cores})
            # In the order of the claim's CDI devices, which is the allocation's.
            nodes = view["deviceNodes"]
            if len(set(nodes)) != len(nodes) or set(nodes) != {f"/dev/neuron{d}" for d in devices}:
                self.fail(
                    f"{name} sees cores {cores} of devices {devices} but device nodes "
                    f"{view['deviceNodes']}"
                )

    def check_driver(self) -> None:
        """Each node's checkpoint and CDI specs are exactly the model's prepared claims."""
        for name, node in self.nodes.items():
            expected = {h.uid: sorted(h.devices) for h in self.on(name)}
            recorded: dict[str, list[str]] = {}
            if node.checkpoint.exists():
                claims = json.loads(node.checkpoint.read_text())["claims"]
                recorded = {
                    uid: sorted(d["device"] for d in record["devices"])
                    for uid, record in claims.items()
                }
            if recorded != expected:
                self.fail(f"{name}: checkpoint {recorded} is not the model's {expected}")
            specs = sorted(f"{DRIVER_NAME}-{uid}.json" for uid in expected)
            if node.cdi_files() != specs:
                self.fail(f"{name}: CDI specs {node.cdi_files()} are not {specs}")

    # -- the whole run

    def run(self, steps: int) -> None:
        order = sorted(self.topo)
        while self.tally.steps < steps:
            self.rng.shuffle(order)
            begun = [self.begin(node) for node in order[: steps - self.tally.steps]]
            for step in begun:
                self.finish(step)
            self.check()

    def drain(self) -> None:
        """Delete what is left; the nodes end empty, as they began."""
        for held in sorted(self.held.values(), key=lambda h: h.pod):
            self.cluster.delete("v1", "Pod", held.pod, NS)
        for held in list(self.held.values()):
            self.finish_delete(held)
        self.check()

    def summary(self, seconds: float) -> str:
        t = self.tally
        return (
            f"seed {self.seed}: {t.steps} steps in {seconds:.1f}s; allocated cores "
            f"{t.allocated['cores']}, devices {t.allocated['devices']}, node "
            f"{t.allocated['node']}; unschedulable cores {t.unschedulable['cores']}, devices "
            f"{t.unschedulable['devices']}, node {t.unschedulable['node']}; deleted {t.deleted}; "
            f"scheduled after a first refusal {t.late}; most units held at once "
            f"{dict(t.most_held)}"
        )


# --------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def nodes(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    """A trn2.48xlarge and a trn2u.48xlarge UltraServer member; none where too old."""
    if too_old(e2e_binaries):
        yield {}
        return
    with trn2_and_ultraserver(e2e_binaries, "us-r") as nodes:
        yield nodes


@pytest.fixture(autouse=True)
def _skip_old_releases(e2e_binaries: Binaries) -> None:
    reason = too_old(e2e_binaries)
    if reason:
        pytest.skip(reason)


def test_random_claims_never_share_a_unit(
    nodes: dict[str, SimulatedNode], record_property: Any
) -> None:
    seed = int(os.environ.get(SEED_ENV) or DEFAULT_SEED)
    steps = int(os.environ.get(STEPS_ENV) or DEFAULT_STEPS)
    print(f"{SEED_ENV}={seed} {STEPS_ENV}={steps}")
    record_property("seed", seed)
    started = time.monotonic()
    run = Run(nodes, seed)
    # The model's ground: cores are published on both nodes, the node device on one.
    assert {n: len(t.all_units) for n, t in run.topo.items()} == {"trn2": 64, "us-0": 64}
    assert {n: t.node_device for n, t in run.topo.items()} == {"trn2": False, "us-0": True}
    run.check()
    run.run(steps)
    run.drain()
    summary = run.summary(time.monotonic() - started)
    print(summary)
    record_property("summary", summary)
    assert sum(run.tally.allocated.values()) > 0, summary
