"""The driver's version has one source, consts.DRA_DRIVER_VERSION: the package
metadata reads it, the release scripts print it, and the chart repeats it."""

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from consts import DRA_DRIVER_VERSION

REPO = Path(__file__).resolve().parents[1]


def test_the_package_takes_its_version_from_consts() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "consts.DRA_DRIVER_VERSION"}


def test_the_release_scripts_read_it_from_any_directory(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-I", str(REPO / "scripts/version.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == f"{DRA_DRIVER_VERSION}\n"


def test_the_chart_repeats_it() -> None:
    chart = yaml.safe_load((REPO / "deploy/helm/neuron-dra/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (DRA_DRIVER_VERSION, DRA_DRIVER_VERSION)
