"""The workflows' supply chain, read from the files: actions pinned by commit, tokens
no wider than each job needs, no expression expanded inside a script, and every run step
of the release either run by tests/e2e/test_release.py or named as needing a registry."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from consts import DRA_DRIVER_VERSION
from tests import doc_commands, release_workflow
from tests.release_workflow import LOCAL, REMOTE, WORKFLOWS, job_order, load, steps

FILES = sorted(WORKFLOWS.glob("*.y*ml"))
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?:\s+#\s*(?P<comment>.*))?$")
_PINNED = re.compile(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}")


def uses_lines(path: Path) -> list[tuple[str, str]]:
    return [
        (m["ref"], m["comment"] or "")
        for line in path.read_text().splitlines()
        if (m := _USES.match(line))
    ]


def test_the_release_workflow_is_read() -> None:
    assert release_workflow.RELEASE in FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit(path: Path) -> None:
    """A tag can be moved to other code; a commit cannot. The tag it was stays in a comment,
    for the reader and for updates."""
    found = uses_lines(path)
    workflow = load(path)
    in_yaml = [s.uses for job in workflow["jobs"] for s in steps(workflow, job) if s.uses]
    assert [ref for ref, _ in found] == in_yaml, "a `uses:` the line reader missed"
    assert found, path
    assert unpinned(path) == [], f"{path.name}: not pinned by a 40-hex commit with its release"


def unpinned(path: Path) -> list[str]:
    """The `uses:` of `path` not pinned by a 40-hex commit with its release in a comment."""
    return [
        ref
        for ref, comment in uses_lines(path)
        if not (_PINNED.fullmatch(ref) and re.fullmatch(r"v\d+(\.\d+)*", comment))
    ]


def test_a_tag_is_refused(tmp_path: Path) -> None:
    """The release workflow with one action pinned by tag, one by a short commit."""
    text = release_workflow.RELEASE.read_text()
    [checkout] = re.findall(r"actions/checkout@[0-9a-f]{40}", text)
    [helm, _] = re.findall(r"azure/setup-helm@[0-9a-f]{40}", text)
    copy = tmp_path / "release.yml"
    copy.write_text(text.replace(checkout, "actions/checkout@v7").replace(helm, helm[:-1]))
    assert unpinned(release_workflow.RELEASE) == []
    assert unpinned(copy) == ["actions/checkout@v7", helm[:-1], helm[:-1]]


def run_version_step(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The build job's version step as GitHub runs it, with `env` (and `python`)."""
    [step] = [s for s in steps(load(), "build") if s.id == "version"]
    script = tmp_path / "script"
    script.write_text(step.run)
    (tmp_path / "output").touch()
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # `python`, as setup-python's
    return subprocess.run(
        [*release_workflow.SHELL, str(script)],
        cwd=release_workflow.REPO,
        capture_output=True,
        env={"PATH": path, "GITHUB_OUTPUT": str(tmp_path / "output"), **env},
        text=True,
        check=False,
    )


def test_the_version_step_refuses_an_unset_registry(tmp_path: Path) -> None:
    """An unset vars.REGISTRY would name the image "/neuron-dra:<version>"."""
    tag = "v" + DRA_DRIVER_VERSION
    for registry in ("", None):
        env = {"GITHUB_REF_NAME": tag} | ({} if registry is None else {"REGISTRY": registry})
        done = run_version_step(tmp_path, **env)
        assert done.returncode == 1, done.stdout
        assert "the repository variable REGISTRY is not set" in done.stdout
        assert (tmp_path / "output").read_text() == ""
    done = run_version_step(tmp_path, GITHUB_REF_NAME=tag, REGISTRY="registry.example/ml")
    assert done.returncode == 0, done.stdout
    assert (tmp_path / "output").read_text() == f"version={tag[1:]}\n"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_job_has_only_the_permissions_it_needs(path: Path) -> None:
    """Nothing by default; a job that runs the repository's code (it checks it out) may
    only read it, and never gets an OIDC token; a checkout keeps no credentials in
    .git/config for the steps after it."""
    workflow = load(path)
    assert workflow["permissions"] == {}
    for job in workflow["jobs"]:
        permissions = workflow["jobs"][job]["permissions"]
        checkouts = [
            s
            for s in load(path)["jobs"][job]["steps"]
            if str(s.get("uses", "")).startswith("actions/checkout@")
        ]
        for checkout in checkouts:
            assert checkout["with"]["persist-credentials"] is False, job
        if checkouts:
            assert set(permissions.values()) <= {"read", "none"}, (job, permissions)


