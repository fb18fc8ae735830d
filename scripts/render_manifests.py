"""Render the plain manifests in ``deploy/*.yaml`` from the Helm chart.

The chart (``deploy/helm/neuron-dra``) is the one source: the manifests that
``scripts/install-dra-driver.sh`` applies are its output with the default
values in namespace ``neuron-dra``, one file per template, the image left as the
placeholder the script replaces and ``app.kubernetes.io/managed-by`` naming the
script instead of Helm. The chart installs into the release namespace that
``helm install -n NAME --create-namespace`` makes, so it has no Namespace
template: ``namespace.yaml`` is written here, with the Pod Security labels the
plugin pods need. helm is the one ``neuron_dra_harness.build`` builds
(``NEURON_DRA_HELM`` names another).

    python scripts/render_manifests.py           # rewrite deploy/*.yaml
    python scripts/render_manifests.py --check   # fail if they differ from the chart
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEPLOY = REPO_ROOT / "deploy"
CHART = DEPLOY / "helm" / "neuron-dra"
RELEASE = "neuron-dra"
NAMESPACE = "neuron-dra"
MANAGED_BY = "install-dra-driver.sh"
PLACEHOLDER = "NEURON_DRA_IMAGE"
HEADER = (
    "# Rendered from deploy/helm/neuron-dra with its default values by\n"
    "# scripts/render_manifests.py: edit the chart, then run that script.\n"
)
IMAGE_NOTE = (
    f"# {PLACEHOLDER} is a placeholder that scripts/install-dra-driver.sh replaces;\n"
    "# applied as is, the pods fail with InvalidImageName.\n"
)
NAMESPACE_MANIFEST = f"""\
# Written by scripts/render_manifests.py (NAMESPACE_MANIFEST): the chart installs
# into the namespace helm is given and has no Namespace of its own.
#
# The driver's namespace. Its pods mount host paths (kubelet plugin directories,
# /var/run/cdi, /sys, /dev), which the baseline Pod Security level forbids, so
# the namespace enforces "privileged"; the pods themselves still run
# unprivileged with no capabilities (see daemonset.yaml).
apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    app.kubernetes.io/name: neuron-dra
    app.kubernetes.io/managed-by: {MANAGED_BY}
    pod-security.kubernetes.io/enforce: privileged
    pod-security.kubernetes.io/warn: privileged
    pod-security.kubernetes.io/audit: privileged
"""
_MANAGED_BY = re.compile(r"^(\s+app\.kubernetes\.io/managed-by: )Helm$", re.MULTILINE)
_SOURCE = re.compile(rf"^# Source: {RELEASE}/templates/(?P<name>[^/\n]+\.yaml)\n", re.MULTILINE)
DIFF_LINES_PER_FILE = 40
_RENDERED_REPOSITORY = "placeholder.invalid/neuron-dra"
_RENDERED_TAG = "placeholder"


def helm() -> Path:
    """The helm of ``NEURON_DRA_HELM``, else the pinned one, built unless cached."""
    if os.environ.get("NEURON_DRA_HELM"):
        return Path(os.environ["NEURON_DRA_HELM"])
    # The build's progress (minutes on a cold machine) goes to our stderr.
    out = subprocess.run(
        [sys.executable, "-m", "neuron_dra_harness.build", "--helm"],
        cwd=REPO_ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return Path(out.strip().splitlines()[-1])


def helm_template(helm_bin: Path, chart: Path = CHART) -> str:
    # The chart's schema wants a real repository and tag; the script wants a bare word.
    # The script has no `helm test`: the test pod and its claim template are left out.
    sets = f"image.repository={_RENDERED_REPOSITORY},image.tag={_RENDERED_TAG},tests.enabled=false"
    args = [
        str(helm_bin),
        "template",
        RELEASE,
        str(chart),
        f"--namespace={NAMESPACE}",
        f"--set={sets}",
    ]
    done = subprocess.run(args, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed (exit {done.returncode}):\n{done.stderr}")
    return done.stdout


def split(rendered: str) -> dict[str, str]:
    """One file per template, its documents in helm's order, with the header on top."""
    documents: dict[str, list[str]] = {}
    for chunk in rendered.split("\n---\n"):
        document = chunk.removeprefix("---\n")
        found = _SOURCE.search(document)
        if found is None:
            if document.strip():
                raise ValueError(f"a rendered document without its template:\n{document[:200]}")
            continue
        body = document[found.end() :].rstrip("\n") + "\n"
        documents.setdefault(found["name"], []).append(body)
    files = {name: "---\n".join(docs) for name, docs in documents.items()}
    rendered_image = re.escape(f"{_RENDERED_REPOSITORY}:{_RENDERED_TAG}")
    image = re.compile(rf"^(\s+image: ){rendered_image}$", re.MULTILINE)
    replaced = 0
    for name, text in files.items():
        labelled = _MANAGED_BY.sub(rf"\g<1>{MANAGED_BY}", text)
        placed, count = image.subn(rf"\g<1>{PLACEHOLDER}", labelled)
        files[name] = HEADER + (IMAGE_NOTE if count else "") + "#\n" + placed
        replaced += count
    if replaced != 1:
        raise ValueError(f"expected one image line to replace with {PLACEHOLDER}, found {replaced}")
    return {"namespace.yaml": NAMESPACE_MANIFEST, **files}


def render(helm_bin: Path, deploy: Path = DEPLOY) -> dict[str, str]:
    return split(helm_template(helm_bin, deploy / "helm" / "neuron-dra"))


def _diff(name: str, old: str, new: str) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"deploy/{name} (committed)",
            f"deploy/{name} (chart)",
        )
    )
    shown = "".join(lines[:DIFF_LINES_PER_FILE])
    if len(lines) > DIFF_LINES_PER_FILE:
        shown += f"... {len(lines) - DIFF_LINES_PER_FILE} more lines\n"
    return shown


def drift(files: dict[str, str], deploy: Path = DEPLOY) -> list[str]:
    """What differs between the committed manifests and `files`, as diffs and names."""
    problems = []
    committed = {p.name: p.read_text() for p in sorted(deploy.glob("*.yaml"))}
    for name in sorted(set(committed) | set(files)):
        if name not in files:
            problems.append(f"deploy/{name}: no template renders it (delete it)\n")
        elif name not in committed:
            problems.append(f"deploy/{name}: missing\n")
        elif committed[name] != files[name]:
            problems.append(_diff(name, committed[name], files[name]))
    return problems


def write(files: dict[str, str], deploy: Path = DEPLOY) -> None:
    for path in deploy.glob("*.yaml"):
        if path.name not in files:
            path.unlink()
    for name, text in files.items():
        (deploy / name).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if deploy/*.yaml is stale")
    parser.add_argument(
        "--deploy-dir", type=Path, default=DEPLOY, help="a deploy/ with its helm/neuron-dra chart"
    )
    args = parser.parse_args(argv)
    if not os.environ.get("NEURON_DRA_HELM") and shutil.which("go") is None:
        print("go not installed: deploy/*.yaml not checked against the chart", file=sys.stderr)
        return 0 if args.check else 1
    files = render(helm(), args.deploy_dir)
    if not args.check:
        write(files, args.deploy_dir)
        print(f"rendered {len(files)} files into {args.deploy_dir}")
        return 0
    problems = drift(files, args.deploy_dir)
    if problems:
        sys.stderr.write("".join(problems))
        print(
            "deploy/*.yaml differ from the chart: run `python scripts/render_manifests.py`",
            file=sys.stderr,
        )
        return 1
    print(f"deploy/*.yaml match the chart ({len(files)} files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
