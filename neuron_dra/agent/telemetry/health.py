"""Device health: one bad Neuron device is taken out of service, the rest keep working.

Sources, all read under the injectable sysfs root and kernel log path. Of the
device's own health files the first the Neuron driver writes is read:
- `stats/hardware/health_status/unhealthy_components` (driver 2.30+, Trainium2
  and 3): the firmware's failing subsystems, comma-separated (hbm, sram, link_efa,
  ...), or `device_unreachable`; the device is out of service while the list is not
  empty, the subsystems being the taint's value;
- `stats/hardware/health_status/` counts (driver 2.28 and 2.29): any increase of the
  cached ECC counts or of `hw_error_event`;
- the ECC counters under `stats/hardware/` (uncorrected, repairable uncorrected):
  any increase over the value seen at start.
A device with none of them (Inferentia, whose driver writes no ECC counters; a
driver that moved them) is unwatched: logged once, counted in `unwatched`. Besides:
- the device's sysfs directory or /dev node vanishing;
- the kernel's records of `NEURON_HW_ERR=<KIND>` in /dev/kmsg, as the Neuron
  runtime writes them through the driver (`kernellog` says which records count); a
  record naming a device (its serial number, else its index `nd-id=`, else its
  only neuronN) affects that device; one naming no device, several, or a device
  this node does not have (an unknown serial number) affects none, logged, since
  any process holding a Neuron device can have the driver print such a record;
- optionally, `healthcheck_heartbeat` standing still for `heartbeat_timeout_s`.
What keeps a device in service yet is worth knowing (no health file, corrected ECC
errors, a slow heartbeat) is the `notices` monitor's, driven by this poll.
A device returns to service when its cause goes away (the directory or node
comes back, the subsystem list empties, the counters reset with a driver reload)
or, for errors that leave no trace to re-check, after the configured recovery
period.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from consts import DEVICE_NAME_PREFIX, NODE_DEVICE_NAME
from neuron_dra.agent.telemetry import kernellog
from neuron_dra.agent.telemetry.notices import NoticeMonitor
from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.discovery import DEV_DIR, DEVICES_DIR
from neuron_dra.hardware.driverformats import HEALTH_STATUS_DIR, UNREACHABLE
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.hardware.stats import HEARTBEAT_FILE
from neuron_dra.hardware.sysfsfile import ascii_int, counts, read_if_present, reason

log = logging.getLogger(__name__)

_COMPONENT_RE = re.compile(r"[a-z0-9_]{1,40}")
MAX_KIND = 63  # a taint value is a label value


class Kind(StrEnum):
    MEM_ECC_UNCORRECTED = "MemEccUncorrected"
    MEM_ECC_REPAIRABLE = "MemEccRepairableUncorrected"
    SRAM_ECC_UNCORRECTED = "SramEccUncorrected"
    HARDWARE_ERROR_EVENT = "HardwareErrorEvent"
    DEVICE_UNREACHABLE = "DeviceUnreachable"
    DEVICE_MISSING = "DeviceMissing"
    HEARTBEAT_STALLED = "HeartbeatStalled"


class Source(StrEnum):
    """Where a device's health is read from."""

    HEALTH_STATUS = "health_status"  # unhealthy_components (2.30+)
    HEALTH_COUNTS = "health_status_counts"  # health_status/ counts (2.28, 2.29)
    ECC = "ecc"  # stats/hardware/ ECC counters


# Counter files of each counting source, relative to the device, and what a rise means.
COUNTERS: Mapping[Source, Mapping[str, Kind]] = {
    Source.HEALTH_COUNTS: {
        f"{HEALTH_STATUS_DIR}/hbm_ecc_err_count": Kind.MEM_ECC_UNCORRECTED,
        f"{HEALTH_STATUS_DIR}/repairable_hbm_ecc_err_count": Kind.MEM_ECC_REPAIRABLE,
        f"{HEALTH_STATUS_DIR}/sram_ecc_err_count": Kind.SRAM_ECC_UNCORRECTED,
        f"{HEALTH_STATUS_DIR}/hw_error_event": Kind.HARDWARE_ERROR_EVENT,
    },
    Source.ECC: {
        "stats/hardware/mem_ecc_uncorrected": Kind.MEM_ECC_UNCORRECTED,
        "stats/hardware/mem_ecc_repairable_uncorrected": Kind.MEM_ECC_REPAIRABLE,
        "stats/hardware/sram_ecc_uncorrected": Kind.SRAM_ECC_UNCORRECTED,
    },
}
COMPONENTS_FILE = f"{HEALTH_STATUS_DIR}/unhealthy_components"


@dataclass(frozen=True)
class Problem:
    kind: str  # a Kind, the failing subsystems, or the NEURON_HW_ERR kind as the runtime spelled it
    detail: str
    since: float
    recoverable_by_time: bool = True  # no state to re-check: only time clears it


@dataclass(frozen=True)
class Change:
    device: int
    problem: Problem | None  # None: back in service


