"""`neuron-dra run`: the node agent's start and stop, from the kubelet's sockets to SIGTERM.

Start-up is mostly imports. The kubelet's sockets come first, served from this
module's few imports (gRPC and the kubelet's protocols); the rest of the agent
(`node`) is imported in a worker thread meanwhile, so the event loop answers the
kubelet's registration at once, and a prepare that comes that early waits until
the checkpoint is loaded.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
from typing import TYPE_CHECKING

from neuron_dra.agent import arenas
from neuron_dra.agent.kubelet.plugin import KubeletPlugin
from neuron_dra.agent.options import RunOptions

if TYPE_CHECKING:
    from neuron_dra.agent.claims.preparer import StepHook

__all__ = ["RunOptions", "run"]


def run(options: RunOptions, started: float, after_step: StepHook | None = None) -> int:
    """Run until SIGTERM or SIGINT; exit 0 after a clean shutdown.

    `after_step` is called between a claim's side effects (see `preparer.Step`).
    """

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        plugin = KubeletPlugin(
            None,
            pool=options.node_name,
            registrar_dir=options.registrar_dir,
            plugins_dir=options.plugins_dir,
            pod_uid=options.pod_uid,
            health_port=options.health_port,
            health_address=options.health_address,
            probe_socket=options.probe_socket,
        )
        await plugin.start()
        try:
            await asyncio.to_thread(importlib.import_module, "neuron_dra.agent.node")
            from neuron_dra.agent.node import serve  # noqa: PLC0415 (imported just above)

            await serve(options, plugin, started, stop, after_step)
        finally:
            await plugin.stop()

    arenas.limit()
    asyncio.run(main())
    return 0
