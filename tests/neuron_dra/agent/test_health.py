from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from neuron_dra.agent.health import Change, HealthMonitor, Kind
from tests.sysfs_tree import FakeNode, write


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ecc(root: Path, device: int, value: int, counter: str = "mem_ecc_uncorrected") -> None:
    write(root, f"sys/devices/virtual/neuron_device/neuron{device}/stats/hardware/{counter}",
          f"{value}\n")  # fmt: skip


def monitor(root: Path, clock: Clock, recovery: float = 0.0) -> HealthMonitor:
    kmsg = root / "dev/kmsg"
    kmsg.touch()
    return HealthMonitor(root, range(16), kmsg=kmsg, recovery_s=recovery, clock=clock)


def test_an_uncorrectable_ecc_increase_marks_exactly_that_device(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    ecc(root, 5, 3)  # errors before start are the baseline, not news
    clock = Clock()
    health = monitor(root, clock)
    assert health.poll() == []
    ecc(root, 5, 4)
    [change] = health.poll()
    assert change.device == 5 and change.problem is not None
    assert (change.problem.kind, change.problem.detail) == (
        Kind.MEM_ECC_UNCORRECTED, "mem_ecc_uncorrected 3 -> 4"
    )  # fmt: skip
    assert health.poll() == [] and set(health.problems) == {5}


def test_sram_errors_count_too(fake_node: FakeNode) -> None:
    root = fake_node("trn1.32xlarge")
    health = monitor(root, Clock())
    ecc(root, 2, 1, "sram_ecc_uncorrected")
    assert [(c.device, c.problem and c.problem.kind) for c in health.poll()] == [
        (2, Kind.SRAM_ECC_UNCORRECTED)
    ]


def test_recovery_after_the_configured_time_forgives_old_errors(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    clock = Clock()
    health = monitor(root, clock, recovery=60)
    ecc(root, 1, 1)
    assert [c.device for c in health.poll()] == [1]
    clock.now += 59
    assert health.poll() == []
    clock.now += 1
    assert health.poll() == [Change(1, None)]
    assert health.poll() == []  # the old count is the new baseline
    ecc(root, 1, 2)
    assert [c.device for c in health.poll()] == [1]


def test_kernel_error_lines(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    clock = Clock()
    health = monitor(root, clock, recovery=30)
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write("6,1234,5678,-;neuron: neuron3: NEURON_HW_ERR=HBM_UE address 0x10\n")
        kmsg.write("6,1235,5679,-;unrelated line\n")
    [change] = health.poll()
    assert change.device == 3 and change.problem is not None and change.problem.kind == "HBM_UE"
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write("3,1236,5680,-;neuron: NEURON_HW_ERR=DMA_ABORT\n")  # no device: all of them
    changes = health.poll()
    assert sorted(c.device for c in changes) == list(range(16))  # 3: a new kind is news
    assert {c.problem.kind for c in changes if c.problem} == {"DMA_ABORT"}
    clock.now += 30
    assert len(health.poll()) == 16 and health.problems == {}


def test_lines_already_in_the_log_at_start_are_history(fake_node: FakeNode) -> None:
    root = fake_node("inf2.48xlarge")
    write(root, "dev/kmsg", "neuron0: NEURON_HW_ERR=OLD\n")
    health = HealthMonitor(root, range(12), kmsg=root / "dev/kmsg", clock=Clock())
    assert health.poll() == []


def test_a_vanished_device_returns_when_it_comes_back(fake_node: FakeNode) -> None:
    root = fake_node("inf2.48xlarge")
    health = HealthMonitor(root, range(12), clock=Clock())
    (root / "dev/neuron7").unlink()
    [change] = health.poll()
    assert change.device == 7 and change.problem and change.problem.kind == Kind.DEVICE_MISSING
    write(root, "dev/neuron7", "")
    assert health.poll() == [Change(7, None)]


def test_a_broken_source_is_reported_once(
    fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    root = fake_node("inf2.48xlarge")
    ecc(root, 0, 0)
    health = HealthMonitor(root, range(12), kmsg=root / "no/such/kmsg", clock=Clock())
    shutil.rmtree(root / "sys/devices/virtual/neuron_device/neuron0/stats/hardware")
    (root / "sys/devices/virtual/neuron_device/neuron0/stats/hardware").mkdir()
    (root / "sys/devices/virtual/neuron_device/neuron0/stats/hardware/mem_ecc_uncorrected").mkdir()
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert health.poll() == []
    messages = [r.getMessage() for r in caplog.records]
    assert sum("kernel log unreadable" in m for m in messages) == 1
    assert sum("health counter unreadable" in m for m in messages) == 1


def test_a_problem_is_dated_when_first_seen_for_as_long_as_it_lasts(fake_node: FakeNode) -> None:
    # The date becomes the taint's timeAdded, from which NoExecute tolerations count.
    root = fake_node("trn2.48xlarge")
    clock = Clock()
    health = monitor(root, clock)
    ecc(root, 5, 1)
    health.poll()
    clock.now += 300
    ecc(root, 5, 2)  # more errors of the same kind: the same problem
    assert health.poll() == [] and health.problems[5].since == 1000.0
    clock.now += 300
    (root / "dev/neuron5").unlink()  # another kind of problem: news, dated now
    [change] = health.poll()
    assert change.problem is not None and change.problem.since == health.problems[5].since == 1600


def test_a_device_that_appears_later_is_checked_once_handed_over(fake_node: FakeNode) -> None:
    # The kernel driver loaded after the agent started: neuron11 comes with rediscovery.
    root = fake_node("inf2.48xlarge")
    aside = root.parent / "aside"
    aside.mkdir()
    shutil.move(root / "sys/devices/virtual/neuron_device/neuron11", aside / "sys")
    shutil.move(root / "dev/neuron11", aside / "dev")
    health = HealthMonitor(root, range(11), clock=Clock())
    assert health.poll() == []
    shutil.move(aside / "sys", root / "sys/devices/virtual/neuron_device/neuron11")
    shutil.move(aside / "dev", root / "dev/neuron11")
    ecc(root, 11, 2)  # errors from before it was handed over are history
    health.follow(range(12))
    assert health.poll() == []
    ecc(root, 11, 3)
    [change] = health.poll()
    assert change.device == 11 and change.problem is not None
    assert change.problem.kind == Kind.MEM_ECC_UNCORRECTED
    assert change.problem.detail == "mem_ecc_uncorrected 2 -> 3"


def test_a_device_left_out_of_a_hand_over_is_still_watched(fake_node: FakeNode) -> None:
    # Rediscovery drops a vanished device: it stays out of service until it is back.
    root = fake_node("inf2.48xlarge")
    health = HealthMonitor(root, range(12), clock=Clock())
    (root / "dev/neuron7").unlink()
    health.follow(d for d in range(12) if d != 7)
    [change] = health.poll()
    assert change.device == 7 and change.problem and change.problem.kind == Kind.DEVICE_MISSING
    write(root, "dev/neuron7", "")
    health.follow(range(12))
    assert health.poll() == [Change(7, None)]
