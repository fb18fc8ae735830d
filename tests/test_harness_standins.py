"""The stand-ins a pre-release's build uses for modules the Go module proxy refuses."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from neuron_dra_harness import build, standins
from tests.doc_commands import HARNESS, REPO, fill, run_by

NEXT = "v1.38.0-beta.0"
STAGING = "v0.38.0-beta.0"

# `go mod download -json` of a version the proxy refuses (.info), and of one whose .zip
# it refuses, as go 1.27.3 prints them.
REFUSED_INFO = """{
\t"Path": "k8s.io/apiextensions-api",
\t"Version": "v0.38.0-beta.0",
\t"Error": "k8s.io/apiextensions-api@v0.38.0-beta.0: reading \
https://proxy.golang.org/k8s.io/apiextensions-api/@v/v0.38.0-beta.0.info: 403 Forbidden\\n\
\\tserver response: This module version is not available."
}
"""
REFUSED_ZIP = """{
\t"Path": "sigs.k8s.io/structured-merge-diff/v7",
\t"Version": "v7.0.1",
\t"Error": "sigs.k8s.io/structured-merge-diff/v7@v7.0.1: reading \
https://proxy.golang.org/sigs.k8s.io/structured-merge-diff/v7/@v/v7.0.1.zip: 403 Forbidden\\n\
\\tserver response: This module version is not available.",
\t"GoMod": "/root/go/pkg/mod/cache/download/sigs.k8s.io/structured-merge-diff/v7/@v/v7.0.1.mod"
}
"""
SERVED = '{\n\t"Path": "k8s.io/ktesting",\n\t"Version": "v0.38.0",\n\t"Dir": "/x"\n}\n'
K8S_MOD = """module k8s.io/kubernetes

