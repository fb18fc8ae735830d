"""`neuron-dra run` that kills itself with SIGKILL after one step of a claim.

The crash seam of the end-to-end tests: the agent's `after_step` hook, armed
here for one step, so the production command has no test switch to read.

    python crashing_plugin.py after-cdi-write run --node-name=... [run flags]
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from neuron_dra.agent.claims.preparer import STEPS, Step
from neuron_dra.agent.run import run
from neuron_dra.cli import STARTED, logs, parser
from neuron_dra.cli.agent import run_options


def main(argv: list[str]) -> int:
    step, *command = argv
    if step not in STEPS:
        raise SystemExit(f"{step!r} is not one of {', '.join(STEPS)}")
    args = parser().parse_args(command)
    logs.configure(args.log_level, args.log_format)
    logging.getLogger("neuron_dra").warning("armed: the process kills itself %s", step)

    def kill(reached: Step) -> None:
        if reached == step:
            os.kill(os.getpid(), signal.SIGKILL)

    return run(run_options(args), STARTED, after_step=kill)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
