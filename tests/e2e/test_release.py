"""`scripts/release.sh`: one version's image archive, packaged chart and checksums,
the version taken from consts.DRA_DRIVER_VERSION and refused where the chart disagrees; and the
release workflow's steps that need no registry, run as GitHub runs them, so the workflow
cannot drift from what is tested here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from consts import DRA_DRIVER_VERSION
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra_harness import images
from tests import doc_commands, oci_archive, release_workflow
from tests.release_workflow import LOCAL, REMOTE, SHELL, Step

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
VERSION = DRA_DRIVER_VERSION
WHEEL = f"neuron_dra-{VERSION}-py3-none-any.whl"
CATALOG = f"neuron-dra-{VERSION}-karpenter.json"
PACKAGES = f"neuron-dra-{VERSION}-packages.txt"


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
        done = subprocess.run(
            ["bash", "-c", text], cwd=tmp_path, env=env, check=False, capture_output=True, text=True
        )
        assert done.returncode == 0, (str(command), done.stdout[-2000:], done.stderr[-2000:])
    image, chart = f"neuron-dra-{VERSION}.oci.tar", f"neuron-dra-{VERSION}.tgz"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [image, chart, WHEEL, CATALOG, PACKAGES, "SHA256SUMS"]
    )
    # Karpenter's DynamicResources for every instance type, as `neuron-dra templates`.
    catalog = json.loads((out / CATALOG).read_text())
    assert sorted(catalog) == sorted(INSTANCE_TYPES)
    assert all(c["resourceSliceTemplates"] for c in catalog.values())
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
    with zipfile.ZipFile(out / WHEEL) as wheel:
        metadata = wheel.read(f"neuron_dra-{VERSION}.dist-info/METADATA").decode()
        assert f"neuron_dra-{VERSION}.dist-info/licenses/LICENSE" in wheel.namelist()
    assert f"\nVersion: {VERSION}\n" in metadata
    assert "Provides-Extra: tools" in metadata
    listed = [line.split()[1] for line in (out / "SHA256SUMS").read_text().splitlines()]
    assert sorted(listed) == sorted([image, chart, WHEEL, CATALOG, PACKAGES])


def test_a_chart_of_another_version_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", copy / "scripts")
    shutil.copytree(REPO / "deploy/helm", copy / "deploy/helm")
    shutil.copytree(REPO / "consts", copy / "consts")  # scripts/version.py reads it
    chart = copy / "deploy/helm/neuron-dra/Chart.yaml"
    chart.write_text(chart.read_text().replace(f"version: {VERSION}", "version: 9.9.9"))
    result = subprocess.run(
        [str(copy / "scripts/release.sh"), str(tmp_path / "out")],
        env={**os.environ, "HELM": "/bin/true"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert f"Chart.yaml version is 9.9.9, consts.DRA_DRIVER_VERSION says {VERSION}" in result.stderr


REGISTRY = "registry.example/ml"
SNAPSHOT = "https://snapshot.debian.org/archive/debian/"
EMULATED = (
    "actions/checkout",
    "actions/setup-python",
    "azure/setup-helm",
    "actions/upload-artifact",
    "actions/download-artifact",
    "sigstore/cosign-installer",
    # After the registry's steps, which do not run here: nothing of theirs is needed.
    "docker/login-action",
    "aws-actions/configure-aws-credentials",
    "actions/attest-build-provenance",
    "anchore/sbom-action",
    "actions/attest",
)


@dataclass
class Run:
    """One run of the release workflow here: each job's workspace and what ran."""

    root: Path
    base_env: dict[str, str]
    context: dict[str, str] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)  # what the setup actions put first
    workspaces: dict[str, Path] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)  # the run steps, job/name
    # Job env values set here instead of the workflow's, each said by the test that sets it.
    overridden: dict[str, str] = field(default_factory=dict)

    def env(self, job: dict[str, str], step: Step) -> dict[str, str]:
        steps = {k: release_workflow.expand(v, self.context) for k, v in step.env}
        path = ":".join([*reversed(self.path), self.base_env["PATH"]])
        return {**self.base_env, **job, **steps, "PATH": path}


