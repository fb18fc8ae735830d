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

import logging
import time
from collections.abc import Callable

from neuron_dra.agent.files.offloop import OneAtATime
from neuron_dra.agent.telemetry.health import Change

log = logging.getLogger(__name__)

# A poll takes milliseconds; this is a hang, not a slow disk.
POLL_DEADLINE_S = 30.0


class HealthPoll:
    def __init__(
        self,
        poll: Callable[[], list[Change]],
        *,
        deadline_s: float = POLL_DEADLINE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._poll = OneAtATime(poll, "neuron-dra-health", clock)
        self._deadline_s = deadline_s
        self.stalled = False

    async def __call__(self) -> list[Change]:
        """The changes of the poll going on or of a new one; none while it hangs."""
        try:
            changes = await self._poll.run(self._deadline_s)
        except TimeoutError:
            if not self.stalled:
                log.error(
                    "device health poll stalled: running for %.0f s (a sysfs read or the "
                    "kernel log hangs); devices keep their last known health until it ends",
                    self._poll.running_s,
                    extra={"deadline_s": self._deadline_s},
                )
            self.stalled = True
            return []
        except Exception:
            self._recovered()
            raise
        self._recovered()
        return changes

    def _recovered(self) -> None:
        if self.stalled:
            log.warning("device health poll answered again; health follows the devices")
        self.stalled = False
