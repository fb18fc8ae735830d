"""kube-scheduler built once more with changes proposed upstream, to measure them beside
the release: `bench/upstream/<name>.patch` applied to the release's
k8s.io/dynamic-resource-allocation module (the DRA allocator), several joined by `+`.
Not part of any default build; `bench/scale.py --patched NAME` runs each layout on
both schedulers.

The patched scheduler is cached beside the release's binaries, keyed by the patch's
content; the other binaries are the release's own (linked, not rebuilt).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from neuron_dra_harness import build as e2e_build
from neuron_dra_harness.build import Binaries

PATCHES = Path(__file__).resolve().parent / "upstream"
MODULE = "k8s.io/dynamic-resource-allocation"


def patched_binaries(name: str) -> Binaries:
    """The release's binaries, with a kube-scheduler whose allocator has the patches
    `name` names (`a+b`: a, then b)."""
    release = e2e_build.build()
    patches = [PATCHES / f"{part}.patch" for part in name.split("+")]
    digest = hashlib.sha256(release.version.encode())
    for patch in patches:
        digest.update(patch.read_bytes())
    label = f"scheduler-{release.version}-{digest.hexdigest()[:16]}"
    target = e2e_build.cache_root() / label / "bin"
    scheduler = target / "kube-scheduler"
    with e2e_build._locked(target.parent):
        if not scheduler.is_file():
            target.mkdir(parents=True, exist_ok=True)
            _build(patches, release.version, target)
        for other in e2e_build.BINARIES:
            link = target / other
            if other != "kube-scheduler" and not link.exists():
                link.symlink_to(release.path(other))
    return Binaries(target, release.version)


def _build(patches: list[Path], version: str, target: Path) -> None:
    staging = e2e_build.staging_version(version)
    with tempfile.TemporaryDirectory(prefix="neuron-dra-patched-") as tmp:
        module = Path(tmp) / "k8s"
        shutil.copytree(e2e_build.K8S_MODULE_DIR, module)
        listed = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{staging}"],
            cwd=module, env=e2e_build._go_env(), check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        source = Path(tmp) / "dra"
        shutil.copytree(json.loads(listed)["Dir"], source)
        for path in source.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # the module cache is read-only
        for patch in patches:
            subprocess.run(["patch", "-p1", "--quiet", "-i", str(patch)], cwd=source, check=True)
        e2e_build._run(["go", "mod", "edit", f"-replace={MODULE}={source}"], module)
        flags = [f"-ldflags={e2e_build.ldflags(version)}"]
        e2e_build._go_build(
            target, "kube-scheduler", module, "k8s.io/kubernetes/cmd/kube-scheduler", flags
        )
