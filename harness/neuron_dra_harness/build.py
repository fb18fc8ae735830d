"""Build the real Kubernetes binaries the end-to-end tests run against.

The Go modules under ``harness/go`` pin the versions: ``go/k8s/go.mod`` the
default release, ``go/releases/<version>/`` every other supported one. The
binaries go to a cache outside the checkout, keyed by Kubernetes and Go
version, so that only the first run pays for compilation.
``python -m neuron_dra_harness.build`` builds (or reuses) them and prints the bin dir as
the last line of stdout. ``go/helm/go.mod`` pins the helm client the chart
tests and the manifest check run (``python -m neuron_dra_harness.build --helm``);
``go/prometheus/go.mod`` the promtool that checks the chart's alert rules and
dashboard (``python -m neuron_dra_harness.build --promtool``).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from neuron_dra_harness import standins

K8S_VERSION = "v1.37.2"
"""Default Kubernetes release; ``NEURON_DRA_K8S_VERSION`` overrides it."""

RELEASES = ("v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2")
"""Releases run whole: control plane and kubelet side of the same release."""

KUBELET_ONLY_RELEASES = ("v1.33.13",)
"""Releases whose kubelet side runs under the oldest control plane, as Kubernetes'
version skew policy allows (``NEURON_DRA_KUBELET_VERSION``)."""

NEXT_RELEASES = ("v1.38.0-beta.0",)
"""Pre-releases of the next minor, run whole like ``RELEASES`` by ``make
test-versions`` but never the default, and built only when asked for."""

TOOLCHAINS = {"v1.38.0-beta.0": "go1.27.3"}
"""Releases that need a newer Go than the local one: the ``GOTOOLCHAIN`` their
build (and only theirs) runs with, which the go command fetches from the module
proxy the first time (k8s.io/kubernetes v1.38 requires Go 1.27). Every other
build runs with ``GOTOOLCHAIN=local``."""

GO_DIR = Path(__file__).resolve().parents[1] / "go"  # harness/go
K8S_MODULE_DIR = GO_DIR / "k8s"
ETCD_MODULE_DIR = GO_DIR / "etcd"
RELEASES_DIR = GO_DIR / "releases"
HELM_MODULE_DIR = GO_DIR / "helm"
PROMETHEUS_MODULE_DIR = GO_DIR / "prometheus"
NODE_MODULE_DIR = GO_DIR / "node"

# Bump when the way binaries are built changes, so stale caches are rebuilt.
_BUILD_FORMAT = "2"

STAGING_MODULES = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
)

STAGING_MODULES_SINCE = {38: ("apiextensions-api", "ktesting", "streaming")}
"""Staging modules a release split out, by the minor that first has them."""


def staging_modules(version: str) -> tuple[str, ...]:
    """The staging modules of Kubernetes ``version``."""
    since = [ms for first, ms in STAGING_MODULES_SINCE.items() if minor(version) >= first]
    return (*STAGING_MODULES, *(m for ms in since for m in ms))


_K8S_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
# Programs of the k8s wrapper module itself: the kubelet stand-in, a minimal
# upstream-helper DRA plugin used to test it, and the upstream helper's device
# metadata writer run on one claim (1.37+; earlier releases build a stub).
_LOCAL_COMMANDS = ("kubeletside", "drastub", "metadatagen")
BINARIES = ("etcd", *_K8S_COMMANDS, *_LOCAL_COMMANDS)
# A kubelet-only release (older than the control plane) needs only the kubelet
# stand-in; drastub is a plugin and comes from the control plane's release.
KUBELET_BINARIES = ("kubeletside",)


@dataclass(frozen=True)
class Binaries:
    """Paths of the built executables: the control plane's, and the kubelet
    side's, which may come from an older release."""

    bin_dir: Path
    version: str = K8S_VERSION
    kubelet_dir: Path | None = None  # default: bin_dir
    kubelet_version: str | None = None  # default: version

    def path(self, name: str) -> Path:
        if name not in BINARIES:
            raise KeyError(name)
        if name in KUBELET_BINARIES and self.kubelet_dir is not None:
            return self.kubelet_dir / name
        return self.bin_dir / name

    @property
    def kubelet_release(self) -> str:
        return self.kubelet_version or self.version

    @property
    def minor(self) -> int:
        """The control plane's minor version: 37 for v1.37.2."""
        return minor(self.version)

    @property
    def kubelet_minor(self) -> int:
        return minor(self.kubelet_release)

    @property
    def etcd(self) -> Path:
        return self.path("etcd")

    @property
    def kube_apiserver(self) -> Path:
        return self.path("kube-apiserver")

    @property
    def kube_scheduler(self) -> Path:
        return self.path("kube-scheduler")

    @property
    def kube_controller_manager(self) -> Path:
        return self.path("kube-controller-manager")

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")

    @property
    def kubeletside(self) -> Path:
        return self.path("kubeletside")

    @property
    def drastub(self) -> Path:
        return self.path("drastub")

    @property
    def metadatagen(self) -> Path:
        return self.path("metadatagen")


