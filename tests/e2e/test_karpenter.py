"""Karpenter provisioning Neuron nodes for DRA claims (``make test-karpenter``).

Real Karpenter (its operator and the KWOK cloud provider, DRA simulation on) reads
the driver's catalog as each instance type's DynamicResources; each node it
launches is a simulated node running the real plugin (``neuron_dra_harness.karpenter``).
The cases: the cheapest fitting type for one device and its provisioning time; 4
connected devices, 16 devices, one NeuronCore and a device-plugin-style pod (its node
never Initialized); two 8-device pods on one node; what gets no node, with Karpenter's
reason (a claim no type satisfies, 16 devices of any type, an UltraServer gang); a
device-plugin-style pod asking more NeuronCores than its type serves, refused at
creation; consolidation. Not part of
``make test``: Karpenter needs Go 1.27 to build and the cases take minutes; run with
``NEURON_DRA_KARPENTER=1`` (``make test-karpenter``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from consts import LABEL_INSTANCE_TYPE
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.karpenter import NODE_POOL_LABEL, KarpenterCluster, karpenter_cluster
from neuron_dra_harness.karpenter_build import build_karpenter
from neuron_dra_harness.karpenter_catalog import NODE_POOL, cheapest
from neuron_dra_harness.workloads import claim_spec, submit
from tests.e2e.test_gangs import GATES, RUNTIME_CONFIG, load, pods_of

if not os.environ.get("NEURON_DRA_KARPENTER"):
    pytest.skip(
        "Karpenter's tests run with NEURON_DRA_KARPENTER=1 (make test-karpenter)",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.e2e, pytest.mark.karpenter]

Obj = dict[str, Any]
DEVICE = "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'"
TRN2 = f"{DEVICE} && device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"
NEURON = "aws.amazon.com/neuron"
CORES = "aws.amazon.com/neuroncore"
PROVISION_TIMEOUT = 120.0
PROVISIONING_GOAL = 30.0  # seconds from a pod's creation to Running


@pytest.fixture(scope="module")
def karpenter(e2e_binaries: Binaries) -> Iterator[KarpenterCluster]:
    if shutil.which("go") is None:
        pytest.skip("Karpenter is built from source and needs a Go toolchain")
    if e2e_binaries.minor < 37:
        pytest.skip(f"the cases need Kubernetes 1.37 (this is 1.{e2e_binaries.minor})")
    with karpenter_cluster(
        e2e_binaries, build_karpenter(), feature_gates=GATES, runtime_config=RUNTIME_CONFIG
    ) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_nodes_left(karpenter: KarpenterCluster) -> Iterator[None]:
    """Each case starts with no Karpenter node, and leaves none: its pods, claims and
    NodeClaims deleted, and every machine powered off."""
    yield
    cluster = karpenter.cluster
    for pod in cluster.list_objects("v1", "Pod", namespace="default"):
        cluster.delete("v1", "Pod", pod["metadata"]["name"], "default", grace_period=0)
    for claim in cluster.list_objects("resource.k8s.io/v1", "ResourceClaim", namespace="default"):
        cluster.delete("resource.k8s.io/v1", "ResourceClaim", claim["metadata"]["name"], "default")
    for claim in karpenter.node_claims():
        cluster.delete("karpenter.sh/v1", "NodeClaim", claim["metadata"]["name"])
    cluster.wait_for(
        "no Karpenter node or NodeClaim",
        lambda: not karpenter.nodes() and not karpenter.node_claims(),
        timeout=120,
    )
    cluster.wait_for("every machine off", lambda: not karpenter.follower.launched, timeout=60)
    karpenter.follower.check()


def run(karpenter: KarpenterCluster, spec: Obj) -> tuple[Obj, float]:
    """A pod with a claim of `spec`, once Running; and seconds from creation to Running."""
    started = time.monotonic()
    name = submit(karpenter.cluster, spec)
    pod = karpenter.cluster.wait_for_pod_running(name, timeout=PROVISION_TIMEOUT)
    return pod, time.monotonic() - started


def instance_type(karpenter: KarpenterCluster, pod: Obj) -> str:
    node = karpenter.cluster.get("v1", "Node", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"][NODE_POOL_LABEL] == NODE_POOL
    return str(node["metadata"]["labels"][LABEL_INSTANCE_TYPE])


def pool_types(karpenter: KarpenterCluster) -> list[str]:
    pool = karpenter.cluster.get("karpenter.sh/v1", "NodePool", NODE_POOL)
    [types] = [
        r["values"]
        for r in pool["spec"]["template"]["spec"]["requirements"]
        if r["key"] == LABEL_INSTANCE_TYPE
    ]
    return list(types)


def test_one_device_gets_the_cheapest_type_and_runs(
    karpenter: KarpenterCluster, record_property: Any
) -> None:
    pod, seconds = run(karpenter, claim_spec(1, cel=DEVICE))
    record_property("provisioning_seconds", f"{seconds:.1f}")
    # Every type of the pool has a device: the cheapest of all fits.
    assert instance_type(karpenter, pod) == cheapest(pool_types(karpenter)) == "inf1.xlarge"
    assert [n["metadata"]["name"] for n in karpenter.nodes()] == [pod["spec"]["nodeName"]]
    assert seconds < PROVISIONING_GOAL, f"pod Running {seconds:.1f}s after its creation"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # devicegroup4_id is bound on inf1.6xlarge (one ring of 4), the cheapest such.
        (claim_spec(4, group=4), "inf1.6xlarge"),
        # Pinned: unpinned, Karpenter's search times out (test_sixteen_of_any_type...).
        (claim_spec(16, cel=TRN2), "trn2.48xlarge"),
    ],
    ids=["4-connected", "16-devices"],
)
def test_devices_get_the_cheapest_fitting_type(
    karpenter: KarpenterCluster, spec: Obj, expected: str, record_property: Any
) -> None:
    pod, seconds = run(karpenter, spec)
    record_property("provisioning_seconds", f"{seconds:.1f}")
    assert instance_type(karpenter, pod) == expected


def test_one_neuroncore_gets_a_node(karpenter: KarpenterCluster, record_property: Any) -> None:
    spec = claim_spec(1)
    spec["devices"]["requests"][0]["exactly"]["deviceClassName"] = "neuroncore.neuron.aws.com"
    pod, seconds = run(karpenter, spec)
    record_property("provisioning_seconds", f"{seconds:.1f}")
    assert instance_type(karpenter, pod) == "inf1.xlarge"


def test_two_pods_of_eight_devices_share_one_trn2(karpenter: KarpenterCluster) -> None:
    names = [submit(karpenter.cluster, claim_spec(8, cel=TRN2, group=8)) for _ in range(2)]
    pods = [karpenter.cluster.wait_for_pod_running(n, timeout=PROVISION_TIMEOUT) for n in names]
    [node] = karpenter.nodes()
    assert {p["spec"]["nodeName"] for p in pods} == {node["metadata"]["name"]}
    assert instance_type(karpenter, pods[0]) == "trn2.48xlarge"


def refusal(karpenter: KarpenterCluster, pod: str) -> str:
    """Karpenter's reason for launching nothing for `pod`: the error of its "could not
    schedule pod" log line (waits for one)."""

    def found() -> str | None:
        for line in karpenter.karpenter_log().splitlines():
            if '"could not schedule pod"' in line and f'"name":"{pod}"' in line:
                return str(json.loads(line)["error"])
        return None

    return karpenter.cluster.wait_for(f"Karpenter's refusal of {pod}", found, timeout=60)


