"""`neuron-dra convert`: beta claims, templates and classes rewritten as resource.k8s.io/v1."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.tools import convert
from neuron_dra.tools.convertyaml import convert_text
from neuron_dra.tools.lint import lint_files

REPO = Path(__file__).resolve().parents[3]
BETA = sorted((REPO / "examples" / "specs" / "v1beta1").glob("*.yaml"))
Json = dict[str, Any]

CLAIM = """\
# a claim of four devices
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata:
  name: four
spec:
  devices:
    requests:
      - name: neurons   # the request
        count: 4  # four of them
        deviceClassName: neuron.aws.com
        allocationMode: ExactCount
        selectors:
          - cel:
              expression: "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"
    config:
      - requests: ['neurons']
        opaque:
          driver: neuron.aws.com
          parameters: {apiVersion: neuron.aws.com/v1, kind: NeuronConfig, logicalNeuronCore: 1}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: p   # kept as written
spec:
  containers: [{name: c, image: busybox}]
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["convert", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def requests_of(doc: Json) -> list[Json]:
    spec = doc["spec"]["spec"] if doc["kind"] == "ResourceClaimTemplate" else doc["spec"]
    requests: list[Json] = spec["devices"]["requests"]
    return requests


@pytest.mark.parametrize("path", BETA, ids=lambda p: p.name)
def test_every_v1beta1_example_converts_to_v1_that_lints_clean(path: Path, tmp_path: Path) -> None:
    before = [d for d in yaml.safe_load_all(path.read_text()) if d]
    result = convert_text(path.read_text(), path.name)
    assert result.findings == ()
    assert result.changed
    after = [d for d in yaml.safe_load_all(result.text) if d]
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        if old["apiVersion"] != "resource.k8s.io/v1beta1":
            assert new == old  # the Pod or LeaderWorkerSet beside the template
            continue
        assert new["apiVersion"] == "resource.k8s.io/v1"
        for old_request, new_request in zip(requests_of(old), requests_of(new), strict=True):
            moved = {k: v for k, v in old_request.items() if k in convert.EXACT_FIELDS}
            assert new_request == {"name": old_request["name"], "exactly": moved}
        old_devices = (old["spec"]["spec"])["devices"]
        new_devices = (new["spec"]["spec"])["devices"]
        assert new_devices.get("config") == old_devices.get("config")
        assert new_devices.get("constraints") == old_devices.get("constraints")
    converted = tmp_path / path.name
    converted.write_text(result.text)
    assert [(f.error, f.message) for f in lint_files([converted])] == []


def test_comments_key_order_quotes_and_indentation_are_kept() -> None:
    result = convert_text(CLAIM, "claim.yaml")
    assert result.findings == ()
    assert result.text == CLAIM.replace("v1beta1", "v1").replace(
        """\
      - name: neurons   # the request
        count: 4  # four of them
        deviceClassName: neuron.aws.com
        allocationMode: ExactCount
        selectors:
          - cel:
              expression: "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"
""",
        """\
      - name: neurons   # the request
        exactly:
          count: 4 # four of them
          deviceClassName: neuron.aws.com
          allocationMode: ExactCount
          selectors:
            - cel:
                expression: "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"
""",
    )


def test_other_documents_pass_through_byte_for_byte() -> None:
    already = CLAIM.replace("v1beta1", "v1").replace("name: four", "name: done")
    text = f"{POD}---\n# between\n{CLAIM}---\n{already}...\n"
    result = convert_text(text, "mixed.yaml")
    assert result.findings == ()
    pod, claim, done = result.text.split("---\n")
    assert pod == POD
    assert claim.startswith(
        "# between\n# a claim of four devices\napiVersion: resource.k8s.io/v1\n"
    )
    assert done == already + "...\n"


def test_a_file_with_nothing_to_convert_is_not_changed() -> None:
    # Spacing a round trip would normalise: the file must come back as it was.
    v1 = convert_text(CLAIM, "c").text.replace("metadata:\n  name: four", "metadata: {name:  v1}")
    result = convert_text(POD + "---\n" + v1, "v1.yaml")
    assert (result.changed, result.findings) == (False, ())
    assert result.text == POD + "---\n" + v1


def test_v1beta2_changes_only_its_api_version() -> None:
    v1beta2 = convert_text(CLAIM, "c").text.replace("resource.k8s.io/v1", "resource.k8s.io/v1beta2")
    result = convert_text(v1beta2, "c")
    assert result.findings == ()
    assert result.text == v1beta2.replace("resource.k8s.io/v1beta2", "resource.k8s.io/v1")


def test_device_class_and_list_items_convert() -> None:
    text = """\
apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1beta1
  kind: DeviceClass
  metadata: {name: neuron.aws.com}
  spec:
    selectors:
    - cel: {expression: "device.driver == 'neuron.aws.com'"}
- apiVersion: resource.k8s.io/v1beta1
  kind: ResourceClaim
  metadata: {name: c}
  spec: {devices: {requests: [{name: r, deviceClassName: neuron.aws.com}]}}
"""
    result = convert_text(text, "list.yaml")
    assert result.findings == ()
    [doc] = yaml.safe_load_all(result.text)
    device_class, claim = doc["items"]
    assert device_class["apiVersion"] == claim["apiVersion"] == "resource.k8s.io/v1"
    assert device_class["spec"] == {
        "selectors": [{"cel": {"expression": "device.driver == 'neuron.aws.com'"}}]
    }
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "r", "exactly": {"deviceClassName": "neuron.aws.com"}}
    ]


