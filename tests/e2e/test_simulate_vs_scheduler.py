"""The simulator against the real kube-scheduler, on the same ResourceSlices.

Every example is run twice: by the simulator, and by the scheduler on a real
control plane where the test publishes the very slices the simulator used
(each example on its own labelled nodes, so examples do not compete). The
scheduler may pick another of several equally good device sets, so the check
is on sets: the simulator's choice is one of the allocations it deems
possible, the scheduler's allocation is among them too, and what the
simulator says cannot fit stays unschedulable.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import DEFAULT_DRIVER_VERSION, FakeUltraServer, build_fake_node
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from neuron_dra.tools.lint import lint_files
from neuron_dra.tools.simulate import (
    Claim,
    SimNode,
    load_documents,
    node_from_slices,
    read_inputs,
    simulate,
)
from neuron_dra.tools.simulate import (
    Cluster as SimCluster,
)
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from tests.aws_driver import CLAIMS, DRIVER_VERSION, AwsClaim

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "examples" / "specs"
Obj = dict[str, Any]
EXAMPLE_LABEL = "neuron-e2e.test/example"

# example -> nodes it runs on (enough for every claim it stands for)
EXAMPLES: dict[str, list[tuple[str, int]]] = {
    "1x4-connected-devices.yaml": [("trn2.48xlarge", 1)],
    "v1beta1/1x4-connected-devices.yaml": [("trn2.48xlarge", 1)],
    "l-trn2.yaml": [("trn2.48xlarge", 1)],
    "v1beta1/l-trn2.yaml": [("trn2.48xlarge", 1)],
    "2.26-driver-trn2.yaml": [("trn2.48xlarge", 1)],
    "v1beta1/2.26-driver-trn2.yaml": [("trn2.48xlarge", 1)],
    "xl-trn2.yaml": [("trn2.48xlarge", 1)],
    "v1beta1/xl-trn2.yaml": [("trn2.48xlarge", 1)],
    "all-devices.yaml": [("inf2.48xlarge", 1)],
    "lnc-setting-trn2.yaml": [("trn2.48xlarge", 1)],
    "v1beta1/lnc-setting-trn2.yaml": [("trn2.48xlarge", 1)],
    "v1beta1/lnc-neurons.yaml": [("trn2.48xlarge", 1)],
    "shared-claim.yaml": [("trn2.48xlarge", 1)],
    "single-device.yaml": [("trn2u.48xlarge", 1)],
    "two-claims-one-pod.yaml": [("trn2.48xlarge", 1)],
    "inf2-2-connected.yaml": [("inf2.48xlarge", 1)],
    "us-4-node-config.yaml": [("trn2u.48xlarge", 8)],
    "v1beta1/us-4-node-config.yaml": [("trn2u.48xlarge", 8)],
    "us-2-node-config.yaml": [("trn2u.48xlarge", 4)],
    "us-and-lnc-config.yaml": [("trn2u.48xlarge", 4)],
    "specific-driver-version.yaml": [("inf2.48xlarge", 1), ("trn2u.48xlarge", 1)],
}
_ids = itertools.count()


@pytest.fixture(scope="module")
def real(e2e_binaries: Binaries) -> Iterator[Cluster]:
    with Cluster(e2e_binaries, feature_gates={"DRAPartitionableDevices": True}) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        yield cluster


def publish(
    real: Cluster,
    tmp: Path,
    nodes: list[tuple[str, int]],
    driver_version: str | None = None,
    example: str | None = None,
) -> tuple[str, list[SimNode]]:
    """Nodes labelled with an example id (by default a fresh one), their slices on the
    server and in the simulator."""
    example = example or f"x{next(_ids)}"
    layout = real.counter_layout()
    sim_nodes = []
    for instance_type, count in nodes:
        spec = INSTANCE_TYPES[instance_type]
        for i in range(count):
            name = f"{example}-{instance_type.replace('.', '-')}-{i}"
            labels = {"node.kubernetes.io/instance-type": instance_type, EXAMPLE_LABEL: example}
            node = real.add_node(name, labels)
            unit = FakeUltraServer(f"{example}-us-{i // 4}", i % 4) if spec.ultraserver else None
            root = build_fake_node(
                tmp / name,
                instance_type,
                ultraserver=unit,
                driver_version=driver_version or DEFAULT_DRIVER_VERSION,
            )
            inventory = discover(root).inventory
            options = SliceOptions(
                name, node["metadata"]["uid"], 1, UltraServerDevices.BOTH, counter_layout=layout
            )
            slices = build_slices(inventory, options)
            for obj in slices:
                real.create(obj)
            sim_nodes.append(node_from_slices(name, slices, labels=labels, inventory=inventory))
    return example, sim_nodes


def submit(real: Cluster, example: str, claims: list[Claim], docs: list[tuple[str, Obj]]) -> None:
    """The simulator's claims as ResourceClaims, in their template's apiVersion, and pods."""
    real.create_namespace(example)
    versions = {
        (d.get("metadata") or {}).get("name"): (d["apiVersion"], d["spec"]["spec"])
        for _, d in docs
        if d.get("kind") == "ResourceClaimTemplate"
    }
    pods: dict[str, list[Claim]] = {}
    for claim in claims:
        api_version, spec = versions[claim.template]
        metadata = {"name": claim.name, "namespace": example}
        real.create(
            {"apiVersion": api_version, "kind": "ResourceClaim", "metadata": metadata, "spec": spec}
        )
        pods.setdefault(claim.pod or claim.name, []).append(claim)
    for i, members in enumerate(pods.values()):
        refs = [{"name": f"c{k}", "resourceClaimName": c.name} for k, c in enumerate(members)]
        real.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod{i}", "namespace": example},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": {EXAMPLE_LABEL: example},
                    "containers": [
                        {
                            "name": "c",
                            "image": "none",
                            "resources": {"claims": [{"name": r["name"]} for r in refs]},
                        }
                    ],
                    "resourceClaims": refs,
                },
            }
        )


def scheduled(real: Cluster, example: str, claim: Claim) -> tuple[str, dict[str, list[str]]]:
    status = real.wait_for_claim_allocated(claim.name, example)["status"]
    results = status["allocation"]["devices"]["results"]
    [pool] = {r["pool"] for r in results}
    by_request: dict[str, list[str]] = {}
    for result in results:
        by_request.setdefault(result["request"], []).append(result["device"])
    return pool, {k: sorted(v) for k, v in by_request.items()}


def unschedulable(real: Cluster, example: str, pod: str) -> None:
    def waiting(p: Obj) -> bool:
        conditions = p.get("status", {}).get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

    found = real.wait_for_pod(pod, example, waiting, "unschedulable")
    assert not found["spec"].get("nodeName")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_matches_the_scheduler(real: Cluster, tmp_path: Path, name: str) -> None:
    matches(real, tmp_path, SPECS / name, EXAMPLES[name])


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.name)
def test_a_claim_written_for_the_aws_driver_runs_unchanged(
    real: Cluster, tmp_path: Path, claim: AwsClaim
) -> None:
    """AWS's attributes, selected as its documentation does, on the real scheduler."""
    path = tmp_path / f"{claim.name}.yaml"
    path.write_text(claim.template())
    allocations = matches(real, tmp_path, path, [("trn2.48xlarge", 1)], DRIVER_VERSION)
    got = frozenset(int(d.removeprefix("neurondevice")) for d in allocations[0]["neurons"])
    assert got in claim.devices