def test_a_claim_no_type_satisfies_provisions_nothing(
    karpenter: KarpenterCluster, record_property: Any
) -> None:
    # devicegroup7_id: no type has a connected set of 7 (sets are of 1, 2, 3, 4, 6, 8, 12, 16).
    name = submit(karpenter.cluster, claim_spec(7, group=7))
    reason = refusal(karpenter, name)
    record_property("reason", reason)
    assert reason == "allocating dynamic resources, no instance type can satisfy the allocation"
    assert not karpenter.node_claims()
    pod = karpenter.cluster.get("v1", "Pod", name, "default")
    assert not pod["spec"].get("nodeName")


def test_a_device_plugin_style_pod_runs_on_a_node_never_initialized(
    karpenter: KarpenterCluster, record_property: Any
) -> None:
    """`aws.amazon.com/neuron: 4`, no claim: Karpenter v1.15.0 fits it against the
    instance types' capacity, which the AWS provider (and here the wrapper) gives
    aws.amazon.com/neuron, and launches the cheapest type with 4 devices. The node's
    kubelet never registers that resource (no device plugin runs), so the scheduler
    serves the pod through the DeviceClass whose extendedResourceName it is: a claim of
    4 devices. Karpenter waits for the resource to be registered: the NodeClaim is
    never Initialized."""
    cluster = karpenter.cluster
    started = time.monotonic()
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "device-plugin-style", "namespace": "default"},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [
                    {"name": "c", "image": "none", "resources": {"limits": {NEURON: "4"}}}
                ],
            },
        }
    )
    pod = cluster.wait_for_pod_running("device-plugin-style", timeout=PROVISION_TIMEOUT)
    record_property("provisioning_seconds", f"{time.monotonic() - started:.1f}")
    assert instance_type(karpenter, pod) == "inf1.6xlarge"
    node = cluster.get("v1", "Node", pod["spec"]["nodeName"])
    assert NEURON not in node["status"]["allocatable"]

    status = pod["status"]["extendedResourceClaimStatus"]
    assert [(m["containerName"], m["resourceName"]) for m in status["requestMappings"]] == [
        ("c", NEURON)
    ]
    claim = cluster.get(
        "resource.k8s.io/v1", "ResourceClaim", status["resourceClaimName"], "default"
    )
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "extended-resource-neuron.neuron.aws.com"
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == [f"neurondevice{i}" for i in range(4)]
    assert {r["pool"] for r in results} == {node["metadata"]["name"]}

    [node_claim] = karpenter.node_claims()
    assert node_claim["status"]["allocatable"][NEURON] == "4"

    def initialized() -> Obj | None:
        got = cluster.get("karpenter.sh/v1", "NodeClaim", node_claim["metadata"]["name"])
        conditions: dict[str, Obj] = {c["type"]: c for c in got["status"].get("conditions", [])}
        condition = conditions.get("Initialized")
        if condition and condition.get("reason") == "ResourceNotRegistered":
            return condition
        return None

    condition = cluster.wait_for("NodeClaim waiting for its resource", initialized, timeout=60)
    record_property("initialized", json.dumps(condition))
    assert condition["status"] == "Unknown"
    assert condition["message"] == f'Resource "{NEURON}" was requested but not registered'
    assert "karpenter.sh/initialized" not in node["metadata"]["labels"]


