"""What `lint` and `simulate` make of files they cannot read: an error naming file and line."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from neuron_dra import cli
from neuron_dra.tools import published as published_module
from neuron_dra.tools import simulate as simulate_module
from neuron_dra.tools.lint import lint_files
from neuron_dra.tools.simulate import InputError, SimNode, load_documents, simulated_nodes

REPO = Path(__file__).resolve().parents[3]
SINGLE = (REPO / "examples" / "specs" / "single-device.yaml").read_text()
SUPPORTED = "resource.k8s.io/v1, resource.k8s.io/v1beta1, resource.k8s.io/v1beta2"
SERVICE = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec: {}\n"


def write(tmp_path: Path, text: str, name: str = "in.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def lint(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["lint", str(path)])
    return code, capsys.readouterr().out


def simulate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["simulate", str(path), "--node", "trn2.48xlarge=1"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("version", ["v9", "v1alpha3"])
def test_an_unknown_resource_version_is_an_error_in_both_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    path = write(tmp_path, SINGLE.replace("resource.k8s.io/v1\n", f"resource.k8s.io/{version}\n"))
    expected = (
        f"{path}:2: error: ResourceClaimTemplate with apiVersion resource.k8s.io/{version}: "
        f"these tools read {SUPPORTED}"
    )
    code, out = lint(path, capsys)
    assert (code, out) == (1, f"{expected}\n1 error, 0 warnings\n")
    # Nothing allocated: the simulator refuses the file as it is.
    code, out, err = simulate(path, capsys)
    assert (code, out) == (2, "")
    assert f"{path}:2: ResourceClaimTemplate with apiVersion resource.k8s.io/{version}" in err


def test_a_claim_without_an_api_version_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, SINGLE.replace("apiVersion: resource.k8s.io/v1\n", ""))
    code, out = lint(path, capsys)
    assert code == 1
    assert out.startswith(f"{path}:2: error: ResourceClaimTemplate with no apiVersion: ")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", None, "no YAML document: the file is empty"),
        ("# only a comment\n---\n", None, "no YAML document: the file is empty"),
        ("- a\n- b\n", 1, "a YAML list, not a Kubernetes object (a mapping with a kind)"),
        ("just text\n", 1, "a YAML scalar, not a Kubernetes object (a mapping with a kind)"),
        ("name: x\n", 1, "no kind: not a Kubernetes object"),
        (SERVICE + "---\n" + SERVICE, None, "nothing these tools read ("),
    ],
    ids=["empty", "comment", "list", "scalar", "no-kind", "unrelated"],
)
def test_a_file_with_nothing_to_read_is_an_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    line: int | None,
    message: str,
) -> None:
    path = write(tmp_path, text)
    at = str(path) if line is None else f"{path}:{line}"
    code, out = lint(path, capsys)
    assert code == 1
    assert out.startswith(f"{at}: error: {message}")
    assert out.endswith("\n1 error, 0 warnings\n")
    code, out, err = simulate(path, capsys)
    assert (code, out) == (2, "")
    assert f"{at}: {message}" in err


def test_a_file_of_only_other_kinds_names_them(tmp_path: Path) -> None:
    [finding] = lint_files([write(tmp_path, SERVICE)])
    assert finding.error and finding.message.endswith("; only Service")
    assert "DeviceClass, DeviceTaintRule, PodGroup, Pod, Deployment" in finding.message


def test_a_list_document_beside_claims_is_an_error_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, SINGLE + "---\n- a\n")
    [finding] = lint_files([path])
    line = SINGLE.count("\n") + 2
    assert (finding.error, finding.line, finding.message.split(",")[0]) == (
        True,
        line,
        "a YAML list",
    )


@pytest.mark.parametrize(
    ("kind", "meant"),
    [
        ("ResourceClaimTemplte", "ResourceClaimTemplate"),
        ("resourceclaimtemplate", "ResourceClaimTemplate"),
        ("ResourceClaimTemplates", "ResourceClaimTemplate"),
    ],
)
def test_a_misspelt_kind_is_an_error_with_the_kind_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, meant: str
) -> None:
    path = write(tmp_path, SINGLE.replace("kind: ResourceClaimTemplate", f"kind: {kind}"))
    message = f"kind {kind} is not one these tools read; did you mean {meant}?"
    code, out = lint(path, capsys)
    assert code == 1
    assert out.startswith(f"{path}:2: error: {message}\n")
    with pytest.raises(InputError, match=re.escape(f"{path}:2: {message}")):
        load_documents([path])


def test_other_kubernetes_objects_beside_claims_are_left_out_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slice_like = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: x}\n"
    path = write(tmp_path, f"{SERVICE}---\n{slice_like}---\n{SINGLE}")
    assert lint(path, capsys) == (0, "0 errors, 0 warnings\n")
    assert [d["kind"] for _, d in load_documents([path])] == ["ResourceClaimTemplate", "Pod"]


def test_list_items_are_read_each_with_its_line(tmp_path: Path) -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: resource.k8s.io/v1\n  kind: DeviceClass\n  metadata: {name: a}\n"
        "- apiVersion: resource.k8s.io/v1beta9\n  kind: DeviceClass\n  metadata: {name: b}\n"
    )
    [finding] = lint_files([write(tmp_path, text)])
    assert (finding.line, finding.message.split(":")[0]) == (
        7,
        "DeviceClass with apiVersion resource.k8s.io/v1beta9",
    )


def test_list_items_beside_a_merge_key_are_all_read_each_with_its_line(tmp_path: Path) -> None:
    """A List's own `items` win over those a merge key (`<<:`) brings, as YAML says: every
    one of them is read (none dropped), each at its line."""
    claim = "{apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: %s}}"
    text = (
        "apiVersion: v1\nkind: List\n"
        f"<<: {{items: [{claim % 'merged'}]}}\n"
        f"items:\n- {claim % 'a'}\n- {claim % 'b'}\n"
    )
    path = write(tmp_path, text)
    found = [(where, d["metadata"]["name"]) for where, d in load_documents([path])]
    assert found == [(f"{path}:5", "a"), (f"{path}:6", "b")]


def test_a_file_over_the_size_limit_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as file:
        file.write(SINGLE)
        comment = "#" + "x" * 1023 + "\n"
        for _ in range(8 * 1024):
            file.write(comment)
    code, out = lint(path, capsys)
    assert code == 1
    assert out.startswith(f"{path}: error: larger than 8 MiB, more than these tools read")
    code, _, err = simulate(path, capsys)
    assert code == 2 and "larger than 8 MiB" in err


def test_lint_and_simulate_write_no_node_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the driver publishes is built in memory: nothing is written under $TMPDIR."""

    def refuse(*args: object, **kwargs: object) -> str:
        raise AssertionError("a temporary directory was made")

    path = write(tmp_path, SINGLE)
    published_module.published.cache_clear()
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    try:
        assert lint(path, capsys)[0] == 0
        assert simulate(path, capsys)[0] == 0
        assert len(simulated_nodes([("trn2u.48xlarge", 8), ("inf1.xlarge", 1)])) == 9
    finally:
        monkeypatch.undo()
        published_module.published.cache_clear()


