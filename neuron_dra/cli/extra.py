"""What to say when a command needs the `tools` extra and it is not installed.

The extra is named after the package, but the package is not on PyPI: the three ways
that really get it are a clone of the repository, the wheel a release attaches to its
GitHub release (docs/operators/releases.md), and the driver's image, whose plugin pods
carry the offline tools already (the chart's DaemonSet, `neuron-dra` in namespace
`neuron-dra` by default).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# The chart's defaults (deploy/daemonset.yaml): its namespace and DaemonSet.
PLUGIN_POD = "-n neuron-dra ds/neuron-dra"


def missing(what: str, module: str | None) -> str:
    """The error for `what` (`neuron-dra lint`) when `module` of the extra cannot be imported."""
    return (
        f"{what} needs the tools extra ({module or 'a module of it'} is not installed); "
        "install it from a clone of the repository with `pip install -e '.[tools]'`, or from "
        "a release's wheel with `pip install 'neuron_dra-<version>-py3-none-any.whl[tools]'`, "
        "or run it in a plugin pod, which has it: "
        f"`kubectl exec -i {PLUGIN_POD} -- neuron-dra lint - < FILE`"
    )


@contextlib.contextmanager
def needed(command: str) -> Iterator[None]:
    """Imports of the tools; a missing `tools` extra becomes a one-line error."""
    try:
        yield
    except ModuleNotFoundError as err:
        if (err.name or "").partition(".")[0] in {"neuron_dra", "api", "consts"}:
            raise  # a broken install of the driver itself, not a missing extra
        raise ValueError(missing(f"`neuron-dra {command}`", err.name)) from err
