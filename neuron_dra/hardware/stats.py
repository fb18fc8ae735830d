"""Per-device statistics the Neuron driver writes under each device's sysfs directory.

Formats as the driver's `neuron_sysfs_metrics.c` and `neuron_power.c` write them:

- `stats/power/utilization`: one line `<status>,<seconds>,<min>,<max>,<avg>`, the
  status one of POWER_STATUS_VALID, POWER_STATUS_NO_DATA, POWER_STATUS_INVALID, the
  three figures percentages of the device's maximum power with two decimals
  (basis points printed as `%u.%02u`) over the driver's last sampling period. It is
  power, not compute utilization, whatever the file is called.
- `neuron_coreK/stats/status/<outcome>/{total,present}`: execution counters, `%llu`;
  `total` counts since the driver loaded (up to 2.29 it grows when a runtime process
  ends, from 2.30 live).
- `neuron_coreK/stats/memory_usage/device_mem/{total,present,peak}`: bytes of device
  memory allocated to the core, `%llu`: `total` is what is allocated now (`present`
  is only the size of the last change).
- `stats/hardware/<counter>`: ECC error counters, `%u`; absent on Inferentia (v1)
  devices, which report none in sysfs.

A file the driver does not write (an older driver, a counter of another generation)
is simply absent from the result; one that cannot be parsed is reported by path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from neuron_dra.hardware.counterfiles import DEVICE_MEMORY_DIR, STATUS_DIR
from neuron_dra.hardware.discovery import DEVICES_DIR
from neuron_dra.hardware.driverformats import HEALTH_STATUS_DIR
from neuron_dra.hardware.sysfsfile import ascii_int, read_if_present, reason

POWER_FILE = "stats/power/utilization"
HEARTBEAT_FILE = f"{HEALTH_STATUS_DIR}/healthcheck_heartbeat"
HARDWARE_DIR = "stats/hardware"
# Outcomes exported as execution counters: the ones an operator tells a job's health
# by. The driver writes some twenty more (`execute_sw_*`, `oob_error`, ...); they stay
# in sysfs, keeping each device at a handful of series.
EXECUTION_OUTCOMES = ("success", "failure", "timeout", "exec_bad_input", "hw_error")
# ECC counter file -> (memory, kind) labels.
# Written 0644: a root write zeroes them, so they are counters that may reset.
ECC_COUNTERS: Mapping[str, tuple[str, str]] = {
    "mem_ecc_uncorrected": ("hbm", "uncorrected"),
    "mem_ecc_repairable_uncorrected": ("hbm", "repairable_uncorrected"),
    "mem_ecc_corrected": ("hbm", "corrected"),
    "sram_ecc_uncorrected": ("sram", "uncorrected"),
    "sram_ecc_corrected": ("sram", "corrected"),
}
POWER_VALID = "POWER_STATUS_VALID"
T = TypeVar("T")


@dataclass(frozen=True)
class Power:
    status: str
    sampled_at: int  # seconds since the epoch, as the driver's clock had it
    min_ratio: float
    max_ratio: float
    avg_ratio: float

    @property
    def valid(self) -> bool:
        return self.status == POWER_VALID


@dataclass(frozen=True)
class DeviceStats:
    index: int
    power: Power | None = None
    memory_used_bytes: int | None = None  # None: no core reports it
    executions: Mapping[str, int] = field(default_factory=dict)  # outcome -> total
    ecc: Mapping[str, int] = field(default_factory=dict)  # counter file name -> value
    heartbeat: int | None = None  # health_status/healthcheck_heartbeat (2.30+)
    problems: tuple[str, ...] = ()  # "<path>: <what is wrong>"


def parse_power(text: str) -> Power:
    """Raises ValueError for anything but the driver's five comma-separated fields."""
    fields = text.strip().split(",")
    if len(fields) != 5:
        raise ValueError(f"{len(fields)} comma-separated fields, not 5")
    status, seconds, *figures = fields
    if not status.startswith("POWER_STATUS_"):
        raise ValueError(f"unknown status {status[:40]!r}")
    ratios = [_percent(f) / 100 for f in figures]
    return Power(status, ascii_int(seconds, signed=True), *ratios)


def _percent(text: str) -> float:
    whole, dot, hundredths = text.partition(".")
    if not dot or len(hundredths) != 2:
        raise ValueError(f"{text[:20]!r} is not a percentage with two decimals")
    return ascii_int(whole) + ascii_int(hundredths) / 100


def read_device_stats(root: Path, index: int, cores: int | None) -> DeviceStats:
    """What device `index` reports now, under the sysfs root `root`; `cores` its
    physical NeuronCores (None: the directories present)."""
    base = root / DEVICES_DIR / f"neuron{index}"
    problems: list[str] = []

    def parsed(path: Path, parse: Callable[[str], T]) -> T | None:
        try:
            text = read_if_present(path)
            return None if text is None else parse(text)
        except (OSError, ValueError) as err:
            problems.append(f"/{path.relative_to(root)}: {reason(err)}")
            return None

    power = parsed(base / POWER_FILE, parse_power)
    core_dirs = (
        [base / f"neuron_core{k}" for k in range(cores)]
        if cores is not None
        else sorted(base.glob("neuron_core[0-9]*"))
    )
    memory: int | None = None
    executions: dict[str, int] = {}
    for core in core_dirs:
        used = parsed(core / DEVICE_MEMORY_DIR / "total", ascii_int)
        if used is not None:
            memory = (memory or 0) + used
        for outcome in EXECUTION_OUTCOMES:
            total = parsed(core / STATUS_DIR / outcome / "total", ascii_int)
            if total is not None:
                executions[outcome] = executions.get(outcome, 0) + total
    ecc = {}
    for name in ECC_COUNTERS:
        value = parsed(base / HARDWARE_DIR / name, ascii_int)
        if value is not None:
            ecc[name] = value
    heartbeat = None
    # Absent before 2.30; `device_unreachable` there is the health monitor's to report.
    with contextlib.suppress(OSError, ValueError):
        text = read_if_present(base / HEARTBEAT_FILE)
        heartbeat = None if text is None else ascii_int(text)
    return DeviceStats(index, power, memory, executions, ecc, heartbeat, tuple(problems))
