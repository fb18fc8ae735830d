from __future__ import annotations

import pytest

from neuron_dra.agent.telemetry.kernellog import (
    HardwareError,
    Record,
    device_named,
    hardware_error,
    record,
    scan,
)

GENUINE = (
    "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322 "
    "hostname=ip-172-31-61-252 nd-id=0 nc-id=0 serial-num=19FCDA00F5FF6EB9 "
    "action=TERMINATE_INSTANCE"
)


def test_a_record_header_gives_facility_and_level() -> None:
    assert record(f"3,812,9912,-;{GENUINE}") == Record(0, 3, GENUINE)
    assert record("14,1,2,c,caller=T42;hello") == Record(1, 6, "hello")  # later fields
    assert record(f"<3>{GENUINE}") is None and record(GENUINE) is None


def test_the_runtimes_line_is_an_error_of_the_device_it_names() -> None:
    assert hardware_error(Record(0, 3, GENUINE)) == HardwareError(
        "SRAM_UNCORRECTABLE_ERROR", GENUINE[-200:], frozenset(), "19fcda00f5ff6eb9", 0
    )
    dated = hardware_error(Record(0, 3, "2026-11-28T00:01:02.345Z NEURON_HW_ERR=DMA_ERROR"))
    assert dated is not None and (dated.kind, dated.serial, dated.index) == (
        "DMA_ERROR",
        None,
        None,
    )
    named = hardware_error(Record(0, 3, "NEURON_HW_ERR=NC_UNCORRECTABLE_ERROR neuron12"))
    assert named is not None and named.devices == {12}


@pytest.mark.parametrize(
    "text",
    [
        "NEURON_HW_ERR=x[1234]: segfault at 0 ip 0000561f2a3b4c5d sp 00007ffd1e2f3a40 error 4",
        "NEURON_HW_ERR=x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0",
        "NEURON_HW_ERR=y",  # the longest a process name can carry after the marker
        "neuron:ncdev_printk: NEURON_HW_ERR=DMA_ERROR",  # not at the start
        "NEURON_HW_ERR=dma_error",  # the runtime's kinds are upper case
        "NEURON_HW_ERR=DMA_ERROR[7]",
    ],
)
def test_kernel_lines_not_of_the_runtimes_shape_do_not_count(text: str) -> None:
    assert hardware_error(Record(0, 3, text)) is None


def test_only_the_kernels_records_count() -> None:
    for facility in (1, 3, 23):  # user, daemon, local7: what a process writes to /dev/kmsg
        assert hardware_error(Record(facility, 3, GENUINE)) is None


def test_a_scan_skips_continuations_and_counts_lines_that_are_not_records() -> None:
    text = (
        f"3,1,10,-;{GENUINE}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:10:1b.0\n"
        f"11,2,11,-;{GENUINE}\nNov 28 00:00:00 node kernel: {GENUINE}\n\n"
    )
    result = scan(text)
    assert [e.kind for e in result.errors] == ["SRAM_UNCORRECTABLE_ERROR"]
    assert result.not_records == 1


def test_a_record_counts_for_one_named_device_or_none() -> None:
    def named(text: str) -> int | None:
        error = hardware_error(Record(0, 3, text))
        assert error is not None
        return device_named(error, range(16), {5: "19fcda00f5ff6eb9"})

    assert named(GENUINE) == 5  # the serial number wins over nd-id=0
    assert named(GENUINE.replace("19FC", "29FC").replace("nd-id=0", "nd-id=9")) == 9
    assert named(GENUINE.replace("19FC", "29FC").replace(" nd-id=0", "")) is None
    assert named("NEURON_HW_ERR=DMA_ERROR neuron3") == 3
    assert named("NEURON_HW_ERR=DMA_ERROR") is None
    assert named("NEURON_HW_ERR=DMA_ERROR neuron3 neuron4") is None
    assert named("NEURON_HW_ERR=DMA_ERROR neuron40") is None
