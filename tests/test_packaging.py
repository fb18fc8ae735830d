"""The wheel, as the image installs it: complete, and working outside the source tree.

The wheel is built from a copy of the packaged files (the build writes its
scratch files next to the sources, which must not touch the checkout), then
installed without dependencies into fresh venvs. Their runtime dependencies
come from this project's venv, seen through a path entry placed after the
venv's own site-packages: all of it (the driver with the `tools` extra), or
only the files of the distributions the agent requires (what the image
installs). The project venv's editable install of neuron-dra is a .pth hook
that is not processed from such an entry, so every import of neuron_dra, api
and consts must resolve to the installed wheel. That keeps the test offline and
fast; the pins themselves are checked against the wheel's metadata.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from neuron_dra_harness.distribution import PACKAGES, REPO, build_wheel

# An example both tool commands run on, from the installed command, outside the checkout.
SPEC = str(REPO / "examples" / "specs" / "inf2-2-connected.yaml")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def installed_venv(wheel: Path, root: Path, dependencies: Path) -> Path:
    """A fresh venv holding the wheel, its dependencies found in `dependencies`;
    returns its bin directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(own) / "zz_runtime_deps.pth").write_text(f"{dependencies}\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
    )
    return root / "bin"


# The extras the image installs (requirements/image.txt): the CLI, not `kubernetes`.
IMAGE_EXTRAS = frozenset({"cli"})


def requirement_closure(
    name: str, extras: frozenset[str] = frozenset()
) -> dict[str, metadata.Distribution]:
    """The installed distributions `name` with `extras` needs at run time."""
    found: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, frozenset[str]]] = [(name, extras)]
    while todo:
        wanted, extras = todo.pop()
        key = canonicalize_name(wanted)
        if key in found and not extras:
            continue
        found[key] = dist = metadata.distribution(wanted)
        for line in dist.requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in {"", *extras}):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel with every dependency of this project's venv, the tools' included."""
    root = tmp_path_factory.mktemp("venv") / "v"
    return installed_venv(wheel, root, Path(sysconfig.get_paths()["purelib"]))


@pytest.fixture(scope="module")
def agent_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel with exactly the distributions it requires with the `cli` extra: the
    image's set."""
    work = tmp_path_factory.mktemp("agent")
    site = work / "site"
    for key, dist in requirement_closure("neuron-dra", IMAGE_EXTRAS).items():
        if key == "neuron-dra":
            continue  # the wheel provides it
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # scripts in bin/, bytecode
            link = site / file
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(Path(str(dist.locate_file(file))))
    return installed_venv(wheel, work / "v", site)


def test_wheel_holds_every_package_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        path.relative_to(REPO).as_posix()
        for package in PACKAGES
        for path in (REPO / package).rglob("*")
        if path.is_file() and path.suffix in {".py", ".pyi", ".typed", ".json"}
    }
    assert expected - names == set()
    for package in PACKAGES:
        assert f"{package}/py.typed" in names
    protos = {n for n in names if n.startswith("api/kubelet/") and n.endswith("_pb2.py")}
    assert {n.split("/")[2] for n in protos} >= {
        "dra",
        "drahealth",
        "grpchealth",
        "pluginregistration",
        "podresources",
    }
    assert not {n for n in names if n.startswith("tests/") or "__pycache__" in n}


def test_wheel_requirements_are_pinned(wheel: Path) -> None:
    """Every runtime requirement has a pin in constraints.txt that satisfies it."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    requirements = [
        Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")
    ]
    runtime = [r for r in requirements if r.marker is None]
    assert {r.name for r in runtime} >= {"grpcio", "protobuf", "pydantic"}
    # The image installs the runtime set: the kubernetes package is the tools' only.
    assert "kubernetes" not in {r.name for r in runtime}
    pins = constraint_pins()
    for requirement in requirements:  # the extras' too, but for the extras themselves
        if requirement.name == "neuron-dra":
            continue
        version = pins.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement.name} has no pin in constraints.txt"
        assert requirement.specifier.contains(version), f"{version} does not satisfy {requirement}"


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
        "import json, neuron_dra, api, consts\n"
        "import neuron_dra.agent.run, neuron_dra.agent.kubelet.plugin\n"
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
    # The tools with their extra: nothing they read may lie in the checkout.
    allocated = json.loads(run("neuron-dra", "simulate", SPEC, "--node=inf2.48xlarge=1", "-o=json"))
    assert [c["allocated"] for c in allocated["claims"]] == [True]
    assert run("neuron-dra", "lint", SPEC).strip().endswith("0 errors, 0 warnings")


EXEC_KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}}]
"""