def matches(
    real: Cluster,
    tmp_path: Path,
    path: Path,
    node_counts: list[tuple[str, int]],
    driver_version: str | None = None,
) -> list[dict[str, list[str]]]:
    """The simulator's allocation of each claim is one the scheduler may make, and the
    scheduler's is one the simulator deems possible; the scheduler's, claim by claim."""
    example, nodes = publish(real, tmp_path, node_counts, driver_version)
    docs = load_documents([path])
    claims = read_inputs(docs).claims
    sim = SimCluster(nodes, {})
    outcomes = simulate([path], sim)
    assert all(o.allocated for o in outcomes), [o.reasons for o in outcomes]
    empty = SimCluster(nodes, sim.classes)  # nothing allocated: every possible allocation
    possible = {(c.key, n.name): empty.alternatives(c, n.name) for c in claims for n in nodes}

    submit(real, example, claims, docs)
    taken: set[str] = set()
    allocations = []
    for claim, outcome in zip(claims, outcomes, strict=True):
        chosen: dict[str, list[str]] = {}
        for placement in outcome.placements:
            chosen.setdefault(placement.request, []).append(placement.device.name)
        assert outcome.node is not None
        assert {k: sorted(v) for k, v in chosen.items()} in possible[(claim.key, outcome.node)]
        pool, got = scheduled(real, example, claim)
        assert got in possible[(claim.key, pool)], (got, pool)
        devices = {f"{pool}/{d}" for ds in got.values() for d in ds}
        assert not devices & taken  # the scheduler's allocations are disjoint, as the simulator's
        taken |= devices
        allocations.append(got)
    return allocations


