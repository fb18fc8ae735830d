"""Damaged state on disk and a failing disk: the preparer recovers or fails the claim cleanly.

A node's disk can be cut short by a power loss, edited by a person, full, or
replaced by something unusable. None of it may crash the plugin or leave a
half-written file behind, and every failure must say which file is the problem.
"""

from __future__ import annotations

import copy
import errno
import os
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.checkpoint import CheckpointStore, ClaimRecord, decode
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import plan
from neuron_dra.agent.claims.preparer import Outcome, Preparer
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import build_fake_node
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim
from tests.sysfs_tree import NOBODY, run_unprivileged

POOL = "node-a"
BOOT = "5f0e9c1a-0000-4000-8000-00000000c001"
Obj = dict[str, Any]
JSON_WHITESPACE = b" \t\n\r"


def uid(i: int) -> str:
    return f"0c7d2a1e-0000-4000-8000-{i:012d}"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> NodeInventory:
    root = tmp_path_factory.mktemp("node")
    return discover(build_fake_node(root / "sysfs", "trn2.48xlarge")).inventory


@dataclass
class Disk:
    """A node's CDI directory and checkpoint, with an in-memory API server."""

    inventory: NodeInventory
    root: Path
    claims: dict[str, Obj] = field(default_factory=dict)

    @property
    def cdi_root(self) -> Path:
        return self.root / "cdi"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugin"

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / "checkpoint.json"

    def add(self, i: int, devices: list[int]) -> ClaimRef:
        ref = ClaimRef("default", f"claim-{i}", uid(i))
        self.claims[ref.name] = allocated_claim(
            ref.uid, [f"neurondevice{d}" for d in devices], pool=POOL, name=ref.name
        )
        return ref

    def get_claim(self, namespace: str, name: str) -> Obj:
        found: Obj = copy.deepcopy(self.claims[name])
        return found

    def preparer(self) -> Preparer:
        """A started preparer, as after a plugin (re)start."""
        preparer = Preparer(
            inventory=lambda: self.inventory,
            pool=POOL,
            cdi_root=self.cdi_root,
            store=CheckpointStore(self.checkpoint),
            boot_id=BOOT,
            get_claim=self.get_claim,
        )
        preparer.start()
        return preparer

    def planned_spec(self, ref: ClaimRef) -> bytes:
        prepared = plan(ref, self.claims[ref.name], self.inventory, POOL)
        return cdi.encode_spec(cdi.build_spec(prepared))

    def recorded(self) -> dict[str, ClaimRecord]:
        if not self.checkpoint.exists():
            return {}
        boot, claims = decode(self.checkpoint.read_bytes())
        assert boot == BOOT
        return claims

    def temp_files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*.tmp"))


@pytest.fixture
def disk(inventory: NodeInventory, tmp_path: Path) -> Disk:
    return Disk(inventory, tmp_path / "disk")


def run(preparer: Preparer, what: str, *refs: ClaimRef) -> dict[str, Outcome]:
    call = preparer.prepare if what == "prepare" else preparer.unprepare
    return call(refs)


def assert_prepared(outcomes: dict[str, Outcome]) -> None:
    assert all(o.devices and not o.error for o in outcomes.values()), outcomes


def assert_unprepared(outcomes: dict[str, Outcome]) -> None:
    assert all(not o.devices and not o.error for o in outcomes.values()), outcomes


# ---------------------------------------------------------------------- checkpoint damage


@dataclass(frozen=True)
class Saved:
    """A node with two prepared claims, as files to put back before each damage."""

    checkpoint: bytes
    specs: dict[str, bytes]
    refs: tuple[ClaimRef, ...]


@pytest.fixture
def saved(disk: Disk) -> Saved:
    refs = (disk.add(1, [0, 1, 2, 3]), disk.add(2, [9]))
    assert_prepared(run(disk.preparer(), "prepare", *refs))
    specs = {p.name: p.read_bytes() for p in disk.cdi_root.iterdir()}
    return Saved(disk.checkpoint.read_bytes(), specs, refs)


def restore(disk: Disk, saved: Saved, checkpoint: bytes) -> None:
    """The node as a crash left it: both specs on disk, `checkpoint` as the record."""
    shutil.rmtree(disk.root)
    disk.cdi_root.mkdir(parents=True)
    disk.plugin_dir.mkdir(parents=True)
    for name, data in saved.specs.items():
        (disk.cdi_root / name).write_bytes(data)
    disk.checkpoint.write_bytes(checkpoint)


