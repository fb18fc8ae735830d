"""DeviceTaintRules: the simulator against the real kube-scheduler, on the same slices.

Each case creates a rule tainting one device of a fresh inf2.48xlarge node (before the
node's slices and pods exist, so the scheduler knows the rule before it can place
anything there), gives the simulator the same rule in a file, and checks that both
agree: a claim that needs the tainted device stays unschedulable, one that may take
another gets one of those, and one that tolerates the taint gets the device.
DeviceTaintRules are served (resource.k8s.io/v1) and used by the scheduler by default
from Kubernetes 1.37; earlier releases skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.tools.simulate import (
    Cluster as SimCluster,
)
from neuron_dra.tools.simulate import (
    describe,
    live_cluster,
    load_documents,
    parse_taint_rule,
    read_inputs,
    simulate,
)
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from tests.e2e.test_simulate_vs_scheduler import (
    REPO,
    SPECS,
    publish,
    scheduled,
    submit,
    unschedulable,
)

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
TOLERATION = "          tolerations: [{key: example.com/maintenance, operator: Exists}]\n"


@pytest.fixture(scope="module")
def real(e2e_binaries: Binaries) -> Iterator[Cluster]:
    if e2e_binaries.minor < 37:
        pytest.skip(
            f"DeviceTaintRules are on by default from 1.37 (this is 1.{e2e_binaries.minor})"
        )
    with Cluster(e2e_binaries) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        yield cluster


def tainted_node(real: Cluster, tmp_path: Path, example: str, claim: str) -> tuple[str, Path]:
    """A rule tainting neurondevice0 of the example's node on the server, then the node;
    the rule and `claim` (a manifest) in one file for the simulator."""
    node = f"{example}-inf2-48xlarge-0"
    rule: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{example}-drain"},
        "spec": {
            "deviceSelector": {"driver": "neuron.aws.com", "pool": node, "device": "neurondevice0"},
            "taint": TAINT,
        },
    }
    real.create(rule)
    path = tmp_path / f"{example}.yaml"
    path.write_text(yaml.safe_dump(rule) + "---\n" + claim)
    return node, path


def simulated(real: Cluster, tmp_path: Path, example: str) -> SimCluster:
    _, nodes = publish(real, tmp_path, [("inf2.48xlarge", 1)], example=example)
    return SimCluster(nodes, {})


def test_a_rule_tainting_a_device_the_claim_needs_keeps_the_claim_out(
    real: Cluster, tmp_path: Path
) -> None:
    example = "taint-all"
    node, path = tainted_node(real, tmp_path, example, (SPECS / "all-devices.yaml").read_text())
    sim = simulated(real, tmp_path, example)
    [outcome] = simulate([path], sim)
    reason = (
        f"{node}: 12 devices match the selectors (1 with taints the request does not tolerate, "
        f"from DeviceTaintRule {example}-drain), 11 free; allocationMode All needs every one "
        "of them"
    )
    assert outcome.reasons == [reason]

    # Read from the live cluster, the rule says the same.
    live = live_cluster(real.kubeconfig)
    from_server = SimCluster([n for n in live.nodes if n.name == node], live.classes)
    from_server.add_taint_rules([parse_taint_rule(r, "cluster") for r in live.taint_rules])
    [again] = simulate([SPECS / "all-devices.yaml"], from_server)
    assert again.reasons == [reason]

    docs = load_documents([path])
    submit(real, example, read_inputs(docs).claims, docs)
    unschedulable(real, example, "pod0")


def test_a_rule_tainting_a_device_the_claim_would_get_sends_it_elsewhere(
    real: Cluster, tmp_path: Path
) -> None:
    example = "taint-one"
    node, path = tainted_node(real, tmp_path, example, (SPECS / "single-device.yaml").read_text())
    sim = simulated(real, tmp_path, example)
    [outcome] = simulate([path], sim)
    assert [p.device.name for p in outcome.placements] == ["neurondevice1"]
    docs = load_documents([path])
    [claim] = read_inputs(docs).claims
    possible = SimCluster(sim.nodes, sim.classes).alternatives(claim, node)
    assert {"neurons": ["neurondevice1"]} in possible
    assert {"neurons": ["neurondevice0"]} not in possible and len(possible) == 11

    submit(real, example, [claim], docs)
    pool, got = scheduled(real, example, claim)
    assert pool == node and got in possible, got


def test_a_claim_that_tolerates_the_rule_gets_the_tainted_device(
    real: Cluster, tmp_path: Path
) -> None:
    example = "taint-tolerated"
    claim = (SPECS / "all-devices.yaml").read_text()
    assert "allocationMode: All\n" in claim
    claim = claim.replace("allocationMode: All\n", "allocationMode: All\n" + TOLERATION)
    node, path = tainted_node(real, tmp_path, example, claim)
    sim = simulated(real, tmp_path, example)
    [outcome] = simulate([path], sim)
    devices = sorted(p.device.name for p in outcome.placements)
    assert devices == sorted(f"neurondevice{i}" for i in range(12))
    assert (
        "  taint    neurondevice0: example.com/maintenance=planned:NoSchedule "
        f"(DeviceTaintRule {example}-drain)"
    ) in describe(outcome)

    docs = load_documents([path])
    submit(real, example, read_inputs(docs).claims, docs)
    pool, got = scheduled(real, example, outcome.claim)
    assert (pool, got) == (node, {"neurons": devices})
