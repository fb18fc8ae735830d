"""bench/interleave.py in miniature: arms side by side on a few nodes each.

Checks that every arm is grown and filled to its state before any is timed, that
each arm times every block with the arms' order rotated, and that an arm of a layout
without cores times no core case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_interleaved_benchmark_times_every_arm_in_every_block(tmp_path: Path) -> None:
    out = tmp_path / "interleaved.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "interleave.py"),
            "--size",
            "10",
            "--arms",
            "partitions:empty,partitions:core-full-1,devices:full",
            "--cases",
            "1 device,1 core",
            "--blocks",
            "2",
            "--pods",
            "1",
            "--allow-dirty",
            "--out",
            str(out),
        ],
        check=True,
        timeout=600,
    )
    result = json.loads(out.read_text())
    arms = result["arms"]
    assert list(arms) == ["partitions, empty", "partitions, core-full-1", "devices, full"]
    for arm in arms.values():
        assert len(arm["blocks"]) == 2
    assert set(arms["partitions, empty"]["blocks"][0]["cases"]) == {"1 device", "1 core"}
    assert set(arms["devices, full"]["blocks"][1]["cases"]) == {"1 device"}
    # 9 of 10 nodes full of 1-core claims (64 a node at LNC 2), their devices withdrawn.
    assert arms["partitions, core-full-1"]["claims"] == 9 * 64
    assert (
        arms["partitions, core-full-1"]["devices_published"]
        < (arms["partitions, empty"]["devices_published"])
    )
    assert arms["devices, full"]["claims"] == 9
    assert result["run"]["load_average"]["end"]


def test_an_arm_of_cores_on_a_layout_without_them_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "interleave.py"),
            "--arms",
            "devices:core-full-1",
            "--out",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "devices publishes no cores to fill" in done.stderr
