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
The ioctl marks nothing: it is served on any open /dev/neuronN (write-only opens
included) with no capability check, prints the caller's string alone (a bare
`printk`, which `pr_fmt` does not prefix), and ignores the struct's `action` field;
nor does the record say which device's node the caller opened. So a record counts
only for the one device it names (`device_named`), and one naming no device, or
several, counts for none: a holder can still name any device of the node, one
record each.
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


def device_named(
    error: HardwareError, devices: Sequence[int], serials: Mapping[int, str]
) -> int | None:
    """The one device of `devices` an error names: by serial number (`serials`, from
    `serial_numbers`), else by index (`nd-id=`), else as its only `neuronN`. None when
    it names no device, several as `neuronN`, or only a device not here: any process
    that can open a /dev/neuronN can have the driver print such a record, so a record
    counts for the device it names or for none, never for every device."""
    if error.serial is not None:
        by_serial = [d for d in devices if serials.get(d) == error.serial]
        if len(by_serial) == 1:
            return by_serial[0]
    if error.index is not None and error.index in devices:
        return error.index
    if len(error.devices) == 1 and (device := next(iter(error.devices))) in devices:
        return device
    return None
