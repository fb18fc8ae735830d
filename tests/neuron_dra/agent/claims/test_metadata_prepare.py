"""Device metadata files through prepare, unprepare, crashes and the start sweep."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from consts import DRIVER_NAME
from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims import metadata as md
from neuron_dra.agent.claims.checkpoint import CheckpointStore
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import ClaimEvent, ClaimUnprepared
from neuron_dra.agent.claims.metadatafiles import POD_CLAIM_ANNOTATION, MetadataFiles
from neuron_dra.agent.claims.preparer import Outcome, Preparer, Step, StepHook, no_step_hook
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.slices import SliceOptions, build_slices
from tests.claim_objects import allocated_claim
from tests.neuron_dra.agent.claims.test_preparer import BOOT, OTHER_BOOT, POOL, UID, Api, Crash, uid
from tests.reliability.test_corruption import FullDisk
from tests.sysfs_tree import FakeNode

OTHER = uid(7)


class Node:
    def __init__(self, inventory: NodeInventory, root: Path) -> None:
        self.inventory = inventory
        self.cdi_root = root / "cdi"
        self.plugin_dir = root / "plugin"
        self.api = Api()
        slices = build_slices(inventory, SliceOptions(POOL, cores=True))
        self.published = {d["name"]: d["attributes"] for s in slices for d in s["spec"]["devices"]}

    def files(self, *, enabled: bool = True) -> MetadataFiles:
        return MetadataFiles(self.plugin_dir, self.cdi_root, self.published.get, enabled=enabled)

    def preparer(
        self,
        *,
        after_step: StepHook = no_step_hook,
        boot_id: str = BOOT,
        enabled: bool = True,
        tidy: bool = True,
    ) -> Preparer:
        """A preparer of this node's; with `tidy`, each unprepare followed by what the
        agent's event loop does after it (`claimpath`), at once."""
        files = self.files(enabled=enabled)

        def dispatch(event: ClaimEvent) -> None:
            if tidy and isinstance(event, ClaimUnprepared):
                files.unprepared(event)

        preparer = Preparer(
            inventory=lambda: self.inventory,
            pool=POOL,
            cdi_root=self.cdi_root,
            store=CheckpointStore(self.plugin_dir / "checkpoint.json"),
            boot_id=boot_id,
            get_claim=self.api.get_claim,
            after_step=after_step,
            metadata=files,
            post=dispatch,
        )
        preparer.start()
        return preparer

    def add(self, claim_uid: str, devices: dict[str, list[str]], **meta: Any) -> ClaimRef:
        ref = self.api.add(claim_uid, devices)
        self.api.claims["default", ref.name]["metadata"] |= meta
        return ref

    def left(self, *, directories: bool = True) -> list[str]:
        """Every metadata file and spec on the node, and every directory of them."""
        found = sorted(p.name for p in self.cdi_root.glob(f"{md.CDI_PREFIX}*"))
        root = self.plugin_dir / md.SUBDIR
        if root.exists():
            found += sorted(
                str(p.relative_to(root)) for p in root.rglob("*") if directories or not p.is_dir()
            )
        return found

    def metadata(self, ref: ClaimRef, request: str) -> dict[str, Any]:
        path = self.plugin_dir / md.SUBDIR / f"default_{ref.name}" / request / "metadata.json"
        obj: dict[str, Any] = json.loads(path.read_bytes())
        return obj


@pytest.fixture
def node(fake_node: FakeNode, tmp_path: Path) -> Node:
    return Node(discover(fake_node("trn2.48xlarge")).inventory, tmp_path)


def prepare(preparer: Preparer, ref: ClaimRef) -> Outcome:
    return preparer.prepare([ref])[ref.uid]


def unprepare(preparer: Preparer, ref: ClaimRef) -> Outcome:
    return preparer.unprepare([ref])[ref.uid]


def meta_id(claim_uid: str, request: str) -> str:
    return f"{DRIVER_NAME}/metadata={claim_uid}_{request}"


def test_prepare_writes_a_file_per_request_and_unprepare_removes_them(node: Node) -> None:
    ref = node.add(
        UID,
        {"train": ["neurondevice2", "neurondevice3"], "infer": ["neurondevice4"]},
        annotations={POD_CLAIM_ANNOTATION: "cores"},
    )
    preparer = node.preparer()

    outcome = prepare(preparer, ref)

    meta = [[i for i in d.cdi_device_ids if "/metadata=" in i] for d in outcome.devices]
    # One id per request, on that request's first entry, after the device's own; none
    # on the entry only a container of the whole claim gets.
    assert meta == [[meta_id(UID, "train")], [], [meta_id(UID, "infer")], []]
    assert all("/metadata=" not in d.cdi_device_ids[0] for d in outcome.devices)
    train = node.metadata(ref, "train")
    assert train["podClaimName"] == "cores"
    assert train["requests"][0]["name"] == "train"
    devices = train["requests"][0]["devices"]
    assert [d["name"] for d in devices] == ["neurondevice2", "neurondevice3"]
    # The attributes the node publishes for the device, core ids and LNC included.
    assert devices[0]["attributes"] == dict(sorted(node.published["neurondevice2"].items()))
    assert devices[0]["attributes"]["logicalNeuronCore"] == {"int": node.inventory.lnc}
    spec = json.loads(md.cdi_spec_path(node.cdi_root, UID, "infer").read_bytes())
    mount = spec["devices"][0]["containerEdits"]["mounts"][0]
    assert mount["containerPath"] == (
        f"{md.CONTAINER_DIR}/resourceclaimtemplates/cores/infer/{DRIVER_NAME}-metadata.json"
    )
    assert Path(mount["hostPath"]).read_bytes().startswith(b"{")
    # Restarted, the plugin answers the same from its checkpoint.
    assert prepare(node.preparer(), ref) == outcome

    assert unprepare(preparer, ref) == Outcome()
    assert node.left() == []


