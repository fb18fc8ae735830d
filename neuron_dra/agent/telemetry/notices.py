"""Informational notices: what is worth knowing about a device that stays in service.

Each is published as a device taint of effect None (`resources.taints.Notice`),
which keeps no claim from the device and evicts nothing, where the API server
keeps such taints (Kubernetes 1.35+, with DRADeviceTaints). Three, each with the
first-seen and recovery rules of the health problems (`health`):
- unwatched: none of the device's health files can be read (Inferentia; a
  driver that moved them); gone once one can be, dated from the first poll that
  found none;
- corrected ECC errors rose (`stats/hardware/{mem,sram}_ecc_corrected`, driver
  2.30+) over the value seen at start: the memory corrects them, yet a rising
  count is often the first sign of a failing one. Like an uncorrected count's
  rise, only time clears it (`--health-recovery`, 0: never), after which only
  later errors count;
- a slow heartbeat: the firmware's `healthcheck_heartbeat` has stood still for
  half of `--health-heartbeat-timeout`, dated from its last move, gone when it
  moves. At the full timeout the device is taken out of service as well.

Driven by the health poll, in its thread: `poll` is given what it found and
swaps `notices` in whole for the event loop to read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from consts import TAINT_CORRECTED_ECC, TAINT_HEARTBEAT_SLOW, TAINT_UNWATCHED
from neuron_dra.hardware.discovery import DEVICES_DIR
from neuron_dra.hardware.sysfsfile import counts
from neuron_dra.resources.taints import Notice

# Corrected-ECC counters (driver 2.30+), relative to the device, and the memory each counts.
CORRECTED_ECC = {
    "stats/hardware/mem_ecc_corrected": "Hbm",
    "stats/hardware/sram_ecc_corrected": "Sram",
}
UNWATCHED = "NoHealthSource"
HEARTBEAT_SLOW = "HeartbeatSlow"

Read = Callable[[Path], str | None]  # a file's stripped text; None: absent or unreadable
Report = Callable[[str, str], None]  # (source, message), said once per source


class NoticeMonitor:
    def __init__(
        self,
        root: Path,
        read: Read,
        report: Report,
        *,
        recovery_s: float = 0.0,  # 0: time never clears a corrected-ECC notice
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._root = root
        self._read = read
        self._report = report
        self._recovery_s = recovery_s
        self._clock = clock
        self._baseline: dict[int, dict[str, int]] = {}
        # device -> its notices by key; swapped in whole, as the health poll's problems are.
        self.notices: dict[int, dict[str, Notice]] = {}

    def watch(self, devices: Iterable[int]) -> None:
        """Take the devices' corrected-ECC counts now as their baselines."""
        for device in devices:
            self._baseline.setdefault(device, self._corrected(device))

    def all(self) -> tuple[Notice, ...]:
        """Every device's notices, by device then key."""
        current = self.notices
        return tuple(n for d in sorted(current) for _, n in sorted(current[d].items()))

    def poll(
        self, devices: Iterable[int], unwatched: frozenset[int], slow: Mapping[int, float]
    ) -> bool:
        """What the health poll found: the devices watched, those without a health file,
        and when each slow heartbeat last moved. True when the notices changed."""
        now = self._clock()
        found: dict[int, dict[str, Notice]] = {}
        for device in devices:
            old = self.notices.get(device, {})
            mine: dict[str, Notice] = {}
            if device in unwatched:
                mine[TAINT_UNWATCHED] = _kept(old, Notice(device, TAINT_UNWATCHED, UNWATCHED, now))
            if device in slow:
                since = slow[device]
                mine[TAINT_HEARTBEAT_SLOW] = Notice(
                    device, TAINT_HEARTBEAT_SLOW, HEARTBEAT_SLOW, since
                )
            ecc = self._ecc(device, old.get(TAINT_CORRECTED_ECC), now)
            if ecc is not None:
                mine[TAINT_CORRECTED_ECC] = ecc
            if mine:
                found[device] = mine
        changed = found != self.notices
        self.notices = found
        return changed

    def _ecc(self, device: int, old: Notice | None, now: float) -> Notice | None:
        counts = self._corrected(device)
        baseline = self._baseline.setdefault(device, dict(counts))
        expired = old is not None and old.since is not None and now - old.since >= self._recovery_s
        if expired and self._recovery_s > 0:
            # Forgiven: only errors after this moment count against the device.
            self._baseline[device] = baseline = dict(counts)
            old = None
        risen = []
        for name, value in counts.items():
            start = baseline.get(name)
            if start is None or value < start:
                baseline[name] = value  # newly readable, or reset by a driver reload
            elif value > start:
                risen.append(CORRECTED_ECC[name])
        if not risen:
            return old  # only time clears it
        notice = Notice(device, TAINT_CORRECTED_ECC, ".".join(risen), now)
        return _kept({} if old is None else {old.key: old}, notice)

    def _corrected(self, device: int) -> dict[str, int]:
        base = self._root / DEVICES_DIR / f"neuron{device}"
        return counts(
            base,
            CORRECTED_ECC,
            self._read,
            lambda path, err: self._report(str(path), f"corrected ECC count unreadable: {err}"),
        )


def _kept(old: Mapping[str, Notice], new: Notice) -> Notice:
    """`new`, dated as the same notice already was."""
    before = old.get(new.key)
    return before if before is not None and before.value == new.value else new
