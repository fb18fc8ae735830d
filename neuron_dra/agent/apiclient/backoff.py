"""Capped exponential backoff with jitter, for the agent's retry loops.

A loop resets it only once what it retries has proven itself (a watch that
stayed open or delivered an event), not when a first request merely answered:
a server that answers LISTs but refuses every watch would otherwise be asked
again and again at the initial delay. Jitter spreads a fleet's retries so
thousands of nodes do not come back in step after an outage.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# A watch that stayed open this long, or delivered an event, has proven the server
# well: only then does a watch loop's backoff start again from its first step.
WATCH_PROVEN_S = 30.0


@dataclass
class Backoff:
    initial_s: float = 0.2
    max_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    _next_s: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._next_s = self.initial_s

    def delay(self, at_least_s: float = 0.0) -> float:
        """The wait before the next try (at least what the server asked, e.g.
        Retry-After), growing each time until `reset`."""
        base = self._next_s
        self._next_s = min(base * 2, self.max_s)
        # "Equal jitter": between half and all of the step, never near zero.
        return max(at_least_s, base * self.rng.uniform(0.5, 1.0))

    def reset(self) -> None:
        self._next_s = self.initial_s
