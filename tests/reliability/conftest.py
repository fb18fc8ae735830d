"""A simulated trn2.48xlarge running the real plugin, on a control plane per test module."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuron_dra_harness.build import build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def node(request: pytest.FixtureRequest) -> Iterator[SimulatedNode]:
    """The node is named by the module's NODE, so each module's faults stay its own."""
    if shutil.which("go") is None:
        pytest.skip("the end-to-end tests build Kubernetes from source and need a Go toolchain")
    with Cluster(build()) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        yield add_simulated_node(cluster, request.module.NODE, "trn2.48xlarge")
