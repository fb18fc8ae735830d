"""kube-scheduler built once more with changes proposed upstream, to measure them beside
the release: see `neuron_dra_harness.patched`, which the end-to-end tests share."""

from __future__ import annotations

from neuron_dra_harness.patched import MODULE, PATCHES, patched_binaries

__all__ = ["MODULE", "PATCHES", "patched_binaries"]
