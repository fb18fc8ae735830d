"""The schemas `lint` and `simulate` check objects against are the newest supported
release's own: `scripts/extract_api_schemas.py --check` against the OpenAPI of the
Kubernetes module the end-to-end build fetched."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_dra_harness.build import Binaries

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/extract_api_schemas.py"


def test_the_checked_schemas_are_the_releases(e2e_binaries: Binaries) -> None:
    release = runpy.run_path(str(SCRIPT))["RELEASE"]
    if e2e_binaries.version != release:
        pytest.skip(f"the schemas are {release}'s; this run built {e2e_binaries.version}")
    check = [sys.executable, str(SCRIPT), "--check"]
    result = subprocess.run(check, check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
