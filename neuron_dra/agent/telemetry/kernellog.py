"""Which kernel log records report a Neuron hardware error: the kernel's own, in the
shape the Neuron runtime writes them, not what any process can put in the log.

The Neuron runtime reports a hardware error through the Neuron driver
(`NEURON_IOCTL_PRINTK`, `ncdev_printk` in `neuron_cdev.c`), which prints the
runtime's text as it is (`printk(KERN_ERR "%s\\n", str)`), without the
`neuron:<function>:` prefix of the driver's own messages (`pr_fmt`), as the Neuron
documentation shows it:

    NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322
    hostname=ip-172-31-61-252 nd-id=0 nc-id=0 serial-num=19fcda00f5ff6eb9
    action=TERMINATE_INSTANCE  (one line)

A record counts only when both hold:
- origin: `/dev/kmsg` shows each record as `PRI,SEQ,TS,FLAGS[,...];text`, the
  facility being PRI >> 3. The kernel's messages have facility 0 (LOG_KERN); what a
  process writes into `/dev/kmsg` gets LOG_USER, or the facility it names, never 0
  (`devkmsg_write`). A line without that header (a syslog file, where anyone can
  write `kernel:`) does not count.
- shape: the text begins with the marker, after an optional ISO-8601 time, and the
  kind is an upper-case word of at least two characters followed by a space or the
  end. Kernel messages that begin with a process name (`<comm>[<pid>]: segfault at
  ...`, `<comm> invoked oom-killer: ...`) cannot match: a process name holds at most
  15 characters, one after `NEURON_HW_ERR=`.

What no rule here can tell apart: a process that holds a Neuron device may call the
same ioctl with any text; such a record is the kernel's and has the runtime's shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LOG_KERN = 0
MAX_DETAIL = 200  # characters of the message kept as the problem's detail

# PRI,SEQ,TS,FLAGS, possibly more comma-separated fields later kernels add, then ';'.
_RECORD = re.compile(r"(\d{1,4}),(\d{1,20}),(\d{1,20}),[^;,]*(?:,[^;]*)?;(.*)")
_HW_ERROR = re.compile(
    r"(?:\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:?\d\d)? )?"
    r"NEURON_HW_ERR=([A-Z][A-Z0-9_]{1,62})(?: |$)"
)
_DEVICE = re.compile(r"\bneuron(\d{1,4})\b")
_SERIAL = re.compile(r" serial-num=([0-9a-fA-F]{1,32})(?: |$)")
_INDEX = re.compile(r" nd-id=(\d{1,4})(?: |$)")


@dataclass(frozen=True)
class Record:
    """One `/dev/kmsg` record: its syslog facility and level, and its message."""

    facility: int
    level: int
    text: str


@dataclass(frozen=True)
class HardwareError:
    kind: str  # as the runtime spelled it: SRAM_UNCORRECTABLE_ERROR, ...
    detail: str  # the message, cut to MAX_DETAIL characters from its end
    devices: frozenset[int]  # the devices the message names as `neuronN`
    serial: str | None  # the device's serial number (`serial-num=`), lower case
    # `nd-id=`: the device's index as the runtime numbers them, which is the driver's
    # neuronN: the container sees the host's /dev/neuronN, CDI passes them unchanged.
    index: int | None = None

    @property
    def names_a_device(self) -> bool:
        return self.serial is not None or self.index is not None or bool(self.devices)


@dataclass(frozen=True)
class Scan:
    errors: tuple[HardwareError, ...]
    not_records: int  # lines that are not /dev/kmsg records (no header), not counted


def record(line: str) -> Record | None:
    """The record a `/dev/kmsg` line holds; None when the line has no record header."""
    match = _RECORD.fullmatch(line)
    if match is None:
        return None
    pri = int(match.group(1))
    return Record(facility=pri >> 3, level=pri & 7, text=match.group(4))


def hardware_error(rec: Record) -> HardwareError | None:
    """The hardware error the record reports; None unless it is the kernel's and
    begins with the runtime's `NEURON_HW_ERR=<KIND>`."""
    if rec.facility != LOG_KERN:
        return None
    match = _HW_ERROR.match(rec.text)
    if match is None:
        return None
    serial = _SERIAL.search(rec.text)
    index = _INDEX.search(rec.text)
    return HardwareError(
        kind=match.group(1),
        detail=rec.text.strip()[-MAX_DETAIL:],
        devices=frozenset(int(n) for n in _DEVICE.findall(rec.text)),
        serial=serial.group(1).lower() if serial else None,
        index=int(index.group(1)) if index else None,
    )


def scan(text: str) -> Scan:
    """The hardware errors among records read from `/dev/kmsg`, one per line;
    continuation lines (a record's dictionary, indented) belong to their record."""
    errors: list[HardwareError] = []
    not_records = 0
    for line in text.splitlines():
        if not line or line[0].isspace():
            continue
        rec = record(line)
        if rec is None:
            not_records += 1
        elif (error := hardware_error(rec)) is not None:
            errors.append(error)
    return Scan(tuple(errors), not_records)


def serial_numbers(serials: Mapping[int, str | None]) -> dict[int, str]:
    """Devices' serial numbers (as sysfs gives them) as records write them: hex, lower
    case, no 0x; devices without one left out."""
    return {d: s.lower().removeprefix("0x") for d, s in serials.items() if s}


def devices_named(
    error: HardwareError, devices: Sequence[int], serials: Mapping[int, str]
) -> Sequence[int] | None:
    """The devices of `devices` an error names: by serial number (`serials`, from
    `serial_numbers`), else by index (`nd-id=`), else as neuronN; a record that names
    none, every device; None when it names only devices not here."""
    if error.serial is not None:
        by_serial = [d for d in devices if serials.get(d) == error.serial]
        if by_serial:
            return by_serial
    if error.index is not None and error.index in devices:
        return [error.index]
    if error.devices:
        return [d for d in devices if d in error.devices] or None
    return None if error.names_a_device else devices
