"""Kubernetes releases as the offline tools take them (`--kubernetes-version`), and
the releases from which what the driver publishes or the API server serves changes.

`templates` builds what a node publishes on a release; `lint` says only what applies
on the one given, and everything that differs between releases when none is.
"""

from __future__ import annotations

Release = tuple[int, int]  # (major, minor)

OLDEST = (1, 34)  # the oldest release the driver runs on
FIRST_OWN_SLICE = (1, 35)  # counters in a slice of their own
FIRST_GATED_CORES = (1, 35)  # partitionable devices behind DRAPartitionableDevices
FIRST_WITH_CORES = (1, 36)  # partitionable devices served (the agent publishes cores)
FIRST_EXTENDED = (1, 36)  # extended resources served from DeviceClasses (DRA nodes)


class ReleaseError(ValueError):
    """A bad option: the message says which and what is accepted."""


def parse_version(text: str) -> Release:
    """`1.36` or `v1.36.2` as (1, 36); the driver's oldest release at the least."""
    parts = text.removeprefix("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ReleaseError(
            f"--kubernetes-version {text!r}: expected MAJOR.MINOR, e.g. 1.36"
        ) from None
    if (major, minor) < OLDEST:
        raise ReleaseError(f"--kubernetes-version {text}: the driver needs Kubernetes 1.34+")
    return major, minor


def named(release: Release) -> str:
    """`Kubernetes 1.35`."""
    return f"Kubernetes {release[0]}.{release[1]}"