@pytest.mark.parametrize(
    "value", ["../../../../../etc", "", "a/b", "Cores", "-cores", "c" * 64, "cores\n"]
)
def test_a_pod_claim_name_that_is_no_dns_label_fails_the_prepare(node: Node, value: str) -> None:
    """The annotation names a directory of the container's mount (upstream declares
    podClaimName a `k8s-short-name`): anything but a DNS label is refused before any
    file is written, the claim alone failing."""
    ref = node.add(UID, {"neurons": ["neurondevice1"]}, annotations={POD_CLAIM_ANNOTATION: value})
    preparer = node.preparer()
    outcome = prepare(preparer, ref)
    assert outcome.devices == () and outcome.reason == "claim"
    assert POD_CLAIM_ANNOTATION in outcome.error and "DNS label" in outcome.error
    assert node.left() == [] and cdi.spec_uids(node.cdi_root) == set()
    assert preparer.prepared == {}
    fine = node.add(
        OTHER, {"neurons": ["neurondevice1"]}, annotations={POD_CLAIM_ANNOTATION: "c" * 63}
    )
    assert prepare(preparer, fine).error == ""


def test_a_prepare_the_checkpoint_refuses_leaves_none_of_its_files(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk fails the checkpoint's fsync (the specs and metadata files are not
    fsynced): the claim is not prepared, so its CDI specs and metadata files go too,
    and another claim's stay."""
    other = node.add(OTHER, {"neurons": ["neurondevice0"]})
    ref = node.add(UID, {"train": ["neurondevice8"], "infer": ["neurondevice9"]})
    preparer = node.preparer()
    assert prepare(preparer, other).error == ""
    kept = node.left()
    full = FullDisk(monkeypatch, "fsync", node.plugin_dir)

    outcome = prepare(preparer, ref)

    assert full.failures == 1
    assert outcome.reason == "io" and "No space left on device" in outcome.error
    assert node.left() == kept and cdi.spec_uids(node.cdi_root) == {OTHER}
    assert set(preparer.prepared) == {OTHER}
    full.full = False
    assert prepare(preparer, ref).error == ""
    assert unprepare(preparer, ref) == unprepare(preparer, other) == Outcome()
    assert node.left() == [] and cdi.spec_uids(node.cdi_root) == set()


def test_a_subrequest_names_its_file_by_its_request(node: Node) -> None:
    ref = node.add(UID, {"neurons/large": ["neurondevice5"]})
    outcome = prepare(node.preparer(), ref)
    assert outcome.devices[0].cdi_device_ids[-1] == meta_id(UID, "neurons")
    assert node.metadata(ref, "neurons")["requests"][0]["name"] == "neurons/large"
    assert node.left() == [
        f"{md.CDI_PREFIX}{UID}_neurons.json",
        f"default_{ref.name}",
        f"default_{ref.name}/neurons",
        f"default_{ref.name}/neurons/metadata.json",
    ]


def test_a_core_device_carries_its_core_id(node: Node) -> None:
    core = next(n for n, a in node.published.items() if "coreId" in a)
    ref = node.add(UID, {"cores": [core]})
    prepare(node.preparer(), ref)
    device = node.metadata(ref, "cores")["requests"][0]["devices"][0]
    assert device["attributes"]["coreId"] == node.published[core]["coreId"]


def test_off_writes_nothing_yet_removes_what_was_written(node: Node) -> None:
    ref = node.add(UID, {"neurons": ["neurondevice1"]})
    prepare(node.preparer(), ref)
    assert node.left()

    off = node.preparer(enabled=False)
    assert node.left()  # still named by the checkpoint's answer: kept until unprepare
    assert unprepare(off, ref) == Outcome()
    assert node.left() == []

    other = node.add(OTHER, {"neurons": ["neurondevice1"]})
    outcome = prepare(off, other)
    assert all(len(d.cdi_device_ids) == 1 for d in outcome.devices)
    assert node.left() == []


PREPARE_STEPS: list[Step] = ["after-plan", "after-cdi-write", "after-metadata-write"]


def crash_at(step: Step) -> StepHook:
    def crash(reached: Step) -> None:
        if reached == step:
            raise Crash(step)

    return crash