def _checked(version: str) -> str:
    if not re.fullmatch(r"v1\.\d+\.\d+(-(alpha|beta|rc)\.\d+)?", version):
        raise ValueError(
            f"Kubernetes version must look like v1.Y.Z or v1.Y.Z-beta.N, got {version!r}"
        )
    return version


def toolchain(version: str | None = None) -> str:
    """The ``GOTOOLCHAIN`` that builds ``version`` (default: the local Go)."""
    return TOOLCHAINS.get(version, "local") if version else "local"


def k8s_version() -> str:
    return _checked(os.environ.get("NEURON_DRA_K8S_VERSION", K8S_VERSION))


def kubelet_version() -> str:
    """The kubelet side's release: the control plane's unless set apart."""
    return _checked(os.environ.get("NEURON_DRA_KUBELET_VERSION") or k8s_version())


def minor(version: str) -> int:
    return int(_checked(version).split(".")[1])


def release_tags(version: str) -> str:
    """Build tags k8s1.33 ... k8s1.Y for release 1.Y, cumulative like Go's release
    tags, so a file says `//go:build k8s1.35` for "1.35 and later"."""
    return ",".join(f"k8s1.{m}" for m in range(33, minor(version) + 1))


def staging_version(version: str) -> str:
    """v1.Y.Z of k8s.io/kubernetes is published as v0.Y.Z for staging modules."""
    return "v0." + version.split(".", 1)[1]


