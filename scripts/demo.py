"""Local demo: simulate a trn2.48xlarge node and show what the driver publishes for it."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from neuron_dra.cli import main


def demo() -> int:
    with tempfile.TemporaryDirectory(prefix="neuron-dra-demo-") as tmp:
        root = str(Path(tmp) / "trn2-node")
        steps = [
            ["fake-node", "--instance-type", "trn2.48xlarge", "--out", root],
            ["discover", "--sysfs-root", root],
            ["slices", "--sysfs-root", root, "--node-name", "trn2-node"],
        ]
        for argv in steps:
            print(f"\n$ neuron-dra {' '.join(argv)}", flush=True)
            if (code := main(argv)) != 0:
                return code
    return 0


if __name__ == "__main__":
    sys.exit(demo())
