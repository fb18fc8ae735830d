"""How long work reports how far it has got: `progress(done, total)` after each step.

Building simulated nodes and allocating claims both take one; the command line shows
it on stderr, a library caller passes nothing and gets `quiet`.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int], None]  # (done, total)


def quiet(done: int, total: int) -> None:
    """No progress shown."""
