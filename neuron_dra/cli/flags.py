"""Flags more than one command takes, with no imports beyond argparse: `run` builds its
parser from this module alone, before the kubelet's sockets are served."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from consts import ENV_SYSFS_ROOT

SubParsers = Any  # argparse's _SubParsersAction, which typeshed keeps private


def add_sysfs_root(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--sysfs-root",
        type=Path,
        default=Path(os.environ.get(ENV_SYSFS_ROOT, "/")),
        help=f"root holding sys/, dev/ and opt/aws/neuron (default ${ENV_SYSFS_ROOT} or /)",
    )
