"""Flags more than one command takes, with no imports beyond argparse: `run` builds its
parser from this module alone, before the kubelet's sockets are served."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from consts import ENV_SYSFS_ROOT

# Help that names its default already: `(default: ...)`, `(default $ENV or /)`, `default: ...`.
_SAYS_DEFAULT = re.compile(r"\(default\b|\bdefault:")

SubParsers = Any  # argparse's _SubParsersAction, which typeshed keeps private


def add_sysfs_root(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--sysfs-root",
        type=Path,
        default=Path(os.environ.get(ENV_SYSFS_ROOT, "/")),
        help=f"root holding sys/, dev/ and opt/aws/neuron (default ${ENV_SYSFS_ROOT} or /)",
    )


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's help with each option's default, as `ArgumentDefaultsHelpFormatter`
    adds it, but only where there is one to name: not for an option that is off or unset
    unless given (a flag, a None, an empty list), nor where the help says it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            _SAYS_DEFAULT.search(text)
            or not action.option_strings
            or action.default in (None, False, [], argparse.SUPPRESS)
        ):
            return text
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """The parser of one command (`add_subparsers(parser_class=...)`): defaults shown."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(**kwargs)
