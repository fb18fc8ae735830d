"""Device health: one bad Neuron device is taken out of service, the rest keep working.

Sources, all read under the injectable sysfs root and kernel log path:
- the uncorrectable ECC counters under each device's stats/hardware/: any
  increase over the value seen at start marks the device unhealthy;
- the device's sysfs directory or /dev node vanishing;
- kernel log lines carrying NEURON_HW_ERR=<kind> (read from /dev/kmsg or any
  file with the same lines); a line naming neuronN affects that device, a line
  naming none affects every device.
A device returns to service when its cause goes away (the directory or node
comes back, the counters reset with a driver reload) or, for errors that leave
no trace to re-check, after the configured recovery period.

The devices watched follow the inventory: `follow` hands over what rediscovery
found, so a device that appears after start (the kernel driver loaded late) is
checked from then on, its counters at hand-over being its baseline. A device is
never dropped: one that rediscovery no longer finds stays missing, out of
service, until it is back.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from neuron_dra.hardware.discovery import DEV_DIR, DEVICES_DIR
from neuron_dra.hardware.sysfsfile import ascii_int, read_text

log = logging.getLogger(__name__)

UNCORRECTABLE_COUNTERS = ("mem_ecc_uncorrected", "sram_ecc_uncorrected")
_HW_ERR_RE = re.compile(r"NEURON_HW_ERR=([A-Za-z0-9_.-]{1,63})")
_DEVICE_RE = re.compile(r"\bneuron(\d{1,4})\b")


class Kind(StrEnum):
    MEM_ECC_UNCORRECTED = "MemEccUncorrected"
    SRAM_ECC_UNCORRECTED = "SramEccUncorrected"
    DEVICE_MISSING = "DeviceMissing"


@dataclass(frozen=True)
class Problem:
    kind: str  # a Kind, or the NEURON_HW_ERR kind as the kernel spelled it
    detail: str
    since: float
    recoverable_by_time: bool = True  # no state to re-check: only time clears it


@dataclass(frozen=True)
class Change:
    device: int
    problem: Problem | None  # None: back in service


class HealthMonitor:
    def __init__(
        self,
        root: Path,
        devices: Iterable[int],
        *,
        kmsg: Path | None = None,
        recovery_s: float = 0.0,  # 0: time never clears a problem
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._root = root
        self._kmsg = kmsg
        self._recovery_s = recovery_s
        self._clock = clock
        self._devices = sorted(set(devices))
        self.problems: dict[int, Problem] = {}
        self._failing_sources: set[str] = set()
        self._baseline = {d: self._counters(d) for d in self._devices}
        self._kmsg_fd: int | None = None
        # `poll` runs in a worker thread while `follow` may come from another one.
        self._lock = threading.Lock()
        self._open_kmsg()

    def follow(self, devices: Iterable[int]) -> None:
        """Watch these devices too, from now on; devices already watched stay watched.

        Reads the new devices' counters, so call it off the event loop.
        """
        with self._lock:
            new = set(devices).difference(self._devices)
            for device in new:
                self._baseline[device] = self._counters(device)
            self._devices = sorted(new.union(self._devices))

    def poll(self) -> list[Change]:
        """Read every source once; return what changed."""
        with self._lock:
            return self._poll()

    def _poll(self) -> list[Change]:
        now = self._clock()
        expired = {
            device
            for device, problem in self.problems.items()
            if problem.recoverable_by_time
            and self._recovery_s > 0
            and now - problem.since >= self._recovery_s
        }
        for device in expired:
            # Forgiven: only errors after this moment count against the device.
            self._baseline[device] = self._counters(device)
        found: dict[int, Problem] = {}
        for device in self._devices:
            problem = self._check_device(device, now)
            if problem is not None:
                found[device] = problem
        for device, problem in self._kernel_errors(now):
            found.setdefault(device, problem)
        changes: list[Change] = []
        # Built aside and swapped in whole: the event loop reads it while this runs.
        problems = dict(self.problems)
        for device in self._devices:
            old, new = problems.get(device), found.get(device)
            if new is None and old is not None and old.recoverable_by_time:
                new = None if device in expired else old
            if (old is None) != (new is None) or (old and new and old.kind != new.kind):
                changes.append(Change(device, new))
            if new is None:
                problems.pop(device, None)
            elif old is None or old.kind != new.kind:
                problems[device] = new
        self.problems = problems
        return changes

    def _check_device(self, device: int, now: float) -> Problem | None:
        base = self._root / DEVICES_DIR / f"neuron{device}"
        if not base.is_dir() or not (self._root / DEV_DIR / f"neuron{device}").exists():
            return Problem(
                Kind.DEVICE_MISSING, f"neuron{device} vanished", now, recoverable_by_time=False
            )
        counters = self._counters(device)
        baseline = self._baseline[device]
        for name, kind in zip(
            UNCORRECTABLE_COUNTERS,
            (Kind.MEM_ECC_UNCORRECTED, Kind.SRAM_ECC_UNCORRECTED),
            strict=True,
        ):
            value, start = counters.get(name), baseline.get(name)
            if value is not None and start is not None and value < start:
                baseline[name] = value  # the driver reset its counters: a fresh start
            elif value is not None and start is not None and value > start:
                return Problem(kind, f"{name} {start} -> {value}", now)
        return None

    def _counters(self, device: int) -> dict[str, int]:
        values = {}
        for name in UNCORRECTABLE_COUNTERS:
            path = self._root / DEVICES_DIR / f"neuron{device}" / "stats/hardware" / name
            try:
                values[name] = ascii_int(read_text(path).strip())
                self._failing_sources.discard(str(path))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as err:
                self._report_once(str(path), f"health counter unreadable: {err}")
        return values

    def _open_kmsg(self) -> None:
        if self._kmsg is None:
            return
        try:
            # Non-blocking: /dev/kmsg blocks a read when no new record is there.
            self._kmsg_fd = os.open(self._kmsg, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self._kmsg_fd, 0, os.SEEK_END)  # only errors from now on
            self._failing_sources.discard(str(self._kmsg))
        except OSError as err:
            self._report_once(str(self._kmsg), f"kernel log unreadable: {err.strerror}")

    def _kernel_errors(self, now: float) -> list[tuple[int, Problem]]:
        if self._kmsg_fd is None:
            self._open_kmsg()
            if self._kmsg_fd is None:
                return []
        data = b""
        while True:
            try:
                chunk = os.read(self._kmsg_fd, 65536)
            except OSError as err:
                if err.errno == errno.EPIPE:  # /dev/kmsg: records overwritten; go on
                    continue
                if err.errno != errno.EAGAIN:
                    self._report_once(str(self._kmsg), f"kernel log unreadable: {err.strerror}")
                break
            if not chunk:
                break
            data += chunk
        found = []
        for line in data.decode(errors="replace").splitlines():
            match = _HW_ERR_RE.search(line)
            if match is None:
                continue
            named = [int(n) for n in _DEVICE_RE.findall(line)]
            devices = [d for d in named if d in self._devices] if named else self._devices
            problem = Problem(match.group(1), line.strip()[-200:], now)
            found += [(d, problem) for d in devices]
        return found

    def _report_once(self, source: str, message: str) -> None:
        if source not in self._failing_sources:
            self._failing_sources.add(source)
            log.warning(message, extra={"path": source})

    def close(self) -> None:
        if self._kmsg_fd is not None:
            os.close(self._kmsg_fd)
            self._kmsg_fd = None
