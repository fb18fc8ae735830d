"""`neuron-dra templates`: what Karpenter is told equals what the agent publishes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.cli import main
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.tools.releases import parse_version
from neuron_dra.tools.templates import (
    Layout,
    TemplateError,
    is_node_specific,
    layout_for,
    qualified,
    templates,
)

Json = dict[str, Any]
LAYOUTS = {
    "1.34": Layout(CounterLayout.BESIDE_DEVICES, cores=False),
    "1.35": Layout(CounterLayout.OWN_SLICE, cores=False),
    "1.37": Layout(CounterLayout.OWN_SLICE, cores=True),
}


def _node_devices(root: Path, name: str, layout: Layout) -> tuple[list[Json], list[Json]]:
    inventory = discover(root).inventory
    options = SliceOptions(name, counter_layout=layout.counter_layout, cores=layout.cores)
    slices = build_slices(inventory, options)
    devices = [d for s in slices for d in s["spec"].get("devices") or ()]
    counters = [c for s in slices for c in s["spec"].get("sharedCounters") or ()]
    return devices, counters


@pytest.mark.parametrize("version", sorted(LAYOUTS))
@pytest.mark.parametrize("instance_type", sorted(INSTANCE_TYPES))
def test_templates_are_what_a_node_of_the_type_publishes(
    fake_node: Callable[..., Path], instance_type: str, version: str
) -> None:
    """A node other than the one templates are built on (its own name, its own place in an
    UltraServer): its devices equal the template's once the bound attributes are filled in
    with its values, and the devices of every binding share one value on it."""
    unit = (
        FakeUltraServer(server_id="us-7", node_id=3)
        if INSTANCE_TYPES[instance_type].ultraserver
        else None
    )
    root = fake_node(instance_type, name="ip-10-0-3-7", ultraserver=unit, pci_parents=True)
    devices, counters = _node_devices(root, "ip-10-0-3-7", LAYOUTS[version])
    dynamic = templates([instance_type], version, None)[instance_type]
    template, *rest = dynamic["resourceSliceTemplates"]
    assert {t["driver"] for t in dynamic["resourceSliceTemplates"]} == {"neuron.aws.com"}
    # Karpenter drops the devices of a template that has counters: never both in one.
    assert all(not ("devices" in t and "sharedCounters" in t) for t in [template, *rest])
    assert [c for t in rest for c in t["sharedCounters"]] == counters
    assert len(rest) == (1 if counters else 0)
    by_name = {d["name"]: d for d in devices}
    for binding in dynamic["attributeBindings"]:
        values = set()
        for ref in binding["devices"]:
            attrs = {qualified(k): v for k, v in by_name[ref["device"]]["attributes"].items()}
            values.add(json.dumps(attrs[binding["attribute"]], sort_keys=True))
        assert len(values) == 1, binding
    filled = []
    for device in template["devices"]:
        node = by_name[device["name"]]
        bound = {k: v for k, v in node["attributes"].items() if is_node_specific(k)}
        filled.append({**device, "attributes": {**device["attributes"], **bound}})
    assert filled == devices


def test_no_template_carries_a_node_name() -> None:
    text = json.dumps(templates(sorted(INSTANCE_TYPES), "1.37", None))
    assert "template-node" not in text
    assert len(json.loads(text)) == len(INSTANCE_TYPES)


def test_each_type_has_a_pool_of_its_own() -> None:
    """Karpenter caches a selector's answer per driver, pool and device name: two types
    with a device of one name must not share a pool, or one type's answer stands for the
    other's (a claim pinned to trn2.48xlarge got no node)."""
    dynamic = templates(sorted(INSTANCE_TYPES), "1.37", None)
    pools = {
        instance_type: {t["pool"]["name"] for t in d["resourceSliceTemplates"]}
        | {ref["pool"] for b in d["attributeBindings"] for ref in b["devices"]}
        for instance_type, d in dynamic.items()
    }
    assert pools == {t: {f"template-{t}"} for t in INSTANCE_TYPES}


def test_devicegroups_are_bindings_not_attributes() -> None:
    dynamic = templates(["trn2.48xlarge"], "1.37", None)["trn2.48xlarge"]
    for device in dynamic["resourceSliceTemplates"][0]["devices"]:
        assert not any(k.startswith("resource.aws.com/") for k in device["attributes"])
    groups4 = [
        b
        for b in dynamic["attributeBindings"]
        if b["attribute"] == "resource.aws.com/devicegroup4_id"
    ]
    assert [len(b["devices"]) for b in groups4] == [4, 4, 4, 4]
    # A NeuronCore carries its device's own group (LNC 2: 4 cores a device), so that
    # cores can be asked beside the EFA interface next to their device.
    groups1 = [
        {d["device"] for d in b["devices"]}
        for b in dynamic["attributeBindings"]
        if b["attribute"] == "resource.aws.com/devicegroup1_id"
    ]
    assert len(groups1) == 16
    assert {"neurondevice0", *(f"neuroncore{i}" for i in range(4))} in groups1


@pytest.mark.parametrize(
    ("version", "cores", "expected"),
    [
        ("1.34", None, LAYOUTS["1.34"]),
        ("1.35", None, LAYOUTS["1.35"]),
        ("1.36", None, LAYOUTS["1.37"]),
        ("v1.37.2", "off", Layout(CounterLayout.OWN_SLICE, cores=False)),
        ("1.36", "on", LAYOUTS["1.37"]),
    ],
)
def test_layout_follows_the_release(version: str, cores: str | None, expected: Layout) -> None:
    assert layout_for(parse_version(version), cores) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--instance-type", "trn9.huge"], "unknown instance type 'trn9.huge'"),
        (["--kubernetes-version", "1.33"], "needs Kubernetes 1.34+"),
        (["--kubernetes-version", "one"], "expected MAJOR.MINOR"),
        (["--kubernetes-version", "1.35", "--neuron-cores", "on"], "does not serve"),
    ],
)
def test_bad_options_exit_2_with_a_clear_error(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["templates", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


def test_cli_options(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["templates", "--instance-type", "inf2.xlarge", "--instance-type", "trn2.48xlarge"]
    assert main([*argv, "--kubernetes-version", "1.37", "--neuron-cores", "off"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(out) == ["inf2.xlarge", "trn2.48xlarge"]
    kinds = {
        d["attributes"]["resourceType"]["string"]
        for d in out["trn2.48xlarge"]["resourceSliceTemplates"][0]["devices"]
    }
    assert kinds == {"neuron_device"}
    assert main(["templates", "--instance-type", "trn2.48xlarge"]) == 0
    devices = json.loads(capsys.readouterr().out)["trn2.48xlarge"]["resourceSliceTemplates"][0][
        "devices"
    ]
    assert {d["attributes"]["resourceType"]["string"] for d in devices} == {
        "neuron_device",
        "neuron_core",
    }
    with pytest.raises(TemplateError):
        templates(["inf1.xlarge"], "1.34", "on")
