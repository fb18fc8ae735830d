"""The offline allocator: examples, taken devices, All, constraints, counters, output."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.slices import UltraServerDevices
from neuron_dra.tools.simulate import (
    Cluster,
    InputError,
    Outcome,
    default_classes,
    load_documents,
    parse_claim_spec,
    parse_device_class,
    parse_taken,
    read_inputs,
    simulate,
    simulated_nodes,
)

REPO = Path(__file__).resolve().parents[3]
SPECS = REPO / "examples" / "specs"
ROWS = [set(range(i, i + 4)) for i in range(0, 16, 4)]
HALVES = [set(range(8)), set(range(8, 16))]
SECOND = "trn2.48xlarge-0"


def run(
    files: list[Path],
    nodes: list[tuple[str, int]],
    *,
    taken: Sequence[str] = (),
    ultraserver_devices: UltraServerDevices = UltraServerDevices.BOTH,
    driver_version: str | None = None,
    cores: bool = True,
) -> list[Outcome]:
    cluster = Cluster(
        simulated_nodes(
            nodes,
            ultraserver_devices=ultraserver_devices,
            driver_version=driver_version,
            cores=cores,
        ),
        {},
    )
    for node, device in parse_taken(list(taken)):
        cluster.take(node, device, "test")
    return simulate(files, cluster)


def indices(outcome: Outcome) -> set[int]:
    return {int(p.device.name.removeprefix("neurondevice")) for p in outcome.placements}


def env(outcome: Outcome) -> dict[str, str]:
    assert outcome.prepared is not None, outcome.prepare_error
    return dict(outcome.prepared.env)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- every example --------------------------------------------------------------------------

Check = Callable[[list[Outcome]], None]


def _row_on_trn2(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert only.node == SECOND and indices(only) in ROWS
    assert env(only)["NEURON_RT_VISIBLE_CORES"] == "0-15"
    assert only.prepared is not None
    assert only.prepared.device_nodes == tuple(f"/dev/neuron{i}" for i in range(4))


def _half(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert only.node == SECOND and indices(only) in HALVES


def _everything(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert indices(only) == set(range(16))
    assert env(only)["NEURON_RT_VISIBLE_CORES"] == "0-63"


def _lnc1(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert indices(only) == set(range(16))
    assert env(only) == {"NEURON_RT_VISIBLE_CORES": "0-127", "NEURON_LOGICAL_NC_CONFIG": "1"}


def _all_inf2(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert only.node == "inf2.48xlarge-0" and indices(only) == set(range(12))
    assert env(only) == {"NEURON_RT_VISIBLE_CORES": "0-23"}


def _two_rows_one_node(outcomes: list[Outcome]) -> None:
    first, second = outcomes
    assert first.node == second.node == SECOND
    assert indices(first) in ROWS and indices(second) in ROWS
    assert not indices(first) & indices(second)
    assert env(second)["NEURON_RT_VISIBLE_CORES"] == "16-31"


def _single(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert [p.device.name for p in only.placements] == ["neurondevice0"]
    assert env(only) == {"NEURON_RT_VISIBLE_CORES": "0-1"}


def _four_whole_devices(outcomes: list[Outcome]) -> None:
    # The claim the scheduler makes for the pod's `aws.amazon.com/neuron: 4`: any 4 devices.
    [only] = outcomes
    assert only.claim.pod == "default/device-plugin-style"
    assert only.claim.extended == (("aws.amazon.com/neuron", 4),)
    assert only.node == SECOND and len(indices(only)) == 4
    assert {p.request for p in only.placements} == {"container-0-request-0"}


def _single_core(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert [p.device.name for p in only.placements] == ["neuroncore0"]
    assert env(only) == {"NEURON_RT_VISIBLE_CORES": "0"}
    assert only.prepared is not None and only.prepared.device_nodes == ("/dev/neuron0",)


def _two_cores(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert [p.device.name for p in only.placements] == ["neuroncore0", "neuroncore1"]
    assert env(only) == {"NEURON_RT_VISIBLE_CORES": "0-1"}
    assert only.prepared is not None and only.prepared.device_nodes == ("/dev/neuron0",)


def _two_cores_for_the_pod(outcomes: list[Outcome]) -> None:
    # The claim the scheduler makes for `aws.amazon.com/neuroncore: 2`: any 2 cores.
    _two_cores(outcomes)
    assert outcomes[0].claim.extended == (("aws.amazon.com/neuroncore", 2),)


def _inf2_pair(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert indices(only) in [{i, i + 1} for i in range(0, 12, 2)]


def _every_device_of_two_nodes(outcomes: list[Outcome]) -> None:
    # Two replicas, each with all single devices of a node of its own, trn2u included.
    first, second = outcomes
    assert {first.node, second.node} == {"inf2.48xlarge-0", "trn2u.48xlarge-0"}
    for outcome in outcomes:
        assert outcome.node is not None
        spec = INSTANCE_TYPES[outcome.node.rsplit("-", 1)[0]]
        assert indices(outcome) == set(range(spec.devices))
        assert {p.device.name for p in outcome.placements} == {
            f"neurondevice{i}" for i in range(spec.devices)
        }


def _ultraserver(mode: int, pods: int, lnc: int | None = None) -> Check:
    runtime_mode = {4: "1", 2: "3"}[mode]  # 2 nodes: X2V, what a healthy trn2u offers
    cores = "0-127" if lnc == 1 else "0-63"

    def check(outcomes: list[Outcome]) -> None:
        assert len(outcomes) == pods
        assert all(o.allocated for o in outcomes), [o.reasons for o in outcomes]
        assert {o.node for o in outcomes} == {f"trn2u.48xlarge-{i}" for i in range(pods)}
        for outcome in outcomes:
            assert [p.device.name for p in outcome.placements] == ["neuronnode"]
            variables = env(outcome)
            assert variables["NEURON_RT_ULTRASERVER_MODE"] == runtime_mode
            assert variables["NEURON_RT_VISIBLE_CORES"] == cores
            assert variables.get("NEURON_LOGICAL_NC_CONFIG") == (lnc and str(lnc))
        servers = [env(o)["NEURON_RT_ULTRASERVER_SERVER_ID"] for o in outcomes]
        if mode == 4:
            assert servers == ["us-0"] * 4 + ["us-1"] * 4
        else:
            assert servers == ["us-0-0", "us-0-0", "us-0-1", "us-0-1"]

    return check


def _gang(size: int) -> Check:
    """Pod i on the unit's node i (its nodeSelector on the driver's label), rank = NODE_ID."""

    def check(outcomes: list[Outcome]) -> None:
        assert all(o.allocated for o in outcomes), [o.reasons for o in outcomes]
        assert [o.node for o in outcomes] == [f"trn2u.48xlarge-{i}" for i in range(size)]
        assert [env(o)["NEURON_RT_ULTRASERVER_NODE_ID"] for o in outcomes] == [
            str(i) for i in range(size)
        ]
        assert {env(o)["NEURON_RT_ULTRASERVER_MODE"] for o in outcomes} == {
            "1" if size == 4 else "3"
        }

    return check


def _one_device(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert [p.device.name for p in only.placements] == ["neurondevice0"]
    assert env(only)["NEURON_RT_VISIBLE_CORES"] == "0-3"


def _two_devices(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert len(indices(only)) == 2
    assert env(only)["NEURON_RT_VISIBLE_CORES"] == "0-7"


def _every_device_held_by_none(outcomes: list[Outcome]) -> None:
    [only] = outcomes
    assert indices(only) == set(range(16)) and all(p.admin for p in only.placements)


TRN2 = [("trn2.48xlarge", 1)]
# Examples whose claims need another driver's devices: run on the real scheduler instead.
OTHER_DRIVERS = {
    "efa-and-neuron.yaml": "tests/e2e/test_examples.py::test_neurons_and_efa",
    "cores-and-efa.yaml": "tests/e2e/test_examples.py::test_cores_and_efa",
}
EXAMPLES: dict[str, tuple[list[tuple[str, int]], Check]] = {
    "1x4-connected-devices.yaml": (TRN2, _row_on_trn2),
    "device-plugin-style-neuron.yaml": (TRN2, _four_whole_devices),
    "device-plugin-style-neuroncore.yaml": (TRN2, _two_cores_for_the_pod),
    "single-core.yaml": (TRN2, _single_core),
    "cores-of-one-device.yaml": (TRN2, _two_cores),
    "v1beta1/1x4-connected-devices.yaml": (TRN2, _row_on_trn2),
    "l-trn2.yaml": (TRN2, _half),
    "v1beta1/l-trn2.yaml": (TRN2, _half),
    "2.26-driver-trn2.yaml": (TRN2, _half),
    "v1beta1/2.26-driver-trn2.yaml": (TRN2, _half),
    "xl-trn2.yaml": (TRN2, _everything),
    "v1beta1/xl-trn2.yaml": (TRN2, _everything),
    "all-devices.yaml": ([("inf2.48xlarge", 1)], _all_inf2),
    "lnc-setting-trn2.yaml": (TRN2, _lnc1),
    "v1beta1/lnc-setting-trn2.yaml": (TRN2, _lnc1),
    "v1beta1/lnc-neurons.yaml": (TRN2, _lnc1),
    "shared-claim.yaml": (TRN2, _row_on_trn2),
    "single-device.yaml": ([("inf2.xlarge", 1)], _single),
    "two-claims-one-pod.yaml": (TRN2, _two_rows_one_node),
    "inf2-2-connected.yaml": ([("inf2.48xlarge", 1)], _inf2_pair),
    "us-4-node-config.yaml": ([("trn2u.48xlarge", 8)], _ultraserver(4, 8)),
    "v1beta1/us-4-node-config.yaml": ([("trn2u.48xlarge", 8)], _ultraserver(4, 8)),
    "us-2-node-config.yaml": ([("trn2u.48xlarge", 4)], _ultraserver(2, 4)),
    "podgroup/us-4-node-gang.yaml": ([("trn2u.48xlarge", 8)], _gang(4)),
    "first-available.yaml": (TRN2, _everything),
    "tolerations.yaml": (TRN2, _one_device),
    "device-metadata.yaml": (TRN2, _two_devices),
    "claim-shared-by-pods.yaml": (TRN2, _row_on_trn2),
    "admin-access.yaml": (TRN2, _every_device_held_by_none),
    "podgroup/us-2-node-gang.yaml": ([("trn2u.48xlarge", 8)], _gang(2)),
    "us-and-lnc-config.yaml": ([("trn2u.48xlarge", 4)], _ultraserver(2, 4, lnc=1)),
    "specific-driver-version.yaml": (
        [("inf2.48xlarge", 1), ("trn2u.48xlarge", 1)],
        _every_device_of_two_nodes,
    ),
}


def test_every_example_is_covered() -> None:
    files = {str(p.relative_to(SPECS)) for p in SPECS.rglob("*.yaml")}
    assert files == set(EXAMPLES) | set(OTHER_DRIVERS)


def test_a_class_of_another_driver_is_named() -> None:
    [claim] = run([SPECS / "efa-and-neuron.yaml"], TRN2)
    assert claim.reasons == [
        f"{SECOND}: request efa: DeviceClass efa.networking.k8s.aws is not among the inputs "
        "nor the driver's"
    ]


ADMIN = SPECS / "admin-access.yaml"


def test_an_admin_request_has_devices_in_use_and_holds_none() -> None:
    """As the scheduler: adminAccess skips devices' "in use", and what it gets stays free
    for the claims after it, where the devices draw on no counter (no cores published)."""
    files = [SPECS / "1x4-connected-devices.yaml", ADMIN, SPECS / "l-trn2.yaml"]
    row, monitor, later = run(files, TRN2, cores=False)
    assert indices(row) == set(range(4))
    assert indices(monitor) == set(range(16))
    assert indices(later) == set(range(8, 16)) or indices(later) == set(range(4, 12))


def test_an_admin_request_is_held_to_counters_as_the_scheduler_does() -> None:
    """The allocator checks an admin request's devices against shared counters, and a
    held device keeps drawing on its counter: with cores published, the admin request
    cannot have a device in use, whole or by one of its cores."""
    row, monitor, _ = run(
        [SPECS / "1x4-connected-devices.yaml", ADMIN, SPECS / "l-trn2.yaml"], TRN2
    )
    assert indices(row) == set(range(4))
    assert not monitor.allocated
    [monitor] = run([ADMIN], TRN2, taken=[f"{SECOND}:neuroncore5"])
    assert not monitor.allocated
    [monitor] = run([ADMIN], TRN2, taken=[f"{SECOND}:1"])
    assert not monitor.allocated


def test_why_an_admin_request_does_not_fit_counts_the_devices_it_could_have(
    tmp_path: Path,
) -> None:
    too_many = tmp_path / "admin.yaml"
    too_many.write_text(ADMIN.read_text().replace("allocationMode: All", "count: 17"))
    # Without counters device 0 is held, yet open to the admin request: 16 free, not 15.
    [monitor] = run([too_many], TRN2, taken=[f"{SECOND}:0"], cores=False)
    assert monitor.reasons == [
        f"{SECOND}: 16 devices match the selectors, 16 free, fewer than the 17 requested"
    ]
    # With them, its counter is spent.
    [monitor] = run([too_many], TRN2, taken=[f"{SECOND}:0"])
    assert monitor.reasons == [
        f"{SECOND}: 16 devices match the selectors, 15 free (1 held through shared counters "
        "by allocated devices), fewer than the 17 requested"
    ]


def test_an_admin_request_on_an_ultraserver_node_meets_the_counters(tmp_path: Path) -> None:
    """A held device spends a counter the node device needs; a held node device spends
    every device's, its own included. Publishing only the devices, nothing draws on a
    counter and admin requests have held devices."""
    node = "trn2u.48xlarge-0"
    whole = tmp_path / "node.yaml"
    text = ADMIN.read_text().replace("allocationMode: All", "count: 1")
    whole.write_text(text.replace("== 'neuron_device'", "== 'neuron_node'"))
    us = [("trn2u.48xlarge", 1)]
    [monitor] = run([whole], us, taken=[f"{node}:3"], cores=False)
    assert not monitor.allocated
    [monitor] = run([whole], us, taken=[f"{node}:neuronnode"], cores=False)
    assert not monitor.allocated
    [monitor] = run([ADMIN], us, taken=[f"{node}:neuronnode"], cores=False)
    assert not monitor.allocated
    [monitor] = run([ADMIN], us, taken=[f"{node}:3"], cores=False)
    assert not monitor.allocated
    devices = UltraServerDevices.DEVICES
    [monitor] = run([ADMIN], us, taken=[f"{node}:3"], cores=False, ultraserver_devices=devices)
    assert indices(monitor) == set(range(16))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_gets_the_intended_devices(name: str) -> None:
    nodes, check = EXAMPLES[name]
    outcomes = run([SPECS / name], nodes)
    assert all(o.allocated for o in outcomes), [o.reasons for o in outcomes]
    assert not any(o.prepare_error for o in outcomes)
    check(outcomes)


def test_examples_only_fit_where_the_readme_says() -> None:
    [pair] = run([SPECS / "inf2-2-connected.yaml"], TRN2)
    assert pair.reasons == [
        "trn2.48xlarge-0: no device matches the selectors: of 80 devices, DeviceClass "
        "neuron.aws.com selector `device.attributes['neuron.aws.com'].resourceType != "
        "'neuron_core'` excludes 64, selector "
        "`device.attributes['neuron.aws.com'].instanceType == 'inf2.48xlarge'` excludes 16"
    ]
    [pinned] = run([SPECS / "2.26-driver-trn2.yaml"], TRN2, driver_version="2.26.1.0")
    assert not pinned.allocated
    assert "excludes 16" in pinned.reasons[0]


def test_the_default_class_is_the_one_the_driver_installs() -> None:
    # Built in, not read from deploy/: an installed `neuron-dra simulate` has no checkout.
    docs = yaml.safe_load_all((REPO / "deploy" / "deviceclass.yaml").read_text())
    installed = [parse_device_class(d) for d in docs if d]
    assert installed == default_classes()
    assert {c.extended_resource for c in installed} == {
        None,
        "aws.amazon.com/neuron",
        "aws.amazon.com/neurondevice",
        "aws.amazon.com/neuroncore",
    }


def test_v1beta1_and_v1_spellings_parse_alike() -> None:
    def spec(name: str) -> object:
        [(_, doc)] = [d for d in load_documents([SPECS / name]) if d[1]["kind"] != "Pod"]
        return parse_claim_spec(doc["spec"]["spec"], name)

    assert spec("l-trn2.yaml") == spec("v1beta1/l-trn2.yaml")


# --- taken devices, All, constraints ------------------------------------------------------


def test_taken_devices_leave_only_whole_rows(tmp_path: Path) -> None:
    rows = write(tmp_path, "rows.yaml", (SPECS / "shared-claim.yaml").read_text().split("---")[0])
    files = [rows] * 3
    outcomes = run(files, TRN2, taken=["trn2.48xlarge-0:1,neurondevice6"])
    # A template no pod references stands for one claim each time it is given.
    assert len(outcomes) == 3
    assert [indices(o) for o in outcomes[:2]] == [ROWS[2], ROWS[3]]
    assert outcomes[2].reasons == [
        "trn2.48xlarge-0: 16 devices match the selectors, 6 free, no 4 of them share "
        "resource.aws.com/devicegroup4_id"
    ]


def test_constraint_failure_names_the_attribute() -> None:
    [half] = run([SPECS / "l-trn2.yaml"], TRN2, taken=["trn2.48xlarge-0:0,8"])
    assert not half.allocated
    assert half.reasons == [
        "trn2.48xlarge-0: 16 devices match the selectors, 14 free, no 8 of them share "
        "resource.aws.com/devicegroup8_id"
    ]


def test_fewer_free_than_requested() -> None:
    [everything] = run([SPECS / "xl-trn2.yaml"], TRN2, taken=["trn2.48xlarge-0:5"])
    assert everything.reasons == [
        "trn2.48xlarge-0: 16 devices match the selectors, 15 free, fewer than the 16 requested"
    ]


def test_all_fails_when_any_matching_device_is_taken() -> None:
    [claim] = run([SPECS / "all-devices.yaml"], [("inf2.48xlarge", 1)], taken=["inf2.48xlarge-0:3"])
    assert not claim.allocated
    assert claim.reasons == [
        "inf2.48xlarge-0: 12 devices match the selectors, 11 free; "
        "allocationMode All needs every one of them"
    ]


def test_all_over_devices_sharing_counters_says_which_counter(tmp_path: Path) -> None:
    # The node device and its devices, all free, each fit alone; All takes them together.
    text = (SPECS / "specific-driver-version.yaml").read_text()
    kind = "resourceType == 'neuron_device'"
    both = write(tmp_path, "both.yaml", text.replace(kind, "resourceType != 'neuron_core'"))
    first, _ = run([both], [("trn2u.48xlarge", 1)])
    assert not first.allocated
    assert first.reasons == [
        "trn2u.48xlarge-0: 17 devices match the selectors, 17 free; allocationMode All needs "
        "every one of them, and together they consume 8 of shared counter "
        "neuron-node/neurondevice0, which holds 4"
    ]


def test_all_takes_the_free_node() -> None:
    nodes = [("inf2.48xlarge", 2)]
    [claim] = run([SPECS / "all-devices.yaml"], nodes, taken=["inf2.48xlarge-0:3"])
    assert claim.node == "inf2.48xlarge-1" and indices(claim) == set(range(12))
    assert claim.reasons == []


def test_later_claims_see_earlier_ones_taken() -> None:
    files = [SPECS / "l-trn2.yaml", SPECS / "l-trn2.yaml", SPECS / "l-trn2.yaml"]
    first, second, third = run(files, TRN2)
    assert [indices(first), indices(second)] == HALVES
    assert "fewer than the 8 requested" in third.reasons[0]


def test_pod_claims_share_a_node(tmp_path: Path) -> None:
    # One trn2 node cannot hold two halves plus a row; the pod's claims move together.
    nodes = [("trn2.48xlarge", 2)]
    outcomes = run(
        [SPECS / "l-trn2.yaml", SPECS / "two-claims-one-pod.yaml", SPECS / "l-trn2.yaml"], nodes
    )
    assert [o.node for o in outcomes] == [
        "trn2.48xlarge-0",
        "trn2.48xlarge-0",
        "trn2.48xlarge-0",
        "trn2.48xlarge-1",
    ]


def test_first_available_falls_back_to_the_next_subrequest(tmp_path: Path) -> None:
    text = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: flexible}
spec:
  devices:
    requests:
    - name: neurons
      firstAvailable:
      - name: eight
        deviceClassName: neuron.aws.com
        count: 8
      - name: four
        deviceClassName: neuron.aws.com
        count: 4
    constraints:
    - requests: [neurons]
      matchAttribute: resource.aws.com/devicegroup4_id
"""
    [claim] = run([write(tmp_path, "c.yaml", text)], TRN2)
    assert {p.request for p in claim.placements} == {"neurons/four"}
    assert indices(claim) == ROWS[0]


