"""The agent caps glibc's malloc arenas, unless the environment already does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "from neuron_dra.agent import arenas; print(arenas.limit())"


def limit_in_a_fresh_process(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallopt")
def test_the_arenas_are_capped_on_glibc() -> None:
    assert limit_in_a_fresh_process() == "True"


def test_the_environment_wins() -> None:
    assert limit_in_a_fresh_process(MALLOC_ARENA_MAX="4") == "False"
