"""Static checks of claim templates against what the driver publishes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.tools.lint import Finding, lint_files
from neuron_dra.tools.published import published, suggest

REPO = Path(__file__).resolve().parents[3]
SPECS = REPO / "examples" / "specs"
EXAMPLES = sorted(SPECS.rglob("*.yaml"))
ROW = (SPECS / "1x4-connected-devices.yaml").read_text()
LNC = (SPECS / "lnc-setting-trn2.yaml").read_text()
SEED_ERROR = (
    "Instance type trn1.32xlarge does not support requests for device: 7. "
    "Please request a different number of devices. Its connected sets have 1, 4, 8 or 16 devices."
)
Json = dict[str, Any]


def broken(tmp_path: Path, text: str, *replacements: tuple[str, str]) -> list[Finding]:
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    return lint_files([path])


def messages(findings: list[Finding], *, error: bool) -> list[str]:
    return [f.message for f in findings if f.error is error]


def pinned(instance_type: str) -> str:
    return f"device.attributes['neuron.aws.com'].instanceType == '{instance_type}'"


def template(expression: str, count: int, group: int | None = None, name: str = "t") -> Json:
    """A ResourceClaimTemplate of one request, constrained to one devicegroup size if given."""
    request = {
        "name": "neurons",
        "exactly": {
            "deviceClassName": "neuron.aws.com",
            "count": count,
            "selectors": [{"cel": {"expression": expression}}],
        },
    }
    devices: Json = {"requests": [request]}
    if group is not None:
        attribute = f"resource.aws.com/devicegroup{group}_id"
        devices["constraints"] = [{"requests": ["neurons"], "matchAttribute": attribute}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def lint_docs(tmp_path: Path, *docs: Json, instance_types: Sequence[str] = ()) -> list[Finding]:
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return lint_files([path], instance_types)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(SPECS)))
def test_every_example_lints_clean(path: Path) -> None:
    findings = lint_files([path])
    assert messages(findings, error=True) == []
    if "v1beta1" in path.parts:
        [warning] = messages(findings, error=False)
        assert warning.startswith(
            "apiVersion resource.k8s.io/v1beta1 is served only when enabled "
            "(--runtime-config=resource.k8s.io/v1beta1=true) from Kubernetes 1.34, and "
            "removed in 1.38"
        )
        assert warning.endswith(f"`neuron-dra convert {path}` prints it as resource.k8s.io/v1")
    elif path.name == "device-plugin-style-neuron.yaml":
        [warning] = messages(findings, error=False)
        assert warning.startswith("aws.amazon.com/neuron: 4 is served through extended resources")
    elif path.name == "device-plugin-style-neuroncore.yaml":
        [warning] = messages(findings, error=False)
        assert warning.startswith("aws.amazon.com/neuroncore: 2 is served through extended")
    elif path.name == "efa-and-neuron.yaml":
        [warning] = messages(findings, error=False)
        assert "DeviceClass efa.networking.k8s.aws is neither the driver's" in warning
    elif path.name == "cores-and-efa.yaml":
        efa, cores = sorted(messages(findings, error=False))
        assert "DeviceClass efa.networking.k8s.aws is neither the driver's" in efa
        assert " for NeuronCores, which the driver publishes only where the API server " in cores
    elif path.name in ("single-core.yaml", "cores-of-one-device.yaml"):
        [warning] = messages(findings, error=False)
        assert " for NeuronCores, which the driver publishes only where the API server " in warning
    else:
        assert findings == []


def test_examples_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["lint", *map(str, EXAMPLES)]) == 0
    assert capsys.readouterr().out.endswith("0 errors, 14 warnings\n")


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


def test_seven_devices_on_trn1_is_an_error_in_the_scheduler_extension_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    findings = broken(
        tmp_path,
        ROW,
        ("'trn2.48xlarge'", "'trn1.32xlarge'"),
        ("count: 4", "count: 7"),
        ("devicegroup4_id", "devicegroup8_id"),
    )
    assert messages(findings, error=True) == [SEED_ERROR]
    assert cli.main(["lint", str(tmp_path / "broken.yaml")]) == 1
    assert capsys.readouterr().out.endswith("1 error, 1 warning\n")


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
    assert SEED_ERROR not in messages(lint_files([path]), error=True)
    findings = lint_files([path], ["trn1.32xlarge"])
    assert SEED_ERROR in messages(findings, error=True)


@pytest.mark.parametrize(
    ("instance_type", "count", "error"),
    [
        ("inf2.48xlarge", 5, True),
        ("inf2.48xlarge", 3, False),
        ("inf2.24xlarge", 4, True),
        ("inf1.24xlarge", 8, False),
        ("trn2.48xlarge", 2, True),
    ],
)
def test_a_count_no_connected_set_of_the_instance_type_has_is_an_error(
    tmp_path: Path, instance_type: str, count: int, error: bool
) -> None:
    findings = lint_docs(tmp_path, template(pinned(instance_type), count))
    expected = [
        f"Instance type {instance_type} does not support requests for device: {count}. "
        "Please request a different number of devices."
    ]
    errors = [m.split(" Its connected", 1)[0] for m in messages(findings, error=True)]
    assert errors == (expected if error else [])


def test_count_larger_than_the_connected_set_is_an_error(tmp_path: Path) -> None:
    findings = broken(tmp_path, ROW, ("count: 4", "count: 5"))
    errors = messages(findings, error=True)
    assert errors[0] == (
        "count 5 with matchAttribute resource.aws.com/devicegroup4_id: each value is shared by "
        "exactly 4 devices, so 5 never share one"
    )
    assert errors[1].startswith(
        "Instance type trn2.48xlarge does not support requests for device: 5. "
        "Please request a different number of devices."
    )
    assert len(errors) == 2


def test_group_size_the_instance_type_lacks(tmp_path: Path) -> None:
    findings = broken(
        tmp_path, ROW, ("count: 4", "count: 2"), ("devicegroup4_id", "devicegroup2_id")
    )
    assert messages(findings, error=True) == [
        "matchAttribute resource.aws.com/devicegroup2_id: trn2.48xlarge has no connected sets "
        "of 2 (sizes: 1, 4, 8, 16)",
        "Instance type trn2.48xlarge does not support requests for device: 2. Please request a "
        "different number of devices. Its connected sets have 1, 4, 8 or 16 devices.",
    ]


def test_bad_lnc_value_names_the_field(tmp_path: Path) -> None:
    findings = broken(tmp_path, LNC, ("logicalNeuronCore: 1", "logicalNeuronCore: 3"))
    [error] = [f for f in findings if f.error]
    assert error.where.endswith("config[0]")
    assert "'logicalNeuronCore': 3 is not allowed; allowed values: 1, 2" in error.message


def test_lnc_on_an_instance_type_without_it_is_an_error(tmp_path: Path) -> None:
    findings = broken(tmp_path, LNC, ("'trn2.48xlarge'", "'inf2.48xlarge'"))
    [error] = messages(findings, error=True)
    assert "inf2.48xlarge, which have no logical NeuronCores" in error
    assert messages(findings, error=False) == []


def test_lnc_where_only_some_instance_types_have_it_warns(tmp_path: Path) -> None:
    findings = broken(
        tmp_path, LNC, ("== 'trn2.48xlarge'", "in ['trn1.32xlarge', 'trn2.48xlarge']")
    )
    assert messages(findings, error=True) == []
    [warning] = messages(findings, error=False)
    assert "can land on trn1.32xlarge, which have no logical NeuronCores" in warning


def test_lnc_on_the_instance_type_flag_without_it_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "lnc.yaml"
    path.write_text(
        LNC.replace("instanceType == 'trn2.48xlarge'", "resourceType == 'neuron_device'")
    )
    assert messages(lint_files([path], ["trn2.48xlarge"]), error=True) == []
    [error] = messages(lint_files([path], ["trn1.32xlarge"]), error=True)
    assert "trn1.32xlarge, which have no logical NeuronCores" in error


def test_lnc_of_a_device_class_on_an_instance_type_without_it_is_an_error(
    tmp_path: Path,
) -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "lnc1"},
        "spec": {
            "config": [
                {
                    "opaque": {
                        "driver": "neuron.aws.com",
                        "parameters": {
                            "apiVersion": "neuron.aws.com/v1",
                            "kind": "NeuronConfig",
                            "logicalNeuronCore": 1,
                        },
                    }
                }
            ]
        },
    }
    claim = template(pinned("inf2.48xlarge"), 1)
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "lnc1"
    [error] = messages(lint_docs(tmp_path, device_class, claim), error=True)
    assert "inf2.48xlarge, which have no logical NeuronCores" in error


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
    # The file and the line of the selector's expression, as compilers name them.
    assert f"{path}:17: error: ResourceClaimTemplate 1x4-connected-neurons" in out
    assert out.endswith("1 error, 0 warnings\n")


def test_published_names_cover_the_catalogue() -> None:
    names = published().names
    assert {"instanceType", "deviceId", "ultraserverServerId4", "logicalNeuronCore"} <= names[
        "neuron.aws.com"
    ]
    assert "devicegroup16_id" in names["resource.aws.com"]
    assert suggest("InstanceTyp", names["neuron.aws.com"]) == "instanceType"


MANY_PROBLEMS = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: many
spec:
  spec:
    devices:
      requests:
      - name: neurons
        exactly:
          deviceClassName: neuron.aws.com
          count: 7
          selectors:
          - cel:
              expression: "device.attributes['neuron.aws.com'].instanceType == 'trn1.32xlarge'"
      - name: classless
        exactly:
          count: 2
      - name: none
        exactly:
          deviceClassName: neuron.aws.com
          count: 0
      - exactly:
          deviceClassName: neuron.aws.com
      constraints:
      - requests: ["neurons"]
        matchAttribute: resource.aws.com/devicegroup8_id
      - requests: ["nope"]
        matchAttribute: resource.aws.com/devicegroup4_id
      config:
      - requests: ["classless"]
        opaque:
          driver: neuron.aws.com
          parameters:
            apiVersion: neuron.aws.com/v1
            kind: NeuronConfig
            logicalNeuronCore: 3
"""


