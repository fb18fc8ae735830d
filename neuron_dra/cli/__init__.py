"""`neuron-dra`: the node agent, node inspection, and the offline claim tools.

Owns: the command line. Each command module registers its flags here and
imports what its command runs only when it runs, so `neuron-dra run` loads the
agent and nothing of the tools. May use every layer.
"""

from __future__ import annotations

import argparse
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
    except ValueError as err:
        print(f"neuron-dra: error: {err}", file=sys.stderr)
        return 2
    return code


def parser() -> argparse.ArgumentParser:
    command_line = argparse.ArgumentParser(prog="neuron-dra", description=__doc__.splitlines()[0])
    levels = ["debug", "info", "warning", "error"]
    command_line.add_argument("--log-level", default="info", choices=levels)
    command_line.add_argument("--log-format", default="text", choices=["text", "json"])
    commands = command_line.add_subparsers(required=True, metavar="COMMAND")
    node.add_commands(commands)
    agent.add_command(commands)
    tools.add_commands(commands)
    return command_line
