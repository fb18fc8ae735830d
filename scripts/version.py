"""Print the driver's version: ``consts.DRA_DRIVER_VERSION``, the one source.

The package metadata (pyproject.toml reads it as a dynamic version), the image tag
and the release artifacts take it from here; Chart.yaml repeats it and
``scripts/release.sh`` refuses a chart whose version differs. Runs with any
Python 3.11 from any directory, without installing anything.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consts import DRA_DRIVER_VERSION

if __name__ == "__main__":
    print(DRA_DRIVER_VERSION)
