"""Two plugin instances over one checkpoint and one CDI directory, as in a rolling update.

The kubelet may send a claim's prepare or unprepare to either instance, so every
answer must hold against the files on disk, whatever this instance remembers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from neuron_dra.agent import node as node_module
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.preparer import Outcome, Preparer
from neuron_dra.agent.node import Agent
from neuron_dra.hardware.discovery import discover
from tests.neuron_dra.agent.claims.test_preparer import (
    UID,
    Node,
    prepare,
    record_of,
    recorded,
    spec_name,
    uid,
    unprepare,
)
from tests.sysfs_tree import FakeNode

DEVICES = ["neurondevice2", "neurondevice3"]


@pytest.fixture
def node(fake_node: FakeNode, tmp_path: Path) -> Node:
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    return Node(inventory, tmp_path / "cdi", tmp_path / "plugin" / "checkpoint.json")


def known_to_both(node: Node, ref: ClaimRef, how: str) -> tuple[Preparer, Preparer]:
    """(old, new): old prepared `ref`; new knows it by preparing it too, or from its start."""
    old = node.preparer()
    if how == "prepared":
        new = node.preparer()
        answer = prepare(old, ref)[ref.uid]
        assert prepare(new, ref)[ref.uid] == answer
    else:
        prepare(old, ref)
        new = node.preparer()  # loads the checkpoint, which holds the claim
    assert ref.uid in new.prepared
    return old, new


def assert_answer_is_on_disk(node: Node, ref: ClaimRef, outcome: Outcome) -> None:
    """The spec on disk defines every CDI id of the answer; the checkpoint holds the claim."""
    assert outcome.devices, outcome
    spec = cdi.spec_path(node.cdi_root, ref.uid)
    assert spec.exists(), f"answered claim {ref.uid} with CDI ids, but {spec.name} is gone"
    assert node.spec(ref) == node.planned_spec(ref)
    defined = {f"{node.spec(ref)['kind']}={d['name']}" for d in node.spec(ref)["devices"]}
    assert {i for d in outcome.devices for i in d.cdi_device_ids} <= defined
    assert ref.uid in node.checkpointed(), "answered a claim the checkpoint does not hold"


@pytest.mark.parametrize("how", ["prepared", "started"])
def test_prepare_after_the_other_instance_unprepared_writes_the_claim_again(
    node: Node, how: str
) -> None:
    ref = node.api.add(UID, DEVICES)
    old, new = known_to_both(node, ref, how)
    assert unprepare(old, ref) == {UID: Outcome()}
    assert node.files() == []
    assert node.checkpointed() == {}

    outcome = prepare(new, ref)[UID]

    assert outcome == Outcome(recorded(UID, DEVICES))
    assert_answer_is_on_disk(node, ref, outcome)
    assert node.files() == [spec_name(UID)]
    assert node.checkpointed() == {UID: record_of(ref, DEVICES)}
    assert new.prepared == node.checkpointed()


def test_prepare_of_a_claim_only_the_other_instance_prepared(node: Node) -> None:
    new = node.preparer()  # started before the other instance prepared the claim
    old = node.preparer()
    ref = node.api.add(UID, DEVICES)
    first = prepare(old, ref)[UID]
    assert UID not in new.prepared

    outcome = prepare(new, ref)[UID]

    assert outcome == first
    assert_answer_is_on_disk(node, ref, outcome)
    assert node.checkpointed() == {UID: record_of(ref, DEVICES)}


def test_a_claim_the_other_instance_unprepared_no_longer_holds_its_devices(
    node: Node,
) -> None:
    ref = node.api.add(uid(1), DEVICES)
    old, new = known_to_both(node, ref, "prepared")
    assert unprepare(old, ref) == {ref.uid: Outcome()}
    # The claim is gone from the API server too: the retry cannot prepare it again.
    node.api.failures["default", ref.name] = ApiError(404, "resourceclaims not found")

    gone = prepare(new, ref)[ref.uid]

    assert gone.devices == ()
    assert "404" in gone.error
    assert node.files() == []
    assert node.checkpointed() == {}
    # Its devices are free on this instance as on disk: the next claim for them prepares.
    successor = node.api.add(uid(2), DEVICES)
    outcome = prepare(new, successor)[successor.uid]
    assert outcome == Outcome(recorded(successor.uid, DEVICES))
    assert_answer_is_on_disk(node, successor, outcome)


def test_a_device_the_other_instance_prepared_is_held_here_too(node: Node) -> None:
    new = node.preparer()  # started before the other instance prepared anything
    old = node.preparer()
    first = node.api.add(uid(1), DEVICES)
    assert prepare(old, first)[first.uid].devices

    # A second claim for one of those devices, sent to the other instance: refused, as
    # it would be on the instance that prepared the first.
    second = node.api.add(uid(2), DEVICES[1:])
    refused = prepare(new, second)[second.uid]

    assert refused.devices == ()
    assert "neurondevice3" in refused.error and first.uid in refused.error, refused.error
    assert node.files() == [spec_name(first.uid)]
    assert node.checkpointed() == {first.uid: record_of(first, DEVICES)}


def test_a_failed_read_of_the_other_instances_claims_is_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent follows the checkpoint every few seconds for the other instance's
    claims; a read that fails is logged and retried at the next interval, and the loop
    goes on (its supervisor would otherwise hold the plugin not ready meanwhile)."""
    monkeypatch.setattr(node_module, "CLAIMS_FOLLOW_S", 0.0)
    reads: list[int] = []

    def refresh() -> None:
        reads.append(len(reads))
        if len(reads) == 1:
            raise OSError(5, "Input/output error")

    agent = SimpleNamespace(preparer=SimpleNamespace(refresh=refresh))

    async def follow() -> None:
        task = asyncio.create_task(Agent._follow_claims(agent))  # type: ignore[arg-type]
        while len(reads) < 2 and not task.done():
            await asyncio.sleep(0)
        assert not task.done(), task.exception()
        task.cancel()

    asyncio.run(asyncio.wait_for(follow(), timeout=10))
    assert len(reads) == 2
    assert "checkpoint not read; retrying" in caplog.text
