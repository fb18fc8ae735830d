"""`neuron-dra completion SHELL`: shell completion, from argcomplete.

The printed script asks `neuron-dra` itself for completions, with `_ARGCOMPLETE` in
its environment; `main` then hands the parser to argcomplete, which answers and
exits. argcomplete is in the `tools` extra and imported only then.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from neuron_dra.cli import extra

SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")


def add_command(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "completion",
        help="print the shell code that completes neuron-dra's commands and flags",
        description="Load it in the shell, e.g. `source <(neuron-dra completion bash)` "
        "in ~/.bashrc.",
    )
    cmd.add_argument("shell", choices=SHELLS, help="the shell to print the code for")
    cmd.set_defaults(command=_print)


def _argcomplete() -> Any:
    try:
        import argcomplete  # noqa: PLC0415 (the tools extra)
        import argcomplete.shell_integration  # noqa: PLC0415
    except ModuleNotFoundError as err:
        raise ValueError(extra.missing("shell completion", err.name)) from err
    return argcomplete


def _print(args: argparse.Namespace) -> int:
    code: str = _argcomplete().shell_integration.shellcode(["neuron-dra"], shell=args.shell)
    print(code, end="")
    return 0


def complete(parser: argparse.ArgumentParser) -> NoReturn:
    """Answer the shell's completion request on argcomplete's channel and exit."""
    _argcomplete().autocomplete(parser)
    raise SystemExit(0)  # argcomplete exits itself; a request it did not take ends here