def test_every_problem_of_a_claim_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(MANY_PROBLEMS)
    errors = messages(lint_files([path]), error=True)
    expected = [
        "request 'classless' names no deviceClassName",
        "request 'none': count must be a positive integer",
        "requests[3] has no name",
        "names unknown request 'nope'",
        SEED_ERROR,
        "'logicalNeuronCore': 3 is not allowed",
    ]
    assert [[e for e in errors if part in e] for part in expected] == [[e] for e in errors], errors


def test_a_broken_file_hides_neither_other_files_nor_its_earlier_documents(
    tmp_path: Path,
) -> None:
    typo = ROW.split("---")[0].replace(".instanceType ==", ".instancetype ==")
    first, second, third = tmp_path / "1.yaml", tmp_path / "2.yaml", tmp_path / "3.yaml"
    first.write_text(typo)
    second.write_text(typo + "---\nkind: [unclosed\n")
    third.write_text(typo)
    findings = [f for f in lint_files([first, second, third, tmp_path / "4.yaml"]) if f.error]
    assert [f.file for f in findings] == [
        str(first),
        str(second),
        str(second),
        str(third),
        str(tmp_path / "4.yaml"),
    ]
    yaml_error = findings[2]
    assert (yaml_error.line, yaml_error.message.split(":")[0]) == (23, "invalid YAML at column 1")
    assert "No such file or directory" in findings[4].message


