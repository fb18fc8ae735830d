"""Fixtures shared by the whole suite: simulated Neuron nodes in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from neuron_dra.hardware.fakenode import (
    DEFAULT_DRIVER_VERSION,
    Counters,
    FakeUltraServer,
    build_fake_node,
)
from tests.sysfs_tree import FakeNode


@pytest.fixture
def fake_node(tmp_path: Path) -> FakeNode:
    """`fake_node("trn2.48xlarge")` -> the sysfs root of a simulated node."""

    def build(
        instance_type: str,
        *,
        name: str = "node",
        driver_version: str = DEFAULT_DRIVER_VERSION,
        lnc: int | None = None,
        ultraserver: FakeUltraServer | None = None,
        pci_parents: bool = False,
        counters: Counters = Counters.NONE,  # the tests of the counters ask for them
    ) -> Path:
        return build_fake_node(
            tmp_path / name,
            instance_type,
            driver_version=driver_version,
            lnc=lnc,
            ultraserver=ultraserver,
            pci_parents=pci_parents,
            counters=counters,
        )

    return build


@pytest.fixture(scope="session")
def git_history() -> None:
    """Skip a test that looks up commits where the checkout holds no history to look in:
    not a git checkout, or a shallow clone."""
    found = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip("not a git checkout: no commits to look up")
    if found.stdout.strip() == "true":
        pytest.skip("a shallow clone: the commits before its tip are not here")