def test_node_selector_is_honoured(tmp_path: Path) -> None:
    text = (
        (SPECS / "single-device.yaml")
        .read_text()
        .replace(
            "  containers:",
            "  nodeSelector: {kubernetes.io/hostname: inf2.xlarge-1}\n  containers:",
        )
    )
    [claim] = run([write(tmp_path, "p.yaml", text)], [("inf2.xlarge", 2)])
    assert claim.node == "inf2.xlarge-1"


def test_device_taints_exclude_unless_tolerated(tmp_path: Path) -> None:
    cluster = Cluster(simulated_nodes([("inf2.xlarge", 1)]), {})
    devices = cluster.nodes[0].devices
    at = next(i for i, d in enumerate(devices) if d.name == "neurondevice0")
    device = devices[at]
    assert len([d for d in devices if d.name.startswith("neuroncore")]) == 2
    taint = {"key": "neuron.aws.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}
    cluster.nodes[0].devices[at] = type(device)(
        device.driver, device.pool, device.name, device.view, device.consumes, (taint,)
    )
    [claim] = simulate([SPECS / "single-device.yaml"], cluster)
    assert not claim.allocated and "with taints the request does not tolerate" in claim.reasons[0]
    tolerating = (
        (SPECS / "single-device.yaml")
        .read_text()
        .replace(
            "          count: 1\n",
            "          count: 1\n          tolerations: [{key: neuron.aws.com/unhealthy, "
            "operator: Exists}]\n",
        )
    )
    [ok] = simulate([write(tmp_path, "t.yaml", tolerating)], cluster)
    assert ok.allocated


def test_an_informational_taint_keeps_nothing_out() -> None:
    cluster = Cluster(simulated_nodes([("inf2.xlarge", 1)]), {})
    device = cluster.nodes[0].devices[0]
    notice = {"key": "neuron.aws.com/unwatched", "value": "NoHealthSource", "effect": "None"}
    cluster.nodes[0].devices[0] = type(device)(
        device.driver, device.pool, device.name, device.view, device.consumes, (notice,)
    )
    [claim] = simulate([SPECS / "single-device.yaml"], cluster)
    assert claim.allocated and claim.reasons == []


# --- UltraServer nodes: the whole node or its devices ------------------------------------


def test_neuronnode_and_devices_exclude_each_other_through_counters() -> None:
    nodes = [("trn2u.48xlarge", 1)]
    # The LeaderWorkerSet stands for 8 pods; with one node the first one already cannot fit.
    single, whole, *_ = run([SPECS / "single-device.yaml", SPECS / "us-4-node-config.yaml"], nodes)
    assert single.allocated
    assert whole.reasons == [
        "trn2u.48xlarge-0: 1 device matches the selectors, 0 free (1 held through shared "
        "counters by allocated devices), fewer than the 1 requested"
    ]
    node_first = run([SPECS / "us-4-node-config.yaml", SPECS / "single-device.yaml"], nodes)
    assert node_first[0].allocated and node_first[0].node == "trn2u.48xlarge-0"
    # Only the first of the LeaderWorkerSet's 8 pods fits; the single device never does.
    assert not node_first[-1].allocated
    assert "held through shared counters" in node_first[-1].reasons[0]


def test_without_counters_the_node_publishes_one_kind() -> None:
    nodes = [("trn2u.48xlarge", 1)]
    [claim, *_] = run(
        [SPECS / "us-4-node-config.yaml"], nodes, ultraserver_devices=UltraServerDevices.DEVICES
    )
    assert "no device matches the selectors" in claim.reasons[0]


# --- inputs and output ------------------------------------------------------------------------


def test_unknown_template_is_an_input_error(tmp_path: Path) -> None:
    pod = (SPECS / "single-device.yaml").read_text().split("---")[1]
    with pytest.raises(InputError, match="not among the inputs"):
        read_inputs(load_documents([write(tmp_path, "pod.yaml", pod)]))


def test_alternatives_are_the_rows() -> None:
    cluster = Cluster(simulated_nodes(TRN2), {})
    inputs = read_inputs(load_documents([SPECS / "1x4-connected-devices.yaml"]))
    simulate([], cluster)  # installs the driver's DeviceClass
    options = cluster.alternatives(inputs.claims[0], SECOND)
    assert [set(o["neurons"]) for o in options] == [
        {f"neurondevice{i}" for i in row} for row in ROWS
    ]


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "simulate",
            str(SPECS / "1x4-connected-devices.yaml"),
            str(SPECS / "xl-trn2.yaml"),
            "--node",
            "trn2.48xlarge=1",
            "-o",
            "json",
        ]
    )
    assert code == 1  # the second claim does not fit next to the first
    document = json.loads(capsys.readouterr().out)
    first, second = document["claims"]
    assert first["node"] == SECOND and first["allocated"]
    assert [r["device"] for r in first["results"]] == [f"neurondevice{i}" for i in range(4)]
    assert first["env"] == {"NEURON_RT_VISIBLE_CORES": "0-15"}
    assert first["deviceNodes"] == [f"/dev/neuron{i}" for i in range(4)]
    assert not second["allocated"]
    assert second["reasons"] == [
        "trn2.48xlarge-0: 16 devices match the selectors, 12 free, fewer than the 16 requested"
    ]
    assert document["nodes"][0]["devices"]["0"] == "default/pod0-neurons"


def test_text_output_and_picture(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    svg = tmp_path / "out.svg"
    code = cli.main(
        [
            "simulate",
            str(SPECS / "two-claims-one-pod.yaml"),
            "--node",
            "trn2.48xlarge=2",
            "--taken",
            "trn2.48xlarge-1:0",
            "--picture",
            str(svg),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "[A] claim default/two-claims-neurons0" in out
    assert "env      NEURON_RT_VISIBLE_CORES=0-15" in out
    assert " 0:A   1:A   2:A   3:A" in out and " 4:B" in out
    assert " 0:# " in out  # the taken device of the second node
    assert svg.read_text().startswith("<?xml")


def test_bad_node_flag() -> None:
    assert cli.main(["simulate", str(SPECS / "xl-trn2.yaml"), "--node", "trn9.x=1"]) == 2
