"""Python's cyclic garbage collector: what start-up made is kept out of its passes.

The modules, classes and parts the agent builds before it serves claims live as long
as the process, and they are most of its objects. A full collection walks every one of
them, and the allocations of prepares and unprepares set one off now and then, inside
a kubelet's call: the slowest calls of the side-by-side run were those. Frozen once
the agent is built (`gc.freeze`), they stay out of every pass; what claims make after
is collected as ever (docs/contributors/performance.md).
"""

from __future__ import annotations

import gc


def freeze_startup() -> int:
    """Move every object alive now out of the collector's passes; how many there are."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
