"""The device health poll's watchdog: off the event loop, one at a time, with a deadline.

A poll reads a few files a device and the kernel log, in milliseconds. One past
its deadline is a read hung in the kernel driver. It is reported once (an error
naming how long it has run) and left to finish; no second poll starts beside it,
and each later call waits for it again, up to the deadline. Meanwhile the devices
keep the state the last finished poll found: a hung read says nothing of a
device's health, and marking every device unhealthy (or unknown) for it would
taint them all, and with the NoExecute effect evict every workload of the node,
for a fault of the monitoring alone. Prepares, the slices and the kubelet's
health stream go on from that state. When the poll finishes, its changes are
returned as any poll's are, and the recovery is logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from neuron_dra.agent.files.offloop import READ_DEADLINE_S, Watched
from neuron_dra.agent.telemetry.health import Change
from neuron_dra.agent.telemetry.metrics import Sample


class HealthPoll(Watched[list[Change]]):
    def __init__(
        self,
        poll: Callable[[], list[Change]],
        *,
        deadline_s: float = READ_DEADLINE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            poll,
            "neuron-dra-health",
            what="device health poll",
            cause="a sysfs read or the kernel log hangs",
            meanwhile="devices keep their last known health until it ends",
            recovered="health follows the devices",
            deadline_s=deadline_s,
            clock=clock,
        )

    async def __call__(self) -> list[Change]:
        """The changes of the poll going on or of a new one; none while it hangs."""
        return await super().__call__() or []

    def samples(self, node: str) -> list[Sample]:
        """The gauge that says whether the poll hangs (`metrics.METRICS`)."""
        return [Sample("neuron_dra_health_poll_stalled", (("node", node),), float(self.stalled))]
