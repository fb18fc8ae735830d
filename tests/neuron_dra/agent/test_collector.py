"""What start-up made is kept out of the collector's passes."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc
from neuron_dra.agent import collector
before = gc.get_freeze_count()
frozen = collector.freeze_startup()
garbage = [[] for _ in range(1000)]
print(before, frozen, gc.get_freeze_count())
"""


def test_the_objects_alive_at_start_are_frozen_and_later_ones_are_not() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    before, frozen, after = map(int, done.stdout.split())
    assert before == 0
    assert frozen > 1000  # the interpreter's and the driver's modules at least
    assert after == frozen  # objects made after stay collectable
