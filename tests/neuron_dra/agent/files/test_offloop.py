"""Reads off the event loop: whatever ends the thread settles what the caller awaits."""

from __future__ import annotations

import asyncio
import sys

import pytest

from neuron_dra.agent.files.offloop import in_daemon_thread

PATIENCE_S = 5.0


def test_a_thread_ended_by_system_exit_still_answers_its_caller() -> None:
    def work() -> int:
        sys.exit(3)

    async def main() -> None:
        with pytest.raises(RuntimeError, match="neuron-dra-test ended by SystemExit: 3"):
            await asyncio.wait_for(in_daemon_thread(work, "neuron-dra-test"), PATIENCE_S)

    asyncio.run(main())


def test_a_result_and_an_error_reach_the_caller() -> None:
    def fails() -> int:
        raise OSError("unreadable")

    async def main() -> None:
        assert await in_daemon_thread(lambda: 7, "neuron-dra-test") == 7
        with pytest.raises(OSError, match="unreadable"):
            await in_daemon_thread(fails, "neuron-dra-test")

    asyncio.run(main())
