"""A prepared claim's `status.devices` entries: what a monitoring tool reads of each device."""

from __future__ import annotations

import json

from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.devicestatus import entries
from neuron_dra.agent.claims.plan import plan
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim, neuron_config, opaque
from tests.sysfs_tree import FakeNode

REF = ClaimRef("default", "claim", "0c7d2a1e-1111-4222-8333-944455556666")
AT = "2026-11-28T10:00:00Z"


def inventory_of(fake_node: FakeNode, instance_type: str, **kw: object) -> NodeInventory:
    return discover(fake_node(instance_type, **kw)).inventory  # type: ignore[arg-type]


def status_of(
    inventory: NodeInventory,
    devices: list[str] | dict[str, list[str]],
    config: list[dict[str, object]] | None = None,
) -> list[dict[str, object]]:
    prepared = plan(REF, allocated_claim(REF.uid, devices, config=config), inventory, "node-a")
    return entries(prepared, inventory.lnc, AT)


def test_each_device_is_ready_with_its_serial_and_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    serial = {d.index: d.serial_number for d in inventory.devices}
    assert all(serial.values())
    found = status_of(inventory, ["neurondevice3", "neurondevice1"])
    assert [(e["driver"], e["pool"], e["device"]) for e in found] == [
        ("neuron.aws.com", "node-a", "neurondevice3"),
        ("neuron.aws.com", "node-a", "neurondevice1"),
    ]
    assert found[0]["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Prepared",
            "message": "prepared for the claim's containers: /dev/neuron3",
            "lastTransitionTime": AT,
        }
    ]
    assert found[0]["data"] == {
        "neuronDevices": [{"index": 3, "path": "/dev/neuron3", "serialNumber": serial[3]}],
        "neuronCores": "12-15",  # LNC 2: 4 logical cores a device
        "logicalNeuronCoreSize": 2,
    }


def test_the_claims_lnc_counts_the_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    [entry] = status_of(inventory, ["neurondevice1"], [opaque(neuron_config(1))])
    assert entry["data"]["neuronCores"] == "8-15"  # type: ignore[index]
    assert entry["data"]["logicalNeuronCoreSize"] == 1  # type: ignore[index]


def test_a_core_device_names_its_core_and_device(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    [entry] = status_of(inventory, ["neuroncore9"])
    data = entry["data"]
    assert data["neuronCores"] == "9"  # type: ignore[index]
    assert [d["index"] for d in data["neuronDevices"]] == [2]  # type: ignore[index]


def test_no_lnc_on_inf2(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    [entry] = status_of(inventory, ["neurondevice0"])
    assert entry["data"]["neuronCores"] == "0-1"  # type: ignore[index]
    assert "logicalNeuronCoreSize" not in entry["data"]  # type: ignore[operator]


def test_a_device_of_two_requests_is_one_entry(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    found = status_of(inventory, {"a": ["neurondevice0"], "b": ["neurondevice0"]})
    assert [e["device"] for e in found] == ["neurondevice0"]


def test_the_whole_node_stays_under_the_servers_10_kib(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2u.48xlarge", ultraserver=FakeUltraServer("us-a", 0))
    [entry] = status_of(inventory, ["neuronnode"])
    data = entry["data"]
    assert len(data["neuronDevices"]) == 16  # type: ignore[index]
    assert len(json.dumps(data)) <= 10 * 1024