def test_a_broken_selector_hides_no_count_problem(tmp_path: Path) -> None:
    claim = template(pinned("trn1.32xlarge"), 7)
    selectors = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    selectors.append({"cel": {"expression": "device.attributes['neuron.aws.com'].deviceid >= 0"}})
    errors = messages(lint_docs(tmp_path, claim), error=True)
    assert errors == [
        "attribute neuron.aws.com/deviceid is never published by the driver; "
        "did you mean 'deviceId'?",
        SEED_ERROR,
    ]


def test_malformed_documents_are_findings_not_crashes(tmp_path: Path) -> None:
    nameless_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "spec": {}}
    listed_spec = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": [1, 2],
    }
    findings = lint_docs(tmp_path, nameless_class, listed_spec)
    assert [(f.where, f.message) for f in findings if f.error] == [
        ("DeviceClass ?", "metadata.name is missing"),
        ("ResourceClaim c", "spec is a list, not a mapping"),
    ]


GROUP = re.compile(r"devicegroup(\d+)_id")


@pytest.mark.parametrize(
    ("instance_type", "counts", "groups"),
    [
        ("trn1.32xlarge", range(1, 17), (1, 2, 3, 4, 6, 7, 8, 16)),
        ("inf2.24xlarge", range(1, 7), (1, 2, 3, 4, 6, 8)),
        ("inf2.48xlarge", range(1, 13), (2, 4, 5, 8, 12, 16)),
    ],
)
def test_suggestions_name_only_groups_the_instance_type_publishes(
    tmp_path: Path, instance_type: str, counts: range, groups: tuple[int, ...]
) -> None:
    sizes = published().group_sizes[instance_type]
    docs = [
        template(pinned(instance_type), count, group, f"c{count}-g{group}")
        for count in counts
        for group in groups
    ]
    findings = lint_docs(tmp_path, *docs)
    assert findings
    for finding in findings:
        asked = int(finding.where.split("-g")[1].split(":")[0])
        named = {int(n) for n in GROUP.findall(finding.message)} - {asked}
        assert named <= sizes, finding


