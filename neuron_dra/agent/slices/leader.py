"""One publisher per node: an exclusive file lock in the plugin directory.

During a rolling update two plugin pods share the node's plugin directory.
Both serve the kubelet, but only the lock holder writes ResourceSlices, so two
driver versions never rewrite each other's slices. The lock dies with its
process, however that ends, and the waiting pod takes over.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

from neuron_dra.agent.files.dirs import PLUGIN_DIR_MODE, ensure_dir, open_lock_file

POLL_S = 0.5


@contextlib.asynccontextmanager
async def held(path: Path) -> AsyncIterator[None]:
    """Hold the lock at `path` for the body; waits (without blocking the loop) while taken."""
    ensure_dir(path.parent, PLUGIN_DIR_MODE)
    fd = open_lock_file(path)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock
