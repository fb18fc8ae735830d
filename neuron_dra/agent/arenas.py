"""glibc's malloc arenas: one for the whole agent, unless the operator sets another count.

glibc gives threads that allocate at the same moment arenas of their own, up to eight
per core, and each keeps the memory it once held. The agent's threads (the kubelet's
gRPC calls, the claims of a call, the loop's workers, gRPC's own) allocate little
outside the interpreter, which serialises them anyway; their arenas cost the process
megabytes of resident memory for no speed (docs/contributors/performance.md, memory).
`MALLOC_ARENA_MAX`, where set, is glibc's and wins.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

# mallopt's parameter number for the arena count (glibc's malloc.h).
M_ARENA_MAX = -8


def limit(count: int = 1) -> bool:
    """Cap the arenas at `count` before the agent starts a thread; whether it was set.
    Anywhere but glibc (musl, another OS), and where the environment sets it, nothing."""
    if sys.platform != "linux" or "MALLOC_ARENA_MAX" in os.environ:
        return False
    import ctypes  # noqa: PLC0415 (only here, before any thread)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    done = bool(mallopt(M_ARENA_MAX, count))
    if not done:
        log.info("malloc arena count not set: this C library refused it")
    return done
