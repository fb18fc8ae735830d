"""What a kept result says of the code and the machine that made it, so that each figure
can be traced to a commit of the repository and read against the load it ran under.

`at_start(repo, allow_dirty)` is the run's record at its start: the full commit checked
out, whether the tree had changes, the driver's version and the load average. A tree
with changes (anything `git status` shows outside bench/results, where the runs write)
ran code that no commit holds, so such a run is refused unless the caller allows it,
and then the record says `"dirty": true`. `at_end(record)` adds the load average at the
end: a run of tens of minutes on a shared machine is read against both.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from consts import DRA_DRIVER_VERSION

Obj = dict[str, Any]
# Where the runs write their results: a result not yet committed changes no code.
OUTPUTS = "bench/results"


class DirtyTreeError(Exception):
    """The tree has changes no commit holds, and the run was not allowed to use them."""


def _git(repo: Path, *argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


def changes(repo: Path) -> list[str]:
    """`git status --porcelain` of the tree outside bench/results: changed, staged and
    untracked files alike, since any of them may be what ran."""
    status = _git(repo, "status", "--porcelain", "--", ".", f":(exclude){OUTPUTS}")
    return status.splitlines()


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, to two decimals."""
    return [round(load, 2) for load in os.getloadavg()]


def at_start(repo: Path, allow_dirty: bool) -> Obj:
    """The record of a run starting from `repo`'s checkout: refused (DirtyTreeError) where
    the tree has changes and `allow_dirty` is false."""
    changed = changes(repo)
    if changed and not allow_dirty:
        listed = ", ".join(line[3:] for line in changed[:5])
        raise DirtyTreeError(
            f"the tree has changes no commit holds ({listed}"
            f"{', ...' if len(changed) > 5 else ''}): commit them, or mark the run "
            "with --allow-dirty"
        )
    return {
        "commit": _git(repo, "rev-parse", "HEAD").strip(),
        "dirty": bool(changed),
        "driver_version": DRA_DRIVER_VERSION,
        "load_average": {"start": load_average()},
    }


def at_end(record: Obj) -> Obj:
    """`record` with the load average at the end of the run (now)."""
    return {**record, "load_average": {**record["load_average"], "end": load_average()}}
