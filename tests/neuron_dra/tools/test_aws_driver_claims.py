"""Claims and attributes as the AWS Neuron DRA driver documents them, here unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_dra.hardware.discovery import discover
from neuron_dra.resources.nodetopology import from_labels
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from neuron_dra.tools.simulate import Cluster, simulate, simulated_nodes
from tests.aws_driver import ATTRIBUTES, CLAIMS, DRIVER_VERSION, NOT_PUBLISHED, AwsClaim
from tests.sysfs_tree import FakeNode

VALUE_KEYS = {"int": "int", "string": "string", "version": "version"}


def published(root: Path, **options: object) -> dict[str, dict[str, dict[str, object]]]:
    topology, _ = from_labels(
        {f"topology.k8s.aws/network-node-layer-{i}": f"nn-{i}" for i in (1, 2, 3)}
    )
    ultraserver = options.get("ultraserver_devices", UltraServerDevices.BOTH)
    assert isinstance(ultraserver, UltraServerDevices)
    slices = build_slices(
        discover(root).inventory,
        SliceOptions("n", topology=topology, ultraserver_devices=ultraserver),
    )
    return {
        d["name"]: d["attributes"]
        for s in slices
        for d in s["spec"].get("devices") or []
        if d["name"].startswith("neurondevice")
    }


def test_every_attribute_aws_documents_is_published_with_its_type(fake_node: FakeNode) -> None:
    devices = published(fake_node("trn2.48xlarge"))
    assert len(devices) == 16
    for attributes in devices.values():
        for name, (kind, _) in ATTRIBUTES.items():
            assert set(attributes[name]) == {VALUE_KEYS[kind]}, name
        assert not set(NOT_PUBLISHED) & set(attributes)


def test_the_topology_attributes_mean_what_aws_says(fake_node: FakeNode) -> None:
    """topology_x: the row; topology_y: the column; topology4_id: the row;
    topology8_id: the two rows."""
    for name, attributes in published(fake_node("trn2.48xlarge")).items():
        index = int(name.removeprefix("neurondevice"))
        row, column = divmod(index, 4)
        values = {k: attributes[k]["int"] for k in ATTRIBUTES if k.startswith("topology")}
        assert values == {
            "topology_x": row,
            "topology_y": column,
            "topology4_id": row,
            "topology8_id": row // 2,
        }


def test_a_single_device_instance_has_no_topology(fake_node: FakeNode) -> None:
    [attributes] = published(fake_node("trn2.3xlarge")).values()
    assert not {k for k in attributes if k.startswith("topology")}


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.name)
def test_an_aws_claim_runs_unchanged(tmp_path: Path, claim: AwsClaim) -> None:
    path = tmp_path / f"{claim.name}.yaml"
    path.write_text(claim.template())
    nodes = simulated_nodes([("trn2.48xlarge", 1)], driver_version=DRIVER_VERSION)
    [outcome] = simulate([path], Cluster(nodes, {}))
    assert outcome.allocated, outcome.reasons
    got = frozenset(int(p.device.name.removeprefix("neurondevice")) for p in outcome.placements)
    assert got in claim.devices


def test_an_ultraserver_node_publishes_what_claims_for_aws_select_too(
    fake_node: FakeNode,
) -> None:
    """AWS publishes the topology attributes on non-UltraServer nodes only; here a
    trn2u.48xlarge has them too, so a claim selecting by them never lacks them."""
    devices = published(fake_node("trn2u.48xlarge"), ultraserver_devices=UltraServerDevices.DEVICES)
    assert all("topology_x" in a for a in devices.values())
