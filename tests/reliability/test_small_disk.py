"""A real, nearly full file system: a 64 KiB tmpfs mounted for the test.

The kernel first takes what fits and returns a short count; only the next write
raises ENOSPC. A checkpoint or CDI spec cut at the short count and renamed into
place recorded a claim by half, and the next write found the checkpoint corrupt,
set it aside and kept none of the other claims. The faked ENOSPC of
`test_corruption` never shows that first step.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.answer import claim_record
from neuron_dra.agent.claims.checkpoint import encode
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import plan
from neuron_dra.agent.claims.preparer import Outcome
from neuron_dra.agent.files.dirs import CDI_DIR_MODE, PLUGIN_DIR_MODE
from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import build_fake_node
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim
from tests.reliability.test_corruption import (
    BOOT,
    POOL,
    Disk,
    assert_prepared,
    assert_unprepared,
    run,
    uid,
)

PAGE = 4096
Mount = Callable[[Path, int], None]


@pytest.fixture(scope="module")
def trn2(tmp_path_factory: pytest.TempPathFactory) -> NodeInventory:
    root = tmp_path_factory.mktemp("node")
    return discover(build_fake_node(root / "sysfs", "trn2.48xlarge")).inventory


@pytest.fixture
def small() -> Iterator[Mount]:
    """`small(directory, mode)` mounts a 64 KiB tmpfs there, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted: list[Path] = []

    def mount(directory: Path, mode: int) -> None:
        directory.mkdir(parents=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size=64k,mode={mode:o}", "tmpfs", str(directory)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"no tmpfs could be mounted: {done.stderr.strip()}")
        mounted.append(directory)

    try:
        yield mount
    finally:
        for directory in mounted:
            subprocess.run(["umount", str(directory)], check=True)


def fill(directory: Path, leave: int) -> Path:
    """A ballast file that leaves exactly `leave` bytes (whole pages) free."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    assert free > leave, (free, leave)
    ballast = directory / "ballast"
    ballast.write_bytes(b"\0" * (free - leave))
    stats = os.statvfs(directory)
    assert stats.f_bavail * stats.f_frsize == leave
    return ballast


def add_cores(disk: Disk, i: int, devices: range) -> ClaimRef:
    """A claim of every NeuronCore of `devices`: a large record and spec."""
    wanted = {f"neurondevice{d}" for d in devices}
    cores = [c.name for c in logical_cores(disk.inventory) if c.device.name in wanted]
    ref = ClaimRef("default", f"claim-{i}", uid(i))
    disk.claims[ref.name] = allocated_claim(ref.uid, cores, pool=POOL, name=ref.name)
    return ref


def size_of(disk: Disk, *refs: ClaimRef) -> int:
    """The checkpoint's size once `refs` are prepared."""
    prepared = (plan(r, disk.claims[r.name], disk.inventory, POOL) for r in refs)
    return len(encode(BOOT, {p.claim.uid: claim_record(p) for p in prepared}))


def assert_no_space(outcome: Outcome, path: Path) -> None:
    assert not outcome.devices
    assert "No space left on device" in outcome.error, outcome
    assert str(path) in outcome.error, outcome
    assert outcome.reason == "io"


def test_a_checkpoint_that_does_not_fit_refuses_the_claim_and_keeps_every_other(
    trn2: NodeInventory, small: Mount, tmp_path: Path
) -> None:
    disk = Disk(trn2, tmp_path / "disk")
    small(disk.plugin_dir, PLUGIN_DIR_MODE)  # the specs stay beside it
    big = add_cores(disk, 100, range(8, 16))
    refs = [disk.add(i, [i]) for i in range(1, 7)]
    preparer = disk.preparer()
    assert_prepared(run(preparer, "prepare", big, *refs))
    before = disk.checkpoint.read_bytes()
    last = disk.add(7, [7])
    # One page free beside the old checkpoint, and the new needs two: the kernel
    # writes the first.
    assert PAGE < size_of(disk, big, *refs, last) <= 2 * PAGE
    ballast = fill(disk.plugin_dir, PAGE)

    assert_no_space(run(preparer, "prepare", last)[last.uid], disk.checkpoint)

    # Nothing lost: the old checkpoint, whole, lists every prepared claim.
    assert disk.checkpoint.read_bytes() == before
    assert set(disk.recorded()) == {big.uid, *(r.uid for r in refs)}
    assert set(preparer.prepared) == set(disk.recorded())
    assert disk.temp_files() == []
    # Room again: the next write keeps every other claim too.
    ballast.unlink()
    assert_unprepared(run(preparer, "unprepare", refs[0]))
    assert set(disk.recorded()) == {big.uid, *(r.uid for r in refs[1:])}
    assert_prepared(run(preparer, "prepare", last))
    assert set(disk.recorded()) == {big.uid, last.uid, *(r.uid for r in refs[1:])}
    assert list(disk.plugin_dir.glob("*.corrupt-*")) == []


def test_a_spec_that_does_not_fit_refuses_the_claim_and_keeps_every_other(
    trn2: NodeInventory, small: Mount, tmp_path: Path
) -> None:
    disk = Disk(trn2, tmp_path / "disk")
    small(disk.cdi_root, CDI_DIR_MODE)  # the checkpoint stays beside it
    refs = [disk.add(i, [i]) for i in range(1, 4)]
    preparer = disk.preparer()
    assert_prepared(run(preparer, "prepare", *refs))
    specs = {p: p.read_bytes() for p in disk.cdi_root.iterdir()}
    checkpoint = disk.checkpoint.read_bytes()
    big = add_cores(disk, 100, range(8, 16))
    # Two pages of spec with one free: the kernel writes the first.
    assert len(disk.planned_spec(big)) > PAGE
    ballast = fill(disk.cdi_root, PAGE)

    assert_no_space(run(preparer, "prepare", big)[big.uid], cdi.spec_path(disk.cdi_root, big.uid))

    assert not cdi.spec_path(disk.cdi_root, big.uid).exists()
    assert {p: p.read_bytes() for p in disk.cdi_root.iterdir() if p != ballast} == specs
    assert disk.checkpoint.read_bytes() == checkpoint
    assert set(preparer.prepared) == {r.uid for r in refs}
    assert disk.temp_files() == []
    ballast.unlink()
    assert_prepared(run(preparer, "prepare", big))
    assert cdi.spec_path(disk.cdi_root, big.uid).read_bytes() == disk.planned_spec(big)
    assert set(disk.recorded()) == {big.uid, *(r.uid for r in refs)}
