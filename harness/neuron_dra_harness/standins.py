"""Stand-ins for modules a Kubernetes pre-release's build needs and the Go module proxy
refuses, generated at build time.

Kubernetes v1.38.0-beta.0 asks for four module versions the proxy here will not serve:

- ``k8s.io/apiextensions-api`` (the external CRD types and their generated client,
  moved out of apiextensions-apiserver in 1.38; upstream publishes the module from
  master only). It is made from apiextensions-apiserver at ``SOURCE_VERSION``, whose
  packages are the same types in their old place: ``pkg/apis/apiextensions/{v1,v1beta1}``
  without the conversion files (they stay in 1.38's apiextensions-apiserver), and
  ``pkg/client/{applyconfiguration,clientset/clientset,listers,informers/externalversions}``,
  with import paths moved and structured-merge-diff v6 made v7.
- ``k8s.io/ktesting``: imported by tests only, but ``go mod tidy`` walks the tests of
  dependencies. Three empty packages satisfy it; no binary links them.
- ``sigs.k8s.io/structured-merge-diff/v7`` v7.0.1 (its zip): v7.0.0 stands in.
- ``sigs.k8s.io/iptables-wrappers`` v1.0.0 (its zip): imported by ``cmd/kubelet`` and
  ``cmd/kube-proxy`` only, so those two leave ``tools.go`` while the module is tidied.

``plan`` asks the proxy about each (one ``go mod download`` probe apiece, nothing
cached) and returns the stand-ins still needed, so each one drops by itself on the day
the real module is served. The first two are local directories under ``standins/``,
named by relative ``replace`` lines that ``--pin`` records; ``materialize`` writes them
into a module copy from its go.mod before a build.
``python -m neuron_dra_harness.build --standins v1.38.0`` says which ones a release needs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STANDIN_DIR = "standins"
"""Where a module copy keeps its generated stand-ins: ``./standins/<name>``."""

SOURCE_VERSION = "v0.37.2"
"""The apiextensions-apiserver release the apiextensions-api stand-in is made from:
the default release's, which its build has already downloaded."""

FIRST_MINOR = 38
"""No earlier release asks for any of these modules."""

# `go` on a module version the proxy will not serve (403 on .info, .mod or .zip).
_REFUSED = re.compile(r"(?P<module>[\w./-]+)@(?P<version>v[\w.+-]+): reading \S+: 403 Forbidden")


def refused_modules(go_output: str) -> list[str]:
    """The module@version pairs `go` reports the module proxy refused."""
    return sorted({f"{m['module']}@{m['version']}" for m in _REFUSED.finditer(go_output)})


@dataclass(frozen=True)
class StandIn:
    """One refused module version and what takes its place."""

    module: str
    version: str
    replacement: str  # a version of the same module, or ./standins/<name>
    why: str

    @property
    def local(self) -> bool:
        return self.replacement.startswith("./")

    @property
    def replace(self) -> str:
        """The `go mod edit -replace` argument."""
        target = self.replacement if self.local else f"{self.module}@{self.replacement}"
        return f"{self.module}={target}"


def candidates(staging: str, smd_v7: str | None, iptables: str | None) -> list[StandIn]:
    """Every stand-in a 1.38+ build may need: the two staging modules at ``staging``
    (v0.Y.Z), and the versions of structured-merge-diff v7 and iptables-wrappers that
    k8s.io/kubernetes requires (None where it requires none)."""
    found = [
        StandIn(
            "k8s.io/apiextensions-api",
            staging,
            f"./{STANDIN_DIR}/apiextensions-api",
            f"made from apiextensions-apiserver {SOURCE_VERSION}'s CRD types and client",
        ),
        StandIn("k8s.io/ktesting", staging, f"./{STANDIN_DIR}/ktesting", "empty packages"),
    ]
    if smd_v7 == "v7.0.1":
        found.append(
            StandIn("sigs.k8s.io/structured-merge-diff/v7", smd_v7, "v7.0.0", "v7.0.0 served")
        )
    if iptables is not None:
        found.append(
            StandIn(
                "sigs.k8s.io/iptables-wrappers",
                iptables,
                "",
                "kubelet and kube-proxy left out of tools.go",
            )
        )
    return found


