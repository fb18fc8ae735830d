"""Keep the agent's long-lived loops running: a loop that fails (or ends, which none
should) is logged with its traceback and started again after a backoff.

While a loop waits to be started again the plugin is not ready; a loop that fails
again and again (`FAILURES_NOT_LIVE` times, each within `STEADY_S` of its start)
also makes liveness fail, so the kubelet restarts the container where no restart of
the loop helps. A loop that has run `STEADY_S` without failing is well again: its
backoff and its count start over. Nothing is left to die silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.kubelet.readiness import Health

log = logging.getLogger(__name__)

STEADY_S = 60.0
FAILURES_NOT_LIVE = 5

Loop = Callable[[], Awaitable[None]]


class Supervisor:
    def __init__(
        self,
        health: Health,
        *,
        backoff: Callable[[], Backoff] = lambda: Backoff(initial_s=1.0, max_s=60.0),
        steady_s: float = STEADY_S,
    ) -> None:
        self._health = health
        self._backoff = backoff
        self._steady_s = steady_s
        self.tasks: list[asyncio.Task[None]] = []
        self.restarts: dict[str, int] = {}

    def start(self, name: str, loop: Loop) -> None:
        self.tasks.append(asyncio.create_task(self._keep(name, loop), name=name))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _keep(self, name: str, loop: Loop) -> None:
        backoff, failures = self._backoff(), 0
        while True:
            run = asyncio.ensure_future(loop())
            try:
                # Still running after steady_s: well again, whatever came before.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(run), self._steady_s)
                if not run.done():
                    backoff.reset()
                    failures = 0
                    self._health.set_loop(name, down=False, failing=False)
                    await run
                else:
                    run.result()
                log.error("%s loop ended; starting it again", name, extra={"loop": name})
            except asyncio.CancelledError:
                run.cancel()
                with contextlib.suppress(BaseException):
                    await run
                raise
            except Exception:
                log.exception("%s loop failed", name, extra={"loop": name})
            failures += 1
            failing = failures >= FAILURES_NOT_LIVE
            self._health.set_loop(name, down=True, failing=failing)
            self.restarts[name] = self.restarts.get(name, 0) + 1
            delay = backoff.delay()
            log.warning(
                "starting the %s loop again in %.1fs%s",
                name,
                delay,
                " (failing again and again: liveness fails)" if failing else "",
                extra={"loop": name, "failures": failures},
            )
            await asyncio.sleep(delay)
            self._health.set_loop(name, down=False, failing=failing)
