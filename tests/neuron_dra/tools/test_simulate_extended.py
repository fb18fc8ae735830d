"""Device-plugin-style pods: the claim the scheduler makes for their extended resources."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.tools.simulate import Cluster, InputError, Outcome, simulate, simulated_nodes

Json = dict[str, Any]


def container(name: str, amounts: Mapping[str, object], field: str = "limits") -> Json:
    return {"name": name, "image": "none", "resources": {field: amounts}}


def pod(*containers: Json, name: str = "p", init: tuple[Json, ...] = ()) -> Json:
    spec: Json = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def run(tmp_path: Path, docs: list[Json], node: str, count: int = 1) -> list[Outcome]:
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return simulate([path], Cluster(simulated_nodes([(node, count)]), {}))


def devices(outcome: Outcome) -> list[str]:
    return [p.device.name for p in outcome.placements]


@pytest.mark.parametrize("node", ["inf2.48xlarge", "trn2.48xlarge", "trn2u.48xlarge"])
def test_neuron_asks_whole_devices_never_the_ultraserver_node(tmp_path: Path, node: str) -> None:
    [only] = run(tmp_path, [pod(container("c", {"aws.amazon.com/neuron": 4}))], node)
    assert only.allocated, only.reasons
    assert only.claim.key == "default/p-extended-resources"
    assert only.claim.pod == "default/p"
    assert len(set(devices(only))) == 4
    assert all(d.startswith("neurondevice") for d in devices(only))
    assert only.prepare_error is None


def test_neurondevice_is_served_by_its_own_class(tmp_path: Path) -> None:
    [only] = run(
        tmp_path, [pod(container("c", {"aws.amazon.com/neurondevice": "2"}))], "trn2.48xlarge"
    )
    [request] = only.claim.spec.requests
    [alt] = request.alternatives
    assert alt.device_class == "extended-resource-neurondevice.neuron.aws.com"
    assert (alt.count, alt.all) == (2, False)
    assert len(set(devices(only))) == 2


def test_more_than_the_node_has_is_unallocatable(tmp_path: Path) -> None:
    [only] = run(tmp_path, [pod(container("c", {"aws.amazon.com/neuron": 17}))], "trn2.48xlarge")
    assert not only.allocated
    assert only.reasons == [
        "trn2.48xlarge-0: 16 devices match the selectors, 16 free, fewer than the 17 requested"
    ]


def test_one_request_per_container_named_as_the_scheduler_names_them(tmp_path: Path) -> None:
    # Requests count the container's sorted resource names: cpu sorts before aws.amazon.com/.
    first = container("a", {"aws.amazon.com/neuron": 2, "memory": "1Gi"})
    second = container("b", {"aws.amazon.com/neuron": 2, "zz.example.com/x": 1})
    [only] = run(tmp_path, [pod(first, second)], "trn2.48xlarge")
    assert [r.name for r in only.claim.spec.requests] == [
        "container-0-request-0",
        "container-1-request-0",
    ]
    assert only.claim.extended == (("aws.amazon.com/neuron", 4),)
    assert len(set(devices(only))) == 4
    by_request = {p.request for p in only.placements}
    assert by_request == {"container-0-request-0", "container-1-request-0"}
    shifted = container("c", {"aws.amazon.com/neuron": 1, "aaa.example.com/y": 1})
    [second_pod] = run(tmp_path, [pod(shifted)], "trn2.48xlarge")
    assert [r.name for r in second_pod.claim.spec.requests] == ["container-0-request-1"]


def test_requests_win_over_limits_and_init_containers_reuse_later_devices(
    tmp_path: Path,
) -> None:
    main = container("main", {"aws.amazon.com/neuron": 3}, "requests")
    setup = container("setup", {"aws.amazon.com/neuron": 5})
    [only] = run(tmp_path, [pod(main, init=(setup,))], "trn2.48xlarge")
    # The init container runs before `main` and reuses its 3 devices; it asks 2 more.
    counts = {r.name: r.alternatives[0].count for r in only.claim.spec.requests}
    assert counts == {"container-0-request-0": 2, "container-1-request-0": 3}
    assert len(set(devices(only))) == 5


def test_workload_pods_and_their_order(tmp_path: Path) -> None:
    template = pod(container("c", {"aws.amazon.com/neuron": 8}))
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "template": {"spec": template["spec"]}},
    }
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": template["spec"]}}}},
    }
    outcomes = run(tmp_path, [deployment, cronjob], "trn2.48xlarge")
    assert [o.claim.pod for o in outcomes] == [
        "default/web-00000",
        "default/web-00001",
        "default/nightly-00000",
    ]
    assert [o.allocated for o in outcomes] == [True, True, False]
    assert not set(devices(outcomes[0])) & set(devices(outcomes[1]))


def test_pods_without_served_resources_are_ignored(tmp_path: Path) -> None:
    plain = pod(container("c", {"cpu": "1"}))
    other = pod(container("c", {"example.com/gpu": 2}), name="other")
    assert run(tmp_path, [plain, other], "trn2.48xlarge") == []


def test_a_class_among_the_inputs_serves_its_name(tmp_path: Path) -> None:
    custom = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "first"},
        "spec": {
            "extendedResourceName": "example.com/first-device",
            "selectors": [
                {
                    "cel": {
                        "expression": "device.attributes['neuron.aws.com'].resourceType "
                        "== 'neuron_device' && device.attributes['neuron.aws.com'].deviceId == 0"
                    }
                }
            ],
        },
    }
    implicit = {"deviceclass.resource.kubernetes.io/first": 1}
    asks = [
        pod(container("c", {"example.com/first-device": 1})),
        pod(container("c", implicit), name="q"),
    ]
    first, second = run(tmp_path, [custom, *asks], "trn2.48xlarge")
    assert devices(first) == ["neurondevice0"]
    assert not second.allocated  # the one device the class selects is taken


def test_a_fractional_amount_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a whole number"):
        run(tmp_path, [pod(container("c", {"aws.amazon.com/neuron": "500m"}))], "trn2.48xlarge")


def test_output_names_the_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod(container("c", {"aws.amazon.com/neuron": 4}), name="x")))
    assert cli.main(["simulate", str(path), "--node", "trn2.48xlarge=1"]) == 0
    out = capsys.readouterr().out
    assert (
        f"[A] claim default/x-extended-resources (Pod x (aws.amazon.com/neuron: 4), {path}:1)"
        in out
    )
    assert cli.main(["simulate", str(path), "--node", "trn2.48xlarge=1", "-o", "json"]) == 0
    [claim] = json.loads(capsys.readouterr().out)["claims"]
    assert claim["extendedResources"] == {"aws.amazon.com/neuron": 4}
    assert claim["pod"] == "default/x"