Download = Callable[[str, str], str]
"""`go mod download -json module@version`'s combined output, for a probe."""


def served(module: str, version: str, download: Download) -> bool:
    """Whether the proxy serves ``module@version`` whole (.info, .mod and .zip). A
    refusal is False; any other failure raises, since it says nothing of the proxy."""
    out = download(module, version)
    if refused_modules(out):
        return False
    try:
        error = json.loads(out).get("Error")
    except json.JSONDecodeError as err:
        raise RuntimeError(f"go mod download {module}@{version}: {out.strip()}") from err
    if error:
        raise RuntimeError(f"go mod download {module}@{version}: {error}")
    return True


def plan(minor: int, k8s_mod: str, staging: str, download: Download) -> list[StandIn]:
    """The stand-ins a release needs: for 1.38 and later, each candidate whose module
    version the proxy refuses. ``k8s_mod`` is k8s.io/kubernetes's go.mod text."""
    if minor < FIRST_MINOR:
        return []
    smd = _required(k8s_mod, "sigs.k8s.io/structured-merge-diff/v7")
    iptables = _required(k8s_mod, "sigs.k8s.io/iptables-wrappers")
    return [
        s for s in candidates(staging, smd, iptables) if not served(s.module, s.version, download)
    ]


def _required(go_mod: str, module: str) -> str | None:
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", go_mod, re.MULTILINE)
    return found.group(1) if found else None


# tools.go lines importing a command that needs iptables-wrappers.
_IPTABLES_COMMANDS = re.compile(r'^\s*_ "k8s\.io/kubernetes/cmd/(kubelet|kube-proxy)"\n', re.M)


def without_iptables_commands(tools_go: str) -> str:
    """tools.go without the two commands that import iptables-wrappers."""
    return _IPTABLES_COMMANDS.sub("", tools_go)


def apply(
    module: Path, standins: Iterable[StandIn], staging: str, run_go: Callable[[list[str]], None]
) -> None:
    """Make a module copy build with ``standins``: its ``replace`` lines (relative, so a
    pinned go.mod records them), the local stand-ins written, tools.go trimmed."""
    chosen = list(standins)
    edits = [f"-replace={s.replace}" for s in chosen if s.replacement]
    if edits:
        run_go(["go", "mod", "edit", *edits])
    if any(s.module == "sigs.k8s.io/iptables-wrappers" for s in chosen):
        tools = module / "tools.go"
        tools.write_text(without_iptables_commands(tools.read_text()))
    materialize(module, {s.replacement for s in chosen if s.local}, staging)


def local_replacements(go_mod_json: str) -> set[str]:
    """The ``./standins/...`` directories a go.mod (as `go mod edit -json`) replaces to."""
    replaces = json.loads(go_mod_json).get("Replace") or []
    prefix = f"./{STANDIN_DIR}/"
    return {r["New"]["Path"] for r in replaces if r["New"]["Path"].startswith(prefix)}


def materialize(module: Path, replacements: Iterable[str], staging: str) -> None:
    """Write each local stand-in ``./standins/<name>`` into ``module``, as the staging
    version ``staging`` (v0.Y.Z) of its module."""
    makers = {"apiextensions-api": make_apiextensions_api, "ktesting": make_ktesting}
    for replacement in sorted(replacements):
        name = replacement.removeprefix(f"./{STANDIN_DIR}/")
        if name not in makers:
            raise RuntimeError(f"go.mod replaces to {replacement}, which no generator makes")
        target = module / STANDIN_DIR / name
        shutil.rmtree(target, ignore_errors=True)
        makers[name](target, staging)


def make_ktesting(target: Path, staging: str) -> None:
    """k8s.io/ktesting: the three packages Kubernetes' tests import, empty."""
    for package in ("", "format", "initoption"):
        directory = target / package
        directory.mkdir(parents=True, exist_ok=True)
        name = package or "ktesting"
        (directory / "doc.go").write_text(
            f"// Package {name} stands in for k8s.io/ktesting {staging}; only tests import it.\n"
            f"package {name}\n"
        )
    (target / "go.mod").write_text("module k8s.io/ktesting\n\ngo 1.26.0\n")