def test_a_group_no_instance_type_publishes_suggests_the_next_set(tmp_path: Path) -> None:
    findings = lint_docs(tmp_path, template(pinned("trn1.32xlarge"), 2, 7))
    assert [m for m in messages(findings, error=True) if "matchAttribute" in m] == [
        "matchAttribute resource.aws.com/devicegroup7_id is never published by the driver, so "
        "no device satisfies the constraint; did you mean resource.aws.com/devicegroup8_id?"
    ]


def test_seven_of_a_set_of_eight_suggests_no_group_of_seven(tmp_path: Path) -> None:
    findings = lint_docs(tmp_path, template(pinned("trn1.32xlarge"), 7, 8))
    assert messages(findings, error=False) == [
        "count 7 with matchAttribute resource.aws.com/devicegroup8_id: 7 devices of a connected "
        "set of 8, which are not a connected set themselves; use count 8"
    ]


def test_a_device_class_with_broken_cel_hides_nothing_of_its_claims(tmp_path: Path) -> None:
    selector = {"cel": {"expression": "device.driver =="}}
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "broken"},
        "spec": {"selectors": [selector]},
    }
    claim = template(pinned("trn1.32xlarge"), 7)
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "broken"
    findings = lint_docs(tmp_path, device_class, claim)
    assert [(f.where.split(":")[0], f.message.split(":")[0]) for f in findings if f.error] == [
        ("DeviceClass broken", "CEL 1"),
        ("ResourceClaimTemplate t", SEED_ERROR.split(":", 1)[0]),
    ]


def test_a_request_of_the_wrong_shape_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    claim = template(pinned("trn1.32xlarge"), 4, 4)
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = ["no cel"]
    assert messages(lint_docs(tmp_path, claim), error=True) == [
        "request 'neurons' is malformed: a string where a mapping belongs"
    ]


# --- the device plugin's resources ------------------------------------------------------


def pod(resources: Json, kind: str = "Pod", name: str = "p") -> Json:
    """A Pod (or a Deployment of it) whose one container has `resources`."""
    spec: Json = {"containers": [{"name": "c", "image": "none", "resources": resources}]}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}},
    }


@pytest.mark.parametrize("resource", ["aws.amazon.com/neuron", "aws.amazon.com/neurondevice"])
def test_device_plugin_devices_warn_that_they_are_no_connected_set(
    tmp_path: Path, resource: str
) -> None:
    [finding] = lint_docs(tmp_path, pod({"limits": {resource: 2}}))
    assert not finding.error
    assert finding.where == "Pod p: container c"
    assert finding.message == (
        f"{resource}: 2 is served through extended resources on Kubernetes 1.36+ (DRA "
        "nodes) and carries no connected-set constraint: any 2 devices of the node, not a "
        "connected group; for a connected set use a ResourceClaimTemplate with a "
        "resource.aws.com/devicegroupN_id matchAttribute"
    )


