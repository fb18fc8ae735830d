"""The labels of `neuron_dra_build_info`: what a node runs, for joins and upgrades.

Versions of installed distributions come from their metadata, so that this module
imports nothing it names. Reading it scans the installed packages (15 to 25 ms), so it
is read once, at the first scrape, and importlib.metadata is not loaded before.
"""

from __future__ import annotations

import functools
import platform

from consts import DRA_DRIVER_VERSION

# Distributions whose version a bug report or a fleet upgrade asks about, by label.
DISTRIBUTIONS = {"grpcio_version": "grpcio", "prometheus_client_version": "prometheus-client"}


@functools.cache
def build_labels() -> tuple[tuple[str, str], ...]:
    """The driver's version, Python's, and those of the libraries it speaks through."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 (see above)

    labels = [("version", DRA_DRIVER_VERSION), ("python_version", platform.python_version())]
    for label, distribution in DISTRIBUTIONS.items():
        try:
            labels.append((label, version(distribution)))
        except PackageNotFoundError:
            labels.append((label, "unknown"))
    return tuple(labels)
