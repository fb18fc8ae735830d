"""The slice publisher against an API server that drops fields it does not serve."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from consts import LABEL_INSTANCE_TYPE
from neuron_dra.agent.telemetry.events import DERIVED_METRIC, DERIVED_REASON
from neuron_dra.hardware.discovery import PRODUCT_NAME_FILE
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra_harness import scrape
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import add_simulated_node, simulate_node
from neuron_dra_harness.processes import free_port
from neuron_dra_harness.workloads import submit
from tests.e2e.publisher_log import handled, new_watch, start_logging_passes

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "examples" / "specs"
UNKNOWN = "trn9.48xlarge"  # in no catalogue


def test_fields_the_server_drops_are_named_once_and_rewrite_nothing(
    e2e_binaries: Binaries,
) -> None:
    if e2e_binaries.minor >= 38:
        pytest.skip("DRAPartitionableDevices is locked on from 1.38: no server drops counters")
    # Without the gate the server drops shared counters and what devices consume of
    # them; `both` has the driver publish them all the same.
    with Cluster(e2e_binaries, feature_gates={"DRAPartitionableDevices": False}) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        node = add_simulated_node(
            cluster,
            "us-d",
            "trn2u.48xlarge",
            ultraserver=FakeUltraServer("us-d", 0),
            extra_args=["--ultraserver-devices=both"],
            start=False,
        )
        plugin = start_logging_passes(node)
        # The pool is several slices, created one by one: wait for the whole of it.
        cluster.wait_for("the whole pool", lambda: len(node.device_names()) == 17 or None)
        assert not any(s["spec"].get("sharedCounters") for s in node.slices())
        published = {s["metadata"]["name"]: s["spec"]["pool"]["generation"] for s in node.slices()}

        def label() -> None:
            for name in published:
                patch = {"metadata": {"labels": {"team": "ml"}}}
                cluster.patch("resource.k8s.io/v1", "ResourceSlice", name, patch)

        handled(node, label)
        handled(node, lambda: new_watch(node))
        now = {s["metadata"]["name"]: s["spec"]["pool"]["generation"] for s in node.slices()}
        assert now == published
        lines = plugin.log_path.read_text().splitlines()
        for field in ("spec.sharedCounters", "spec.devices[].consumesCounters"):
            assert sum(f"the API server dropped {field} from" in line for line in lines) == 1


def test_an_unknown_type_publishes_its_sets_and_a_connected_claim_is_allocated(
    e2e_binaries: Binaries,
) -> None:
    # A trn2 tree whose DMI names a type the catalogue does not have: its connected_devices
    # graph is the 4x4 torus, so rows, halves and the whole node are derived.
    with Cluster(e2e_binaries) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        port = free_port()
        cluster.add_node("trn9-a", {LABEL_INSTANCE_TYPE: UNKNOWN})
        node = simulate_node(
            cluster,
            "trn9-a",
            "trn2.48xlarge",
            extra_args=["--neuron-cores=off", f"--metrics-port={port}", "--metrics-auth=none"],
            start=False,
        )
        (node.sysfs / PRODUCT_NAME_FILE).write_text(UNKNOWN + "\n")
        node.start_plugin()
        cluster.wait_for("16 devices", lambda: len(node.device_names()) == 16 or None)
        device = next(d for d in node.devices() if d["name"] == "neurondevice5")
        attributes = device["attributes"]
        assert attributes["instanceType"] == {"string": UNKNOWN}
        assert attributes["logicalNeuronCore"] == {"int": 2}
        groups = {n.split("/")[1]: v["string"] for n, v in attributes.items() if "devicegroup" in n}
        assert groups == {
            "devicegroup1_id": "5",
            "devicegroup4_id": "4-7",
            "devicegroup8_id": "0-7",
            "devicegroup16_id": "0-15",
        }

        # The 1x4-connected-devices pattern, on the unknown type: one row of the torus.
        spec = yaml.safe_load_all((SPECS / "1x4-connected-devices.yaml").read_text())
        template = next(iter(spec))["spec"]["spec"]
        selector = template["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
        selector["expression"] = selector["expression"].replace("trn2.48xlarge", UNKNOWN)
        claim = submit(cluster, template, "trn9-a")
        results = cluster.wait_for_claim_allocated(claim)["status"]["allocation"]["devices"]
        got = {int(r["device"].removeprefix("neurondevice")) for r in results["results"]}
        assert got in [set(range(row, row + 4)) for row in range(0, 16, 4)]

        # Said once: a Node Event and the gauge.
        events = [e for e in cluster.events_for("trn9-a") if e["reason"] == DERIVED_REASON]
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert "connected sets of 1, 4, 8, 16" in events[0]["message"]
        gauge = [
            s
            for s in scrape.samples(f"http://127.0.0.1:{port}/metrics")
            if s.name == DERIVED_METRIC
        ]
        assert [(s.labels, s.value) for s in gauge] == [({"instance_type": UNKNOWN}, 1.0)]
