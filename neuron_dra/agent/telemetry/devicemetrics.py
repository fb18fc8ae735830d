"""Per-device series: what each Neuron device reports in sysfs, and its health here.

Every series carries `node` and `neuron_device` (the index of /dev/neuronN), the
labels `neuron_dra_device_allocation_info` carries too, so any of them joins the
pods holding the device with `* on(node, neuron_device) group_left(...)`.

Cardinality per node: for each device, one power, one memory and one health series,
one heartbeat series where the driver writes it, five execution outcomes and up to
five ECC counters: at most 14 series a device, 224 on a 16-device node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from neuron_dra.agent.telemetry.health import Problem
from neuron_dra.agent.telemetry.metrics import Labels, Sample
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.hardware.stats import ECC_COUNTERS, DeviceStats, read_device_stats

log = logging.getLogger(__name__)


def device_labels(node: str, index: int) -> Labels:
    """The labels every per-device series and each allocation row carry: the join."""
    return (("node", node), ("neuron_device", str(index)))


def device_samples(stats: DeviceStats, node: str) -> list[Sample]:
    """The series one device's statistics make; a power line without valid data makes
    none (the driver's NO_DATA zeros are not a reading)."""
    device = device_labels(node, stats.index)
    samples = []
    if stats.power is not None and stats.power.valid:
        samples.append(Sample("neuron_dra_device_power_draw_ratio", device, stats.power.avg_ratio))
    if stats.memory_used_bytes is not None:
        samples.append(
            Sample("neuron_dra_device_memory_used_bytes", device, stats.memory_used_bytes)
        )
    if stats.heartbeat is not None:
        samples.append(Sample("neuron_dra_device_healthcheck_heartbeat", device, stats.heartbeat))
    for outcome, total in sorted(stats.executions.items()):
        by_outcome: Labels = (*device, ("status", outcome))
        samples.append(Sample("neuron_dra_device_executions_total", by_outcome, total))
    for name, value in sorted(stats.ecc.items()):
        memory, kind = ECC_COUNTERS[name]
        by_kind: Labels = (*device, ("memory", memory), ("kind", kind))
        samples.append(Sample("neuron_dra_device_ecc_errors_total", by_kind, value))
    return samples


def device_states(
    inventory: NodeInventory, problems: Mapping[int, Problem], allocated: Iterable[str]
) -> list[Sample]:
    """`neuron_dra_devices`: the node's devices counted by health and allocation."""
    held = set(allocated)
    counts: dict[tuple[str, str], int] = {}
    for device in inventory.devices:
        health = "unhealthy" if device.index in problems else "healthy"
        state = "allocated" if device.name in held else "free"
        counts[(health, state)] = counts.get((health, state), 0) + 1
    return [
        Sample("neuron_dra_devices", (("health", h), ("state", s)), n)
        for (h, s), n in sorted(counts.items())
    ]


def health_samples(
    inventory: NodeInventory,
    problems: Mapping[int, Problem],
    unwatched: Iterable[int],
    node: str,
) -> list[Sample]:
    """`neuron_dra_device_healthy` of every device, `neuron_dra_unwatched_devices`."""
    samples = [
        Sample(
            "neuron_dra_device_healthy",
            (*device_labels(node, d.index), ("device", d.name)),
            0.0 if d.index in problems else 1.0,
        )
        for d in inventory.devices
    ]
    samples.append(Sample("neuron_dra_unwatched_devices", (("node", node),), len(set(unwatched))))
    return samples


class StatsReader:
    """Reads every device's statistics at scrape, in the metrics thread; a file that
    cannot be parsed is logged once by path, not at every scrape."""

    def __init__(self, root: Path, node: str) -> None:
        self._root = root
        self._node = node
        self._said: set[str] = set()

    def samples(self, inventory: NodeInventory) -> list[Sample]:
        samples: list[Sample] = []
        problems: set[str] = set()
        for device in inventory.devices:
            stats = read_device_stats(self._root, device.index, device.cores)
            problems.update(stats.problems)
            samples += device_samples(stats, self._node)
        for problem in sorted(problems - self._said):
            log.warning("device statistic unreadable: %s", problem)
        self._said = problems
        return samples