def test_a_workload_template_is_read_like_a_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [pod({"requests": {"aws.amazon.com/neuron": 4}}, kind="Deployment", name="d")]
    [finding] = lint_docs(tmp_path, *docs)
    assert finding.where == "Deployment d: spec.template: container c"
    assert "any 4 devices of the node" in finding.message
    assert cli.main(["lint", str(tmp_path / "docs.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path / 'docs.yaml'}:1: warning: Deployment d: spec.template: ")
    assert out.endswith("0 errors, 1 warning\n")


def test_a_container_with_an_extended_resource_and_a_claim_is_warned(tmp_path: Path) -> None:
    """It gets the devices of both, but NEURON_RT_VISIBLE_CORES of one only."""
    docs = [pod({"limits": {"aws.amazon.com/neuron": 1}, "claims": [{"name": "cores"}]})]
    findings = lint_docs(tmp_path, *docs)
    mixed = [f for f in findings if "in one container" in f.message]
    assert [(f.error, f.where) for f in mixed] == [(False, "Pod p: container c")]
    assert mixed[0].message.startswith("aws.amazon.com/neuron and the claims cores in one ")


def test_pods_without_device_plugin_resources_have_no_findings(tmp_path: Path) -> None:
    docs = [
        pod({"limits": {"cpu": "1", "memory": "1Gi"}}),
        pod({"claims": [{"name": "x"}]}, name="q"),
    ]
    assert lint_docs(tmp_path, *docs) == []


ALL_SINGLE = (SPECS / "specific-driver-version.yaml").read_text()
SINGLE_ONLY = """          - cel:
              expression: "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'"
"""


def test_all_devices_with_the_node_device_too_never_fits_an_ultraserver_node(
    tmp_path: Path,
) -> None:
    # As the AWS driver's example writes it: every device of a driver version, no kind.
    findings = broken(tmp_path, ALL_SINGLE, (SINGLE_ONLY, ""))
    [warning] = messages(findings, error=False)
    assert warning.startswith(
        "allocationMode All takes both the single devices (resourceType 'neuron_device') and "
        "the whole-node device ('neuron_node'): an UltraServer node ("
    ), warning
    assert "trn2u.48xlarge" in warning and "publishing both never takes the claim" in warning
    assert "resourceType == 'neuron_device'" in warning
    assert not messages(findings, error=True)


def test_all_of_one_kind_or_of_other_instance_types_is_not_warned(tmp_path: Path) -> None:
    assert not lint_files([SPECS / "specific-driver-version.yaml"])
    findings = broken(
        tmp_path,
        ALL_SINGLE,
        (SINGLE_ONLY, f'          - cel:\n              expression: "{pinned("trn2.48xlarge")}"\n'),
    )
    assert not findings


@pytest.mark.parametrize(
    ("before", "after", "problem"),
    [
        # A template whose claim spec is not under spec.spec.
        ("spec:\n  spec:\n    devices:", "spec:\n  devices:", "spec: unknown field devices"),
        # A v1beta1-shaped request field (count beside the name) under resource.k8s.io/v1.
        (
            "      - name: neurons\n",
            "      - name: neurons\n        count: 4\n",
            "spec.spec.devices.requests[0]: unknown field count",
        ),
    ],
)
def test_what_the_api_server_refuses_is_an_error(
    tmp_path: Path, before: str, after: str, problem: str
) -> None:
    text = (SPECS / "1x4-connected-devices.yaml").read_text()
    findings = broken(tmp_path, text, (before, after))
    errors = messages(findings, error=True)
    assert any(m.startswith(problem) for m in errors), errors


def test_every_example_keeps_the_served_schema() -> None:
    from neuron_dra.tools.apischema import problems  # noqa: PLC0415

    found = [
        (path.name, problem)
        for path in EXAMPLES
        for doc in yaml.safe_load_all(path.read_text())
        if doc
        for problem in problems(doc)
    ]
    assert found == []


def test_a_neuron_config_for_another_driver_is_warned(tmp_path: Path) -> None:
    """Applied by no driver: the claim would run without it. Other drivers' own
    configs (a GPU's, say) are theirs and pass."""
    text = LNC.replace("driver: neuron.aws.com", "driver: neuron.amazonaws.com")
    warnings = messages(broken(tmp_path, text), error=False)
    assert any(m.startswith("opaque config for driver 'neuron.amazonaws.com'") for m in warnings)
    other = LNC.replace("driver: neuron.aws.com", "driver: gpu.example.com").replace(
        "kind: NeuronConfig", "kind: GpuConfig"
    )
    assert not [m for m in messages(broken(tmp_path, other), error=False) if "driver" in m]


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        (
            "true",
            "no Neuron instance type has more than 16 devices (the largest: inf1.24xlarge, "
            "trn1.32xlarge, trn1n.32xlarge and 6 more)",
        ),
        (
            "device.attributes['neuron.aws.com'].instanceType.startsWith('inf2')",
            "no type the selectors allow has more than 12 devices (the largest: inf2.48xlarge)",
        ),
    ],
)
def test_a_count_beyond_the_largest_type_is_an_error_unpinned(
    tmp_path: Path, expression: str, said: str
) -> None:
    """No type pinned: the count is still held against the largest the selectors allow."""
    findings = lint_docs(tmp_path, template(expression, 17))
    assert messages(findings, error=True) == [f"count 17: {said}, so no node ever fits it"]
    assert messages(lint_docs(tmp_path, template(expression, 12)), error=True) == []
