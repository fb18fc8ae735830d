"""`make demo`, the README's first command, as a user without a terminal runs it: it
schedules the examples on simulated nodes, prints what each container got, stops
everything, and prints what the README shows it printing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_dra_harness.build import Binaries

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def readme_sample() -> list[str]:
    """The lines of the README's sample of the demo's output ("..." ends a cut line)."""
    text = (REPO / "README.md").read_text()
    [block] = re.findall(r"`make demo` runs.*?```text\n(.*?)```", text, re.DOTALL)
    return [line for line in block.splitlines() if line.strip() != "..."]


def test_the_demo_prints_what_the_readme_shows(e2e_binaries: Binaries) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/demo.py")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.splitlines()
    for line in readme_sample():
        if line.endswith(" ..."):
            assert any(p.startswith(line.removesuffix(" ...")) for p in printed), line
        else:
            assert line in printed, (line, done.stdout)
    assert "(run `make demo` in a terminal to keep the cluster up for kubectl)" in printed