def components_kind(components: Iterable[str]) -> str:
    """The taint value naming failing subsystems: `hbm,link_efa` -> `Hbm.LinkEfa`, cut
    at a subsystem to fit a label value."""
    kind = ""
    for component in components:
        name = "".join(part.capitalize() for part in component.split("_") if part)
        joined = f"{kind}.{name}" if kind else name
        if len(joined) > MAX_KIND:
            break
        kind = joined
    return kind or "UnhealthyComponents"


class HealthMonitor:
    def __init__(
        self,
        root: Path,
        devices: Iterable[int],
        *,
        kmsg: Path | None = None,
        recovery_s: float = 0.0,  # 0: time never clears a problem
        heartbeat_timeout_s: float = 0.0,  # 0: a still heartbeat is not a problem
        clock: Callable[[], float] = time.time,
        serials: Mapping[int, str | None] | None = None,
    ) -> None:
        self._root = root
        self._kmsg = kmsg
        self._recovery_s = recovery_s
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._clock = clock
        self._devices = sorted(set(devices))
        # The devices' serial numbers as discovery read them, as kernel records write them.
        self._serials = kernellog.serial_numbers(serials or {})
        self.problems: dict[int, Problem] = {}
        # As the last poll found them; swapped in whole, as `problems` is.
        self.sources: dict[int, Source | None] = {}
        self._next_sources: dict[int, Source | None] = {}
        self._failing_sources: set[str] = set()
        self._baseline = {d: self._counters(d)[1] for d in self._devices}
        self._heartbeats: dict[int, tuple[int, float]] = {}  # value, when it last changed
        self._slow: dict[int, float] = {}  # still for half the timeout: when it last moved
        self.notices = NoticeMonitor(
            root, self._read, self._report_once, recovery_s=recovery_s, clock=clock
        )
        self.notices.watch(self._devices)
        self._unwatched_said: frozenset[int] = frozenset()
        self._kmsg_fd: int | None = None
        # `poll` runs in a worker thread while `follow` may come from another one.
        self._lock = threading.Lock()
        self._open_kmsg()

    @property
    def unwatched(self) -> frozenset[int]:
        """Devices of which no health file could be read at the last poll."""
        return frozenset(d for d, source in self.sources.items() if source is None)

    def follow(
        self, devices: Iterable[int], serials: Mapping[int, str | None] | None = None
    ) -> None:
        """Watch these devices too, from now on; devices already watched stay watched.
        `serials`: their serial numbers, as rediscovery read them.

        Reads the new devices' counters, so call it off the event loop.
        """
        with self._lock:
            self._serials |= kernellog.serial_numbers(serials or {})
            new = set(devices).difference(self._devices)
            for device in new:
                self._baseline[device] = self._counters(device)[1]
            self.notices.watch(new)
            self._devices = sorted(new.union(self._devices))

    def poll(self) -> list[Change]:
        """Read every source once; return what changed."""
        with self._lock:
            changes = self._poll()
        self._say_unwatched()
        return changes

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
            self._baseline[device] = self._counters(device)[1]
        found: dict[int, Problem] = {}
        self._next_sources = dict(self.sources)
        self._slow = {}
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
        self.sources = self._next_sources
        self.notices.poll(self._devices, self.unwatched, self._slow)
        return changes

    def _check_device(self, device: int, now: float) -> Problem | None:
        base = self._root / DEVICES_DIR / f"neuron{device}"
        if not base.is_dir() or not (self._root / DEV_DIR / f"neuron{device}").exists():
            return Problem(
                Kind.DEVICE_MISSING, f"neuron{device} vanished", now, recoverable_by_time=False
            )
        components = self._read(base / COMPONENTS_FILE)
        if components is not None:
            self._next_sources[device] = Source.HEALTH_STATUS
            return self._components(components, now) or self._heartbeat(device, base, now)
        source, counters = self._counters(device)
        self._next_sources[device] = source
        baseline = self._baseline.setdefault(device, {})
        for name, value in counters.items():
            start = baseline.get(name)
            if start is None or value < start:
                baseline[name] = value  # newly readable, or reset by a driver reload
            elif value > start and source is not None:  # a counter has a source
                kind = COUNTERS[source][name]
                return Problem(kind, f"{name.rsplit('/', 1)[-1]} {start} -> {value}", now)
        return None

    @staticmethod
    def _components(text: str, now: float) -> Problem | None:
        if not text:
            return None
        if text == UNREACHABLE:
            detail = "unhealthy_components: the driver cannot reach the device"
            return Problem(Kind.DEVICE_UNREACHABLE, detail, now, recoverable_by_time=False)
        # Names the driver may add later are kept, as far as they are plain words.
        names = [n for n in (part.strip() for part in text.split(",")) if n]
        named = [n for n in names if _COMPONENT_RE.fullmatch(n)]
        detail = f"unhealthy components: {', '.join(named) or text[:100]!s}"
        return Problem(components_kind(named), detail, now, recoverable_by_time=False)

    def _heartbeat(self, device: int, base: Path, now: float) -> Problem | None:
        if self._heartbeat_timeout_s <= 0:
            return None
        text = self._read(base / HEARTBEAT_FILE)
        if text is None or text == UNREACHABLE:
            return None  # unhealthy_components says unreachable; absent: nothing to watch
        try:
            value = ascii_int(text)
        except ValueError as err:
            self._report_once(str(base / HEARTBEAT_FILE), f"heartbeat unreadable: {err}")
            return None
        last = self._heartbeats.get(device)
        if last is None or last[0] != value:
            self._heartbeats[device] = (value, now)
            return None
        still = now - last[1]
        if still >= self._heartbeat_timeout_s / 2:
            self._slow[device] = last[1]
        if still < self._heartbeat_timeout_s:
            return None
        detail = f"healthcheck_heartbeat stuck at {value} for {still:.0f} s"
        return Problem(Kind.HEARTBEAT_STALLED, detail, last[1], recoverable_by_time=False)

    def _counters(self, device: int) -> tuple[Source | None, dict[str, int]]:
        """The first counting source the device has, and its counters by relative path;
        (None, {}) when it has none."""
        base = self._root / DEVICES_DIR / f"neuron{device}"
        for source, names in COUNTERS.items():
            values = counts(
                base,
                names,
                self._read,
                lambda path, err: self._report_once(str(path), f"health counter unreadable: {err}"),
            )
            if values:
                return source, values
        return None, {}

    def _read(self, path: Path) -> str | None:
        """The file's stripped text; None when absent or unreadable (reported once)."""
        try:
            text = read_if_present(path)
        except (OSError, UnicodeDecodeError) as err:
            self._report_once(str(path), f"health counter unreadable: {reason(err)}")
            return None
        if text is not None:
            self._failing_sources.discard(str(path))
        return text

    def _say_unwatched(self) -> None:
        unwatched = self.unwatched
        if unwatched and unwatched != self._unwatched_said:
            log.warning(
                "no health source for %s: neither stats/hardware/health_status nor the ECC "
                "counters can be read (the Neuron driver writes none for Inferentia; a "
                "newer driver may have moved them); only vanished devices and kernel "
                "NEURON_HW_ERR lines take them out of service",
                ", ".join(f"neuron{d}" for d in sorted(unwatched)),
                extra={"devices": len(unwatched)},
            )
        self._unwatched_said = unwatched

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
        scan = kernellog.scan(data.decode(errors="replace"))
        if scan.not_records:
            self._report_once(
                f"{self._kmsg} records",
                f"{self._kmsg}: {scan.not_records} lines are not /dev/kmsg records; only "
                "the kernel's records count as hardware errors",
            )
        found = []
        for error in scan.errors:
            problem = Problem(error.kind, error.detail, now)
            found += [(d, problem) for d in self._named(error)]
        return found

    def _named(self, error: kernellog.HardwareError) -> Sequence[int]:
        named = kernellog.device_named(error, self._devices, self._serials)
        if named is not None:
            return [named]
        if error.serial is not None or error.index is not None:
            self._report_once(
                f"unmatched {error.serial}/{error.index}",
                f"a hardware error names no device of this node (serial-num={error.serial}, "
                f"nd-id={error.index}): no device taken out of service: {error.detail}",
            )
        else:
            listed = ",".join(f"neuron{d}" for d in sorted(error.devices)) or "none named"
            self._report_once(
                f"unnamed {error.kind}",
                f"a hardware error names no single device of this node ({listed}): "
                f"no device taken out of service: {error.detail}",
            )
        return []

    def _report_once(self, source: str, message: str) -> None:
        if source not in self._failing_sources:
            self._failing_sources.add(source)
            log.warning(message, extra={"path": source})

    def close(self) -> None:
        if self._kmsg_fd is not None:
            os.close(self._kmsg_fd)
            self._kmsg_fd = None


def health_entries(
    inventory: NodeInventory, problems: Mapping[int, Problem]
) -> dict[str, tuple[bool, str]]:
    """Device name -> (healthy, detail) for every device the node publishes."""
    entries = {
        d.name: (d.index not in problems, problems[d.index].kind if d.index in problems else "")
        for d in inventory.devices
    }
    if inventory.ultraserver is not None:
        # Every problem counts, a vanished device's too, as for the whole-node
        # device's taint in the slice: a pod on it uses every device of the node.
        sick = ", ".join(f"{DEVICE_NAME_PREFIX}{i} ({problems[i].kind})" for i in sorted(problems))
        entries[NODE_DEVICE_NAME] = (not problems, f"unhealthy devices: {sick}" if sick else "")
    # A NeuronCore is as healthy as its device (listed whether or not the slices carry
    # cores: the kubelet asks only about devices it prepared).
    entries |= {core.name: entries[core.device.name] for core in logical_cores(inventory)}
    return entries