def test_first_available_subrequests_stay_and_unset_fields_go() -> None:
    doc: Json = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "neuron.aws.com", "count": 2},
                            {"name": "small", "deviceClassName": "neuron.aws.com"},
                        ],
                        "count": 0,  # Go's zero value: unset, as upstream's conversion has it
                        "allocationMode": "",
                    }
                ]
            }
        },
    }
    out, messages = convert.converted(doc)
    assert messages == []
    assert out["spec"]["devices"]["requests"] == [
        {"name": "r", "firstAvailable": doc["spec"]["devices"]["requests"][0]["firstAvailable"]}
    ]
    assert doc["apiVersion"] == "resource.k8s.io/v1beta1"  # the input is left as it was
    assert doc["spec"]["devices"]["requests"][0]["count"] == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [\n", "bad.yaml:2: error: invalid YAML at column 1"),
        ("- a\n- b\n", "bad.yaml:1: error: not a Kubernetes object (a mapping with a kind)"),
        ("apiVersion: v1\nmetadata: {}\n", "bad.yaml:1: error: no kind: not a Kubernetes object"),
        (
            "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaimTemplat\n",
            "bad.yaml:1: error: ResourceClaimTemplat ?: kind ResourceClaimTemplat is not one "
            "convert rewrites (ResourceClaim, ResourceClaimTemplate, DeviceClass)",
        ),
        (
            "apiVersion: resource.k8s.io/v1alpha3\nkind: DeviceClass\nmetadata: {name: d}\n",
            "bad.yaml:1: error: DeviceClass d: apiVersion resource.k8s.io/v1alpha3: convert "
            "reads resource.k8s.io/v1beta1, resource.k8s.io/v1beta2",
        ),
        (
            CLAIM.replace(
                "        allocationMode:", "        exactly: {}\n        allocationMode:"
            ),
            "bad.yaml:2: error: ResourceClaim four: spec.devices.requests[0]: unknown field "
            "exactly: resource.k8s.io/v1beta1 has no such field, and resource.k8s.io/v1 no "
            "place for it",
        ),
        (
            CLAIM.replace("logicalNeuronCore: 1", "logicalNeuronCore: 3"),
            "bad.yaml:2: error: ResourceClaim four: spec.devices.config[0]: opaque.parameters: "
            "NeuronConfig: field 'logicalNeuronCore': 3 is not allowed",
        ),
        (
            CLAIM.replace(
                "        selectors:", "        firstAvailable: [{name: a}]\n        selectors:"
            ),
            "bad.yaml:2: error: ResourceClaim four: spec.devices.requests[0]: has both "
            "firstAvailable and count, deviceClassName, allocationMode, selectors; v1 takes either",
        ),
    ],
)
def test_bad_input_is_an_error_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    good = tmp_path / "good.yaml"
    good.write_text(CLAIM)
    code, out, err = run(capsys, str(good), str(path))
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    assert line.replace(str(tmp_path) + "/", "").startswith(expected)
    assert run(capsys, "--in-place", str(good), str(path))[0] == 1
    assert (good.read_text(), path.read_text()) == (CLAIM, text)


def test_in_place_rewrites_only_files_that_change(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    claim, pod = tmp_path / "claim.yaml", tmp_path / "pod.yaml"
    claim.write_text(CLAIM)
    claim.chmod(0o640)
    pod.write_text(POD)
    before = pod.stat().st_mtime_ns
    code, out, err = run(capsys, "--in-place", str(claim), str(pod))
    assert (code, out) == (0, "")
    assert err == f"{claim}: converted to resource.k8s.io/v1\n"
    assert claim.read_text() == convert_text(CLAIM, "c").text
    assert claim.stat().st_mode & 0o777 == 0o640
    assert pod.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claim.yaml", "pod.yaml"]


def test_standard_input_and_several_files_make_one_stream(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(POD.rstrip("\n"))  # no newline at the end: the stream still splits
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(CLAIM.encode())))
    code, out, err = run(capsys, str(pod), "-")
    assert (code, err) == (0, "")
    assert out == POD + "---\n" + convert_text(CLAIM, "c").text
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["Pod", "ResourceClaim"]
    assert run(capsys, "--in-place", "-")[0] == 2


def test_lint_names_the_release_that_removes_each_beta_version(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(convert_text(CLAIM, "c").text.replace("k8s.io/v1", "k8s.io/v1beta2"))
    [finding] = lint_files([path])
    assert not finding.error
    assert "removed in 1.39" in finding.message
    assert f"`neuron-dra convert {path}` prints it as resource.k8s.io/v1" in finding.message


def test_simulate_notes_the_removal_on_stderr_and_keeps_json_clean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = REPO / "examples" / "specs" / "v1beta1" / "l-trn2.yaml"
    assert cli.main(["simulate", str(path), "--node=trn2.48xlarge=1", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert [c["claim"] for c in json.loads(out)["claims"]] != []
    assert err.splitlines()[0] == (
        f"{path}:2: warning: ResourceClaimTemplate l-trn2: "
        + convert.removal("resource.k8s.io/v1beta1", str(path))
    )
