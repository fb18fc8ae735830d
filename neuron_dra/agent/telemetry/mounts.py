"""Whether the host mounts the DaemonSet asks to be read-only all the way down are.

The chart mounts the host's /sys, /dev and /opt/aws/neuron with `readOnly: true`
and `recursiveReadOnly: IfPossible`. A runtime that cannot make a mount recursively
read-only (containerd before 2.0, CRI-O before 1.30, runc before 1.1, Linux before
5.12, which added mount_setattr(2) with AT_RECURSIVE) makes only the top read-only,
silently: the mounts below it (cgroup2 under /sys/fs/cgroup, debugfs, /dev/shm,
/dev/mqueue) stay writable in the container. The container's own
/proc/self/mountinfo shows it: each mount's per-mount options (the sixth field)
read `ro` or `rw`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from neuron_dra.agent.telemetry.metrics import Sample
from neuron_dra.hardware.sysfsfile import read_text, reason

log = logging.getLogger(__name__)

# Below the root the agent reads (`--root`, /host in the DaemonSet).
RECURSIVE_READ_ONLY = ("sys", "dev", "opt/aws/neuron")
RUNTIMES = "containerd 2.0 or CRI-O 1.30, with runc 1.1 (or crun), on Linux 5.12 or later"
READ_ONLY_METRIC = "neuron_dra_recursive_readonly_mounts"
MAX_MOUNTINFO_BYTES = 4 * 1024 * 1024  # thousands of mounts; a page is 4 KiB
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    point: str  # where it is mounted, in the reader's mount namespace
    read_only: bool  # the per-mount `ro` option


@dataclass(frozen=True)
class Check:
    point: str  # a mount asked to be recursively read-only
    writable: tuple[str, ...]  # it, or mounts below it, still read-write

    @property
    def effective(self) -> bool:
        return not self.writable


def parse(text: str) -> tuple[Mount, ...]:
    """The mounts of a /proc/<pid>/mountinfo text, in its order. Raises ValueError
    naming the line that is not a mountinfo line."""
    mounts = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split(" ")
        if len(fields) < 10 or "-" not in fields[6:]:
            raise ValueError(f"mountinfo line {number} has not the kernel's fields: {line!r}")
        point = _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        mounts.append(Mount(point, "ro" in fields[5].split(",")))
    return tuple(mounts)


def check(mounts: Iterable[Mount], points: Iterable[str]) -> tuple[Check, ...]:
    """For each of `points` that is a mount, the mounts there or below it still
    read-write (a runtime that made none of it read-only, the top included).
    A point that is not a mount (a test's plain directory) is left out."""
    mounts = tuple(mounts)
    checks = []
    for point in points:
        top = point.rstrip("/") or "/"
        at_top = [m for m in mounts if m.point == top]
        if not at_top:
            continue
        below = top.rstrip("/") + "/"
        writable = {m.point for m in mounts if m.point.startswith(below) and not m.read_only}
        if not at_top[-1].read_only:  # the top itself (the last mount there is the one seen)
            writable.add(top)
        checks.append(Check(top, tuple(sorted(writable))))
    return tuple(checks)


def check_root(root: Path, mountinfo: Path) -> tuple[Check, ...]:
    """`check` of the recursive read-only mounts under `root`, from `mountinfo`;
    a fallback is logged once, as a warning. Unreadable: logged, no checks."""
    try:
        mounts = parse(read_text(mountinfo, MAX_MOUNTINFO_BYTES))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        log.warning(
            "recursive read-only mounts not checked: %s",
            reason(err),
            extra={"path": str(mountinfo)},
        )
        return ()
    checks = check(mounts, (str(root.resolve() / p) for p in RECURSIVE_READ_ONLY))
    fallen = [c for c in checks if not c.effective]
    if fallen:
        log.warning(
            "host mounts %s are not read-only all the way down: %s stay writable in this "
            "container; recursiveReadOnly needs %s",
            ", ".join(c.point for c in fallen),
            ", ".join(p for c in fallen for p in c.writable),
            RUNTIMES,
            extra={"mounts": len(fallen), "writable": sum(len(c.writable) for c in fallen)},
        )
    return checks


def read_only_samples(checks: Iterable[Check]) -> list[Sample]:
    """How many of the checked mounts are recursively read-only and how many are not."""
    checks = tuple(checks)
    effective = sum(c.effective for c in checks)
    return [
        Sample(READ_ONLY_METRIC, (("state", "effective"),), effective),
        Sample(READ_ONLY_METRIC, (("state", "not_effective"),), len(checks) - effective),
    ]