def test_more_cores_than_a_trn2_3xlarge_serves_are_refused_before_a_node(
    karpenter: KarpenterCluster, record_property: Any
) -> None:
    """`aws.amazon.com/neuroncore: 8` on a trn2.3xlarge: Karpenter counts 8 physical
    NeuronCores there and would launch one, whose DRA node serves 4 logical cores at LNC
    2: the pod would never run on the node bought for it. The chart's core-request
    policy refuses the pod at creation, so nothing is launched."""
    cluster = karpenter.cluster
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "eight-cores", "namespace": "default"},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": {LABEL_INSTANCE_TYPE: "trn2.3xlarge"},
            "containers": [{"name": "c", "image": "none", "resources": {"limits": {CORES: "8"}}}],
        },
    }
    with pytest.raises(ApiException) as refused:
        cluster.create(pod)
    message = str(refused.value.body)
    record_property("refusal", message)
    assert refused.value.status == 422, message
    assert (
        "aws.amazon.com/neuroncore: 8 is more than DRA nodes of trn2.3xlarge serve "
        "(at most 4 logical NeuronCores at LNC 2" in message
    )
    assert not cluster.list_objects("v1", "Pod", namespace="default")
    assert not karpenter.node_claims()


def test_sixteen_of_any_type_times_out(karpenter: KarpenterCluster) -> None:
    """Karpenter's device search tries every device for every slot of a request (no two
    orders of one set told apart) within 5 s a pod: 16 devices over every type's
    templates run out of time, and no node is launched."""
    timed_out = '"message":"scheduling simulation timed out"'
    before = karpenter.karpenter_log().count(timed_out)
    name = submit(karpenter.cluster, claim_spec(16, cel=DEVICE))
    karpenter.cluster.wait_for(
        "Karpenter's search timed out",
        lambda: karpenter.karpenter_log().count(timed_out) > before,
        timeout=60,
    )
    assert not karpenter.node_claims()
    assert not karpenter.cluster.get("v1", "Pod", name, "default")["spec"].get("nodeName")


