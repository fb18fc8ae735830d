"""NeuronCores as devices: published by simulated nodes, held apart by shared counters."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.tools.picture import colour, node_views, render_svg, render_text
from neuron_dra.tools.simulate import (
    Cluster,
    Outcome,
    describe,
    node_from_slices,
    outcome_json,
    simulate,
    simulated_nodes,
)

Json = dict[str, Any]
TRN2 = "trn2.48xlarge"
NODE = f"{TRN2}-0"
DEVICE_ID = "neuron.aws.com/deviceId"
SVG = "{http://www.w3.org/2000/svg}"


def template(
    name: str,
    count: int,
    device_class: str = "neuroncore.neuron.aws.com",
    *,
    match: str | None = None,
    mode: str = "ExactCount",
) -> Json:
    exactly: Json = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    devices: Json = {"requests": [{"name": "r", "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def cores_pod(count: int, name: str = "p") -> Json:
    container = {
        "name": "c",
        "image": "none",
        "resources": {"limits": {"aws.amazon.com/neuroncore": count}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }


def write(tmp_path: Path, *docs: Json) -> Path:
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def run(tmp_path: Path, *docs: Json, node: str = TRN2, cores: bool = True) -> list[Outcome]:
    cluster = Cluster(simulated_nodes([(node, 1)], cores=cores), {})
    return simulate([write(tmp_path, *docs)], cluster)


def names(outcome: Outcome) -> list[str]:
    return [p.device.name for p in outcome.placements]


def env(outcome: Outcome) -> dict[str, str]:
    assert outcome.prepared is not None, outcome.prepare_error
    return dict(outcome.prepared.env)


# --- what simulated nodes publish -----------------------------------------------------------


def test_simulated_nodes_publish_cores_drawing_on_their_devices_counters() -> None:
    [node] = simulated_nodes([(TRN2, 1)])
    cores = [d for d in node.devices if d.name.startswith("neuroncore")]
    assert [d.name for d in cores] == [f"neuroncore{i}" for i in range(64)]  # LNC 2
    assert len(node.counters) == 16
    assert set(node.counters.values()) == {4}
    [(counter, amount)] = cores[5].consumes
    assert counter[2:] == ("neuron-node", "neurondevice1") and amount == 1
    [device] = [d for d in node.devices if d.name == "neurondevice1"]
    assert device.consumes == ((counter, Fraction(4)),)


def test_without_cores_nodes_publish_whole_devices_only() -> None:
    [node] = simulated_nodes([(TRN2, 1)], cores=False)
    assert not [d for d in node.devices if d.name.startswith("neuroncore")]
    assert node.counters == {}


def test_a_live_node_with_cores_is_read_back_as_its_devices() -> None:
    [simulated] = simulated_nodes([(TRN2, 1)])
    assert simulated.inventory is not None
    slices = build_slices(
        simulated.inventory,
        SliceOptions(NODE, counter_layout=CounterLayout.OWN_SLICE, cores=True),
    )
    node = node_from_slices(NODE, slices)
    assert node.inventory is not None
    assert [(d.index, d.cores) for d in node.inventory.devices] == [(i, 8) for i in range(16)]
    assert node.inventory.lnc == 2


# --- allocation through the counters --------------------------------------------------------


def test_one_core_then_every_device_does_not_fit(tmp_path: Path) -> None:
    core, devices = run(tmp_path, template("core", 1), template("all", 16, "neuron.aws.com"))
    assert names(core) == ["neuroncore0"]
    assert env(core) == {"NEURON_RT_VISIBLE_CORES": "0"}
    assert not devices.allocated
    assert devices.reasons == [
        f"{NODE}: 16 devices match the selectors, 15 free (1 held through shared counters by "
        "allocated devices), fewer than the 16 requested"
    ]


def test_a_device_holds_its_cores(tmp_path: Path) -> None:
    device, core = run(tmp_path, template("one", 1, "neuron.aws.com"), template("core", 1))
    assert names(device) == ["neurondevice0"]
    assert names(core) == ["neuroncore4"]  # the first core of neurondevice1


def test_four_cores_of_one_device(tmp_path: Path) -> None:
    held, four = run(tmp_path, template("held", 1), template("four", 4, match=DEVICE_ID))
    assert {p.device.attribute(DEVICE_ID) for p in four.placements} == {1}
    assert names(four) == [f"neuroncore{i}" for i in range(4, 8)]
    assert env(four) == {"NEURON_RT_VISIBLE_CORES": "4-7"}
    assert held.allocated


def test_more_cores_than_a_device_has_never_share_one(tmp_path: Path) -> None:
    [five] = run(tmp_path, template("five", 5, match=DEVICE_ID))
    assert five.reasons == [
        f"{NODE}: 64 devices match the selectors, 64 free, no 5 of them share {DEVICE_ID}"
    ]


def test_two_claims_of_two_cores_share_a_device(tmp_path: Path) -> None:
    first, second = run(
        tmp_path, template("a", 2, match=DEVICE_ID), template("b", 2, match=DEVICE_ID)
    )
    assert names(first) == ["neuroncore0", "neuroncore1"]
    assert names(second) == ["neuroncore2", "neuroncore3"]
    assert env(second) == {"NEURON_RT_VISIBLE_CORES": "2-3"}
    assert first.prepared is not None and first.prepared.device_nodes == ("/dev/neuron0",)


def test_a_core_keeps_the_ultraserver_node_device_out(tmp_path: Path) -> None:
    node = "trn2u.48xlarge"
    whole_spec = template("whole", 1, "neuron.aws.com")
    whole_spec["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'"}}
    ]
    _, blocked = run(tmp_path, template("core", 1), whole_spec, node=node)
    assert blocked.reasons == [
        f"{node}-0: 1 device matches the selectors, 0 free (1 held through shared counters by "
        "allocated devices), fewer than the 1 requested"
    ]


def test_all_cores_of_a_node_are_more_than_a_claim_holds(tmp_path: Path) -> None:
    [every] = run(tmp_path, template("every", 0, mode="All"))
    assert not every.allocated
    assert every.reasons == [
        f"{NODE}: allocationMode All matches 64 devices, more than the 32 one claim can hold "
        "(resource.k8s.io AllocationResultsMaxSize)"
    ]
    [fits] = run(tmp_path, template("every", 0, mode="All"), node="trn1.32xlarge")
    assert len(names(fits)) == 32


def test_more_than_32_devices_are_never_allocated(tmp_path: Path) -> None:
    [many] = run(tmp_path, template("many", 33))
    assert many.reasons == [
        "the claim asks for 33 devices, more than the 32 one claim can hold (resource.k8s.io "
        "AllocationResultsMaxSize): the scheduler never allocates it"
    ]


# --- device-plugin-style pods asking NeuronCores -------------------------------------------------


def test_a_pod_asking_neuroncores_gets_cores_anywhere_on_the_node(tmp_path: Path) -> None:
    held, pod = run(tmp_path, template("held", 2), cores_pod(4))
    [request] = pod.claim.spec.requests
    assert request.alternatives[0].device_class == "extended-resource-neuroncore.neuron.aws.com"
    assert pod.claim.extended == (("aws.amazon.com/neuroncore", 4),)
    assert names(pod) == [f"neuroncore{i}" for i in range(2, 6)]  # across neurondevice0 and 1
    assert env(pod) == {"NEURON_RT_VISIBLE_CORES": "2-5"}
    lines = describe(pod)
    assert "  cores    4 NeuronCores, of neurondevice0 and neurondevice1" in lines
    assert lines[-1] == (
        "  warning  aws.amazon.com/neuroncore: 4 carries no constraint: any 4 NeuronCores of "
        "the node, which may span Neuron devices; for cores of one device use a "
        "ResourceClaimTemplate with a neuron.aws.com/deviceId matchAttribute"
    )
    assert outcome_json(pod)["warnings"] == [lines[-1].removeprefix("  warning  ")]
    assert held.allocated


def test_one_neuroncore_gets_no_warning(tmp_path: Path) -> None:
    [pod] = run(tmp_path, cores_pod(1))
    assert "  cores    1 NeuronCore, of neurondevice0" in describe(pod)
    assert not [line for line in describe(pod) if "warning" in line]
    assert "warnings" not in outcome_json(pod)


def test_more_than_32_neuroncores_cannot_be_allocated(tmp_path: Path) -> None:
    [pod] = run(tmp_path, cores_pod(40))
    assert not pod.allocated
    assert pod.reasons == [
        "the claim asks for 40 devices, more than the 32 one claim can hold (resource.k8s.io "
        "AllocationResultsMaxSize): the scheduler never allocates it"
    ]
    assert describe(pod)[-1] == (
        "  warning  aws.amazon.com/neuroncore: 40 cannot be allocated: one claim holds at most "
        "32 devices, and each NeuronCore is one"
    )


def test_neuroncores_need_nodes_that_publish_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, cores_pod(2))
    assert cli.main(["simulate", str(path), "--node", f"{TRN2}=1", "--neuron-cores", "off"]) == 1
    out = capsys.readouterr().out
    assert (
        f"    {NODE}: no device matches the selectors: of 16 devices, DeviceClass "
        "extended-resource-neuroncore.neuron.aws.com selector `device.attributes"
        "['neuron.aws.com'].resourceType == 'neuron_core'` excludes 16"
    ) in out
    assert cli.main(["simulate", str(path), "--node", f"{TRN2}=1"]) == 0
    out = capsys.readouterr().out
    assert "  request  container-0-request-0: neuroncore0 neuroncore1" in out
    assert "  cores    2 NeuronCores, of neurondevice0" in out


def test_pictures_show_devices_held_through_cores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [
        template("a", 2, match=DEVICE_ID),
        template("b", 2, match=DEVICE_ID),
        template("c", 1, "neuron.aws.com"),
    ]
    cluster = Cluster(simulated_nodes([(TRN2, 1)]), {})
    outcomes = simulate([write(tmp_path, *docs)], cluster)
    [view] = node_views(cluster, outcomes)
    assert view.owners == {1: 2}
    assert view.cores == {0: ((0, 0), (1, 0), (2, 1), (3, 1))}
    text = render_text(view, [o.letter for o in outcomes])
    assert text.splitlines()[1].startswith("   0:ab  1:C   2:.   3:.")
    assert "lower case: NeuronCores of the device" in text
    svg = ET.fromstring(render_svg([view], [o.claim.key for o in outcomes]))
    boxes = {r.get("data-device"): r for r in svg.iter(f"{SVG}rect") if r.get("class") == "device"}
    assert boxes["0"].get("fill") == colour(0) and boxes["0"].get("fill-opacity") == "0.5"
    assert boxes["0"].findtext(f"{SVG}title") == (
        "neurondevice0: neuroncore0: default/a, neuroncore1: default/a, neuroncore2: default/b, "
        "neuroncore3: default/b"
    )
    assert boxes["1"].get("fill") == colour(2) and boxes["1"].get("fill-opacity") is None
    assert (
        cli.main(["simulate", str(tmp_path / "docs.yaml"), "--node", f"{TRN2}=1", "-o", "json"])
        == 0
    )
    [node] = json.loads(capsys.readouterr().out)["nodes"]
    assert node["cores"] == {"0": "default/a", "1": "default/a", "2": "default/b", "3": "default/b"}
    assert node["devices"] == {"1": "default/c"}
