"""`--withdraw-after`: the slices leave out a held device's NeuronCores only once a
claim has held it whole that long. A hold that ends sooner rewrites nothing; a longer
one is withdrawn when it is due. The other tests run their plugins with 0 (at once)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import DEVICE_CLASSES, SimulatedNode, add_simulated_node
from tests.e2e.publisher_log import passes, start_logging_passes
from tests.e2e.test_cores import (
    PER_DEVICE,
    WHOLE,
    allocated,
    core_spec,
    cores_held_by,
    on_device,
    published_now,
    release,
    run,
    too_old,
)

pytestmark = pytest.mark.e2e

SHORT_HOLD_LIMIT_S = 600.0  # far longer than the test's hold
DUE_S = 3.0
HELD = "D neuron_dra: devices held held="


@pytest.fixture(scope="module")
def nodes(e2e_binaries: Binaries) -> Iterator[dict[str, SimulatedNode]]:
    """Two trn2.48xlarge nodes: "patient", which withdraws after 600 s and logs each
    publisher pass, and "due", after 3 s."""
    if reason := too_old(e2e_binaries):
        pytest.skip(reason)
    with Cluster(e2e_binaries) as cluster:
        cluster.apply_yaml(DEVICE_CLASSES.read_text())
        patient = add_simulated_node(
            cluster,
            "patient",
            "trn2.48xlarge",
            start=False,
            extra_args=[f"--withdraw-after={SHORT_HOLD_LIMIT_S:g}"],
        )
        start_logging_passes(patient)
        due = add_simulated_node(
            cluster, "due", "trn2.48xlarge", extra_args=[f"--withdraw-after={DUE_S:g}"]
        )
        yield {"patient": patient, "due": due}


def generation(node: SimulatedNode) -> int:
    pool = node.pool()
    assert pool is not None
    found: int = pool[0]["spec"]["pool"]["generation"]
    return found


def test_a_hold_shorter_than_the_limit_rewrites_nothing(nodes: dict[str, SimulatedNode]) -> None:
    """The agent sees the hold (its debug line), withdraws nothing, sees it end; the
    publisher passes that each change wakes find the slices up to date."""
    node = nodes["patient"]
    plugin = node.plugin
    assert plugin is not None
    before, passed = generation(node), passes(plugin)
    name, _, claim = run(node, core_spec(1, device_class=WHOLE, cel=on_device(3)))
    assert allocated(claim) == ["neurondevice3"]
    seen = HELD + "neurondevice3 withdrawn="
    node.cluster.wait_for("the hold seen", lambda: seen in plugin.log_path.read_text(), 30)
    node.cluster.wait_for("a publisher pass", lambda: passes(plugin) > passed, 30)
    release(node, name, claim)
    node.cluster.wait_for("the next pass", lambda: passes(plugin) > passed + 1, 30)
    assert generation(node) == before
    assert len(published_now(node) or ()) == 16 * PER_DEVICE


def test_a_hold_longer_than_the_limit_is_withdrawn_when_due(
    nodes: dict[str, SimulatedNode],
) -> None:
    node = nodes["due"]
    name, _, claim = run(node, core_spec(1, device_class=WHOLE, cel=on_device(5)))
    running = time.monotonic()
    held = set(cores_held_by(["neurondevice5"]))
    node.cluster.wait_for(
        "device 5's cores withdrawn",
        lambda: (found := published_now(node)) is not None and not held & set(found),
        timeout=60,
    )
    # Prepared before the pod ran; withdrawn no sooner than the limit after the agent
    # saw the hold (at most a second after the prepare, with the kubelet side's report
    # of the running pod between the two).
    assert time.monotonic() - running >= DUE_S - 1.0
    release(node, name, claim)
    assert len(published_now(node) or ()) == 16 * PER_DEVICE