def test_claims_the_simulator_rejects_stay_unschedulable(real: Cluster, tmp_path: Path) -> None:
    example, nodes = publish(real, tmp_path, [("trn2.48xlarge", 1)])
    files = [SPECS / "l-trn2.yaml", SPECS / "1x4-connected-devices.yaml", SPECS / "l-trn2.yaml"]
    docs = load_documents(files)
    claims = read_inputs(docs).claims
    outcomes = simulate(files, SimCluster(nodes, {}))
    assert [o.allocated for o in outcomes] == [True, True, False]
    assert outcomes[2].reasons == [
        f"{nodes[0].name}: 16 devices match the selectors, 4 free, fewer than the 8 requested"
    ]
    # One pod at a time, so the scheduler sees the claims in the simulator's order.
    real.create_namespace(example)
    for i, claim in enumerate(claims):
        template = next(d for _, d in docs if d["metadata"]["name"] == claim.template)
        # The same template given twice stands for two claims of one name; number them.
        name = f"{claim.name}-{i}"
        real.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": example},
                "spec": template["spec"]["spec"],
            }
        )
        real.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod{i}", "namespace": example},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": {EXAMPLE_LABEL: example},
                    "containers": [
                        {"name": "c", "image": "none", "resources": {"claims": [{"name": "n"}]}}
                    ],
                    "resourceClaims": [{"name": "n", "resourceClaimName": name}],
                },
            }
        )
        if outcomes[i].allocated:
            real.wait_for_claim_allocated(name, example)
        else:
            unschedulable(real, example, f"pod{i}")


def test_all_of_both_kinds_stays_unschedulable_on_an_ultraserver_node(
    real: Cluster, tmp_path: Path
) -> None:
    """What lint warns of: All over single devices and `neuronnode` never fits a trn2u node
    that publishes both; the simulator and the scheduler agree."""
    example, nodes = publish(real, tmp_path, [("trn2u.48xlarge", 1)])
    text = (SPECS / "specific-driver-version.yaml").read_text()
    kind = "resourceType == 'neuron_device'"
    assert kind in text
    path = tmp_path / "both-kinds.yaml"
    path.write_text(text.replace(kind, "resourceType in ['neuron_device', 'neuron_node']"))
    assert lint_files([path]), "lint must warn of this claim"
    outcomes = simulate([path], SimCluster(nodes, {}))
    assert [o.allocated for o in outcomes] == [False, False]
    docs = load_documents([path])
    submit(real, example, read_inputs(docs).claims[:1], docs)
    unschedulable(real, example, "pod0")


def test_live_cluster_mode_reads_what_is_allocated(real: Cluster, tmp_path: Path) -> None:
    example, nodes = publish(real, tmp_path, [("inf2.48xlarge", 1)])
    docs = load_documents([SPECS / "inf2-2-connected.yaml"])
    claims = read_inputs(docs).claims
    submit(real, example, claims, docs)
    pool, got = scheduled(real, example, claims[0])
    # The simulator, reading the live cluster, sees the pair taken and places a new claim
    # elsewhere on the same node.
    from neuron_dra.tools.simulate import live_cluster, take_allocated  # noqa: PLC0415

    cluster = live_cluster(real.kubeconfig)
    live = SimCluster([n for n in cluster.nodes if n.name == nodes[0].name], cluster.classes)
    take_allocated(live, cluster.claims)
    [outcome] = simulate([SPECS / "inf2-2-connected.yaml"], live)
    assert outcome.node == pool
    new = {p.device.name for p in outcome.placements}
    assert not new & set(got["neurons"]) and len(new) == 2
    # The environment comes from the inventory recovered from the live slices alone.
    first = min(int(d.removeprefix("neurondevice")) for d in new)
    assert outcome.prepared is not None
    assert dict(outcome.prepared.env) == {"NEURON_RT_VISIBLE_CORES": f"{2 * first}-{2 * first + 3}"}
