"""`neuron-dra`: the node agent, node inspection, and the offline claim tools.

Owns: the command line. Each command module registers its flags here and
imports what its command runs only when it runs, so `neuron-dra run` loads the
agent and nothing of the tools. May use every layer.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import select
import sys
import time
from collections.abc import Sequence

from neuron_dra.cli import agent, logs, node, tools

STARTED = time.monotonic()  # start-up time is measured from the first import


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    try:
        code: int = args.command(args)
        # Flushed here, not at exit, so a closed pipe is caught below and not
        # reported by the interpreter as an ignored exception.
        sys.stdout.flush()
    except ValueError as err:
        print(f"neuron-dra: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # a connection of the command's own, which must not go unseen
        # The reader went away (`neuron-dra lint ... | head`): what it wanted was
        # written. Python's recipe: point stdout at devnull so the flush at exit
        # cannot fail again, and exit 1 as Python itself does on EPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return code


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):  # no real file behind stdout: not a pipe
        return False


def _version() -> str:
    try:
        return importlib.metadata.version("neuron-dra")
    except importlib.metadata.PackageNotFoundError:  # run from a tree never installed
        return "unknown"


def parser() -> argparse.ArgumentParser:
    command_line = argparse.ArgumentParser(prog="neuron-dra", description=__doc__.splitlines()[0])
    command_line.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}",
        help="the driver's version (the package's, which the chart and image carry too)",
    )  # fmt: skip
    levels = ["debug", "info", "warning", "error"]
    command_line.add_argument("--log-level", default="info", choices=levels, help="log threshold")
    command_line.add_argument(
        "--log-format", default="text", choices=["text", "json"],
        help="json: one object a line, with claim, device and node fields (the chart's default)",
    )  # fmt: skip
    commands = command_line.add_subparsers(required=True, metavar="COMMAND")
    node.add_commands(commands)
    agent.add_command(commands)
    tools.add_commands(commands)
    return command_line
