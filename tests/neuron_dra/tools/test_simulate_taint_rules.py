"""DeviceTaintRules in the simulator: what they select, what they keep out, what is said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.tools.manifests import read
from neuron_dra.tools.simulate import (
    Cluster,
    InputError,
    TaintRule,
    describe,
    outcome_json,
    parse_taint_rule,
    simulate,
    simulated_nodes,
)

REPO = Path(__file__).resolve().parents[3]
SINGLE = REPO / "examples" / "specs" / "single-device.yaml"
NODE = "inf2.48xlarge-0"
TOLERATION = "          tolerations: [{key: example.com/maintenance, operator: Exists}]\n"


def rule(name: str = "drain", version: str = "v1", **selector: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "taint": {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
    }
    if selector:
        spec["deviceSelector"] = {k: v for k, v in selector.items() if v is not None}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def files(tmp_path: Path, *rules: dict[str, Any], tolerate: bool = False) -> list[Path]:
    claim = SINGLE.read_text()
    if tolerate:
        claim = claim.replace("          count: 1\n", "          count: 1\n" + TOLERATION)
    (tmp_path / "claim.yaml").write_text(claim)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump_all(rules))
    return [tmp_path / "rules.yaml", tmp_path / "claim.yaml"]


def cluster() -> Cluster:
    return Cluster(simulated_nodes([("inf2.48xlarge", 1)]), {})


def test_a_rule_on_one_device_moves_the_claim_to_the_next(tmp_path: Path) -> None:
    sim = cluster()
    taint_rule = rule(driver="neuron.aws.com", pool=NODE, device="neurondevice0")
    [outcome] = simulate(files(tmp_path, taint_rule), sim)
    assert [p.device.name for p in outcome.placements] == ["neurondevice1"]
    [applied] = sim.taint_rules
    assert applied.devices == ((NODE, "neurondevice0"),)


def test_a_toleration_lets_the_claim_have_the_tainted_device_and_says_so(
    tmp_path: Path,
) -> None:
    taint_rule = rule(device="neurondevice0")
    [outcome] = simulate(files(tmp_path, taint_rule, tolerate=True), cluster())
    assert [p.device.name for p in outcome.placements] == ["neurondevice0"]
    assert (
        "  taint    neurondevice0: example.com/maintenance=planned:NoSchedule "
        "(DeviceTaintRule drain)"
    ) in describe(outcome)
    [result] = outcome_json(outcome)["results"]
    assert result["taints"] == [
        {
            "key": "example.com/maintenance",
            "value": "planned",
            "effect": "NoSchedule",
            "deviceTaintRule": "drain",
        }
    ]


def test_what_nothing_fits_names_the_rule(tmp_path: Path) -> None:
    [outcome] = simulate(files(tmp_path, rule(driver="neuron.aws.com")), cluster())
    assert not outcome.allocated
    assert outcome.reasons == [
        f"{NODE}: 12 devices match the selectors (12 with taints the request does not "
        "tolerate, from DeviceTaintRule drain), 0 free, fewer than the 1 requested"
    ]


@pytest.mark.parametrize(
    ("selector", "tainted"),
    [
        ({"driver": "other.example.com"}, 0),
        ({"pool": "elsewhere"}, 0),
        ({"device": "neurondevice3"}, 1),
        ({"pool": NODE}, 12 + 24),  # the node's devices and its NeuronCores
        ({}, 12 + 24),  # an empty selector selects every device
    ],
)
def test_the_selector_matches_driver_pool_and_device(
    tmp_path: Path, selector: dict[str, str], tainted: int
) -> None:
    sim = cluster()
    taint_rule = rule(**selector)
    if not selector:
        taint_rule["spec"]["deviceSelector"] = {}
    simulate(files(tmp_path, taint_rule), sim)
    assert len(sim.taint_rules[0].devices) == tainted


def test_a_rule_without_a_selector_taints_nothing(tmp_path: Path) -> None:
    sim = cluster()
    [outcome] = simulate(files(tmp_path, rule()), sim)
    assert outcome.placements[0].device.name == "neurondevice0"
    assert sim.taint_rules[0].devices == ()


def test_an_informational_rule_keeps_nothing_out(tmp_path: Path) -> None:
    taint_rule = rule(device="neurondevice0")
    taint_rule["spec"]["taint"]["effect"] = "None"
    [outcome] = simulate(files(tmp_path, taint_rule), cluster())
    assert outcome.placements[0].device.name == "neurondevice0"


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1alpha3"])
def test_every_served_version_is_read(version: str) -> None:
    parsed = parse_taint_rule(rule(version=version, device="d"), "f:1")
    assert parsed == TaintRule(
        "drain",
        "f:1",
        {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"},
        True,
        device="d",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["spec"]["taint"].update(effect="PreferNoSchedule"), "spec.taint.effect"),
        (lambda r: r["spec"]["taint"].pop("key"), "spec.taint.key None is not a label name"),
        (lambda r: r["spec"].pop("taint"), "spec.taint is missing"),
        (lambda r: r["metadata"].pop("name"), "metadata.name is missing"),
        (
            lambda r: r["spec"]["deviceSelector"].update(selectors=[{"cel": {"expression": "x"}}]),
            "spec.deviceSelector.selectors was removed in Kubernetes 1.35",
        ),
        (
            lambda r: r["spec"]["deviceSelector"].update(deviceClassName="neuron.aws.com"),
            "spec.deviceSelector.deviceClassName was removed",
        ),
        (lambda r: r["spec"]["deviceSelector"].update(pool=""), "must be a non-empty string"),
    ],
)
def test_a_bad_rule_is_refused_with_its_reason(change: Any, message: str) -> None:
    bad = rule(device="neurondevice0")
    change(bad)
    with pytest.raises(InputError, match=message.replace(".", r"\.")):
        parse_taint_rule(bad, "rules.yaml:1")


def test_a_rule_in_an_unserved_version_is_a_problem_of_its_file(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(rule(version="v1beta1")))
    documents, problems = read(path)
    assert not documents
    assert [p.message for p in problems] == [
        "DeviceTaintRule with apiVersion resource.k8s.io/v1beta1: Kubernetes serves "
        "resource.k8s.io/v1, resource.k8s.io/v1beta2, resource.k8s.io/v1alpha3"
    ]


def test_the_command_reports_each_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [str(p) for p in files(tmp_path, rule(device="neurondevice0"))]
    assert cli.main(["simulate", *paths, "--node", "inf2.48xlarge=1", "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deviceTaintRules"] == [
        {
            "name": "drain",
            "source": f"{paths[0]}:1",
            "taint": {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"},
            "selector": {"device": "neurondevice0"},
            "devices": [{"node": NODE, "device": "neurondevice0"}],
        }
    ]
    assert cli.main(["simulate", *paths, "--node", "inf2.48xlarge=1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        f"DeviceTaintRule drain ({paths[0]}:1) example.com/maintenance=planned:NoSchedule: "
        f"taints 1 device: {NODE}/neurondevice0"
    )


def test_a_bad_rule_fails_before_any_node_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = rule(device="neurondevice0")
    bad["spec"]["taint"]["effect"] = "PreferNoSchedule"
    paths = [str(p) for p in files(tmp_path, bad)]
    # An unknown instance type is refused when the nodes are built: the rule comes first.
    assert cli.main(["simulate", *paths, "--node", "no.such-type=1"]) == 2
    err = capsys.readouterr().err
    assert "spec.taint.effect 'PreferNoSchedule'" in err and "no.such-type" not in err