def test_consolidation_removes_the_empty_node_and_keeps_the_held_one(
    karpenter: KarpenterCluster, record_property: Any
) -> None:
    """Two nodes of one device each (the second pod comes once the first node is full);
    one pod deleted; with consolidation after 5 s, its node goes and the node whose
    device a claim holds stays."""
    cluster = karpenter.cluster
    pods = []
    for _ in range(2):
        pod, _seconds = run(karpenter, claim_spec(1, cel=DEVICE))
        pods.append(pod)
    held, emptied = pods
    assert held["spec"]["nodeName"] != emptied["spec"]["nodeName"]
    name = emptied["metadata"]["name"]
    cluster.delete("v1", "Pod", name, "default", grace_period=0)
    cluster.delete("resource.k8s.io/v1", "ResourceClaim", name, "default")
    cluster.wait_for_pod_gone(name)
    disruption = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s"}
    cluster.patch("karpenter.sh/v1", "NodePool", NODE_POOL, {"spec": {"disruption": disruption}})
    try:
        started = time.monotonic()
        gone = emptied["spec"]["nodeName"]
        cluster.wait_for(
            f"{gone} consolidated away",
            lambda: gone not in {n["metadata"]["name"] for n in karpenter.nodes()},
            timeout=120,
        )
        record_property("consolidation_seconds", f"{time.monotonic() - started:.1f}")
        assert [n["metadata"]["name"] for n in karpenter.nodes()] == [held["spec"]["nodeName"]]
        still = cluster.get("v1", "Pod", held["metadata"]["name"], "default")
        assert still["status"]["phase"] == "Running"
        assert still["spec"]["nodeName"] == held["spec"]["nodeName"]
    finally:
        never = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
        cluster.patch("karpenter.sh/v1", "NodePool", NODE_POOL, {"spec": {"disruption": never}})


def test_an_ultraserver_gang_gets_no_node(
    karpenter: KarpenterCluster, record_property: Any
) -> None:
    """examples/specs/podgroup/us-4-node-gang.yaml: a PodGroup of 4 pods, each held to its
    place in the UltraServer by the driver's node label. Karpenter knows no PodGroup and
    cannot give a node a label only the node publishes once it runs: no node."""
    docs = load("us-4-node-gang.yaml")
    for doc in docs:
        karpenter.cluster.create({**doc, "metadata": {**doc["metadata"], "namespace": "default"}})
    reasons = {pod: refusal(karpenter, pod) for pod in pods_of(docs)}
    record_property("reasons", json.dumps(reasons))
    for reason in reasons.values():
        assert "neuron.amazonaws.com/ultraserver-node-id-4" in reason, reason
    assert not karpenter.node_claims()
