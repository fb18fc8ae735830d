"""The release's credentials, attestations and Debian pin, read from the workflow file and,
where a step can run here, by running it with the registry's tools stood in for: no stored
password, publishing only from the `release` environment, provenance and an SBOM for what
is published, and the build's Debian archive pinned to a snapshot."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from consts import DRA_DRIVER_VERSION
from tests import doc_commands, release_workflow
from tests.release_workflow import REPO, SHELL, load, steps

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_SNAPSHOT = re.compile(r"\d{8}T\d{6}Z")
IMAGE_DIGEST = "sha256:" + "1" * 64
CHART_DIGEST = "sha256:" + "2" * 64


def strings(node: Any) -> Iterator[str]:
    """Every key and value of a YAML document that is a string."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)
    elif isinstance(node, str):
        yield node


def expressions(workflow: dict[str, Any]) -> list[str]:
    return [m for text in strings(workflow) for m in _EXPRESSION.findall(text)]


def with_of(workflow: dict[str, Any], job: str, action: str) -> list[dict[str, Any]]:
    """The `with:` of each step of `job` that uses `action` (owner/name)."""
    return [
        dict(s.get("with", {}))
        for s in workflow["jobs"][job]["steps"]
        if str(s.get("uses", "")).partition("@")[0] == action
    ]


def test_no_stored_secret_reaches_the_workflow() -> None:
    """A long-lived registry password in `secrets.` is what a leaked log or a hostile step
    would keep; the job's own token lasts as long as the job."""
    workflow = load()
    assert not [e for e in expressions(workflow) if "secrets" in e]
    passwords = [
        w["password"]
        for job in workflow["jobs"]
        for s in workflow["jobs"][job]["steps"]
        if "password" in (w := s.get("with", {}))
    ]
    assert passwords == ["${{ github.token }}"]


def test_only_the_release_environment_publishes() -> None:
    """The publish job, the only one with an OIDC token or a registry login, runs in the
    `release` environment, whose protection rules a pushed tag alone does not pass."""
    workflow = load()
    jobs = workflow["jobs"]
    assert {job: jobs[job].get("environment") for job in jobs} == {
        "build": None,
        "publish": "release",
    }
    for job in jobs:
        logins = with_of(workflow, job, "docker/login-action")
        tokens = jobs[job]["permissions"].get("id-token")
        assert (bool(logins) or tokens == "write") == (job == "publish"), job


def test_aws_credentials_come_from_the_jobs_oidc_token() -> None:
    """ECR and ECR Public: a role assumed with the job's OIDC token, no access key; the
    ECR login is the one after it, with no username or password of its own."""
    workflow = load()
    publish = workflow["jobs"]["publish"]
    assert publish["permissions"]["id-token"] == "write"
    [aws] = with_of(workflow, "publish", "aws-actions/configure-aws-credentials")
    assert aws == {
        "role-to-assume": "${{ vars.AWS_ROLE_ARN }}",
        "aws-region": "${{ vars.AWS_REGION || 'us-east-1' }}",
    }
    ghcr, ecr = with_of(workflow, "publish", "docker/login-action")
    assert ghcr == {
        "registry": "ghcr.io",
        "username": "${{ github.actor }}",
        "password": "${{ github.token }}",
    }
    assert ecr == {"registry": "${{ steps.registry.outputs.host }}"}
    conditions = [
        s.get("if")
        for s in publish["steps"]
        if str(s.get("uses", "")).partition("@")[0]
        in ("docker/login-action", "aws-actions/configure-aws-credentials")
    ]
    assert conditions == [
        "steps.registry.outputs.host == 'ghcr.io'",
        "steps.registry.outputs.host != 'ghcr.io'",
        "steps.registry.outputs.host != 'ghcr.io'",
    ]
    assert publish["permissions"]["packages"] == "write"


