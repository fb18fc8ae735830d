"""Informational notices, as the health poll finds them on fake nodes."""

from __future__ import annotations

from pathlib import Path

from consts import TAINT_CORRECTED_ECC, TAINT_HEARTBEAT_SLOW, TAINT_UNWATCHED
from neuron_dra.agent.telemetry.health import HealthMonitor
from neuron_dra.resources.taints import Notice
from tests.neuron_dra.agent.telemetry.test_health import Clock, status
from tests.sysfs_tree import FakeNode, write


def corrected(root: Path, device: int, memory: str, value: int) -> None:
    write(
        root,
        f"sys/devices/virtual/neuron_device/neuron{device}/stats/hardware/{memory}_ecc_corrected",
        f"{value}\n",
    )


def test_an_unwatched_device_is_noticed_from_the_first_poll_until_watched(
    fake_node: FakeNode,
) -> None:
    root = fake_node("inf1.6xlarge")
    clock = Clock()
    health = HealthMonitor(root, range(4), clock=clock)
    assert health.notices.all() == ()
    health.poll()
    clock.now += 30
    health.poll()
    assert health.notices.all() == tuple(
        Notice(d, TAINT_UNWATCHED, "NoHealthSource", 1000.0) for d in range(4)
    )
    assert health.problems == {}  # in service all the same
    corrected_path = "sys/devices/virtual/neuron_device/neuron2/stats/hardware"
    write(root, f"{corrected_path}/mem_ecc_uncorrected", "0\n")  # a source appears
    health.poll()
    assert [n.device for n in health.notices.all()] == [0, 1, 3]


def test_rising_corrected_ecc_is_noticed_dated_and_forgiven_with_time(
    fake_node: FakeNode,
) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0")
    corrected(root, 5, "mem", 7)  # errors before start are the baseline
    clock = Clock()
    health = HealthMonitor(root, range(16), recovery_s=100, clock=clock)
    health.poll()
    assert health.notices.all() == ()
    corrected(root, 5, "mem", 9)
    clock.now = 1010.0
    health.poll()
    assert health.notices.all() == (Notice(5, TAINT_CORRECTED_ECC, "Hbm", 1010.0),)
    corrected(root, 5, "mem", 12)  # still rising: the same notice, as dated
    clock.now = 1050.0
    health.poll()
    assert health.notices.all() == (Notice(5, TAINT_CORRECTED_ECC, "Hbm", 1010.0),)
    assert health.problems == {}  # corrected errors keep the device in service
    corrected(root, 5, "sram", 1)  # a second memory: a new notice, dated now
    clock.now = 1060.0
    health.poll()
    assert health.notices.all() == (Notice(5, TAINT_CORRECTED_ECC, "Hbm.Sram", 1060.0),)
    clock.now = 1159.0
    health.poll()
    assert len(health.notices.all()) == 1  # only time clears it
    clock.now = 1160.0
    health.poll()
    assert health.notices.all() == ()  # forgiven: later errors only count
    corrected(root, 5, "sram", 2)
    health.poll()
    assert health.notices.all() == (Notice(5, TAINT_CORRECTED_ECC, "Sram", 1160.0),)


def test_without_recovery_a_corrected_ecc_notice_stays(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0")
    clock = Clock()
    health = HealthMonitor(root, range(16), clock=clock)
    corrected(root, 0, "mem", 1)
    health.poll()
    clock.now += 10**6
    health.poll()
    assert [n.key for n in health.notices.all()] == [TAINT_CORRECTED_ECC]


def test_a_heartbeat_still_for_half_the_timeout_is_slow_before_it_stalls(
    fake_node: FakeNode,
) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0")
    clock = Clock()
    health = HealthMonitor(root, range(16), heartbeat_timeout_s=60, clock=clock)
    health.poll()
    for device in range(1, 16):
        status(root, device, "healthcheck_heartbeat", "2\n")
    clock.now += 29
    assert health.poll() == [] and health.notices.all() == ()
    clock.now += 1
    assert health.poll() == []  # not out of service yet
    assert health.notices.all() == (Notice(0, TAINT_HEARTBEAT_SLOW, "HeartbeatSlow", 1000.0),)
    for device in range(1, 16):
        status(root, device, "healthcheck_heartbeat", "3\n")
    clock.now += 30
    assert [c.device for c in health.poll()] == [0]  # stalled: out of service too
    assert [n.key for n in health.notices.all()] == [TAINT_HEARTBEAT_SLOW]
    status(root, 0, "healthcheck_heartbeat", "3\n")
    health.poll()
    assert health.notices.all() == ()


def test_no_timeout_no_heartbeat_notice(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0")
    clock = Clock()
    health = HealthMonitor(root, range(16), clock=clock)
    health.poll()
    clock.now += 10**6
    health.poll()
    assert health.notices.all() == ()


def test_a_device_handed_over_later_has_its_corrected_count_as_baseline(
    fake_node: FakeNode,
) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0")
    corrected(root, 15, "mem", 4)
    health = HealthMonitor(root, range(15), clock=Clock())
    health.follow([15])
    health.poll()
    assert health.notices.all() == ()
    corrected(root, 15, "mem", 5)
    health.poll()
    assert [(n.device, n.value) for n in health.notices.all()] == [(15, "Hbm")]
