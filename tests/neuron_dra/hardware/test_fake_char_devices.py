"""Fake trees whose /dev/neuronN a container can open: character devices of one number,
which sysfs's `dev` reports and discovery passes on to the CDI spec."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FAKE_MAJOR, build_fake_node

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def test_device_nodes_are_character_devices_of_the_given_number(tmp_path: Path) -> None:
    build_fake_node(tmp_path, "inf2.xlarge", char_device=(1, 3))
    node = (tmp_path / "dev/neuron0").stat()
    assert stat.S_ISCHR(node.st_mode) and stat.S_IMODE(node.st_mode) == 0o666
    assert (os.major(node.st_rdev), os.minor(node.st_rdev)) == (1, 3)
    [device] = discover(tmp_path).inventory.devices
    assert device.major_minor == (1, 3)


def test_rebuilding_a_plain_tree_with_character_devices_replaces_its_files(
    tmp_path: Path,
) -> None:
    build_fake_node(tmp_path, "inf2.xlarge")
    assert (tmp_path / "dev/neuron0").is_file()
    [device] = discover(tmp_path).inventory.devices
    assert device.major_minor == (FAKE_MAJOR, 0)
    build_fake_node(tmp_path, "inf2.xlarge", char_device=(1, 3))
    assert (tmp_path / "dev/neuron0").is_char_device()
