"""The slice publisher against an API server that drops fields it does not serve."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import add_simulated_node
from tests.e2e.publisher_log import handled, new_watch, start_logging_passes

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


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