@pytest.mark.parametrize("step", [*PREPARE_STEPS, "after-checkpoint"])
def test_prepare_cut_short_is_repaired_and_leaves_nothing(node: Node, step: Step) -> None:
    ref = node.add(UID, {"neurons": ["neurondevice8", "neurondevice9"]})
    with pytest.raises(Crash):
        prepare(node.preparer(after_step=crash_at(step)), ref)

    restarted = node.preparer()
    outcome = prepare(restarted, ref)
    assert outcome.devices[0].cdi_device_ids[-1] == meta_id(UID, "neurons")
    assert node.metadata(ref, "neurons")["metadata"]["uid"] == UID

    assert unprepare(restarted, ref) == Outcome()
    assert node.left() == []


@pytest.mark.parametrize("step", ["after-metadata-remove", "after-cdi-remove"])
def test_unprepare_cut_short_leaves_nothing(node: Node, step: Step) -> None:
    ref = node.add(UID, {"neurons": ["neurondevice8"]})
    prepare(node.preparer(), ref)
    with pytest.raises(Crash):
        unprepare(node.preparer(after_step=crash_at(step)), ref)
    # Files and specs are gone; the directories are the event loop's to remove, after
    # the answer a crash never gave.
    assert node.left(directories=False) == []
    assert node.left() != []
    assert unprepare(node.preparer(), ref) == Outcome()
    assert node.left() == []


def test_start_sweeps_what_no_claim_spec_stands_behind(node: Node) -> None:
    kept = node.add(UID, {"neurons": ["neurondevice1"]})
    gone = node.add(OTHER, {"neurons": ["neurondevice2"]})
    preparer = node.preparer()
    prepare(preparer, kept)
    prepare(preparer, gone)
    before = node.left()
    # An agent that knows nothing of metadata files unprepared `gone` (a rolling update
    # from an earlier version): only its claim spec went.
    cdi.remove_spec(node.cdi_root, OTHER)
    # And a removal cut short left a request's file whose spec is gone.
    stray = node.plugin_dir / md.SUBDIR / "default_stray" / "r" / "metadata.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")

    node.preparer()

    assert node.left() == [n for n in before if OTHER not in n and gone.name not in n]
    assert node.metadata(kept, "neurons")["metadata"]["uid"] == UID


def test_start_after_a_reboot_removes_every_file(node: Node) -> None:
    prepare(node.preparer(boot_id=OTHER_BOOT), node.add(UID, {"neurons": ["neurondevice1"]}))
    assert node.left()
    node.preparer()
    assert node.left() == []


def test_unprepare_keeps_the_file_of_a_new_claim_of_the_same_name(node: Node) -> None:
    old = node.add(UID, {"neurons": ["neurondevice1"]})
    preparer = node.preparer()
    prepare(preparer, old)
    # Deleted and made again under the same name while the old one is still prepared.
    new = ClaimRef(old.namespace, old.name, OTHER)
    node.api.claims["default", old.name] = allocated_claim(
        OTHER, ["neurondevice2"], pool=POOL, name=old.name
    )
    prepare(preparer, new)

    assert unprepare(preparer, old) == Outcome()

    assert node.metadata(new, "neurons")["metadata"]["uid"] == OTHER
    assert md.cdi_spec_path(node.cdi_root, OTHER, "neurons").exists()
    assert not md.cdi_spec_path(node.cdi_root, UID, "neurons").exists()


def attributes_of(obj: Mapping[str, Any]) -> Any:
    return obj["requests"][0]["devices"][0].get("attributes")


def test_a_device_the_node_does_not_publish_has_no_attributes(node: Node) -> None:
    ref = node.add(UID, {"neurons": ["neurondevice1"]})
    node.published.pop("neurondevice1")
    prepare(node.preparer(), ref)
    assert attributes_of(node.metadata(ref, "neurons")) is None


def test_unprepare_answers_before_the_directories_go(node: Node) -> None:
    ref = node.add(UID, {"train": ["neurondevice2"], "infer": ["neurondevice4"]})
    preparer = node.preparer(tidy=False)
    prepare(preparer, ref)

    assert unprepare(preparer, ref) == Outcome()

    # Nothing a container could mount is left; the empty directories wait for the loop.
    assert node.left(directories=False) == []
    assert node.left() == [
        f"default_{ref.name}",
        f"default_{ref.name}/infer",
        f"default_{ref.name}/train",
    ]
    node.files().tidy(ref)
    assert node.left() == []


def test_tidy_leaves_a_file_and_removes_what_the_agent_never_wrote(node: Node) -> None:
    ref = node.add(UID, {"neurons": ["neurondevice1"]})
    prepare(node.preparer(), ref)
    claim_dir = node.plugin_dir / md.SUBDIR / f"default_{ref.name}"
    foreign = claim_dir / "other" / "notes.txt"
    foreign.parent.mkdir()
    foreign.write_text("not the agent's")

    node.files().tidy(ref)

    assert not foreign.parent.exists()
    assert node.metadata(ref, "neurons")["metadata"]["uid"] == UID