def test_the_image_set_runs_the_agent_and_the_cli(agent_venv: Path, tmp_path: Path) -> None:
    """What the image installs runs the agent and the offline CLI (`lint -` and
    `convert -` reading stdin), and says what to install where a kubeconfig needs `kubernetes`."""
    env = {"PATH": f"{agent_venv}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, input=stdin
        )

    probe = run(
        str(agent_venv / "python"),
        "-c",
        "import importlib.util\nprint(importlib.util.find_spec('kubernetes'))",
    )
    assert (probe.returncode, probe.stdout.strip()) == (0, "None"), probe.stderr
    assert "--healthcheck-port" in run("neuron-dra", "run", "--help").stdout
    # The image's set has no `kubernetes` (125 MiB): a kubeconfig that needs it says so.
    kubeconfig = tmp_path / "exec-kubeconfig"
    kubeconfig.write_text(EXEC_KUBECONFIG)
    needs = run("neuron-dra", "run", "--node-name=n", f"--kubeconfig={kubeconfig}")
    assert needs.returncode == 2
    assert "needs the kubernetes package: pip install kubernetes" in needs.stderr
    linted = run("neuron-dra", "lint", "-", stdin=Path(SPEC).read_text())
    assert linted.returncode == 0, linted.stderr
    beta = REPO / "examples" / "specs" / "v1beta1" / "xl-trn2.yaml"
    converted = run("neuron-dra", "convert", "-", stdin=beta.read_text())
    assert converted.returncode == 0, converted.stderr
    assert "apiVersion: resource.k8s.io/v1\n" in converted.stdout
    simulated = run("neuron-dra", "simulate", SPEC, "--node=inf2.48xlarge=1")
    assert simulated.returncode == 0, simulated.stderr
    completion = run("neuron-dra", "completion", "bash")
    assert completion.returncode == 0 and "complete" in completion.stdout, completion.stderr


def test_image_build_context_holds_the_packages() -> None:
    """The Dockerfile copies, and .dockerignore lets through, every packaged directory."""
    dockerfile = (REPO / "Dockerfile").read_text()
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for package in PACKAGES:
        assert f"COPY {package} ./{package}" in dockerfile
        assert f"!{package}/" in ignore
    for name in ("pyproject.toml", "README.md", "requirements/"):
        assert f"!{name}" in ignore
    assert "COPY requirements ./requirements" in dockerfile
    assert "--require-hashes -r /wheels/image.txt" in dockerfile
    assert "--no-build-isolation" in dockerfile
    assert 'ENTRYPOINT ["neuron-dra", "run"]' in dockerfile


def lock_entries(path: Path) -> dict[str, tuple[str, list[str]]]:
    """A lock's packages: canonical name -> (pinned version, sha256 hashes)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\\\n", " ", path.read_text())
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        requirement = Requirement(words[0])
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{path.name}: {words[0]} is not pinned"
        hashes = [w.removeprefix("--hash=sha256:") for w in words[1:]]
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), words[0]
        entries[canonicalize_name(requirement.name)] = (specifier.version, hashes)
    return entries


def constraint_pins() -> dict[str, str]:
    """constraints.txt: each package's canonical name -> its pinned version."""
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pin = Requirement(line)
            (specifier,) = pin.specifier
            assert specifier.operator == "==", f"constraints.txt: {line} is not a pin"
            pins[canonicalize_name(pin.name)] = specifier.version
    return pins


def test_the_image_lock_is_the_runtime_closure_at_the_pinned_versions() -> None:
    """requirements/image.txt, which the image installs with --require-hashes, holds every
    runtime dependency of the driver and nothing else, at constraints.txt's versions, each
    with its files' hashes. (scripts/lock.py --check, in tests/e2e/test_release.py,
    regenerates it from the index.)"""
    image = lock_entries(REPO / "requirements/image.txt")
    runtime = set(requirement_closure("neuron-dra", IMAGE_EXTRAS)) - {"neuron-dra"}
    assert set(image) == runtime
    pins = constraint_pins()
    assert {name: version for name, (version, _) in image.items()} == {
        name: pins[name] for name in image
    }


def test_the_build_tools_are_locked_at_the_pinned_versions() -> None:
    """What builds the image and checks the locks, by hash: pip, setuptools (the build
    backend, fetched by no build isolation), uv."""
    pins = constraint_pins()
    for lock, names in (("build.txt", {"pip", "setuptools"}), ("uv.txt", {"uv"})):
        entries = lock_entries(REPO / "requirements" / lock)
        assert {n: v for n, (v, _) in entries.items()} == {n: pins[n] for n in names}, lock
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    (requirement,) = (Requirement(r) for r in backend["requires"])
    assert requirement.name == "setuptools"
    assert requirement.specifier.contains(pins["setuptools"])
