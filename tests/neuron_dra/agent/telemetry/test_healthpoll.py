"""The health poll's watchdog: a sysfs read that hangs stalls neither the event loop
nor the health loop; it is reported, and its result is taken when it comes."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from neuron_dra.agent.telemetry.health import HealthMonitor, Kind
from neuron_dra.agent.telemetry.healthpoll import HealthPoll
from neuron_dra.agent.telemetry.metrics import Sample
from tests.neuron_dra.agent.telemetry.test_health import Clock, ecc
from tests.sysfs_tree import FakeNode

DEADLINE_S = 0.2
STALLED = Sample("neuron_dra_health_poll_stalled", (("node", "node-a"),), 1.0)


class HangingRead(HealthMonitor):
    """A monitor whose read of neuron5's ECC counter hangs while `hang` is set, as a
    driver's sysfs attribute of a device that stopped answering does."""

    hang = False
    reads = 0
    gate = threading.Event()

    def _read(self, path: Path) -> str | None:
        if self.hang and path.parent.parent.parent.name == "neuron5":
            self.reads += 1
            self.gate.wait()
        return super()._read(path)


def test_a_hung_poll_is_reported_once_and_its_changes_are_kept(
    fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    root = fake_node("trn2.48xlarge")
    ecc(root, 5, 3)
    health = HangingRead(root, range(16), clock=Clock())
    health.gate = threading.Event()

    async def main() -> None:
        poll = HealthPoll(health.poll, deadline_s=DEADLINE_S)
        assert await poll() == []
        health.hang = True
        ecc(root, 5, 4)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(tick())
        # Past the deadline: no changes, the last state kept, said once.
        assert await poll() == []
        assert poll.stalled
        assert poll.samples("node-a") == [STALLED]
        assert ticks > 10  # the event loop ran meanwhile
        assert await poll() == []  # the same poll awaited again, none started beside it
        assert health.reads == 1
        assert health.problems == {}
        ticking.cancel()
        health.hang = False
        health.gate.set()
        [change] = await poll()  # the hung poll's own result
        assert change.device == 5
        assert change.problem is not None
        assert change.problem.kind == Kind.MEM_ECC_UNCORRECTED
        assert not poll.stalled
        assert poll.samples("node-a") == [replace(STALLED, value=0.0)]
        assert await poll() == []  # a new poll, which finds nothing new

    caplog.set_level(logging.INFO)
    asyncio.run(main())
    said = [r.getMessage() for r in caplog.records if "health poll" in r.getMessage()]
    assert len(said) == 2, said
    assert said[0].startswith("device health poll stalled: running for ")
    assert said[1] == "device health poll answered again; health follows the devices"


def test_a_poll_that_fails_is_raised_and_the_next_one_runs() -> None:
    calls = 0

    def poll() -> list[object]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("boom")
        return []

    async def main() -> None:
        watchdog = HealthPoll(poll, deadline_s=DEADLINE_S)  # type: ignore[arg-type]
        with pytest.raises(OSError, match="boom"):
            await watchdog()
        assert await watchdog() == []

    asyncio.run(main())
    assert calls == 2