_OLD = "k8s.io/apiextensions-apiserver/"
_SMD = "sigs.k8s.io/structured-merge-diff"
_NEW = "k8s.io/apiextensions-api/"
# What the stand-in takes from apiextensions-apiserver, and what it leaves there.
_PACKAGES = (
    "pkg/apis/apiextensions/v1",
    "pkg/apis/apiextensions/v1beta1",
    "pkg/client/applyconfiguration",
    "pkg/client/clientset/clientset",
    "pkg/client/listers",
    "pkg/client/informers/externalversions",
)
_LEFT_IN_APISERVER = ("conversion.go", "zz_generated.conversion.go")
_NULL_LITERAL = (
    "package {package}\n\n"
    "// nullLiteral is JSON's null; it lived in conversion.go, which stays in\n"
    "// apiextensions-apiserver.\n"
    "var nullLiteral = []byte(`null`)\n"
)


def make_apiextensions_api(target: Path, staging: str) -> None:
    """k8s.io/apiextensions-api at ``staging``, from apiextensions-apiserver's
    ``SOURCE_VERSION`` packages."""
    source = module_file("k8s.io/apiextensions-apiserver", SOURCE_VERSION)
    for package in _PACKAGES:
        for path in sorted((source / package).rglob("*.go")):
            if path.name.endswith("_test.go") or path.name in _LEFT_IN_APISERVER:
                continue
            out = target / path.relative_to(source)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(moved(path.read_text(), str(path.relative_to(source))))
    for api in ("v1", "v1beta1"):
        directory = target / "pkg/apis/apiextensions" / api
        if "nullLiteral" in "".join(p.read_text() for p in directory.glob("*.go")):
            (directory / "null_literal.go").write_text(_NULL_LITERAL.format(package=api))
    (target / "go.mod").write_text(
        "module k8s.io/apiextensions-api\n\ngo 1.26.0\n\nrequire (\n"
        + "".join(f"\tk8s.io/{m} {staging}\n" for m in ("api", "apimachinery", "client-go"))
        + ")\n"
    )


def moved(text: str, where: str) -> str:
    """A Go file of the stand-in with its imports moved to apiextensions-api. An import
    of any other apiextensions-apiserver package is refused: the stand-in would import
    the module that imports it."""
    for package in _PACKAGES:
        text = text.replace(f'"{_OLD}{package}', f'"{_NEW}{package}')
    text = text.replace(f"{_SMD}/v6", f"{_SMD}/v7")
    if (left := re.search(rf'"{re.escape(_OLD)}[^"]*"', text)) is not None:
        raise RuntimeError(f"{where} imports {left.group(0)}, which the stand-in cannot")
    return text


def _go_mod_download(module: str, version: str, go: str = "local") -> tuple[dict[str, Any], str]:
    """`go mod download -json module@version` outside any module: its JSON (empty where it
    printed none) and everything it printed."""
    with tempfile.TemporaryDirectory(prefix="neuron-dra-standin-") as tmp:
        proc = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=tmp,
            env=dict(os.environ, GOTOOLCHAIN=go, GOFLAGS="-mod=mod"),
            capture_output=True,
            text=True,
            check=False,
        )
    try:
        info = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    return info, proc.stdout + proc.stderr


def module_file(module: str, version: str, key: str = "Dir", go: str = "local") -> Path:
    """The module cache's ``Dir`` (source tree) or ``GoMod`` (go.mod file) of
    ``module@version``, downloaded if need be."""
    info, out = _go_mod_download(module, version, go)
    if not info.get(key):
        raise RuntimeError(f"go mod download {module}@{version}: {info.get('Error') or out}")
    return Path(info[key])


def go_download(go: str = "local") -> Download:
    """A probe that asks the module proxy (`go mod download -json`) with toolchain ``go``."""
    return lambda module, version: _go_mod_download(module, version, go)[1]