require (
\tsigs.k8s.io/iptables-wrappers v1.0.0
\tsigs.k8s.io/structured-merge-diff/v7 v7.0.1
)
"""


def _proxy(refused: set[str]) -> standins.Download:
    """A module proxy that refuses the named modules and serves every other."""

    def download(module: str, version: str) -> str:
        return (
            REFUSED_INFO.replace("k8s.io/apiextensions-api", module)
            if module in refused
            else SERVED
        )

    return download


def test_a_refusal_is_told_from_a_module_that_is_served() -> None:
    assert not standins.served("k8s.io/apiextensions-api", STAGING, lambda m, v: REFUSED_INFO)
    assert not standins.served(
        "sigs.k8s.io/structured-merge-diff/v7", "v7.0.1", lambda m, v: REFUSED_ZIP
    )
    assert standins.served("k8s.io/ktesting", "v0.38.0", lambda m, v: SERVED)


def test_any_other_failure_is_an_error_not_a_refusal() -> None:
    offline = '{"Error": "dial tcp: lookup proxy.golang.org: no such host"}'
    with pytest.raises(RuntimeError, match="no such host"):
        standins.served("k8s.io/ktesting", STAGING, lambda m, v: offline)
    with pytest.raises(RuntimeError, match="go mod download"):
        standins.served("k8s.io/ktesting", STAGING, lambda m, v: "go: not JSON at all")


def test_1_38_needs_the_four_stand_ins_while_the_proxy_refuses_them() -> None:
    everything = {
        "k8s.io/apiextensions-api",
        "k8s.io/ktesting",
        "sigs.k8s.io/structured-merge-diff/v7",
        "sigs.k8s.io/iptables-wrappers",
    }
    needed = standins.plan(38, K8S_MOD, STAGING, _proxy(everything))
    assert [s.replace for s in needed] == [
        "k8s.io/apiextensions-api=./standins/apiextensions-api",
        "k8s.io/ktesting=./standins/ktesting",
        "sigs.k8s.io/structured-merge-diff/v7=sigs.k8s.io/structured-merge-diff/v7@v7.0.0",
        "sigs.k8s.io/iptables-wrappers=sigs.k8s.io/iptables-wrappers@",
    ]
    assert [s.version for s in needed] == [STAGING, STAGING, "v7.0.1", "v1.0.0"]


@pytest.mark.parametrize(
    "now_served",
    [
        "k8s.io/apiextensions-api",
        "k8s.io/ktesting",
        "sigs.k8s.io/structured-merge-diff/v7",
        "sigs.k8s.io/iptables-wrappers",
    ],
)
def test_each_stand_in_drops_by_itself_when_its_module_is_served(now_served: str) -> None:
    everything = {s.module for s in standins.candidates(STAGING, "v7.0.1", "v1.0.0")}
    needed = standins.plan(38, K8S_MOD, STAGING, _proxy(everything - {now_served}))
    assert {s.module for s in needed} == everything - {now_served}


def test_no_release_before_1_38_asks_the_proxy_anything() -> None:
    def never(module: str, version: str) -> str:
        raise AssertionError(f"asked for {module}@{version}")

    assert standins.plan(37, K8S_MOD, "v0.37.2", never) == []


def test_a_newer_structured_merge_diff_needs_no_stand_in() -> None:
    newer = K8S_MOD.replace("v7.0.1", "v7.0.2")
    needed = standins.plan(38, newer, STAGING, _proxy({"sigs.k8s.io/structured-merge-diff/v7"}))
    assert needed == []


def test_tools_go_loses_only_the_commands_that_import_iptables_wrappers() -> None:
    tools = (build.K8S_MODULE_DIR / "tools.go").read_text()
    trimmed = standins.without_iptables_commands(tools)
    assert '"k8s.io/kubernetes/cmd/kubelet"' in tools
    assert "cmd/kubelet" not in trimmed
    assert "cmd/kube-proxy" not in trimmed
    assert '_ "k8s.io/kubernetes/cmd/kube-apiserver"' in trimmed
    assert '_ "k8s.io/kubernetes/cmd/kubectl"' in trimmed


def test_the_pinned_1_38_module_names_its_local_stand_ins() -> None:
    go_mod_json = subprocess.run(
        ["go", "mod", "edit", "-json", str(build.RELEASES_DIR / NEXT / "go.mod")],
        check=True,
        capture_output=True,
        text=True,
        env=build.go_env(build.toolchain(NEXT)),
    ).stdout
    assert standins.local_replacements(go_mod_json) == {
        "./standins/apiextensions-api",
        "./standins/ktesting",
    }


def test_an_unknown_local_replacement_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no generator makes"):
        standins.materialize(tmp_path, {"./standins/kubelet"}, STAGING)


def test_ktesting_is_three_empty_packages(tmp_path: Path) -> None:
    standins.make_ktesting(tmp_path, STAGING)
    packages = {p.parent.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.go")}
    assert packages == {".", "format", "initoption"}
    assert (tmp_path / "go.mod").read_text().startswith("module k8s.io/ktesting\n")


def test_moved_imports_point_at_the_stand_in() -> None:
    source = (
        'import (\n\tv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"\n'
        '\t"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/scheme"\n'
        '\t"sigs.k8s.io/structured-merge-diff/v6/typed"\n)\n'
    )
    assert standins.moved(source, "x.go") == (
        'import (\n\tv1 "k8s.io/apiextensions-api/pkg/apis/apiextensions/v1"\n'
        '\t"k8s.io/apiextensions-api/pkg/client/clientset/clientset/scheme"\n'
        '\t"sigs.k8s.io/structured-merge-diff/v7/typed"\n)\n'
    )


def test_an_import_the_stand_in_cannot_carry_is_refused() -> None:
    internal = 'import "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"\n'
    with pytest.raises(RuntimeError, match=r"conversion\.go imports"):
        standins.moved(internal, "conversion.go")


@pytest.mark.e2e
def test_the_apiextensions_api_stand_in_has_every_type_and_no_conversion(tmp_path: Path) -> None:
    """Made from the module cache (the default release's build downloads the source): the
    external types and client, the conversions left behind, nullLiteral restored."""
    standins.make_apiextensions_api(tmp_path, STAGING)
    v1 = tmp_path / "pkg/apis/apiextensions/v1"
    assert (v1 / "types.go").is_file()
    assert (v1 / "zz_generated.defaults.go").is_file()
    assert not (v1 / "conversion.go").exists()
    assert not (v1 / "zz_generated.conversion.go").exists()
    assert not list(tmp_path.rglob("*_test.go"))
    assert "var nullLiteral" in (v1 / "null_literal.go").read_text()
    assert (tmp_path / "pkg/client/clientset/clientset/fake").is_dir()
    text = "".join(p.read_text() for p in tmp_path.rglob("*.go"))
    assert '"k8s.io/apiextensions-apiserver/' not in text  # no import of it left
    assert "structured-merge-diff/v6" not in text
    go_mod = (tmp_path / "go.mod").read_text()
    assert all(f"k8s.io/{m} {STAGING}" in go_mod for m in ("api", "apimachinery", "client-go"))


@pytest.mark.e2e
def test_the_documented_harness_commands_run() -> None:
    """As typed in the docs, for the next release's beta: the proxy is asked, and the
    stand-ins it still needs are named."""
    documented = run_by(HARNESS)
    assert documented
    for command in documented:
        argv = [fill(a, version=NEXT) for a in command.argv]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        *named, last = done.stdout.splitlines()
        assert re.fullmatch(rf"{re.escape(NEXT)}: {len(named)} stand-in\(s\) needed", last)
        known = {s.module for s in standins.candidates(STAGING, "v7.0.1", "v1.0.0")}
        assert {line.split("@")[0] for line in named} <= known, named


# A property of a type's schema in openapi-gen's output: five tabs deep, `"name": {`.
_PROPERTY = re.compile(r'^\t{5}"([\w$-]+)": \{$', re.MULTILINE)
_SCHEMA = re.compile(r"^func schema_pkg_apis_apiextensions_(v1|v1beta1)_(\w+)\(", re.MULTILINE)
_STRUCT = re.compile(r"^type (\w+) struct \{\n(.*?)^\}", re.MULTILINE | re.DOTALL)
_TAG = re.compile(r'json:"([\w$-]*)[,"]')


def openapi_properties(generated: str) -> dict[tuple[str, str], set[str]]:
    """(version, type) -> the property names openapi-gen lists for it."""
    found = {}
    for function in generated.split("\nfunc ")[1:]:
        if (named := _SCHEMA.match("func " + function)) is not None:
            found[(named.group(1), named.group(2))] = set(_PROPERTY.findall(function))
    return found


def json_fields(package: Path) -> dict[str, set[str]]:
    """type -> the JSON names of its fields, TypeMeta's two for an inline TypeMeta."""
    found = {}
    for path in package.glob("*.go"):
        for struct in _STRUCT.finditer(path.read_text()):
            fields = {t for t in _TAG.findall(struct.group(2)) if t}
            if "metav1.TypeMeta" in struct.group(2):
                fields |= {"apiVersion", "kind"}
            found[struct.group(1)] = fields
    return found


@pytest.mark.e2e
def test_the_stand_in_has_every_field_1_38_s_openapi_lists(tmp_path: Path) -> None:
    """1.38's own OpenAPI definitions of the CRD types (generated in its
    apiextensions-apiserver, which the proxy serves) name no field the stand-in lacks."""
    standins.make_apiextensions_api(tmp_path, STAGING)
    real = standins.module_file("k8s.io/apiextensions-apiserver", STAGING, go=build.toolchain(NEXT))
    generated = (real / "pkg/generated/openapi/zz_generated.openapi.go").read_text()
    listed = openapi_properties(generated)
    assert len(listed) > 40  # every CRD type of both versions
    for version in ("v1", "v1beta1"):
        ours = json_fields(tmp_path / "pkg/apis/apiextensions" / version)
        for (v, name), properties in listed.items():
            if v == version and properties:
                assert properties <= ours[name], (version, name, properties - ours[name])
