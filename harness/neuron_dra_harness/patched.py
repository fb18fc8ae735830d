"""kube-scheduler built once more with changes to its DRA allocator, to measure them
beside the release or to run the end-to-end tests on them: `bench/upstream/<name>.patch`
applied to the release's k8s.io/dynamic-resource-allocation module, several joined by
`+`. Where a release's allocator moved under a patch, `bench/upstream/v1.MINOR/<name>.patch`
is the same change rebased on it. Not part of any default build: `bench/scale.py
--patched NAME` runs each layout on both schedulers, and the end-to-end tests run on
`NEURON_DRA_SCHEDULER_PATCH=NAME`'s.

The patched scheduler is cached beside the release's binaries, keyed by the patches'
content; the other binaries are the release's own (linked, not rebuilt).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from neuron_dra_harness import build as e2e_build
from neuron_dra_harness.build import Binaries

PATCHES = Path(__file__).resolve().parents[2] / "bench" / "upstream"
MODULE = "k8s.io/dynamic-resource-allocation"
PATCH_ENV = "NEURON_DRA_SCHEDULER_PATCH"


def scheduler_patch() -> str | None:
    """The patches the end-to-end tests' scheduler is built with (`PATCH_ENV`); None: the
    release's own."""
    return os.environ.get(PATCH_ENV) or None


def admin_skips_counters() -> bool:
    """Whether the end-to-end tests' allocator exempts adminAccess requests from shared
    counters (the release's checks them)."""
    return "counters-fail-closed" in (scheduler_patch() or "").split("+")


def patched_binaries(name: str) -> Binaries:
    """The release's binaries, with a kube-scheduler whose allocator has the patches
    `name` names (`a+b`: a, then b)."""
    release = e2e_build.build()
    patches = [patch_file(part, release.version) for part in name.split("+")]
    missing = [p.name for p in patches if not p.is_file()]
    if missing:
        known = ", ".join(sorted(p.stem for p in PATCHES.glob("*.patch")))
        raise ValueError(f"no patch {', '.join(missing)} in {PATCHES}; known: {known}")
    digest = hashlib.sha256(release.version.encode())
    for patch in patches:
        digest.update(patch.read_bytes())
    label = f"scheduler-{release.version}-{digest.hexdigest()[:16]}"
    target = e2e_build.cache_root() / label / "bin"
    scheduler = target / "kube-scheduler"
    with e2e_build.locked(target.parent):
        if not scheduler.is_file():
            target.mkdir(parents=True, exist_ok=True)
            _build(patches, release.version, target)
        for other in e2e_build.BINARIES:
            link = target / other
            if other != "kube-scheduler" and not link.exists():
                link.symlink_to(release.path(other))
    return Binaries(target, release.version)


def patch_file(name: str, version: str) -> Path:
    """The patch `name` for Kubernetes `version`: its rebase on that minor release where one
    is kept, the patch as written (on 1.37's allocator) otherwise."""
    rebased = PATCHES / f"v1.{e2e_build.minor(version)}" / f"{name}.patch"
    return rebased if rebased.is_file() else PATCHES / f"{name}.patch"


def patched_source(patches: list[Path], version: str, into: Path) -> Path:
    """A copy of the release's allocator module at `into`, `patches` applied: where
    `go test ./structured/...` runs the patches' own tests."""
    staging = e2e_build.staging_version(version)
    with tempfile.TemporaryDirectory(prefix="neuron-dra-download-") as outside:  # no go.mod
        listed = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{staging}"],
            cwd=outside,
            env=e2e_build.go_env(e2e_build.toolchain(version)),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    shutil.copytree(json.loads(listed)["Dir"], into)
    for path in into.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the module cache is read-only
    for patch in patches:
        subprocess.run(["patch", "-p1", "--quiet", "-i", str(patch)], cwd=into, check=True)
    return into


def _build(patches: list[Path], version: str, target: Path) -> None:
    go = e2e_build.toolchain(version)
    with tempfile.TemporaryDirectory(prefix="neuron-dra-patched-") as tmp:
        module = Path(tmp) / "k8s"
        with e2e_build.k8s_module(version) as release_module:
            shutil.copytree(release_module, module)
        source = patched_source(patches, version, Path(tmp) / "dra")
        e2e_build.run_go(["go", "mod", "edit", f"-replace={MODULE}={source}"], module, go=go)
        flags = [f"-ldflags={e2e_build.ldflags(version)}"]
        e2e_build.go_build(
            target, "kube-scheduler", module, "k8s.io/kubernetes/cmd/kube-scheduler", flags, go=go
        )
