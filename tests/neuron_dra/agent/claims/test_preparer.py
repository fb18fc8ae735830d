from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.checkpoint import CheckpointStore, ClaimRecord, RecordedDevice, decode
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import ClaimEvent, ClaimsChanged, Post, no_post
from neuron_dra.agent.claims.plan import plan
from neuron_dra.agent.claims.preparer import (
    GetClaim,
    Outcome,
    Preparer,
    Step,
    StepHook,
    no_step_hook,
)
from neuron_dra.agent.holdings import held_here, prepared_here
from neuron_dra.agent.objects import claim as claimobj
from neuron_dra.agent.objects.claim import ResourceClaim
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim, neuron_config, opaque
from tests.sysfs_tree import FakeNode

POOL = "node-a"
BOOT = "5f0e9c1a-0000-4000-8000-00000000b001"
OTHER_BOOT = "5f0e9c1a-0000-4000-8000-00000000b002"
UID = "0c7d2a1e-1111-4222-8333-944455556666"


def uid(i: int) -> str:
    return f"0c7d2a1e-0000-4000-8000-{i:012d}"


class Crash(BaseException):
    """The process dying between two steps: not an Exception, so nothing may catch it."""


class Api:
    """The API server's ResourceClaims, by (namespace, name), counting reads."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.failures: dict[tuple[str, str], Exception] = {}
        self.calls: list[tuple[str, str]] = []

    def add(
        self,
        claim_uid: str,
        devices: list[str] | dict[str, list[str]],
        *,
        config: list[dict[str, Any]] | None = None,
        admin: bool = False,
    ) -> ClaimRef:
        name = f"claim-{claim_uid[-4:]}"
        claim = allocated_claim(claim_uid, devices, pool=POOL, config=config, name=name)
        if admin:
            for result in claim["status"]["allocation"]["devices"]["results"]:
                result["adminAccess"] = True
        self.claims["default", name] = claim
        return ClaimRef("default", name, claim_uid)

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append((namespace, name))
        if failure := self.failures.get((namespace, name)):
            raise failure
        # A copy, as each GET returns a fresh object.
        return copy.deepcopy(self.claims[namespace, name])


@dataclass
class Node:
    inventory: NodeInventory
    cdi_root: Path
    checkpoint: Path
    api: Api = field(default_factory=Api)

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.checkpoint)

    def preparer(
        self,
        *,
        after_step: StepHook = no_step_hook,
        boot_id: str = BOOT,
        get_claim: GetClaim | None = None,
        store: CheckpointStore | None = None,
        post: Post = no_post,
    ) -> Preparer:
        preparer = Preparer(
            inventory=lambda: self.inventory,
            pool=POOL,
            cdi_root=self.cdi_root,
            store=store or self.store(),
            boot_id=boot_id,
            get_claim=get_claim or self.api.get_claim,
            after_step=after_step,
            post=post,
        )
        preparer.start()
        return preparer

    def files(self) -> list[str]:
        """Everything in the CDI directory, temp files included."""
        return sorted(p.name for p in self.cdi_root.iterdir()) if self.cdi_root.exists() else []

    def checkpointed(self) -> dict[str, ClaimRecord]:
        if not self.checkpoint.exists():
            return {}
        boot_id, claims = decode(self.checkpoint.read_bytes())
        assert boot_id == BOOT
        return claims

    def spec(self, ref: ClaimRef) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads(cdi.spec_path(self.cdi_root, ref.uid).read_bytes())
        return spec

    def planned_spec(self, ref: ClaimRef) -> dict[str, Any]:
        claim = self.api.claims[ref.namespace, ref.name]
        return cdi.build_spec(plan(ref, claim, self.inventory, POOL))


@pytest.fixture
def node(fake_node: FakeNode, tmp_path: Path) -> Node:
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    return Node(inventory, tmp_path / "cdi", tmp_path / "plugin" / "checkpoint.json")


def spec_name(claim_uid: str) -> str:
    return f"neuron.aws.com-{claim_uid}.json"


def recorded(
    claim_uid: str, devices: list[str], *, admin: bool = False
) -> tuple[RecordedDevice, ...]:
    return tuple(
        RecordedDevice(("neurons",), POOL, d, (f"neuron.aws.com/neuron={claim_uid}-{d}",), admin)
        for d in devices
    )


def record_of(ref: ClaimRef, devices: list[str]) -> ClaimRecord:
    return ClaimRecord(ref.uid, ref.namespace, ref.name, recorded(ref.uid, devices))


def prepare(preparer: Preparer, *refs: ClaimRef) -> dict[str, Outcome]:
    return preparer.prepare(refs)


def unprepare(preparer: Preparer, *refs: ClaimRef) -> dict[str, Outcome]:
    return preparer.unprepare(refs)


def side_by_side(*calls: Callable[[], dict[str, Outcome]]) -> list[dict[str, Outcome]]:
    """Each call in a thread of its own, as the kubelet's calls come on the DRA
    server's worker threads; their answers in order."""
    with ThreadPoolExecutor(len(calls)) as threads:
        return list(threads.map(lambda call: call(), calls))