def test_only_the_publish_job_writes_or_signs() -> None:
    workflow = load()
    written = {
        job: p
        for job in workflow["jobs"]
        if (p := workflow["jobs"][job]["permissions"]) != {"contents": "read"}
    }
    assert written == {
        "publish": {
            "contents": "write",
            "id-token": "write",
            "packages": "write",
            "attestations": "write",
        }
    }
    publish = steps(workflow, "publish")
    assert not any(s.uses.startswith("actions/checkout@") for s in publish)
    assert any(s.uses.startswith("sigstore/cosign-installer@") for s in publish)
    signing = next(s.run for s in publish if s.name == "Publish and sign")
    assert 'cosign sign --yes "${REGISTRY}/neuron-dra@$(cat image.digest)"' in signing
    assert 'cosign sign --yes "${REGISTRY}/charts/neuron-dra@${chart_digest}"' in signing


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_expression_is_expanded_inside_a_script(path: Path) -> None:
    """`${{ }}` in a script is pasted into its text before bash reads it; in `env:` it is a
    value."""
    workflow = load(path)
    for job in workflow["jobs"]:
        for step in steps(workflow, job):
            assert not release_workflow.has_expression(step.run), (job, step.name)


def test_every_run_step_is_local_or_remote() -> None:
    workflow = load()
    names = [s.name for job in job_order(workflow) for s in steps(workflow, job) if s.run]
    assert set(names) == LOCAL | REMOTE
    assert not LOCAL & REMOTE


def test_the_python_is_the_images() -> None:
    """The build job's Python is 3.11, bookworm's, which the image's wheels are for."""
    [setup] = [
        s
        for s in load()["jobs"]["build"]["steps"]
        if str(s.get("uses", "")).startswith("actions/setup-python@")
    ]
    assert setup["with"]["python-version"] == "3.11"
    script = (release_workflow.REPO / "scripts/build-image.sh").read_text()
    assert "readonly IMAGE_PYTHON=3.11 " in script


def test_the_build_step_is_the_documented_release_command() -> None:
    """The documented release command, which tests/e2e/test_release.py also runs, is the
    workflow's, the registry aside."""
    [build] = [s for s in steps(load(), "build") if s.name == "Build"]
    [documented] = [
        c for c in doc_commands.run_by(doc_commands.RELEASE) if "scripts/release.sh" in c.text
    ]
    filled = doc_commands.fill(documented.text, registry="${REGISTRY}")
    assert filled.removeprefix("sudo ") == "scripts/release.sh dist ${REGISTRY}/neuron-dra"
    assert build.run.endswith('scripts/release.sh dist "${REGISTRY}/neuron-dra"')


def test_the_verification_commands_match_the_signer() -> None:
    """The documented `cosign verify` commands need the registry and Sigstore; here, their
    names are the ones the workflow pushes and signs, and their identity accepts the
    release workflow of the repository on a tag, and nothing else."""
    signing = next(s.run for s in steps(load(), "publish") if s.name == "Publish and sign")
    ran = doc_commands.run_by(doc_commands.VERIFY)
    assert [c.argv[1] for c in ran] == ["verify", "verify", "verify-blob"], ran
    signed = f"https://github.com/example/neuron-dra/.github/workflows/release.yml@refs/tags/v{DRA_DRIVER_VERSION}"
    for command in ran:
        text = doc_commands.fill(
            command.text, registry="registry.example/ml", owner="example", repository="neuron-dra"
        )
        _, verb, target, *rest = shlex.split(text)
        options = dict(zip(rest[::2], rest[1::2], strict=True))
        assert (
            options.pop("--certificate-oidc-issuer")
            == "https://token.actions.githubusercontent.com"
        )
        identity = re.compile(options.pop("--certificate-identity-regexp"))
        assert identity.search(signed), command
        for other in (
            signed.replace("refs/tags/v", "refs/heads/main"),
            signed.replace("release.yml", "other.yml"),
            signed.replace("/example/", "/another/"),
            signed.replace("/neuron-dra/", "/neuron-dra-fork/"),
            "https://github.com/x/y/.github/workflows/z.yml?https://github.com/example/neuron-dra/",
        ):
            assert not identity.search(other), (command, other)
        if verb == "verify-blob":
            assert (target, options) == ("SHA256SUMS", {"--bundle": "SHA256SUMS.sigstore.json"})
            assert "--bundle dist/SHA256SUMS.sigstore.json dist/SHA256SUMS" in signing
        else:
            assert options == {}, command
            repository, _, tag = target.rpartition(":")
            assert tag == DRA_DRIVER_VERSION, command
            pushed = repository.replace("registry.example/ml", "${REGISTRY}")
            assert f'cosign sign --yes "{pushed}@' in signing, command
