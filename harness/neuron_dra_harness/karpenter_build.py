"""Build Karpenter's operator with the KWOK cloud provider and the Neuron catalog.

``go/karpenter/go.mod`` pins ``sigs.k8s.io/karpenter``; its ``main`` runs the operator
as Karpenter's own ``kwok/main.go`` does, the instance types (``--instance-types-file-path``)
carrying the DynamicResources of ``neuron-dra templates`` (``--neuron-catalog-path``).
Karpenter needs a newer Go than the local one: this build, and only this one, runs with
``GOTOOLCHAIN=go1.27.3``. The binary goes to the cache beside the Kubernetes binaries
with the CRDs of the same module version, and is built only when a test asks for it
(``python -m neuron_dra_harness.karpenter_build``), never by ``make test``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from neuron_dra_harness.build import (
    GO_DIR,
    build_log,
    cache_root,
    go_build,
    go_env,
    is_fresh,
    locked,
    required_version,
    source_digest,
)

KARPENTER_MODULE_DIR = GO_DIR / "karpenter"
KARPENTER_MODULE = "sigs.k8s.io/karpenter"
KARPENTER_TOOLCHAIN = "go1.27.3"
"""The Go the module's ``go`` directive needs (1.26.9 or later); fetched by the go command."""

# Karpenter's KWOK CRDs (the NodePool's KWOK label rules) and the KWOKNodeClass's, as
# paths in the module.
CRD_FILES = (
    "kwok/charts/crds/karpenter.sh_nodepools.yaml",
    "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
    "kwok/charts/crds/karpenter.sh_nodeoverlays.yaml",
    "kwok/charts/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
    "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
)
_FORMAT = "1"


@dataclass(frozen=True)
class KarpenterBinary:
    """The built operator and the CRDs of its module version."""

    bin_dir: Path
    version: str

    @property
    def operator(self) -> Path:
        return self.bin_dir / "karpenter"

    @property
    def crds(self) -> list[Path]:
        return [self.bin_dir / "crds" / Path(p).name for p in CRD_FILES]


def karpenter_version() -> str:
    """The Karpenter release ``go/karpenter/go.mod`` pins, e.g. v1.15.0."""
    return required_version(KARPENTER_MODULE_DIR, KARPENTER_MODULE, KARPENTER_TOOLCHAIN)


def _module_dir() -> Path:
    """Where the go command keeps the pinned Karpenter module's source (downloaded if absent)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", KARPENTER_MODULE],
        cwd=KARPENTER_MODULE_DIR,
        env=go_env(KARPENTER_TOOLCHAIN),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Path(json.loads(out)["Dir"])


def build_karpenter(force: bool = False) -> KarpenterBinary:
    """The operator of ``go/karpenter``, built unless cached (keyed by Karpenter's
    version and the module's sources); with its CRDs in ``crds/`` beside it."""
    version = karpenter_version()
    target = cache_root() / f"karpenter-{version}-{KARPENTER_TOOLCHAIN}" / "bin"
    sources = [
        KARPENTER_MODULE_DIR / "go.mod",
        KARPENTER_MODULE_DIR / "go.sum",
        *sorted(KARPENTER_MODULE_DIR.glob("*.go")),
    ]
    expected = source_digest((_FORMAT, version, KARPENTER_TOOLCHAIN), sources)
    binary = KarpenterBinary(target, version)
    with locked(target.parent):
        if not force and is_fresh(target, expected, ("karpenter",)):
            return binary
        target.mkdir(parents=True, exist_ok=True)
        (target.parent / "stamp").unlink(missing_ok=True)
        build_log(f"Karpenter {version} with the KWOK provider ({KARPENTER_TOOLCHAIN})")
        flags = ["-ldflags=-s -w"]
        go_build(target, "karpenter", KARPENTER_MODULE_DIR, ".", flags, go=KARPENTER_TOOLCHAIN)
        module = _module_dir()
        (target / "crds").mkdir(exist_ok=True)
        for path in CRD_FILES:
            shutil.copyfile(module / path, target / "crds" / Path(path).name)
        (target.parent / "stamp").write_text(expected + "\n")
        return binary


def main() -> int:
    print(build_karpenter().operator)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
