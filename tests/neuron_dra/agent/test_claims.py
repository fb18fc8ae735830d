from __future__ import annotations

import pytest

from neuron_dra.agent.claims import ClaimError, ClaimRef, PreparedClaim, format_cores, plan
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim, neuron_config, opaque, ultraserver_config
from tests.sysfs_tree import FakeNode

REF = ClaimRef("default", "claim", "0c7d2a1e-1111-4222-8333-944455556666")


def inventory_of(fake_node: FakeNode, instance_type: str, **kw: object) -> NodeInventory:
    return discover(fake_node(instance_type, **kw)).inventory  # type: ignore[arg-type]


def planned(inventory: NodeInventory, devices: list[str] | dict[str, list[str]],
            config: list[dict[str, object]] | None = None) -> PreparedClaim:  # fmt: skip
    return plan(REF, allocated_claim(REF.uid, devices, config=config), inventory, "node-a")


def env(prepared: PreparedClaim) -> dict[str, str]:
    return dict(prepared.env)


def test_a_row_of_trn2_gets_its_logical_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    prepared = planned(inventory, [f"neurondevice{i}" for i in (6, 4, 7, 5)])
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "16-31"}  # LNC 2: 4 per device
    assert [d.device for d in prepared.devices] == [f"neurondevice{i}" for i in (6, 4, 7, 5)]
    assert [d.neuron_devices[0].dev_path for d in prepared.devices] == [
        "/dev/neuron6", "/dev/neuron4", "/dev/neuron7", "/dev/neuron5"
    ]  # fmt: skip
    assert all(d.request_names == ("neurons",) for d in prepared.devices)


def test_lnc_1_from_the_claim_doubles_the_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    all16 = [f"neurondevice{i}" for i in range(16)]
    prepared = planned(inventory, all16, [opaque(neuron_config(1))])
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "0-127", "NEURON_LOGICAL_NC_CONFIG": "1"}