def test_prepare_writes_spec_and_checkpoint(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice2", "neurondevice3"])
    preparer = node.preparer()

    outcomes = prepare(preparer, ref)

    assert outcomes == {UID: Outcome(recorded(UID, ["neurondevice2", "neurondevice3"]))}
    assert outcomes[UID].devices[0] == RecordedDevice(
        request_names=("neurons",),
        pool="node-a",
        device="neurondevice2",
        cdi_device_ids=(f"neuron.aws.com/neuron={UID}-neurondevice2",),
    )
    assert node.files() == [spec_name(UID)]
    assert node.spec(ref) == node.planned_spec(ref)
    # Every CDI id handed to the kubelet names a device the spec defines.
    spec_ids = {f"{node.spec(ref)['kind']}={d['name']}" for d in node.spec(ref)["devices"]}
    assert {i for d in outcomes[UID].devices for i in d.cdi_device_ids} == spec_ids
    assert node.checkpointed() == {UID: record_of(ref, ["neurondevice2", "neurondevice3"])}
    assert preparer.prepared == node.checkpointed()


def test_second_prepare_answers_from_the_record(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice7"])
    preparer = node.preparer()
    first = prepare(preparer, ref)
    assert first[UID].devices
    assert prepare(preparer, ref) == first
    assert len(node.api.calls) == 1
    # A restarted plugin answers from the checkpoint, without the API server.
    assert prepare(node.preparer(), ref) == first
    assert len(node.api.calls) == 1


def test_a_prepare_decodes_its_claim_once(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim the API server answers is decoded where it enters, and the plan reads
    the decoded claim: no second decode of the same answer."""
    decoded: list[object] = []
    decode = claimobj.decode

    def counted(obj: object) -> ResourceClaim:
        decoded.append(obj)
        return decode(obj)

    monkeypatch.setattr(claimobj, "decode", counted)
    ref = node.api.add(UID, ["neurondevice7"])
    preparer = node.preparer()
    assert prepare(preparer, ref)[UID].devices
    assert len(decoded) == 1 and len(node.api.calls) == 1
    assert prepare(preparer, ref)[UID].devices  # answered from the record
    assert len(decoded) == 1


def test_unprepare(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice1"])
    other = node.api.add(uid(1), ["neurondevice2"])
    preparer = node.preparer()
    prepare(preparer, ref, other)
    assert node.files() == sorted([spec_name(UID), spec_name(other.uid)])

    assert unprepare(preparer, ref) == {UID: Outcome()}
    assert node.files() == [spec_name(other.uid)]
    assert set(node.checkpointed()) == {other.uid}
    assert set(preparer.prepared) == {other.uid}

    assert unprepare(preparer, ref) == {UID: Outcome()}
    unknown = ClaimRef("default", "never-seen", uid(2))
    assert unprepare(preparer, unknown) == {unknown.uid: Outcome()}
    assert node.files() == [spec_name(other.uid)]
    assert set(node.checkpointed()) == {other.uid}


def test_unprepare_removes_a_spec_the_checkpoint_never_heard_of(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice1"])
    # What a crash between the spec write and the checkpoint write leaves.
    claim = node.api.claims["default", ref.name]
    cdi.write_spec(node.cdi_root, plan(ref, claim, node.inventory, POOL))
    preparer = node.preparer()
    assert preparer.prepared == {}
    assert unprepare(preparer, ref) == {UID: Outcome()}
    assert node.files() == []


def test_bad_claims_fail_alone(node: Node) -> None:
    bad_config = node.api.add(uid(1), ["neurondevice0"], config=[opaque(neuron_config(3))])
    missing = node.api.add(uid(2), ["neurondevice16"])
    good = node.api.add(uid(3), ["neurondevice3"])

    outcomes = prepare(node.preparer(), bad_config, missing, good)

    assert set(outcomes) == {bad_config.uid, missing.uid, good.uid}
    assert outcomes[bad_config.uid].devices == ()
    assert outcomes[bad_config.uid].error == (
        f"claim {bad_config}: config[0] from the claim: NeuronConfig: field "
        "'logicalNeuronCore': 3 is not allowed; allowed values: 1, 2"
    )
    assert outcomes[missing.uid] == Outcome(
        error=f"claim {missing}: device neurondevice16 is not on this node"
    )
    assert outcomes[good.uid] == Outcome(recorded(good.uid, ["neurondevice3"]))
    assert node.files() == [spec_name(good.uid)]
    assert set(node.checkpointed()) == {good.uid}


def test_api_outage_fails_the_claim_without_side_effects(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice5"])
    node.api.failures["default", ref.name] = ConnectionError("api down")
    preparer = node.preparer()

    outcome = prepare(preparer, ref)[UID]

    assert outcome.devices == ()
    assert str(ref) in outcome.error
    assert "ConnectionError" in outcome.error
    assert "api down" in outcome.error
    assert node.files() == []
    assert node.checkpointed() == {}
    # The failure is not remembered: the kubelet's retry succeeds once the API is back.
    del node.api.failures["default", ref.name]
    assert prepare(preparer, ref) == {UID: Outcome(recorded(UID, ["neurondevice5"]))}


def test_same_claim_at_once_reads_it_once(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice4"])

    entered, release = threading.Event(), threading.Event()

    def slow_get_claim(namespace: str, name: str) -> dict[str, Any]:
        entered.set()
        assert release.wait(timeout=60)
        return node.api.get_claim(namespace, name)

    preparer = node.preparer(get_claim=slow_get_claim)
    with ThreadPoolExecutor(2) as threads:
        first_call = threads.submit(preparer.prepare, [ref])
        assert entered.wait(timeout=60)
        # The first call holds the claim while the API read is in flight; the second
        # starts before the first can finish, so it has to wait for the claim's lock.
        second_call = threads.submit(preparer.prepare, [ref])
        release.set()
        first, second = first_call.result(), second_call.result()
    assert first == second == {UID: Outcome(recorded(UID, ["neurondevice4"]))}
    assert node.api.calls == [("default", ref.name)]
    assert node.files() == [spec_name(UID)]


def test_concurrent_claims_share_checkpoint_writes(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Claims with admin access may share devices, so 50 claims fit on 16 devices.
    refs = [node.api.add(uid(i), [f"neurondevice{i % 16}"], admin=True) for i in range(50)]
    queued = threading.Event()
    specs_written = 0

    def count_specs(step: Step) -> None:
        nonlocal specs_written
        if step == "after-cdi-write":
            specs_written += 1
            if specs_written == len(refs):
                queued.set()

    store = node.store()
    batches: list[list[str]] = []
    apply = store.apply

    def counting_apply(
        boot_id: str, changes: Mapping[str, ClaimRecord | None]
    ) -> dict[str, ClaimRecord]:
        batches.append(sorted(changes))
        if len(batches) == 1:
            # Hold the first write until every claim waits for the checkpoint, so that
            # grouping is certain rather than a matter of thread timing.
            assert queued.wait(timeout=60)
        return apply(boot_id, changes)

    monkeypatch.setattr(store, "apply", counting_apply)
    preparer = node.preparer(after_step=count_specs, store=store)

    # Each claim on a call of its own, as the kubelet prepares the pods it starts.
    answers = side_by_side(*(lambda r=r: prepare(preparer, r) for r in refs))
    outcomes = {uid: o for answer in answers for uid, o in answer.items()}

    assert outcomes == {
        r.uid: Outcome(recorded(r.uid, [f"neurondevice{i % 16}"], admin=True))
        for i, r in enumerate(refs)
    }
    assert len(batches) < len(refs)
    assert len(batches) <= 2  # the write in flight, then one for everything queued behind it
    assert set(node.checkpointed()) == {r.uid for r in refs}
    assert set(preparer.prepared) == {r.uid for r in refs}
    assert node.files() == sorted(spec_name(r.uid) for r in refs)


def crash_at(step: Step) -> StepHook:
    def crash(reached: Step) -> None:
        if reached == step:
            raise Crash(step)

    return crash


@pytest.mark.parametrize("step", ["after-plan", "after-cdi-write", "after-checkpoint"])
def test_prepare_recovers_from_a_crash(node: Node, step: Step) -> None:
    ref = node.api.add(UID, ["neurondevice8", "neurondevice9"])
    with pytest.raises(Crash):
        prepare(node.preparer(after_step=crash_at(step)), ref)

    restarted = node.preparer()
    outcomes = prepare(restarted, ref)

    assert outcomes == {UID: Outcome(recorded(UID, ["neurondevice8", "neurondevice9"]))}
    assert node.files() == [spec_name(UID)]
    assert node.spec(ref) == node.planned_spec(ref)
    assert node.checkpointed() == {UID: record_of(ref, ["neurondevice8", "neurondevice9"])}

    assert unprepare(restarted, ref) == {UID: Outcome()}
    assert node.files() == []
    assert node.checkpointed() == {}


def test_unprepare_recovers_from_a_crash(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice8"])
    prepare(node.preparer(), ref)
    with pytest.raises(Crash):
        unprepare(node.preparer(after_step=crash_at("after-cdi-remove")), ref)
    assert node.files() == []

    restarted = node.preparer()
    assert unprepare(restarted, ref) == {UID: Outcome()}
    assert node.files() == []
    assert node.checkpointed() == {}
    assert restarted.prepared == {}


def test_start_after_a_reboot_removes_the_old_boots_specs(node: Node) -> None:
    refs = [node.api.add(uid(i), [f"neurondevice{i}"]) for i in range(3)]
    prepare(node.preparer(boot_id=OTHER_BOOT), *refs)
    (node.cdi_root / "vendor.example-gpu.json").write_text("{}")
    assert len(node.files()) == 4

    rebooted = node.preparer()

    assert node.files() == ["vendor.example-gpu.json"]
    assert rebooted.prepared == {}
    assert node.checkpointed() == {}
    # The kubelet prepares the claims again for this boot.
    outcomes = prepare(rebooted, *refs)
    assert all(o.devices and not o.error for o in outcomes.values())
    assert set(node.checkpointed()) == {r.uid for r in refs}


def test_start_after_a_reboot_survives_a_stray_spec_name(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice0"])
    prepare(node.preparer(boot_id=OTHER_BOOT), ref)
    (node.cdi_root / "neuron.aws.com-hand_written.json").write_text("{}")

    node.preparer()

    assert node.files() == ["neuron.aws.com-hand_written.json"]


def test_a_torn_checkpoint_after_a_power_loss_drops_the_old_boots_specs(node: Node) -> None:
    """Checkpoint writes are not fsynced, so a power loss may leave torn bytes that name
    no boot; the marker fsynced at the boot's first start still says the boot is over."""
    refs = [node.api.add(uid(i), [f"neurondevice{i}"]) for i in range(2)]
    prepare(node.preparer(boot_id=OTHER_BOOT), *refs)
    node.checkpoint.write_bytes(node.checkpoint.read_bytes()[:40])

    rebooted = node.preparer()

    assert rebooted.prepared == {}
    assert node.files() == []
    assert not list(node.checkpoint.parent.glob("checkpoint.json.corrupt-*"))
    assert node.checkpoint.with_name("checkpoint.json.boot").read_text() == BOOT


@pytest.mark.parametrize(("durable", "per_write"), [(False, 0), (True, 2)])
def test_checkpoint_writes_are_fsynced_only_without_a_boot_id(
    node: Node, monkeypatch: pytest.MonkeyPatch, durable: bool, per_write: int
) -> None:
    preparer = node.preparer(store=CheckpointStore(node.checkpoint, durable=durable))
    fsyncs: list[int] = []
    fsync = os.fsync

    def counted(fd: int) -> None:
        fsyncs.append(fd)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", counted)
    ref = node.api.add(UID, ["neurondevice1"])

    prepare(preparer, ref)
    unprepare(preparer, ref)

    assert len(fsyncs) == 2 * per_write
    # A plugin that restarts within the boot finds what it wrote (the page cache has it).
    prepare(preparer, ref)
    assert set(node.preparer().prepared) == {UID}


def test_start_with_a_corrupt_checkpoint_keeps_specs(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice6"])
    prepare(node.preparer(), ref)
    node.checkpoint.write_bytes(node.checkpoint.read_bytes()[:40])

    restarted = node.preparer()

    assert restarted.prepared == {}
    # Without a trustworthy record the spec may still be in use; the kubelet unprepares it.
    assert node.files() == [spec_name(UID)]
    assert len(list(node.checkpoint.parent.glob("checkpoint.json.corrupt-*"))) == 1
    assert unprepare(restarted, ref) == {UID: Outcome()}
    assert node.files() == []


def test_two_instances_keep_each_others_claims(node: Node) -> None:
    old, new = node.preparer(), node.preparer()
    first = node.api.add(uid(1), ["neurondevice0"])
    second = node.api.add(uid(2), ["neurondevice1"])
    prepare(old, first)
    prepare(new, second)
    assert set(node.checkpointed()) == {first.uid, second.uid}


def test_unprepare_on_the_other_instance_drops_the_entry(node: Node) -> None:
    old, new = node.preparer(), node.preparer()
    ref = node.api.add(UID, ["neurondevice0"])
    prepare(old, ref)

    assert unprepare(new, ref) == {UID: Outcome()}

    assert node.files() == []
    assert node.checkpointed() == {}


def all_files(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def test_uid_escaping_the_directory_is_refused(node: Node, tmp_path: Path) -> None:
    evil = "../../etc/passwd"
    node.api.claims["default", "evil"] = allocated_claim(evil, ["neurondevice0"], name="evil")
    ref = ClaimRef("default", "evil", evil)
    preparer = node.preparer()
    before = all_files(tmp_path)

    outcome = prepare(preparer, ref)[evil]
    unprepare(preparer, ref)

    assert outcome.devices == ()
    assert evil in outcome.error
    assert all_files(tmp_path) == before
    assert node.checkpointed() == {}


# --------------------------------------------------------------------- requests and containers


def injected(
    spec: dict[str, Any], answer: Outcome, request: str
) -> tuple[dict[str, str], list[str]]:
    """(env, device nodes) of a container referencing `request` of the claim ("": all of it).

    The kubelet passes the CDI ids of every answered device whose request names hold
    the request, or of every device for the whole claim; the runtime's CDI package
    applies the spec's edits once, then each device's in order, a variable given again
    replacing the earlier value and a device node given again replacing the earlier one.
    """
    ids = [
        i
        for d in answer.devices
        if not request or not d.request_names or request in d.request_names
        for i in d.cdi_device_ids
    ]
    edits = {f"{spec['kind']}={d['name']}": d["containerEdits"] for d in spec["devices"]}
    env: dict[str, str] = {}
    nodes: list[str] = []
    for edit in [spec.get("containerEdits", {})] + [edits[i] for i in ids]:
        env |= dict(e.split("=", 1) for e in edit.get("env", []))
        for device_node in edit.get("deviceNodes", []):
            nodes = [n for n in nodes if n != device_node["path"]] + [device_node["path"]]
    return env, nodes


def test_each_container_gets_the_cores_of_the_devices_it_gets(node: Node) -> None:
    ref = node.api.add(
        UID,
        {"a": ["neurondevice0", "neurondevice1"], "b": ["neurondevice5"]},
        config=[opaque(neuron_config(2))],
    )
    answer = prepare(node.preparer(), ref)[UID]
    assert not answer.error
    spec = node.spec(ref)

    assert injected(spec, answer, "a") == (
        {"NEURON_RT_VISIBLE_CORES": "0-7", "NEURON_LOGICAL_NC_CONFIG": "2"},
        ["/dev/neuron0", "/dev/neuron1"],
    )
    assert injected(spec, answer, "b") == (
        {"NEURON_RT_VISIBLE_CORES": "20-23", "NEURON_LOGICAL_NC_CONFIG": "2"},
        ["/dev/neuron5"],
    )
    assert injected(spec, answer, "") == (
        {"NEURON_RT_VISIBLE_CORES": "0,1,2,3,4,5,6,7,20,21,22,23", "NEURON_LOGICAL_NC_CONFIG": "2"},
        ["/dev/neuron0", "/dev/neuron1", "/dev/neuron5"],
    )


def test_the_answer_of_a_claim_with_two_requests(node: Node) -> None:
    ref = node.api.add(UID, {"a": ["neurondevice0"], "b/big": ["neurondevice5"]})
    answer = prepare(node.preparer(), ref)[UID]
    kind = "neuron.aws.com/neuron"
    assert answer == Outcome(
        (
            RecordedDevice(
                ("a",),
                POOL,
                "neurondevice0",
                (f"{kind}={UID}-neurondevice0", f"{kind}={UID}.request.a"),
            ),
            RecordedDevice(
                ("b", "b/big"),
                POOL,
                "neurondevice5",
                (f"{kind}={UID}-neurondevice5", f"{kind}={UID}.request.b"),
            ),
            # Only a container referencing the whole claim matches the request name "", and
            # it gets this entry last, so every core of the claim replaces one request's. Its
            # first id is its own: kubelets before 1.36 list the first id of every entry in
            # each container's status, and the API server refuses a status naming one twice.
            RecordedDevice(("",), POOL, "neurondevice5", (f"{kind}={UID}.claim",)),
        )
    )
    assert node.checkpointed()[UID].devices == answer.devices
    spec_ids = {f"{node.spec(ref)['kind']}={d['name']}" for d in node.spec(ref)["devices"]}
    assert {i for d in answer.devices for i in d.cdi_device_ids} == spec_ids


# --------------------------------------------------------------------- one claim per device

NO_SHARING = (
    "a Neuron device or NeuronCore serves one claim at a time unless a request has adminAccess"
)


def test_a_device_prepared_for_another_claim_is_refused(node: Node) -> None:
    first = node.api.add(uid(1), ["neurondevice3"])
    second = node.api.add(uid(2), ["neurondevice2", "neurondevice3"])
    preparer = node.preparer()
    assert prepare(preparer, first)[first.uid] == Outcome(recorded(first.uid, ["neurondevice3"]))

    outcome = prepare(preparer, second)[second.uid]

    assert outcome == Outcome(
        error=f"claim {second}: device neurondevice3 is already prepared for claim {first}; "
        + NO_SHARING
    )
    assert node.files() == [spec_name(first.uid)]
    assert set(node.checkpointed()) == {first.uid}
    # A restarted plugin knows the first claim from its checkpoint.
    assert prepare(node.preparer(), second)[second.uid] == outcome
    # Once the first claim is unprepared, the kubelet's retry of the second succeeds.
    assert unprepare(preparer, first) == {first.uid: Outcome()}
    assert prepare(preparer, second)[second.uid] == Outcome(
        recorded(second.uid, ["neurondevice2", "neurondevice3"])
    )


def test_claims_with_admin_access_share_devices(node: Node) -> None:
    workload = node.api.add(uid(1), ["neurondevice3"])
    monitor = node.api.add(uid(2), ["neurondevice3"], admin=True)
    other_monitor = node.api.add(uid(3), ["neurondevice3"], admin=True)
    preparer = node.preparer()
    outcomes = prepare(preparer, monitor, workload, other_monitor)
    assert all(o.devices and not o.error for o in outcomes.values()), outcomes
    assert node.checkpointed()[monitor.uid].devices[0].admin_access is True
    # What the restarted plugin reads back still lets admin claims share.
    late = node.api.add(uid(4), ["neurondevice3"], admin=True)
    assert prepare(node.preparer(), late)[late.uid].devices


def test_a_device_listed_twice_in_one_claim_is_prepared_once(node: Node) -> None:
    ref = node.api.add(UID, ["neurondevice4", "neurondevice4"])
    outcome = prepare(node.preparer(), ref)[UID]
    assert outcome == Outcome(recorded(UID, ["neurondevice4"]))
    assert [d["name"] for d in node.spec(ref)["devices"]] == [f"{UID}-neurondevice4"]


def test_a_device_of_two_requests_with_one_env_is_answered_once(node: Node) -> None:
    # Both requests see the same devices, so one entry serves both; two would name
    # the device's CDI id first twice, which the kubelet's status may not repeat.
    ref = node.api.add(UID, {"work": ["neurondevice4"], "watch": ["neurondevice4"]})
    outcome = prepare(node.preparer(), ref)[UID]
    assert outcome == Outcome(
        (
            RecordedDevice(
                ("work", "watch"),
                POOL,
                "neurondevice4",
                (f"neuron.aws.com/neuron={UID}-neurondevice4",),
            ),
        )
    )


def test_claims_for_one_device_at_once_prepare_one(node: Node) -> None:
    refs = [node.api.add(uid(i), ["neurondevice9"]) for i in (1, 2, 3)]

    everyone_read = threading.Barrier(len(refs), timeout=60)

    def get_claim_together(namespace: str, name: str) -> dict[str, Any]:
        # Every claim has its object before any plans: each then decides while the
        # others are between their decision and their checkpoint write.
        everyone_read.wait()
        return node.api.get_claim(namespace, name)

    preparer = node.preparer(get_claim=get_claim_together)
    answers = side_by_side(*(lambda r=r: prepare(preparer, r) for r in refs))
    outcomes = {uid: o for answer in answers for uid, o in answer.items()}

    winners = [r for r in refs if outcomes[r.uid].devices]
    assert len(winners) == 1, outcomes
    [winner] = winners
    for ref in refs:
        if ref != winner:
            assert outcomes[ref.uid] == Outcome(
                error=f"claim {ref}: device neurondevice9 is already prepared for claim "
                f"{winner}; {NO_SHARING}"
            )
    assert node.files() == [spec_name(winner.uid)]
    assert set(node.checkpointed()) == {winner.uid}


def test_what_claims_hold_is_told_as_it_changes(node: Node) -> None:
    """The slices leave out what shares a counter with what is held, so the agent is told
    each time the prepared claims change: its own prepares and unprepares, and those of the
    other instance of a rolling update, read from the checkpoint they share."""
    seen: list[frozenset[str]] = []

    def changed(event: ClaimEvent) -> None:
        if isinstance(event, ClaimsChanged):
            seen.append(held_here(node.inventory, POOL, event.claims))

    preparer = node.preparer(post=changed)
    whole = node.api.add(uid(1), ["neurondevice2", "neurondevice3"])
    core = node.api.add(uid(2), ["neuroncore1"])
    admin = node.api.add(uid(3), ["neurondevice9"], admin=True)
    prepare(preparer, whole, core, admin)
    # A core is held as itself (its device's counter is partly spent); admin holds nothing.
    assert seen[-1] == {"neurondevice2", "neurondevice3", "neuroncore1"}
    other = node.preparer()  # the second instance, on the same checkpoint
    later = node.api.add(uid(4), ["neurondevice7"])
    prepare(other, later)
    unprepare(other, whole)

    before = len(seen)
    preparer.refresh()
    assert len(seen) == before + 1
    assert seen[-1] == {"neurondevice7", "neuroncore1"}
    preparer.refresh()  # nothing changed since: a stat, and no news
    assert len(seen) == before + 1
    unprepare(preparer, whole)  # gone already, on the other instance
    assert len(seen) == before + 1


def test_the_node_device_is_held(node: Node, fake_node: FakeNode) -> None:
    inventory = discover(fake_node("trn2u.48xlarge")).inventory
    ref = ClaimRef("default", "whole", uid(1))
    claims = {ref.uid: ClaimRecord(ref.uid, "default", "whole", recorded(ref.uid, ["neuronnode"]))}
    assert held_here(inventory, POOL, claims) == {"neuronnode"}
    assert held_here(inventory, "other-pool", claims) == frozenset()


def test_what_an_admin_claim_has_is_kept_though_not_held(fake_node: FakeNode) -> None:
    """An admin claim holds nothing, yet what it has stays published: the slices
    never withdraw a device a prepared claim on the node has."""
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    whole, monitor = ClaimRef("default", "whole", uid(1)), ClaimRef("admin", "m", uid(2))
    claims = {
        whole.uid: record_of(whole, ["neurondevice4"]),
        monitor.uid: ClaimRecord(
            monitor.uid, "admin", "m", recorded(monitor.uid, ["neuroncore17"], admin=True)
        ),
    }
    assert held_here(inventory, POOL, claims) == {"neurondevice4"}
    assert prepared_here(POOL, claims) == {"neurondevice4", "neuroncore17"}
    assert prepared_here("other-pool", claims) == frozenset()
