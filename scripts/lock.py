"""Write the hashed lock files in ``requirements/`` with ``uv pip compile``.

Each lock pins every package of one set to the version in ``constraints.txt``,
with the sha256 of each of that version's files on the index, for ``pip install
--require-hashes``:

- ``requirements/image.txt``: the driver's runtime dependencies (pyproject.toml,
  with the ``cli`` extra: the agent and the offline tools), what the image installs;
- ``requirements/build.txt``: pip and setuptools, what builds the image
  (``requirements/build.in``);
- ``requirements/uv.txt``: uv itself, for this script in the release workflow
  (``requirements/uv.in``).

Resolved for the image's Python (3.11, Debian bookworm's) on Linux, whatever
runs the script. It asks the package index, so it needs the network; it sees the
index as it was at EXCLUDE_NEWER, so a file uploaded later to a pinned version
does not make a lock stale. Move EXCLUDE_NEWER past the publication of a new pin
when constraints.txt changes.

    python scripts/lock.py           # rewrite the locks after editing constraints.txt
    python scripts/lock.py --check   # fail, showing the difference, if one is stale
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PYTHON_VERSION = "3.11"  # the image's: python3 of Debian bookworm
PLATFORM = "x86_64-manylinux_2_28"  # Neuron instances are x86_64
COMMAND = "python scripts/lock.py"
EXCLUDE_NEWER = "2026-11-28T00:00:00Z"  # after every pin in constraints.txt was published


@dataclass(frozen=True)
class Lock:
    source: str  # relative to the repository
    output: str
    extras: tuple[str, ...] = ()


LOCKS = (
    Lock("pyproject.toml", "requirements/image.txt", extras=("cli",)),
    Lock("requirements/build.in", "requirements/build.txt"),
    Lock("requirements/uv.in", "requirements/uv.txt"),
)


def compile_lock(lock: Lock, output: Path) -> None:
    """`uv pip compile` of `lock.source` into `output`, run from the repository root so
    that the file names it writes are relative."""
    argv = [
        sys.executable,
        "-m",
        "uv",
        "pip",
        "compile",
        lock.source,
        *(f"--extra={extra}" for extra in lock.extras),
        "--constraint",
        "constraints.txt",
        "--generate-hashes",
        "--python-version",
        PYTHON_VERSION,
        "--python-platform",
        PLATFORM,
        "--custom-compile-command",
        COMMAND,
        "--exclude-newer",
        EXCLUDE_NEWER,
        "--no-progress",
        "--quiet",
        "--output-file",
        str(output),
    ]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"uv pip compile {lock.source} failed:\n{done.stderr}")


def stale(lock: Lock, scratch: Path) -> list[str]:
    """The difference between `lock.output` and a fresh compile (empty: up to date)."""
    fresh = scratch / Path(lock.output).name
    compile_lock(lock, fresh)
    path = REPO_ROOT / lock.output
    old = path.read_text().splitlines(keepends=True) if path.exists() else []
    return list(
        difflib.unified_diff(
            old, fresh.read_text().splitlines(keepends=True), lock.output, "uv pip compile"
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a lock is stale")
    args = parser.parse_args(argv)
    try:
        if not args.check:
            for lock in LOCKS:
                compile_lock(lock, REPO_ROOT / lock.output)
            return 0
        with tempfile.TemporaryDirectory() as scratch:
            diffs = [line for lock in LOCKS for line in stale(lock, Path(scratch))]
    except RuntimeError as error:
        print(f"lock: {error}", file=sys.stderr)
        return 1
    if diffs:
        sys.stdout.writelines(diffs)
        print(f"lock: stale; run `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