def start_and_recover(disk: Disk, saved: Saved, damaged: bytes, *, recover: bool) -> bool:
    """Start on a damaged checkpoint and, with `recover`, do what the kubelet does next.

    True if the checkpoint was set aside.
    """
    restore(disk, saved, damaged)
    preparer = disk.preparer()  # must not raise
    asides = list(disk.plugin_dir.glob("checkpoint.json.corrupt-*"))
    first, second = saved.refs
    if asides:
        [aside] = asides
        assert aside.read_bytes() == damaged
        assert not disk.checkpoint.exists()
        assert preparer.prepared == {}
    else:
        assert set(preparer.prepared) == {first.uid, second.uid}
    if not recover:
        return bool(asides)
    # The kubelet prepares what is still in use and unprepares the rest.
    assert_prepared(run(preparer, "prepare", first))
    assert_unprepared(run(preparer, "unprepare", second))
    assert set(disk.recorded()) == {first.uid}
    assert cdi.spec_uids(disk.cdi_root) == {first.uid}
    assert cdi.spec_path(disk.cdi_root, first.uid).read_bytes() == disk.planned_spec(first)
    assert_unprepared(run(preparer, "unprepare", first))
    assert disk.recorded() == {}
    assert sorted(p.name for p in disk.cdi_root.iterdir()) == []
    assert disk.temp_files() == []
    return bool(asides)


# The kubelet's follow-up costs a few fsyncs; every start is checked, every Nth recovery.
RECOVER_EVERY = 16


def test_every_truncation_of_the_checkpoint_is_survived(disk: Disk, saved: Saved) -> None:
    # A prefix of a JSON object is never a JSON object: every length is detected.
    size = len(saved.checkpoint)
    for length in range(size):
        recover = length % RECOVER_EVERY == 0 or length == size - 1
        assert start_and_recover(disk, saved, saved.checkpoint[:length], recover=recover), length


def test_single_byte_edits_of_the_checkpoint_are_survived(disk: Disk, saved: Saved) -> None:
    rnd = random.Random(20261122)
    data = saved.checkpoint
    trusted = 0
    for offset in range(len(data)):
        replacement = rnd.choice([b for b in range(256) if b != data[offset]])
        damaged = data[:offset] + bytes([replacement]) + data[offset + 1 :]
        if not start_and_recover(disk, saved, damaged, recover=offset % RECOVER_EVERY == 0):
            # The checksum covers the canonical body, so only layout may change unnoticed.
            assert data[offset] in JSON_WHITESPACE, offset
            assert replacement in JSON_WHITESPACE, offset
            trusted += 1
    assert trusted < len(data) // 10


# ---------------------------------------------------------------------- unusable CDI directory


def test_cdi_directory_replaced_by_a_file(disk: Disk) -> None:
    ref = disk.add(1, [0])
    preparer = disk.preparer()
    disk.root.mkdir(parents=True, exist_ok=True)
    disk.cdi_root.write_text("not a directory")

    outcome = run(preparer, "prepare", ref)[ref.uid]

    assert not outcome.devices
    assert outcome.error.startswith(f"claim {ref}: ")
    assert str(disk.cdi_root) in outcome.error
    assert disk.cdi_root.read_text() == "not a directory"
    assert disk.recorded() == {}
    assert disk.temp_files() == []
    # Back to a directory (the operator's fix): the kubelet's retry succeeds.
    disk.cdi_root.unlink()
    assert_prepared(run(preparer, "prepare", ref))
    assert set(disk.recorded()) == {ref.uid}


