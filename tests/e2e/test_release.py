"""`scripts/release.sh`: one version's image archive, packaged chart and checksums,
the version taken from pyproject.toml and refused where the chart disagrees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from neuron_dra_harness import images
from tests import doc_commands

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_documented_release_commands_run(helm_bin: Path, tmp_path: Path) -> None:
    """docs/operators/install.md's release commands as written (root already, so without
    sudo; the repository's scripts by path), in a directory of their own; then what they
    made is checked."""
    if os.geteuid() != 0 or images.missing_tools():
        pytest.skip(f"building the image needs root and {', '.join(images.missing_tools())}")
    out = tmp_path / "dist"
    env = {**os.environ, "HELM": str(helm_bin), "TMPDIR": str(tmp_path)}
    ran = doc_commands.run_by(doc_commands.RELEASE)
    assert [c.argv[0] for c in ran] == ["sudo", "cd"], ran
    for command in ran:
        text = doc_commands.fill(command.text, registry="registry.example/ml")
        text = text.removeprefix("sudo ").replace("scripts/", f"{REPO}/scripts/")
        done = subprocess.run(["bash", "-c", text], cwd=tmp_path, env=env, check=False,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, (str(command), done.stdout[-2000:], done.stderr[-2000:])
    image, chart = f"neuron-dra-{VERSION}.oci.tar", f"neuron-dra-{VERSION}.tgz"
    assert sorted(p.name for p in out.iterdir()) == sorted([image, chart, "SHA256SUMS"])
    with tarfile.open(out / chart) as archive:
        member = archive.extractfile("neuron-dra/Chart.yaml")
        assert member is not None
        meta = yaml.safe_load(member.read())
    assert (meta["version"], meta["appVersion"]) == (VERSION, VERSION)
    with tarfile.open(out / image) as archive:
        member = archive.extractfile("index.json")
        assert member is not None
        index = json.loads(member.read())
    names = {m["annotations"].get("io.containerd.image.name") for m in index["manifests"]}
    assert f"registry.example/ml/neuron-dra:{VERSION}" in names


def test_a_chart_of_another_version_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", copy / "scripts")
    shutil.copytree(REPO / "deploy/helm", copy / "deploy/helm")
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    chart = copy / "deploy/helm/neuron-dra/Chart.yaml"
    chart.write_text(chart.read_text().replace(f"version: {VERSION}", "version: 9.9.9"))
    result = subprocess.run(
        [str(copy / "scripts/release.sh"), str(tmp_path / "out")],
        env={**os.environ, "HELM": "/bin/true"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert f"Chart.yaml version is 9.9.9, pyproject.toml says {VERSION}" in result.stderr
