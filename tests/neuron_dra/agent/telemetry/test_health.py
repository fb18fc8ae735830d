from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from neuron_dra.agent.telemetry.health import Change, HealthMonitor, Kind, Source, components_kind
from neuron_dra.hardware.driverformats import COMPONENTS
from tests.sysfs_tree import FakeNode, write


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ecc(root: Path, device: int, value: int, counter: str = "mem_ecc_uncorrected") -> None:
    write(
        root,
        f"sys/devices/virtual/neuron_device/neuron{device}/stats/hardware/{counter}",
        f"{value}\n",
    )


def monitor(
    root: Path, clock: Clock, recovery: float = 0.0, serials: dict[int, str | None] | None = None
) -> HealthMonitor:
    """A monitor of 16 devices and their serial numbers (as discovery read them)."""
    kmsg = root / "dev/kmsg"
    kmsg.touch()
    if serials is None:
        serials = {d: serial(root, d) for d in range(16)}
    return HealthMonitor(
        root, range(16), kmsg=kmsg, recovery_s=recovery, clock=clock, serials=serials
    )


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
        Kind.MEM_ECC_UNCORRECTED,
        "mem_ecc_uncorrected 3 -> 4",
    )
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


def serial(root: Path, device: int) -> str:
    path = root / f"sys/devices/virtual/neuron_device/neuron{device}/info/serial_number"
    return path.read_text().strip()


def hw_error(kind: str, serial: str = "", pri: int = 3, nd_id: int | None = 0) -> str:
    """A /dev/kmsg record as the Neuron runtime writes it through the driver (KERN_ERR)."""
    index = f" nd-id={nd_id} nc-id=0" if nd_id is not None else ""
    fields = f" serial-num={serial}" if serial else ""
    return (
        f"{pri},1234,5678,-;NEURON_HW_ERR={kind} instance-id=i-0592464924bd45322 "
        f"hostname=ip-172-31-61-252{index}{fields} action=TERMINATE_INSTANCE\n"
    )