def test_too_many_simulated_nodes_are_refused_before_any_is_built(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, SINGLE)
    code = cli.main(["simulate", str(path), "--node", "trn2.48xlarge=100000"])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert "--node asks for 100,000 nodes; simulate builds at most 5,000" in captured.err
    built: list[tuple[int, int]] = []
    with pytest.raises(InputError, match="5,001 nodes"):
        simulated_nodes(
            [("inf1.xlarge", 5_000), ("trn2.48xlarge", 1)], progress=lambda *a: built.append(a)
        )
    assert built == []
    simulated_nodes([("inf1.xlarge", 2)], progress=lambda *a: built.append(a))
    assert built == [(1, 2), (2, 2)]


def test_a_bad_file_is_refused_before_any_node_is_built(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt kind with 5,000 trn2.48xlarge nodes asked for fails at once: the files
    are read before the nodes are built (which would take minutes)."""
    path = write(
        tmp_path, SINGLE.replace("kind: ResourceClaimTemplate", "kind: ResourceClaimTemplat")
    )
    built: list[int] = []
    real = simulate_module.simulated_nodes

    def counting(*args: Any, **kwargs: Any) -> list[SimNode]:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(simulate_module, "simulated_nodes", counting)
    code = cli.main(["simulate", str(path), "--node", "trn2.48xlarge=5000"])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert "kind ResourceClaimTemplat is not one these tools read" in captured.err
    assert built == []