def run_script(
    step: release_workflow.Step, workspace: Path, shims: dict[str, str], **env: str
) -> dict[str, str]:
    """`step`'s script as GitHub runs it in `workspace`, with the programs in `shims` (name
    -> shell script) first on PATH; returns what it wrote to GITHUB_OUTPUT."""
    bin_dir = workspace.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in shims.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    script, output = workspace.parent / "script", workspace.parent / "output"
    script.write_text(step.run)
    output.write_text("")
    done = subprocess.run(
        [*SHELL, str(script)],
        cwd=workspace,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "GITHUB_OUTPUT": str(output), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (step.name, done.stdout, done.stderr)
    return release_workflow.read_assignments(output)


def test_the_registry_host_is_what_the_logins_are_chosen_by(tmp_path: Path) -> None:
    [step] = [s for s in steps(load(), "publish") if s.id == "registry"]
    for registry, host in (
        ("ghcr.io/example", "ghcr.io"),
        ("public.ecr.aws/example", "public.ecr.aws"),
        ("1234.dkr.ecr.us-west-2.amazonaws.com/ml", "1234.dkr.ecr.us-west-2.amazonaws.com"),
    ):
        workspace = tmp_path / host / "workspace"
        workspace.mkdir(parents=True)
        assert run_script(step, workspace, {}, REGISTRY=registry) == {"host": host}


def test_the_published_digests_are_attested(tmp_path: Path) -> None:
    """The publish step, with skopeo, helm and cosign stood in for, gives the digests it
    pushed; the provenance of the image, the chart and every checksummed file, and the
    image's SBOM, are attested for those digests and pushed beside them."""
    workflow = load()
    publish = steps(workflow, "publish")
    [step] = [s for s in publish if s.id == "publish"]
    workspace = tmp_path / "workspace"
    (workspace / "dist").mkdir(parents=True)
    shims = {
        "skopeo": f'[ "$2" = --digestfile ] && printf %s {IMAGE_DIGEST} > "$3"\n',
        "helm": f"echo 'Pushed: x'; echo 'Digest: {CHART_DIGEST}'\n",
        "cosign": f'echo "$*" >> {tmp_path}/cosign\n',
    }
    outputs = run_script(step, workspace, shims, REGISTRY="ghcr.io/example", VERSION="1.2.3")
    assert outputs == {"image": IMAGE_DIGEST, "chart": CHART_DIGEST}
    context = {
        "vars.REGISTRY": "ghcr.io/example",
        "needs.build.outputs.version": "1.2.3",
        **{f"steps.publish.outputs.{k}": v for k, v in outputs.items()},
    }
    signed = (tmp_path / "cosign").read_text().splitlines()
    assert signed[:2] == [
        f"sign --yes ghcr.io/example/neuron-dra@{IMAGE_DIGEST}",
        f"sign --yes ghcr.io/example/charts/neuron-dra@{CHART_DIGEST}",
    ]

    def filled(action: str) -> list[dict[str, Any]]:
        return [
            {
                k: release_workflow.expand(v, context) if isinstance(v, str) else v
                for k, v in w.items()
            }
            for w in with_of(workflow, "publish", action)
        ]

    assert filled("actions/attest-build-provenance") == [
        {
            "subject-name": "ghcr.io/example/neuron-dra",
            "subject-digest": IMAGE_DIGEST,
            "push-to-registry": True,
        },
        {
            "subject-name": "ghcr.io/example/charts/neuron-dra",
            "subject-digest": CHART_DIGEST,
            "push-to-registry": True,
        },
        {"subject-checksums": "dist/SHA256SUMS"},
    ]
    [sbom] = filled("anchore/sbom-action")
    assert sbom["image"] == "oci-archive:dist/neuron-dra-1.2.3.oci.tar"
    assert sbom["format"] == "spdx-json"
    [attest] = filled("actions/attest")
    assert attest == {
        "subject-name": "ghcr.io/example/neuron-dra",
        "subject-digest": IMAGE_DIGEST,
        "sbom-path": sbom["output-file"],
        "push-to-registry": True,
    }
    # After the push, before the release that attaches dist/*, the SBOM among them.
    order = [s.uses.partition("@")[0] or s.name for s in publish]
    assert order.index("Publish and sign") < order.index("actions/attest-build-provenance")
    assert order.index("anchore/sbom-action") < order.index("actions/attest")
    assert order[-1] == "GitHub release"
    assert sbom["output-file"].startswith("dist/")


def test_the_debian_snapshot_reaches_the_image_build(tmp_path: Path) -> None:
    """The build job pins Debian's archive to a snapshot.debian.org timestamp, and the Build
    step hands it through sudo (which keeps none of the environment it is not given) to
    scripts/release.sh."""
    workflow = load()
    pinned = str(workflow["jobs"]["build"]["env"]["DEBIAN_SNAPSHOT"])
    assert _SNAPSHOT.fullmatch(pinned), pinned
    [step] = [s for s in steps(workflow, "build") if s.name == "Build"]
    workspace = tmp_path / "workspace"
    (workspace / "scripts").mkdir(parents=True)
    release = workspace / "scripts/release.sh"
    release.write_text(f'#!/bin/sh\nenv > {tmp_path}/env\necho "$@" > {tmp_path}/args\n')
    release.chmod(0o755)
    shims = {"sudo": 'exec env -i "$@"\n', "helm": "exit 0\n"}
    run_script(step, workspace, shims, REGISTRY="ghcr.io/example", DEBIAN_SNAPSHOT=pinned)
    seen = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines())
    assert seen["DEBIAN_SNAPSHOT"] == pinned
    assert (tmp_path / "args").read_text() == "dist ghcr.io/example/neuron-dra\n"


def test_the_attestation_commands_name_what_is_attested() -> None:
    """The documented `gh attestation verify` commands need the registry and GitHub; here,
    the image they name is the one the workflow attests, the file one that SHA256SUMS
    lists (its provenance is attested for each), the signer is the release workflow of
    the repository, and the SBOM's predicate type is the one actions/attest gives an SPDX
    2.3 document, syft's spdx-json. (tests/e2e/test_release.py checks that SHA256SUMS
    lists the wheel.)"""
    workflow = load()
    ran = doc_commands.run_by(doc_commands.ATTESTED)
    assert len(ran) == 3, ran
    [provenance, *_] = with_of(workflow, "publish", "actions/attest-build-provenance")
    [sbom] = with_of(workflow, "publish", "anchore/sbom-action")
    assert sbom["format"] == "spdx-json"
    subjects = []
    for command in ran:
        text = doc_commands.fill(
            command.text, registry="registry.example/ml", owner="example", repository="neuron-dra"
        )
        _, _, _, subject, *rest = shlex.split(text)
        options = dict(zip(rest[::2], rest[1::2], strict=True))
        assert options.pop("--repo") == "example/neuron-dra", command
        signer = options.pop("--signer-workflow")
        assert signer == "example/neuron-dra/" + str(release_workflow.RELEASE.relative_to(REPO))
        predicate = options.pop("--predicate-type", None)
        assert options == {}, command
        subjects.append((subject, predicate))
    image = "oci://" + provenance["subject-name"].replace(
        "${{ vars.REGISTRY }}", "registry.example/ml"
    )
    tagged = f"{image}:{DRA_DRIVER_VERSION}"
    wheel = f"neuron_dra-{DRA_DRIVER_VERSION}-py3-none-any.whl"
    assert subjects == [
        (tagged, None),
        (tagged, "https://spdx.dev/Document/v2.3"),
        (wheel, None),
    ]