def test_kernel_error_lines(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    clock = Clock()
    health = monitor(root, clock, recovery=30)
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write(hw_error("HBM_UNCORRECTABLE_ERROR", serial(root, 3)))
        kmsg.write("6,1235,5679,-;unrelated line\n")
    [change] = health.poll()
    assert change.device == 3 and change.problem is not None
    assert change.problem.kind == "HBM_UNCORRECTABLE_ERROR"
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write("3,1236,5680,-;NEURON_HW_ERR=DMA_ERROR neuron7\n")  # named the old way
    assert [(c.device, c.problem and c.problem.kind) for c in health.poll()] == [(7, "DMA_ERROR")]
    clock.now += 30
    assert len(health.poll()) == 2 and health.problems == {}


def test_a_record_counts_for_the_one_device_it_names_or_for_none(
    fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """Any process that can open a /dev/neuronN can have the driver print a record of
    the runtime's shape (NEURON_IOCTL_PRINTK): one naming no device, or several, must
    not take every device of the node out of service."""
    root = fake_node("trn2.48xlarge")
    health = monitor(root, Clock())
    every = " ".join(f"neuron{d}" for d in range(16))
    with caplog.at_level(logging.WARNING), (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write(hw_error("DMA_ERROR", nd_id=None))  # names no device
        kmsg.write("3,1237,5681,-;NEURON_HW_ERR=DMA_ERROR\n")
        kmsg.write(f"3,1238,5682,-;NEURON_HW_ERR=DMA_ERROR {every}\n")  # names them all
        kmsg.flush()
        assert health.poll() == [] and health.problems == {}
    messages = [r.getMessage() for r in caplog.records]
    assert sum("names no single device of this node" in m for m in messages) == 1
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write(hw_error("DMA_ERROR", serial(root, 6), nd_id=None))
    assert [c.device for c in health.poll()] == [6] and set(health.problems) == {6}


def test_a_runtime_error_names_its_device_by_index_when_its_serial_is_not_known(
    fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """inf1 has no serial numbers, and a serial file can be unreadable: the record's
    nd-id (the runtime's device index, the driver's neuronN) names the device then.
    A serial number no device has, with no index here, takes no device out."""
    root = fake_node("trn2.48xlarge")
    health = monitor(root, Clock(), serials={d: None for d in range(16)})
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write(hw_error("DMA_ERROR", "19fcda00f5ff6eb9", nd_id=9))
    assert [(c.device, c.problem and c.problem.kind) for c in health.poll()] == [(9, "DMA_ERROR")]
    with caplog.at_level(logging.WARNING), (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write(hw_error("HBM_UNCORRECTABLE_ERROR", "19fcda00f5ff6eb9", nd_id=None))
        kmsg.write(hw_error("HBM_UNCORRECTABLE_ERROR", "19fcda00f5ff6eb9", nd_id=40))
        kmsg.flush()
        assert health.poll() == [] and set(health.problems) == {9}
    assert sum("names no device of this node" in r.getMessage() for r in caplog.records) == 2


def test_a_serial_number_wins_over_the_index(fake_node: FakeNode) -> None:
    """...the serial number discovery read: the file is not read again."""
    root = fake_node("trn2.48xlarge")
    health = monitor(root, Clock())
    known = serial(root, 4)
    (root / "sys/devices/virtual/neuron_device/neuron4/info/serial_number").unlink()
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.write(hw_error("DMA_ERROR", known, nd_id=2))
    assert [c.device for c in health.poll()] == [4]


def test_kernel_lines_a_process_can_write_take_no_device_out(
    fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    # An unprivileged process named `NEURON_HW_ERR=x` that segfaults or runs out of
    # memory gets its name into kernel records; a process that may write /dev/kmsg
    # gets LOG_USER records; a syslog file's `kernel:` is anyone's to write.
    root = fake_node("trn2.48xlarge")
    health = monitor(root, Clock())
    spoofs = [
        "6,1240,5700,-;NEURON_HW_ERR=x[1234]: segfault at 0 ip 0000561f2a3b4c5d sp "
        "00007ffd1e2f3a40 error 4 in x[561f2a3b4000+1000] likely on CPU 3 (core 3, socket 0)\n",
        "4,1241,5701,-;NEURON_HW_ERR=x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), "
        "order=0, oom_score_adj=0\n",
        hw_error("SRAM_UNCORRECTABLE_ERROR", serial(root, 5), pri=11),  # written as <3>
        "12,1242,5702,-;neuron: neuron3: NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR\n",
        "3,1243,5703,-;neuron:ncdev_ioctl: pid 7 NEURON_HW_ERR=DMA_ERROR\n",  # not at start
        "Nov 28 00:00:00 ip-10-0-1-7 kernel: NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR\n",
    ]
    with (root / "dev/kmsg").open("a") as kmsg:
        kmsg.writelines(spoofs)
    with caplog.at_level(logging.WARNING):
        assert health.poll() == [] and health.problems == {}
        with (root / "dev/kmsg").open("a") as kmsg:
            kmsg.write("not a record either\n")
        assert health.poll() == []
    assert sum("not /dev/kmsg records" in r.getMessage() for r in caplog.records) == 1


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


HEALTH_STATUS = "sys/devices/virtual/neuron_device/neuron{}/stats/hardware/health_status/{}"


def status(root: Path, device: int, name: str, text: str) -> None:
    write(root, HEALTH_STATUS.format(device, name), text)


def test_ecc_counters_are_the_source_before_driver_2_28(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.26.5.0")
    health = monitor(root, Clock())
    assert health.poll() == []
    assert set(health.sources.values()) == {Source.ECC}
    ecc(root, 4, 1, "mem_ecc_repairable_uncorrected")
    [change] = health.poll()
    assert change.device == 4 and change.problem is not None
    assert change.problem.kind == Kind.MEM_ECC_REPAIRABLE
    assert change.problem.detail == "mem_ecc_repairable_uncorrected 0 -> 1"


def test_health_status_counts_of_driver_2_28(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.28.0.0")
    health = monitor(root, Clock())
    assert health.poll() == [] and set(health.sources.values()) == {Source.HEALTH_COUNTS}
    status(root, 2, "hbm_ecc_err_count", "1\n")
    status(root, 9, "hw_error_event", "3\n")
    ecc(root, 11, 5)  # the counts are read instead: the ECC files are not the source
    found = {c.device: c.problem and (c.problem.kind, c.problem.detail) for c in health.poll()}
    assert found == {
        2: (Kind.MEM_ECC_UNCORRECTED, "hbm_ecc_err_count 0 -> 1"),
        9: (Kind.HARDWARE_ERROR_EVENT, "hw_error_event 0 -> 3"),
    }


def test_unhealthy_components_name_the_subsystem_and_clear_with_it(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0")
    health = monitor(root, Clock())  # no recovery period: the state itself clears
    assert health.poll() == [] and set(health.sources.values()) == {Source.HEALTH_STATUS}
    status(root, 6, "unhealthy_components", "hbm,link_efa\n")
    [change] = health.poll()
    assert change.device == 6 and change.problem is not None
    assert change.problem.kind == "Hbm.LinkEfa"  # the taint's value
    assert change.problem.detail == "unhealthy components: hbm, link_efa"
    assert health.poll() == []
    status(root, 6, "unhealthy_components", "\n")
    assert health.poll() == [Change(6, None)]


def test_an_unreachable_device_is_out_until_it_answers(fake_node: FakeNode) -> None:
    root = fake_node("trn3.48xlarge", driver_version="2.30.2.0")
    health = monitor(root, Clock())
    status(root, 0, "unhealthy_components", "device_unreachable\n")
    [change] = health.poll()
    assert change.problem is not None and change.problem.kind == Kind.DEVICE_UNREACHABLE
    status(root, 0, "unhealthy_components", "\n")
    assert health.poll() == [Change(0, None)]


def test_a_still_heartbeat_is_a_problem_only_when_asked(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0")
    clock = Clock()
    quiet = HealthMonitor(root, range(16), clock=clock)
    watching = HealthMonitor(root, range(16), heartbeat_timeout_s=60, clock=clock)
    assert quiet.poll() == [] and watching.poll() == []
    for device in range(1, 16):
        status(root, device, "healthcheck_heartbeat", "2\n")
    clock.now += 60
    assert quiet.poll() == []
    [change] = watching.poll()
    assert change.device == 0 and change.problem is not None
    assert change.problem.kind == Kind.HEARTBEAT_STALLED
    assert change.problem.since == 1000.0  # when it last moved
    status(root, 0, "healthcheck_heartbeat", "2\n")
    assert watching.poll() == [Change(0, None)]


def test_inferentia_has_no_health_source_and_says_so_once(
    fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    root = fake_node("inf1.6xlarge")
    health = HealthMonitor(root, range(4), clock=Clock())
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert health.poll() == []
    assert health.unwatched == frozenset(range(4))
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith("no health source for neuron0, neuron1, neuron2, neuron3:")


def test_a_moved_ecc_counter_leaves_its_device_unwatched(fake_node: FakeNode) -> None:
    root = fake_node("trn1.32xlarge")
    shutil.rmtree(root / "sys/devices/virtual/neuron_device/neuron3/stats/hardware")
    health = monitor(root, Clock())
    assert health.poll() == []
    assert health.unwatched == {3}


@pytest.mark.parametrize(
    ("components", "kind"),
    [
        (["sram"], "Sram"),
        (["firmware_service_api", "link_intraserver"], "FirmwareServiceApi.LinkIntraserver"),
        (list(COMPONENTS), "Hbm.FirmwareServiceApi.FirmwareServiceProcessor.Sram"),
        ([], "UnhealthyComponents"),
    ],
)
def test_the_subsystems_fit_a_taint_value(components: list[str], kind: str) -> None:
    assert components_kind(components) == kind
    assert len(kind) <= 63