def copy_of_the_checkout(destination: Path) -> None:
    """The repository's files as a checkout has them: tracked and new, not ignored."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def emulate(run: Run, job: str, step: Step, settings: dict[str, Any]) -> None:
    """What the pinned action does, done here (the action itself is JavaScript run by
    GitHub's runner)."""
    action = step.uses.partition("@")[0]
    workspace = run.workspaces[job]
    if action == "actions/checkout":
        assert settings == {"persist-credentials": False}
        copy_of_the_checkout(workspace)
    elif action == "actions/setup-python":
        wanted = settings["python-version"]
        if f"{sys.version_info[0]}.{sys.version_info[1]}" != wanted:
            pytest.skip(f"the workflow's Python is {wanted}, this one is {sys.version}")
        venv = run.root / "setup-python"
        if not venv.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        run.path.append(str(venv / "bin"))
    elif action == "azure/setup-helm":
        run.path.append(str(Path(run.base_env["HELM_DIR"])))
    elif action == "actions/upload-artifact":
        shutil.copytree(workspace / settings["path"], run.root / "artifacts" / settings["name"])
    elif action == "actions/download-artifact":
        shutil.copytree(run.root / "artifacts" / settings["name"], workspace / settings["path"])
    else:
        assert action in EMULATED, f"no emulation of {step.uses}"


def run_step(run: Run, job_env: dict[str, str], step: Step, number: int) -> dict[str, str]:
    """A run step as GitHub runs it: its script in a file given to the workflow's shell,
    in the job's workspace; returns its outputs."""
    files = run.root / "steps" / f"{number:02}"
    files.mkdir(parents=True)
    script, github_output = files / "script", files / "output"
    script.write_text(step.run)
    github_output.touch()
    env = run.env(job_env, step) | {"GITHUB_OUTPUT": str(github_output)}
    done = subprocess.run(
        [*SHELL, str(script)],
        cwd=run.workspaces[step.job],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (step.name, done.stdout[-3000:], done.stderr[-3000:])
    return release_workflow.read_assignments(github_output)


def run_workflow(root: Path, base_env: dict[str, str], overridden: dict[str, str]) -> Run:
    """Every job of the release workflow in order, with its actions emulated, its LOCAL
    run steps run as written (but for the job env values in `overridden`) and its REMOTE
    ones left out."""
    workflow = release_workflow.load()
    run = Run(root, base_env, context={"vars.REGISTRY": REGISTRY}, overridden=overridden)
    number = 0
    for job in release_workflow.job_order(workflow):
        spec = workflow["jobs"][job]
        run.workspaces[job] = root / "workspaces" / job
        run.workspaces[job].mkdir(parents=True)
        run.path.clear()
        job_env = {
            k: release_workflow.expand(str(v), run.context) for k, v in spec.get("env", {}).items()
        }
        job_env |= {k: v for k, v in overridden.items() if k in job_env}
        for step, raw in zip(release_workflow.steps(workflow, job), spec["steps"], strict=True):
            number += 1
            if step.uses:
                emulate(run, job, step, raw.get("with", {}))
            elif step.name in LOCAL:
                outputs = run_step(run, job_env, step, number)
                run.context |= {f"steps.{step.id}.outputs.{k}": v for k, v in outputs.items()}
                run.ran.append(f"{job}/{step.name}")
            else:
                assert step.name in REMOTE, step.name
        run.context |= {
            f"needs.{job}.outputs.{k}": release_workflow.expand(str(v), run.context)
            for k, v in spec.get("outputs", {}).items()
        }
    return run


@pytest.fixture(scope="module")
def released(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    if os.geteuid() != 0 or images.missing_tools():
        pytest.skip(f"building the image needs root and {', '.join(images.missing_tools())}")
    root = tmp_path_factory.mktemp("workflow")
    shims = root / "shims"
    shims.mkdir()
    if shutil.which("sudo") is None:  # root already: sudo runs the command as it is
        (shims / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
        (shims / "sudo").chmod(0o755)
    # The machine's environment (its proxy and CA settings), less this test's Python's.
    inherited = {
        k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    }
    base_env = {
        **inherited,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "TMPDIR": str(root),
        "HELM_DIR": str(helm_bin.parent),
        "GITHUB_REF_NAME": f"v{VERSION}",
        "GITHUB_REPOSITORY": "example/neuron-dra",
    }
    # snapshot.debian.org, where the workflow's build takes Debian's packages from: from
    # here, if it cannot be reached, the live mirrors instead.
    overridden = {"DEBIAN_SNAPSHOT": ""} if unreachable(SNAPSHOT) else {}
    return run_workflow(root, base_env, overridden)


def test_the_workflows_local_steps_run_as_written(released: Run) -> None:
    """Version check, lock check, build and checksums in the build job; the checksums
    again in the publish job, on the artifact it downloaded and without a checkout."""
    assert released.ran == [
        "build/The tag is the package's version",
        "build/The locks are up to date",
        "build/Build",
        "build/Checksums",
        "publish/Checksums",
        "publish/The registry's host",
    ]
    assert released.context["needs.build.outputs.version"] == VERSION
    assert released.context["steps.registry.outputs.host"] == REGISTRY.partition("/")[0]
    dist = released.workspaces["publish"] / "dist"
    assert sorted(p.name for p in dist.iterdir()) == sorted(
        [
            f"neuron-dra-{VERSION}.oci.tar",
            f"neuron-dra-{VERSION}.tgz",
            WHEEL,
            CATALOG,
            PACKAGES,
            "SHA256SUMS",
        ]
    )
    assert sorted(p.name for p in released.workspaces["publish"].iterdir()) == ["dist"]
    with tarfile.open(dist / f"neuron-dra-{VERSION}.oci.tar") as archive:
        member = archive.extractfile("index.json")
        assert member is not None
        index = json.loads(member.read())
    names = {m["annotations"].get("io.containerd.image.name") for m in index["manifests"]}
    assert names == {f"{REGISTRY}/neuron-dra:{VERSION}"}


def test_the_image_holds_exactly_the_locked_packages(released: Run) -> None:
    lock = (REPO / "requirements/image.txt").read_text()
    pinned = {n.lower(): v for n, v in re.findall(r"^([\w.-]+)==(\S+)", lock, re.MULTILINE)}
    archive = released.workspaces["build"] / "dist" / f"neuron-dra-{VERSION}.oci.tar"
    assert oci_archive.python_distributions(archive) == pinned | {"neuron-dra": VERSION}


def test_the_package_list_is_the_images(released: Run) -> None:
    """The released package list names exactly the Debian packages installed in the released
    image, each with a sha256, after the archives they came from: snapshot.debian.org at
    the workflow's DEBIAN_SNAPSHOT, or the live mirrors where the snapshot cannot be
    reached from here (the run's `overridden` says so)."""
    dist = released.workspaces["publish"] / "dist"
    lines = (dist / PACKAGES).read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    listed = [line.split(" ") for line in lines if not line.startswith("#")]
    assert lines[: len(header)] == header
    assert header[0].startswith(f"# {REGISTRY}/neuron-dra:{VERSION}: Debian packages")
    snapshot = released.overridden.get("DEBIAN_SNAPSHOT")
    if snapshot is None:
        pinned = release_workflow.load()["jobs"]["build"]["env"]["DEBIAN_SNAPSHOT"]
        debian = f"https://snapshot.debian.org/archive/debian/{pinned}"
        security = f"https://snapshot.debian.org/archive/debian-security/{pinned}"
    else:
        assert snapshot == ""
        debian, security = "http://deb.debian.org/debian", "http://deb.debian.org/debian-security"
    assert header[1:] == [
        f"# deb {debian} bookworm main",
        f"# deb {debian} bookworm-updates main",
        f"# deb {security} bookworm-security main",
    ]
    assert all(len(fields) == 4 and re.fullmatch(r"[0-9a-f]{64}", fields[3]) for fields in listed)
    image = dist / f"neuron-dra-{VERSION}.oci.tar"
    installed = oci_archive.debian_packages(image)
    assert {(name, version, arch) for name, version, arch, _ in listed} == installed
    assert len(listed) == len(installed)
    assert {"python3", "libstdc++6", "base-files"} <= {name for name, *_ in installed}
    # The .deb files hashed are the apt cache's, which the image does not keep.
    assert not [name for name, _ in oci_archive.layer_files(image) if name.endswith(".deb")]


def test_the_version_step_refuses_another_tag(tmp_path: Path) -> None:
    workflow = release_workflow.load()
    [step] = [s for s in release_workflow.steps(workflow, "build") if s.id == "version"]
    script = tmp_path / "script"
    script.write_text(step.run)
    (tmp_path / "env").touch()
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # `python`, as setup-python's
    env = {"PATH": path, "GITHUB_REF_NAME": "v9.9.9", "GITHUB_OUTPUT": str(tmp_path / "env")}
    done = subprocess.run(
        [*SHELL, str(script)], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stdout.strip() == f"tag v9.9.9 is not v{VERSION}"
    assert (tmp_path / "env").read_text() == ""


def index_unreachable() -> str | None:
    """Why uv's package index cannot be read from here (None: it can), through the
    machine's proxy settings as uv would."""
    index = os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL")
    return unreachable((index or "https://pypi.org/simple/").rstrip("/") + "/uv/")


def unreachable(url: str) -> str | None:
    """Why `url` cannot be read from here (None: it can)."""
    try:
        with urllib.request.urlopen(url, timeout=15) as answer:
            answer.read(1)
    except (OSError, urllib.error.URLError) as error:
        return f"{url} is unreachable ({error})"
    return None


def test_a_stale_lock_is_found(tmp_path: Path) -> None:
    """scripts/lock.py --check, the workflow's lock step, fails on a lock that differs from
    what uv writes for pyproject.toml and constraints.txt, showing the difference."""
    if (unreachable := index_unreachable()) is not None:
        pytest.skip(f"scripts/lock.py --check asks the package index: {unreachable}")
    for name in ("scripts/lock.py", "pyproject.toml", "constraints.txt", "requirements"):
        source, copy = REPO / name, tmp_path / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, copy)
        else:
            shutil.copy2(source, copy)
    lock = tmp_path / "requirements/image.txt"
    text = lock.read_text()
    dropped = re.search(r"^    --hash=sha256:[0-9a-f]{64} \\\n", text, re.MULTILINE)
    assert dropped is not None
    lock.write_text(text.replace(dropped[0], "", 1))

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(tmp_path / "scripts/lock.py"), "--check"],
            capture_output=True,
            text=True,
            check=False,
        )

    stale = check()
    assert stale.returncode == 1, stale.stderr
    assert f"+{dropped[0]}" in stale.stdout
    assert "lock: stale; run `python scripts/lock.py`" in stale.stderr
    lock.write_text(text)
    assert check().returncode == 0
