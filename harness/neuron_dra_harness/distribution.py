"""What the project ships: its packages, its wheel, and what the `tools` extra adds.

Shared by the packaging tests, the end-to-end import check and
bench/footprint.py, so they build and judge the same thing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("neuron_dra", "api", "consts")
SOURCES = ("pyproject.toml", "README.md", *PACKAGES)
# The tools and the modules their extra installs: the node agent loads none of them.
TOOL_MODULES = (
    "neuron_dra.tools",
    "neuron_dra.hardware.fakenode",
    "celpy",
    "lark",
    "pendulum",
    "jmespath",
    "re2",
)


def build_wheel(work: Path) -> Path:
    """The project's wheel, built in `work` from a copy of the packaged files: the build
    writes scratch files beside its sources, which must not touch the checkout."""
    src = work / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    out = work / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(src),
        ],
        check=True,
        cwd=work,
    )
    (found,) = out.glob("neuron_dra-*.whl")
    return found
