"""Static checks of claim templates against what the driver publishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_dra import cli
from neuron_dra.tools.lint import Finding, lint_files, published, suggest

REPO = Path(__file__).resolve().parents[3]
SPECS = REPO / "examples" / "specs"
EXAMPLES = sorted(SPECS.rglob("*.yaml"))
ROW = (SPECS / "1x4-connected-devices.yaml").read_text()
LNC = (SPECS / "lnc-setting-trn2.yaml").read_text()
SEED_WARNING = (
    "Instance type trn1.32xlarge does not support requests for device: 7. "
    "Please request a different number of devices."
)


def broken(tmp_path: Path, text: str, *replacements: tuple[str, str]) -> list[Finding]:
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    return lint_files([path])


def messages(findings: list[Finding], *, error: bool) -> list[str]:
    return [f.message for f in findings if f.error is error]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(SPECS)))
def test_every_example_lints_clean(path: Path) -> None:
    findings = lint_files([path])
    assert messages(findings, error=True) == []
    if "v1beta1" in path.parts:
        [warning] = messages(findings, error=False)
        assert warning.startswith("apiVersion resource.k8s.io/v1beta1: Kubernetes 1.34 serves it")
    else:
        assert findings == []


def test_examples_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["lint", *map(str, EXAMPLES)]) == 0
    assert capsys.readouterr().out.endswith("0 errors, 7 warnings\n")


def test_typo_attribute_gets_a_suggestion(tmp_path: Path) -> None:
    findings = broken(tmp_path, ROW, (".instanceType ==", ".instancetype =="))
    assert messages(findings, error=True) == [
        "attribute neuron.aws.com/instancetype is never published by the driver; "
        "did you mean 'instanceType'?"
    ]
    assert (
        findings[0].where == "ResourceClaimTemplate 1x4-connected-neurons: request neurons: "
        "selectors[0]"
    )


def test_bad_cel_reports_line_and_column(tmp_path: Path) -> None:
    findings = broken(tmp_path, ROW, ("== 'trn2.48xlarge'", "== 'trn2.48xlarge' &&"))
    [error] = messages(findings, error=True)
    assert error.startswith("CEL 1:") and "syntax error" in error
    line, column = error.removeprefix("CEL ").split(":")[:2]
    assert (int(line), int(column)) == (1, 69)


def test_seven_devices_on_trn1_warns_with_the_scheduler_extension_text(tmp_path: Path) -> None:
    findings = broken(
        tmp_path, ROW, ("'trn2.48xlarge'", "'trn1.32xlarge'"), ("count: 4", "count: 7"),
        ("devicegroup4_id", "devicegroup8_id"),
    )  # fmt: skip
    assert SEED_WARNING in messages(findings, error=False)
    # Seven of a set of eight share its value, so only the count warning applies.
    assert messages(findings, error=True) == []


def test_instance_type_flag_applies_the_count_rules(tmp_path: Path) -> None:
    path = tmp_path / "seven.yaml"
    path.write_text(
        ROW.replace("count: 4", "count: 7")
        .replace(
            "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'",
            "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'",
        )
        .replace("devicegroup4_id", "devicegroup8_id")
    )
    assert SEED_WARNING not in messages(lint_files([path]), error=False)
    findings = lint_files([path], ["trn1.32xlarge"])
    assert SEED_WARNING in messages(findings, error=False)


def test_count_larger_than_the_connected_set_is_an_error(tmp_path: Path) -> None:
    findings = broken(tmp_path, ROW, ("count: 4", "count: 5"))
    assert messages(findings, error=True) == [
        "count 5 with matchAttribute resource.aws.com/devicegroup4_id: each value is shared by "
        "exactly 4 devices, so 5 never share one"
    ]
    assert (
        "Instance type trn2.48xlarge does not support requests for device: 5. "
        "Please request a different number of devices." in messages(findings, error=False)
    )


def test_group_size_the_instance_type_lacks(tmp_path: Path) -> None:
    findings = broken(
        tmp_path, ROW, ("count: 4", "count: 2"), ("devicegroup4_id", "devicegroup2_id")
    )
    assert messages(findings, error=True) == [
        "matchAttribute resource.aws.com/devicegroup2_id: trn2.48xlarge has no connected sets "
        "of 2 (sizes: 1, 4, 8, 16)"
    ]


def test_bad_lnc_value_names_the_field(tmp_path: Path) -> None:
    findings = broken(tmp_path, LNC, ("logicalNeuronCore: 1", "logicalNeuronCore: 3"))
    [error] = [f for f in findings if f.error]
    assert error.where.endswith("config[0]")
    assert "'logicalNeuronCore': 3 is not allowed; allowed values: 1, 2" in error.message


def test_lnc_on_hardware_without_it_warns(tmp_path: Path) -> None:
    findings = broken(tmp_path, LNC, ("'trn2.48xlarge'", "'inf2.48xlarge'"))
    assert messages(findings, error=True) == []
    [warning] = messages(findings, error=False)
    assert "inf2.48xlarge, which have no logical NeuronCores" in warning


def test_match_attribute_on_a_missing_attribute(tmp_path: Path) -> None:
    findings = broken(tmp_path, ROW, ("devicegroup4_id", "devicegroup4id"))
    assert messages(findings, error=True) == [
        "matchAttribute resource.aws.com/devicegroup4id is never published by the driver, so "
        "no device satisfies the constraint; did you mean resource.aws.com/devicegroup4_id?"
    ]


def test_config_for_an_unknown_request(tmp_path: Path) -> None:
    findings = broken(tmp_path, LNC, ('requests: ["neurons"]', 'requests: ["neuron"]'))
    assert messages(findings, error=True) == [
        "names request 'neuron', which the claim does not have"
    ]


def test_broken_file_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(ROW.replace(".instanceType ==", ".instancetype =="))
    assert cli.main(["lint", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}: error: ResourceClaimTemplate 1x4-connected-neurons" in out
    assert out.endswith("1 errors, 0 warnings\n")


def test_published_names_cover_the_catalogue() -> None:
    names = published().names
    assert {"instanceType", "deviceId", "ultraserverServerId4", "logicalNeuronCore"} <= names[
        "neuron.aws.com"
    ]
    assert "devicegroup16_id" in names["resource.aws.com"]
    assert suggest("InstanceTyp", names["neuron.aws.com"]) == "instanceType"