def go_version(version: str | None = None) -> str:
    """The Go release that builds Kubernetes ``version`` (default: the local one)."""
    out = subprocess.run(
        ["go", "env", "GOVERSION"],
        env=go_env(toolchain(version)),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not out.startswith("go"):
        raise RuntimeError(f"unexpected `go env GOVERSION` output: {out!r}")
    return out


def cache_root() -> Path:
    base = os.environ.get("NEURON_DRA_CACHE") or os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "neuron-dra"


def bin_dir(
    version: str | None = None, go: str | None = None, *, kubelet_only: bool = False
) -> Path:
    version = version or k8s_version()
    go = go or go_version(version)
    kind = "kubelet" if kubelet_only else "k8s"
    return cache_root() / f"{kind}-{version}-{go}" / "bin"


def _go_mod_json(module: Path, go: str = "local") -> str:
    """The module's go.mod as `go mod edit -json` prints it (with toolchain `go`)."""
    return subprocess.run(
        ["go", "mod", "edit", "-json"],
        cwd=module,
        env=go_env(go),
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _requirements(module: Path, go: str = "local") -> list[dict[str, str]]:
    """The `require` entries of the module's go.mod (read with toolchain `go`)."""
    return list(json.loads(_go_mod_json(module, go)).get("Require") or [])


def required_version(module: Path, path: str, go: str = "local") -> str:
    """The version of `path` the module's go.mod requires (read with toolchain `go`)."""
    for req in _requirements(module, go):
        if req["Path"] == path:
            return str(req["Version"])
    raise RuntimeError(f"{module}/go.mod does not require {path}")


def committed_k8s_version() -> str:
    return required_version(K8S_MODULE_DIR, "k8s.io/kubernetes")


def ldflags(version: str) -> str:
    major, minor = version.removeprefix("v").split(".")[:2]
    flags = ["-s", "-w"]
    # Both packages carry a version: component-base for the servers'
    # /version, client-go for the user agent and kubectl version.
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def _source_files(version: str) -> list[Path]:
    files: list[Path] = []
    for module in (K8S_MODULE_DIR, ETCD_MODULE_DIR):
        files += [module / "go.mod", module / "go.sum"]
        files += sorted(p for p in module.rglob("*.go") if p.is_file())
    pinned = RELEASES_DIR / version
    files += [pinned / name for name in ("go.mod", "go.sum") if (pinned / name).is_file()]
    return files


def stamp(version: str, go: str, *, kubelet_only: bool = False) -> str:
    """Hash of everything that determines the binaries' content: for a release that
    may build with stand-ins, their generator's source too."""
    parts = [_BUILD_FORMAT, version, go, ldflags(version), release_tags(version), str(kubelet_only)]
    if minor(version) >= standins.FIRST_MINOR:
        parts.append(Path(standins.__file__).read_text())
    return source_digest(parts, _source_files(version))


def source_digest(parts: Iterable[str], files: Iterable[Path]) -> str:
    """sha256 of the build's parameters and its Go sources (by path under go/ and content)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    for path in files:
        digest.update(str(path.relative_to(GO_DIR)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_log(message: str) -> None:
    print(f"[e2e-build] {message}", file=sys.stderr, flush=True)


def go_env(go: str = "local") -> dict[str, str]:
    """The go command's environment. The pinned go directive must never trigger a
    toolchain download: ``GOTOOLCHAIN`` is ``local`` unless a release's build asks
    for its own (``TOOLCHAINS``)."""
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = go
    env.setdefault("CGO_ENABLED", "0")
    return env


def run_go(cmd: list[str], cwd: Path, *, go: str = "local") -> None:
    proc = subprocess.run(cmd, check=False, cwd=cwd, env=go_env(go), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed in {cwd} (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )


def go_build(
    target: Path, name: str, module: Path, package: str, flags: list[str], *, go: str = "local"
) -> None:
    """`go build` of `package` in `module` to `target`/`name` with toolchain `go`. Built
    next to the target and renamed, so a binary is either complete or absent."""
    t0 = time.monotonic()
    build_log(f"building {name} ...")
    tmp_out = target / f".{name}.tmp"
    run_go(["go", "build", "-trimpath", *flags, "-o", str(tmp_out), package], module, go=go)
    tmp_out.replace(target / name)
    build_log(f"built {name} in {time.monotonic() - t0:.1f}s")


def _copy_module(module: Path, version: str) -> None:
    shutil.copytree(K8S_MODULE_DIR, module, dirs_exist_ok=True)
    if version in KUBELET_ONLY_RELEASES:
        # drastub publishes resource.k8s.io/v1 slices, which such a release lacks.
        shutil.rmtree(module / "cmd" / "drastub")


@contextmanager
def k8s_module(version: str) -> Iterator[Path]:
    """The k8s wrapper module at ``version``: the committed one; a copy with the
    release's pinned go.mod and go.sum from ``go/releases/<version>``; or, for a
    release not pinned there, a copy whose go.mod is generated (needs the
    module proxy)."""
    if version == committed_k8s_version():
        yield K8S_MODULE_DIR
        return
    with tempfile.TemporaryDirectory(prefix="neuron-dra-k8s-") as tmp:
        module = Path(tmp)
        _copy_module(module, version)
        pinned = RELEASES_DIR / version
        if (pinned / "go.mod").is_file():
            for name in ("go.mod", "go.sum"):
                shutil.copyfile(pinned / name, module / name)
            local = standins.local_replacements(_go_mod_json(module, toolchain(version)))
            standins.materialize(module, local, staging_version(version))
        else:
            pin_release(module, version)
        yield module


def pin_release(module: Path, version: str) -> None:
    """Point the module in ``module`` at Kubernetes ``version`` and tidy it."""
    staging = staging_version(version)
    go = toolchain(version)
    # Start from no requirements: versions another release needed (a newer
    # kube-openapi, say) must not be carried into an older one by MVS.
    edits = [f"-droprequire={r['Path']}" for r in _requirements(module, go)]
    edits.append(f"-require=k8s.io/kubernetes@{version}")
    edits += [f"-replace=k8s.io/{m}=k8s.io/{m}@{staging}" for m in staging_modules(version)]
    build_log(f"generating go.mod for Kubernetes {version} in {module}")
    run_go(["go", "mod", "edit", *edits], module, go=go)
    needed = needed_standins(version)
    for standin in needed:
        build_log(f"stand-in for {standin.module}@{standin.version}, refused: {standin.why}")
    standins.apply(module, needed, staging, lambda cmd: run_go(cmd, module, go=go))
    run_go(["go", "mod", "tidy"], module, go=go)


def needed_standins(version: str) -> list[standins.StandIn]:
    """The stand-ins Kubernetes ``version`` needs today: one module proxy probe each."""
    if minor(version) < standins.FIRST_MINOR:
        return []
    go = toolchain(version)
    k8s_mod = standins.module_file("k8s.io/kubernetes", version, "GoMod", go).read_text()
    return standins.plan(
        minor(version), k8s_mod, staging_version(version), standins.go_download(go)
    )


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Held while one build writes `directory` (a cache key's): parallel test sessions
    share the cache; one builds, the others wait."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_fresh(target: Path, expected_stamp: str, names: tuple[str, ...] = BINARIES) -> bool:
    stamp_file = target.parent / "stamp"
    if not stamp_file.is_file() or stamp_file.read_text().strip() != expected_stamp:
        return False
    return all(os.access(target / name, os.X_OK) for name in names)


def build(force: bool = False) -> Binaries:
    """The binaries of the selected releases (``NEURON_DRA_K8S_VERSION``,
    ``NEURON_DRA_KUBELET_VERSION``), built unless cached."""
    version, kubelet = k8s_version(), kubelet_version()
    control_plane = build_release(version, force=force)
    if kubelet == version:
        return control_plane
    side = build_release(kubelet, kubelet_only=True, force=force)
    return Binaries(control_plane.bin_dir, version, side.bin_dir, kubelet)


def build_release(version: str, *, kubelet_only: bool = False, force: bool = False) -> Binaries:
    """Build one release's binaries (only the kubelet side's with
    ``kubelet_only``) unless an up-to-date set is cached; return them."""
    go = go_version(version)
    target = bin_dir(version, go, kubelet_only=kubelet_only)
    expected = stamp(version, go, kubelet_only=kubelet_only)
    names = KUBELET_BINARIES if kubelet_only else BINARIES
    with locked(target.parent):
        if not force and is_fresh(target, expected, names):
            build_log(f"up to date: {target}")
            return Binaries(target, version)
        target.mkdir(parents=True, exist_ok=True)
        (target.parent / "stamp").unlink(missing_ok=True)
        started = time.monotonic()
        flags = [f"-ldflags={ldflags(version)}"]
        build_log(f"building Kubernetes {version} ({go}) ...")
        with k8s_module(version) as k8s_dir:
            jobs: list[tuple[str, Path, str, list[str]]] = []
            if not kubelet_only:
                jobs += [
                    (name, k8s_dir, f"k8s.io/kubernetes/cmd/{name}", []) for name in _K8S_COMMANDS
                ]
            tags = [f"-tags={release_tags(version)}"]
            local = KUBELET_BINARIES if kubelet_only else _LOCAL_COMMANDS
            jobs += [(name, k8s_dir, f"./cmd/{name}", tags) for name in local]
            if not kubelet_only:
                jobs.append(("etcd", ETCD_MODULE_DIR, "go.etcd.io/etcd/server/v3", []))
            for name, module, package, extra in jobs:
                go_build(target, name, module, package, flags + extra, go=toolchain(version))
        if stamp(version, go, kubelet_only=kubelet_only) != expected:
            # Sources changed while building: leave the set marked stale.
            build_log("sources changed during the build; the next run rebuilds")
        else:
            (target.parent / "stamp").write_text(expected + "\n")
        build_log(f"all binaries built in {time.monotonic() - started:.1f}s: {target}")
        return Binaries(target, version)


def helm_version() -> str:
    """The helm release ``go/helm/go.mod`` pins, e.g. v3.22.0."""
    return required_version(HELM_MODULE_DIR, "helm.sh/helm/v3")


def helm_ldflags(version: str) -> str:
    """As helm's Makefile: its version, and the Kubernetes release of its client-go as
    the default of `helm template` and `helm lint` (v1.20 otherwise)."""
    client_go = required_version(HELM_MODULE_DIR, "k8s.io/client-go")
    kube_minor = client_go.split(".")[1]  # v0.37.0: Kubernetes 1.37
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}"]
    flags.append("-X helm.sh/helm/v3/internal/version.gitTreeState=clean")
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={kube_minor}"]
    return " ".join(flags)


def build_helm(force: bool = False) -> Path:
    """The helm executable of ``go/helm/go.mod``, built unless cached (beside the
    Kubernetes binaries, keyed by helm and Go version); its path."""
    version = helm_version()
    flags = [f"-ldflags={helm_ldflags(version)}"]
    program = GoProgram("helm", "helm.sh/helm/v3/cmd/helm", flags)
    target = _build_tool(
        "helm",
        HELM_MODULE_DIR,
        version,
        parts=[helm_ldflags(version)],
        sources=[],
        programs=[program],
        force=force,
        what=f"helm {version}",
    )
    return target / "helm"


@dataclass(frozen=True)
class GoProgram:
    """One program a tool's Go module builds: its file name, package and build flags."""

    name: str
    package: str
    flags: list[str]


def _build_tool(
    tool: str,
    module: Path,
    version: str,
    *,
    parts: list[str],
    sources: list[str],
    programs: list[GoProgram],
    force: bool,
    what: str,
) -> Path:
    """The bin directory of `tool`'s programs, built from `module` unless cached (in the
    cache root, keyed by the tool's and Go's versions). The stamp covers the build
    format, the versions, `parts` (flags, tags), and the module's go.mod, go.sum,
    tools.go and `sources`."""
    go = go_version()
    target = cache_root() / f"{tool}-{version}-{go}" / "bin"
    digest = hashlib.sha256()
    for part in (_BUILD_FORMAT, version, go, *parts):
        digest.update(part.encode() + b"\0")
    for name in ("go.mod", "go.sum", "tools.go", *sources):
        digest.update(name.encode() + b"\0" + (module / name).read_bytes() + b"\0")
    expected = digest.hexdigest()
    with locked(target.parent):
        if not force and is_fresh(target, expected, tuple(p.name for p in programs)):
            return target
        target.mkdir(parents=True, exist_ok=True)
        (target.parent / "stamp").unlink(missing_ok=True)
        build_log(f"{what} ({go})")
        for program in programs:
            go_build(target, program.name, module, program.package, program.flags)
        (target.parent / "stamp").write_text(expected + "\n")
        return target


PROMETHEUS_MODULE = "github.com/prometheus/prometheus"


def promtool_module_version() -> str:
    """The Prometheus module ``go/prometheus/go.mod`` pins, e.g. v0.316.0."""
    return required_version(PROMETHEUS_MODULE_DIR, PROMETHEUS_MODULE)


def prometheus_release(module_version: str) -> str:
    """The Prometheus release a module version is: v0.316.0 is 3.16.0 (Prometheus 3
    publishes its Go module as v0.3XX.Y, having no /v3 module path)."""
    found = re.fullmatch(r"v0\.(\d)(\d{2})\.(\d+)", module_version)
    if found is None:
        raise ValueError(f"not a Prometheus 3 module version: {module_version!r}")
    major, minor, patch = found.groups()
    return f"{major}.{int(minor)}.{patch}"


def promtool_ldflags(module_version: str) -> str:
    """As Prometheus's promu build: the release in `promtool --version`."""
    pkg = "github.com/prometheus/common/version"
    flags = ["-s", "-w", f"-X {pkg}.Version={prometheus_release(module_version)}"]
    flags += [f"-X {pkg}.Branch=HEAD", f"-X {pkg}.BuildDate=19700101-00:00:00"]
    return " ".join(flags)


# promtool's service discovery (AWS, Azure, GCE, ... SDKs) is for `check
# service-discovery`, which nothing here runs: leaving it out halves the build.
PROMTOOL_TAGS = "remove_all_sd"
# Beside promtool: the metric and label names PromQL expressions use, by Prometheus's
# own parser (`go/prometheus/cmd/promqlnames`).
PROMQLNAMES_SOURCE = "cmd/promqlnames/main.go"


def build_promtool(force: bool = False) -> Path:
    """The promtool of ``go/prometheus/go.mod`` and ``promqlnames`` beside it, built
    unless cached (beside helm, keyed by module and Go version); promtool's path."""
    version = promtool_module_version()
    flags = [f"-tags={PROMTOOL_TAGS}", f"-ldflags={promtool_ldflags(version)}"]
    programs = [
        GoProgram("promtool", f"{PROMETHEUS_MODULE}/cmd/promtool", flags),
        GoProgram("promqlnames", "./cmd/promqlnames", []),
    ]
    parts = [promtool_ldflags(version), PROMTOOL_TAGS]
    what = f"promtool {prometheus_release(version)} ({version})"
    target = _build_tool(
        "promtool",
        PROMETHEUS_MODULE_DIR,
        version,
        parts=parts,
        sources=[PROMQLNAMES_SOURCE],
        programs=programs,
        force=force,
        what=what,
    )
    return target / "promtool"


@dataclass(frozen=True)
class NodeBinaries:
    """A real node's programs: the kubelet and kube-proxy of the control plane's
    release, containerd with its runc shim and ctr, and the pod sandbox's pause."""

    bin_dir: Path  # also the directory containerd finds its runc shim in (PATH)
    version: str

    @property
    def kubelet(self) -> Path:
        return self.bin_dir / "kubelet"

    @property
    def kube_proxy(self) -> Path:
        return self.bin_dir / "kube-proxy"

    @property
    def containerd(self) -> Path:
        return self.bin_dir / "containerd"

    @property
    def ctr(self) -> Path:
        return self.bin_dir / "ctr"

    @property
    def pause(self) -> Path:
        return self.bin_dir / "pause"


_NODE_K8S_COMMANDS = ("kubelet", "kube-proxy")
_CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
NODE_BINARIES = (*_NODE_K8S_COMMANDS, *_CONTAINERD_COMMANDS, "pause")
# Without cgo: the btrfs, devmapper and zfs snapshotters need C libraries; the node
# uses overlayfs.
_CONTAINERD_TAGS = "no_btrfs,no_devmapper,no_zfs"


def containerd_version() -> str:
    return required_version(NODE_MODULE_DIR, "github.com/containerd/containerd/v2")


def node_stamp(version: str, go: str) -> str:
    parts = (_BUILD_FORMAT, version, go, ldflags(version), _CONTAINERD_TAGS)
    files = [
        path
        for module in (K8S_MODULE_DIR, NODE_MODULE_DIR)
        for path in [module / "go.mod", module / "go.sum", *sorted(module.rglob("*.go"))]
    ]
    return source_digest(parts, files)


def build_node(force: bool = False) -> NodeBinaries:
    """The real node's programs (``NodeBinaries``), built unless cached. Only the
    committed release: its go.mod carries the kubelet's dependencies."""
    version, go = committed_k8s_version(), go_version()
    target = cache_root() / f"node-{version}-{containerd_version()}-{go}" / "bin"
    expected = node_stamp(version, go)
    with locked(target.parent):
        if not force and is_fresh(target, expected, NODE_BINARIES):
            return NodeBinaries(target, version)
        target.mkdir(parents=True, exist_ok=True)
        (target.parent / "stamp").unlink(missing_ok=True)
        k8s = [f"-ldflags={ldflags(version)}"]
        containerd = ["-ldflags=-s -w", f"-tags={_CONTAINERD_TAGS}"]
        for name in _NODE_K8S_COMMANDS:
            go_build(target, name, K8S_MODULE_DIR, f"k8s.io/kubernetes/cmd/{name}", k8s)
        for name in _CONTAINERD_COMMANDS:
            package = f"github.com/containerd/containerd/v2/cmd/{name}"
            go_build(target, name, NODE_MODULE_DIR, package, containerd)
        go_build(target, "pause", NODE_MODULE_DIR, "./cmd/pause", ["-ldflags=-s -w"])
        (target.parent / "stamp").write_text(expected + "\n")
        return NodeBinaries(target, version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument(
        "--print-dir", action="store_true", help="only print the bin dir, do not build"
    )
    parser.add_argument(
        "--pin",
        metavar="VERSION",
        help="write go/releases/VERSION/go.mod and go.sum for a release (needs the module proxy)",
    )
    parser.add_argument(
        "--standins",
        metavar="VERSION",
        help="say which refused modules a release's build needs stand-ins for (asks the proxy)",
    )
    parser.add_argument(
        "--helm", action="store_true", help="build (or reuse) helm and print its path instead"
    )
    parser.add_argument(
        "--promtool",
        action="store_true",
        help="build (or reuse) promtool and print its path instead",
    )
    parser.add_argument(
        "--node",
        action="store_true",
        help="build (or reuse) the real node's kubelet, kube-proxy and containerd instead",
    )
    args = parser.parse_args(argv)
    if args.helm:
        print(build_helm(force=args.force))
        return 0
    if args.promtool:
        print(build_promtool(force=args.force))
        return 0
    if args.node:
        print(build_node(force=args.force).bin_dir)
        return 0
    if args.pin:
        pin(_checked(args.pin))
        return 0
    if args.standins:
        needed = needed_standins(_checked(args.standins))
        for standin in needed:
            print(f"{standin.module}@{standin.version}: refused; {standin.why}")
        print(f"{args.standins}: {len(needed)} stand-in(s) needed")
        return 0
    if args.print_dir:
        print(bin_dir())
        return 0
    binaries = build(force=args.force)
    print(binaries.bin_dir)
    return 0


def pin(version: str) -> None:
    """Record the module graph of ``version`` so its builds never depend on
    what the module proxy resolves on the day."""
    with tempfile.TemporaryDirectory(prefix="neuron-dra-k8s-") as tmp:
        module = Path(tmp)
        _copy_module(module, version)
        pin_release(module, version)
        target = RELEASES_DIR / version
        target.mkdir(parents=True, exist_ok=True)
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(module / name, target / name)
    build_log(f"pinned {version} in {target}")


if __name__ == "__main__":
    raise SystemExit(main())