def test_node_default_lnc_1_applies_without_config(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge", lnc=1)
    assert env(planned(inventory, ["neurondevice1"])) == {"NEURON_RT_VISIBLE_CORES": "8-15"}


def test_claim_config_wins_over_class_config(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    configs = [opaque(neuron_config(2)), opaque(neuron_config(1), source="FromClass")]
    assert env(planned(inventory, ["neurondevice0"], configs))["NEURON_LOGICAL_NC_CONFIG"] == "2"
    configs = [opaque(neuron_config(1)), opaque(neuron_config(2), source="FromClass")]
    assert env(planned(inventory, ["neurondevice0"], configs))["NEURON_LOGICAL_NC_CONFIG"] == "1"


def test_non_contiguous_devices_list_their_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    prepared = planned(inventory, ["neurondevice6", "neurondevice1"])
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "2,3,12,13"}


def test_other_drivers_results_and_configs_are_ignored(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.xlarge")
    claim = allocated_claim(REF.uid, ["neurondevice0"], config=[
        opaque({"anything": True}, driver="efa.aws.com"),
    ])  # fmt: skip
    claim["status"]["allocation"]["devices"]["results"] += [
        {"request": "efa", "driver": "efa.aws.com", "pool": "node-a", "device": "efa0"},
        {"request": "neurons", "driver": "neuron.aws.com", "pool": "node-b", "device": "x"},
    ]
    prepared = plan(REF, claim, inventory, "node-a")
    assert [d.device for d in prepared.devices] == ["neurondevice0"]
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "0-1"}


def test_configs_apply_only_to_their_requests(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    with pytest.raises(ClaimError, match="requests set different logicalNeuronCore values"):
        planned(inventory, {"a": ["neurondevice0"], "b": ["neurondevice1"]},
                [opaque(neuron_config(1), requests=["a"])])  # fmt: skip
    prepared = planned(inventory, {"a": ["neurondevice0"], "b": ["neurondevice1"]},
                       [opaque(neuron_config(1), requests=["a", "b"])])  # fmt: skip
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "0-15", "NEURON_LOGICAL_NC_CONFIG": "1"}


def test_subrequests_report_the_parent_request_too(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.xlarge")
    prepared = planned(inventory, {"neurons/big": ["neurondevice0"]})
    assert prepared.devices[0].request_names == ("neurons", "neurons/big")


def test_ultraserver_node_device(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2u.48xlarge", ultraserver=FakeUltraServer("us-3", 3))
    prepared = planned(inventory, ["neuronnode"], [opaque(ultraserver_config(4))])
    assert len(prepared.devices[0].neuron_devices) == 16
    assert env(prepared) == {
        "NEURON_RT_VISIBLE_CORES": "0-63",
        "NEURON_RT_ULTRASERVER_MODE": "1",
        "NEURON_RT_ULTRASERVER_SERVER_ID": "us-3",
        "NEURON_RT_ULTRASERVER_NODE_ID": "3",
    }
    pair = env(planned(inventory, ["neuronnode"], [opaque(ultraserver_config(2))]))
    assert pair["NEURON_RT_ULTRASERVER_MODE"] == "2"
    assert pair["NEURON_RT_ULTRASERVER_SERVER_ID"] == "us-3-1"
    assert pair["NEURON_RT_ULTRASERVER_NODE_ID"] == "1"


@pytest.mark.parametrize(
    ("instance_type", "devices", "config", "message"),
    [
        ("inf2.48xlarge", ["neurondevice0"], [opaque(neuron_config(1))],
         "NeuronConfig.logicalNeuronCore is set for request 'neurons' but inf2.48xlarge has "
         "no logical NeuronCores"),
        ("trn2.48xlarge", ["neurondevice0"], [opaque(neuron_config(3))],
         "config[0] from the claim: NeuronConfig: field 'logicalNeuronCore': 3 is not allowed; "
         "allowed values: 1, 2"),
        ("trn2.48xlarge", ["neurondevice0"], [opaque([1])],
         "config[0] from the claim: parameters must be an object, not an array"),
        ("trn2.48xlarge", ["neurondevice0"], [opaque(ultraserver_config(4))],
         "UltraServerConfig applies to request 'neurons' whose device neurondevice0 is a single "
         "Neuron device; it is only valid for the neuronnode device"),
        ("trn2.48xlarge", ["neuronnode"], [],
         "device neuronnode needs UltraServer membership, which this node does not report"),
        ("trn2u.48xlarge", ["neuronnode"], [opaque(ultraserver_config(1), source="FromClass")],
         ""),
        ("trn2.48xlarge", ["neurondevice16"], [], "device neurondevice16 is not on this node"),
    ],
)  # fmt: skip
def test_bad_claims_name_claim_field_and_allowed_values(
    fake_node: FakeNode, instance_type: str, devices: list[str],
    config: list[dict[str, object]], message: str,
) -> None:  # fmt: skip
    inventory = inventory_of(fake_node, instance_type)
    if not message:
        assert planned(inventory, devices, config).env[-1] == ("NEURON_RT_ULTRASERVER_MODE", "4")
        return
    with pytest.raises(ClaimError) as caught:
        planned(inventory, devices, config)
    assert str(caught.value) == f"claim {REF}: {message}" or message in str(caught.value)
    assert str(caught.value).startswith(f"claim default/claim ({REF.uid}): ")


def test_unsupported_ultraserver_mode(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    (root / "sys/class/neuron_device/ultraserver_mode").write_text("1,2\n")
    inventory = discover(root).inventory
    with pytest.raises(ClaimError, match="ultraserverMode 4 is not supported by this "
                                         "UltraServer; supported: 1, 2"):  # fmt: skip
        planned(inventory, ["neuronnode"], [opaque(ultraserver_config(4))])


def test_uid_and_allocation_are_checked(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.xlarge")
    other = allocated_claim("another-uid", ["neurondevice0"])
    with pytest.raises(ClaimError, match="the API server has UID another-uid, a different claim"):
        plan(REF, other, inventory, "node-a")
    unallocated = allocated_claim(REF.uid, ["neurondevice0"])
    unallocated["status"] = {}
    with pytest.raises(ClaimError, match="not allocated"):
        plan(REF, unallocated, inventory, "node-a")
    with pytest.raises(ClaimError, match=r"no device of neuron\.aws\.com on pool node-b allocated"):
        plan(REF, allocated_claim(REF.uid, ["neurondevice0"]), inventory, "node-b")


def test_format_cores() -> None:
    assert format_cores([4]) == "4"
    assert format_cores([0, 1, 2, 3]) == "0-3"
    assert format_cores([2, 3, 8, 9]) == "2,3,8,9"