def test_start_with_a_file_as_cdi_directory_fails_naming_it(disk: Disk) -> None:
    disk.root.mkdir(parents=True)
    disk.cdi_root.write_text("not a directory")
    # Fail fast at start: the DaemonSet's restarts and logs make the misconfiguration visible.
    with pytest.raises(OSError, match=str(disk.cdi_root)):
        disk.preparer()


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A tree an unprivileged child can reach (pytest's tmp dirs are private to root)."""
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"ndra-unpriv-{os.getpid()}"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    try:
        yield root
    finally:
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(root)


def test_unreadable_cdi_directory(inventory: NodeInventory, shared_root: Path) -> None:
    disk = Disk(inventory, shared_root / "disk")
    ref = disk.add(1, [0, 1])
    disk.cdi_root.mkdir(parents=True)
    disk.plugin_dir.mkdir(parents=True)
    preparer = disk.preparer()
    (disk.cdi_root / "vendor.example-gpu.json").write_text("{}")
    if os.geteuid() == 0:
        for path in (disk.root, disk.cdi_root, disk.plugin_dir):
            os.chown(path, NOBODY, NOBODY)
    disk.cdi_root.chmod(0)

    def attempt() -> dict[str, Outcome]:
        return run(preparer, "prepare", ref)

    outcome = run_unprivileged(attempt)[ref.uid]

    disk.cdi_root.chmod(0o755)
    assert not outcome.devices
    assert outcome.error.startswith(f"claim {ref}: PermissionError")
    assert str(disk.cdi_root) in outcome.error
    assert sorted(p.name for p in disk.cdi_root.iterdir()) == ["vendor.example-gpu.json"]
    assert disk.recorded() == {}
    assert disk.temp_files() == []
    assert preparer.prepared == {}


# ---------------------------------------------------------------------- full disk


class FullDisk:
    """os.write / os.fsync failing with ENOSPC for files under one directory."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, call: str, under: Path) -> None:
        self.under = str(under) + os.sep
        self.full = True
        self.failures = 0
        original: Callable[..., Any] = getattr(os, call)

        def failing(fd: int, *args: Any) -> Any:
            if self.full and str(Path(f"/proc/self/fd/{fd}").readlink()).startswith(self.under):
                self.failures += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return original(fd, *args)

        # The module attribute atomic_write looks up at each call.
        monkeypatch.setattr(os, call, failing)


def assert_disk_error(outcome: Outcome, ref: ClaimRef) -> None:
    assert not outcome.devices
    assert outcome.error.startswith(f"claim {ref}: OSError: [Errno 28] No space left on device")
    assert outcome.reason == "io"


# A spec is not fsynced (see `test_what_a_prepare_makes_durable`): only its write can fail.
@pytest.mark.parametrize("call", ["write"])
def test_full_disk_during_the_cdi_write(
    disk: Disk, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    other, ref = disk.add(1, [0]), disk.add(2, [1, 2])
    preparer = disk.preparer()
    assert_prepared(run(preparer, "prepare", other))
    # A spec the claim already has (an older driver's, say): a failed rewrite must keep it.
    previous = b'{"cdiVersion": "0.3.0", "kind": "neuron.aws.com/neuron", "devices": []}'
    cdi.spec_path(disk.cdi_root, ref.uid).write_bytes(previous)
    checkpoint = disk.checkpoint.read_bytes()
    full = FullDisk(monkeypatch, call, disk.cdi_root)

    assert_disk_error(run(preparer, "prepare", ref)[ref.uid], ref)

    assert full.failures == 1
    assert cdi.spec_path(disk.cdi_root, ref.uid).read_bytes() == previous
    assert disk.checkpoint.read_bytes() == checkpoint
    assert disk.temp_files() == []
    assert set(preparer.prepared) == {other.uid}

    full.full = False
    assert_prepared(run(preparer, "prepare", ref))
    assert cdi.spec_path(disk.cdi_root, ref.uid).read_bytes() == disk.planned_spec(ref)
    assert set(disk.recorded()) == {other.uid, ref.uid}


@pytest.mark.parametrize("call", ["write", "fsync"])
def test_full_disk_during_the_checkpoint_write(
    disk: Disk, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    other, ref = disk.add(1, [0]), disk.add(2, [1, 2])
    preparer = disk.preparer()
    assert_prepared(run(preparer, "prepare", other))
    checkpoint = disk.checkpoint.read_bytes()
    full = FullDisk(monkeypatch, call, disk.plugin_dir)

    assert_disk_error(run(preparer, "prepare", ref)[ref.uid], ref)

    assert full.failures == 1
    assert disk.checkpoint.read_bytes() == checkpoint
    assert disk.temp_files() == []
    assert set(preparer.prepared) == {other.uid}
    # The spec went out before the checkpoint failed; the claim is not prepared, so
    # it goes too (a crash at that point leaves it for the kubelet's next call).
    assert not cdi.spec_path(disk.cdi_root, ref.uid).exists()
    assert cdi.spec_uids(disk.cdi_root) == {other.uid}

    full.full = False
    assert_prepared(run(preparer, "prepare", ref))
    assert set(disk.recorded()) == {other.uid, ref.uid}
    assert_unprepared(run(preparer, "unprepare", ref, other))
    assert disk.recorded() == {}
    assert list(disk.cdi_root.iterdir()) == []


def test_what_a_prepare_makes_durable(disk: Disk, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint and its directory entry are fsynced, before the kubelet's answer;
    the spec is not: it serves this boot only, and the checkpoint names the boot."""
    ref = disk.add(1, [0])
    preparer = disk.preparer()
    synced: list[str] = []
    original = os.fsync

    def fsync(fd: int) -> None:
        synced.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
        original(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert_prepared(run(preparer, "prepare", ref))
    plugin_dir = str(disk.plugin_dir)
    assert len(synced) == 2, synced
    assert synced[0].startswith(f"{plugin_dir}/.{disk.checkpoint.name}.")  # the temp file
    assert synced[1] == plugin_dir
    synced.clear()
    assert_unprepared(run(preparer, "unprepare", ref))
    assert len(synced) == 2 and synced[1] == plugin_dir, synced


def test_full_disk_during_an_unprepare(disk: Disk, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = disk.add(1, [3])
    preparer = disk.preparer()
    assert_prepared(run(preparer, "prepare", ref))
    checkpoint = disk.checkpoint.read_bytes()
    full = FullDisk(monkeypatch, "fsync", disk.plugin_dir)

    assert_disk_error(run(preparer, "unprepare", ref)[ref.uid], ref)

    assert disk.checkpoint.read_bytes() == checkpoint
    assert disk.temp_files() == []
    full.full = False
    assert_unprepared(run(preparer, "unprepare", ref))
    assert disk.recorded() == {}
    assert list(disk.cdi_root.iterdir()) == []


def test_a_claim_that_failed_on_a_full_disk_is_not_recorded_later(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed, later = disk.add(1, [0]), disk.add(2, [1])
    preparer = disk.preparer()
    full = FullDisk(monkeypatch, "fsync", disk.plugin_dir)
    assert_disk_error(run(preparer, "prepare", failed)[failed.uid], failed)
    full.full = False

    assert_prepared(run(preparer, "prepare", later))

    assert set(disk.recorded()) == {later.uid}
    assert set(preparer.prepared) == {later.uid}
