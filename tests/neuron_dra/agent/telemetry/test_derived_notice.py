"""What a node of an instance type the catalogue does not have says: once, in a log line,
a Node Event and a gauge."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from neuron_dra.agent.telemetry.events import (
    DERIVED_METRIC,
    DERIVED_REASON,
    DerivedNotice,
    derived_samples,
)
from neuron_dra.agent.telemetry.metrics import Metrics
from neuron_dra.hardware.discovery import PRODUCT_NAME_FILE, discover
from neuron_dra.hardware.inventory import NodeInventory
from tests.sysfs_tree import FakeNode, write


def unlisted(fake_node: FakeNode) -> NodeInventory:
    root = fake_node("trn2.48xlarge")
    write(root, PRODUCT_NAME_FILE, "trn9.48xlarge\n")
    return discover(root).inventory


def test_the_derivation_is_said_once_and_again_when_it_changes(
    fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    inventory = unlisted(fake_node)
    notice = DerivedNotice()
    with caplog.at_level(logging.WARNING, logger="neuron_dra"):
        event = notice.news("node-a", inventory, 0.0)
        assert notice.news("node-a", inventory, 60.0) is None  # a rediscovery, unchanged
    [record] = caplog.records
    assert record.getMessage().startswith("instance type not in the catalogue")
    assert record.__dict__["instance_type"] == "trn9.48xlarge"
    assert "memory capacity" in record.__dict__["not_derived"]
    assert event is not None
    assert (event["reason"], event["type"]) == (DERIVED_REASON, "Warning")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    assert event["message"].startswith(
        "trn9.48xlarge is not in neuron-dra's catalogue: devices published as sysfs says. "
        "connected_devices: 16 devices, 4x4 torus, connected sets of 1, 4, 8, 16;"
    )
    assert "not derived: memory capacity" in event["message"]
    assert inventory.derived is not None
    fewer = replace(inventory.derived, sets=inventory.derived.sets[:1])
    assert notice.news("node-a", replace(inventory, derived=fewer), 120.0) is not None


def test_a_catalogued_node_says_nothing_and_its_gauge_is_0(fake_node: FakeNode) -> None:
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    assert DerivedNotice().news("node-a", inventory, 0.0) is None
    assert [s.value for s in derived_samples(inventory)] == [0.0]


def test_the_gauge_names_the_derived_type(fake_node: FakeNode) -> None:
    metrics = Metrics()
    metrics.gauges = lambda: derived_samples(unlisted(fake_node))
    [family] = [
        f for f in text_string_to_metric_families(metrics.render()) if f.name == DERIVED_METRIC
    ]
    assert family.type == "gauge"
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"instance_type": "trn9.48xlarge"}, 1.0)
    ]
