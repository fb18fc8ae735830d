"""The wheel, as the image installs it: complete, and working outside the source tree.

The wheel is built from a copy of the packaged files (the build writes its
scratch files next to the sources, which must not touch the checkout), then
installed without dependencies into a fresh venv. Its runtime dependencies
come from this project's venv, which the fresh venv sees through a path entry
placed after its own site-packages. The project venv's editable install of
neuron-dra is a .pth hook that is not processed from such an entry, so every
import of neuron_dra, api and consts must resolve to the installed wheel. That
keeps the test offline and fast; the pins themselves are checked against the
wheel's metadata.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("neuron_dra", "api", "consts")
SOURCES = ("pyproject.toml", "README.md", *PACKAGES)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
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
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(src)],
        check=True, cwd=work,
    )  # fmt: skip
    (found,) = out.glob("neuron_dra-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel; returns its bin directory."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(own) / "zz_runtime_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        check=True,
    )  # fmt: skip
    return root / "bin"


def test_wheel_holds_every_package_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        path.relative_to(REPO).as_posix()
        for package in PACKAGES
        for path in (REPO / package).rglob("*")
        if path.is_file() and path.suffix in {".py", ".pyi", ".typed"}
    }
    assert expected - names == set()
    for package in PACKAGES:
        assert f"{package}/py.typed" in names
    protos = {n for n in names if n.startswith("api/kubelet/") and n.endswith("_pb2.py")}
    assert {n.split("/")[2] for n in protos} >= {"dra", "drahealth", "grpchealth",
                                                  "pluginregistration"}  # fmt: skip
    assert not {n for n in names if n.startswith("tests/") or "__pycache__" in n}


def test_wheel_requirements_are_pinned(wheel: Path) -> None:
    """Every runtime requirement has a pin in constraints.txt that satisfies it."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    requirements = [Requirement(line.split(":", 1)[1]) for line in lines
                    if line.startswith("Requires-Dist:")]  # fmt: skip
    runtime = [r for r in requirements if r.marker is None]
    assert {r.name for r in runtime} >= {"grpcio", "protobuf", "kubernetes", "pydantic"}
    pins = {
        Requirement(line).name.lower().replace("_", "-"): Requirement(line)
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for requirement in runtime:
        pin = pins.get(requirement.name.lower().replace("_", "-"))
        assert pin is not None, f"{requirement.name} has no pin in constraints.txt"
        (version,) = (s.version for s in pin.specifier)
        assert requirement.specifier.contains(version), f"{pin} does not satisfy {requirement}"


def test_installed_wheel_runs_outside_the_source_tree(venv: Path, tmp_path: Path) -> None:
    env = {"PATH": f"{venv}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*argv: str) -> str:
        result = subprocess.run(
            argv, check=False, cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "--healthcheck-port" in run("neuron-dra", "run", "--help")
    assert "--sysfs-root" in run("neuron-dra", "discover", "--help")
    # Everything `run` imports, including the generated gRPC modules, from the wheel.
    probe = (
        "import json, neuron_dra, api, consts, neuron_dra.run, neuron_dra.kubelet\n"
        "from api.kubelet.dra.v1 import api_pb2\n"
        "print(json.dumps([m.__file__ for m in (neuron_dra, api, consts, api_pb2)]))"
    )
    files = json.loads(run(str(venv / "python"), "-c", probe))
    site = Path(
        run(
            str(venv / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        ).strip()
    )
    for file in files:
        assert Path(file).is_relative_to(site), file
    # A fake node's inventory, end to end from the installed command.
    node = run("neuron-dra", "fake-node", "--instance-type", "inf2.xlarge", "--out", "n").strip()
    inventory = json.loads(run("neuron-dra", "discover", "--sysfs-root", node, "-o", "json"))
    assert inventory["instanceType"] == "inf2.xlarge"


def test_image_build_context_holds_the_packages() -> None:
    """The Dockerfile copies, and .dockerignore lets through, every packaged directory."""
    dockerfile = (REPO / "Dockerfile").read_text()
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for package in PACKAGES:
        assert f"COPY {package} ./{package}" in dockerfile
        assert f"!{package}/" in ignore
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        assert f"!{name}" in ignore
    assert 'ENTRYPOINT ["neuron-dra", "run"]' in dockerfile
