"""`neuron-dra`: the node agent, node inspection, and the offline claim tools.

Owns: the command line. Each command module registers its flags here and
imports what its command runs only when it runs, so `neuron-dra run` loads the
agent and nothing of the tools. For `run` only its own flags are built: the
other commands' flags import the hardware and slice modules (0.09 s), and the
package's version (`--version`) is looked up only when asked (0.05 s), both
time the kubelet's sockets would otherwise wait for. May use every layer.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from neuron_dra.cli import agent, flags, logs

STARTED = time.monotonic()  # start-up time is measured from the first import


def main(argv: Sequence[str] | None = None) -> int:
    try:
        if "_ARGCOMPLETE" in os.environ:  # a shell asking for completions (`completion`)
            from neuron_dra.cli import completion  # noqa: PLC0415 (the docstring says why)

            completion.complete(parser())
        args = parse(sys.argv[1:] if argv is None else argv)
        logs.configure(args.log_level, args.log_format)
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
    import importlib.metadata  # noqa: PLC0415 (see the module's docstring)

    try:
        return importlib.metadata.version("neuron-dra")
    except importlib.metadata.PackageNotFoundError:  # run from a tree never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """argparse's `version` action, with the version looked up when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(f"{parser.prog} {_version()}")  # on stdout, as argparse's own action
        parser.exit()


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line's arguments; for `run`, parsed by its own flags alone."""
    return parser(only_run=_command(argv) == "run").parse_args(argv)


def _command(argv: Sequence[str]) -> str | None:
    """The command `argv` names, read past the global flags; None if none."""
    before = argparse.ArgumentParser(add_help=False)
    # Without choices: a bad value is for the whole parser to report.
    before.add_argument("--log-level")
    before.add_argument("--log-format")
    before.add_argument("command", nargs="?")
    command: str | None = before.parse_known_args(argv)[0].command
    return command


def parser(*, only_run: bool = False) -> argparse.ArgumentParser:
    command_line = argparse.ArgumentParser(
        prog="neuron-dra",
        description=__doc__.splitlines()[0],
        formatter_class=flags.DefaultsFormatter,
    )
    command_line.add_argument(
        "--version",
        action=_VersionAction,
        help="the driver's version (the package's, which the chart and image carry too)",
    )
    levels = ["debug", "info", "warning", "error"]
    command_line.add_argument("--log-level", default="info", choices=levels, help="log threshold")
    command_line.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one object a line, with claim, device and node fields (the chart's choice)",
    )
    commands = command_line.add_subparsers(
        required=True, metavar="COMMAND", parser_class=flags.CommandParser
    )
    if only_run:
        agent.add_command(commands)
        return command_line
    from neuron_dra.cli import completion, doctor, node, tools  # noqa: PLC0415 (see docstring)

    node.add_commands(commands)
    agent.add_command(commands)
    tools.add_commands(commands)
    completion.add_command(commands)
    doctor.add_command(commands)
    return command_line
