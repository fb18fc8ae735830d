"""The chart's policy on device-plugin-style core requests, on a real kube-apiserver.

`aws.amazon.com/neuroncore: N` with no claim is served on DRA nodes in logical
NeuronCores (at most 32, a claim's limit); Karpenter counts the name in physical ones.
`deploy/core-request-policy.yaml` refuses at creation a pod whose N none of the
instance types it allows serves, so that no node is bought for it
(`tests/e2e/test_karpenter.py` shows Karpenter launching nothing). Each case here is a
server-side dry run of one pod.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from consts import LABEL_INSTANCE_TYPE
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "deploy" / "core-request-policy.yaml"
CORES = "aws.amazon.com/neuroncore"


def pod(*asks: str, init: str | None = None, **spec: Any) -> Obj:
    """A pod whose containers ask `asks` NeuronCores in their limits."""
    containers = [
        {"name": f"c{i}", "image": "none", "resources": {"limits": {CORES: n}}}
        for i, n in enumerate(asks)
    ]
    body: Obj = {"containers": containers, **spec}
    if init is not None:
        body["initContainers"] = [
            {"name": "init", "image": "none", "resources": {"limits": {CORES: init}}}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "cores-", "namespace": "default"},
        "spec": body,
    }


def on(instance_type: str) -> Obj:
    return {"nodeSelector": {LABEL_INSTANCE_TYPE: instance_type}}


def affinity(operator: str, *types: str) -> Obj:
    term = {
        "matchExpressions": [
            {"key": LABEL_INSTANCE_TYPE, "operator": operator, "values": list(types)}
        ]
    }
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }


def refusal(cluster: Cluster, obj: Obj) -> str | None:
    """The API server's message refusing `obj` (a dry run); None when it takes it."""
    try:
        cluster.request(
            "POST", cluster.path("v1", "Pod", namespace="default"), obj, query={"dryRun": "All"}
        )
    except ApiException as err:
        assert err.status == 422, err.body
        return str(err.body)
    return None


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    with Cluster(e2e_binaries) as running:
        running.apply_yaml(POLICY.read_text())
        # The policy takes effect once the server has loaded it: wait for a first refusal.
        running.wait_for(
            "the policy in force", lambda: refusal(running, pod("8", **on("trn2.3xlarge"))), 30
        )
        yield running


def test_more_cores_than_the_selected_type_serves_are_refused(cluster: Cluster) -> None:
    message = refusal(cluster, pod("8", **on("trn2.3xlarge")))
    assert message is not None
    documented = " ".join((REPO / "docs/operators/autoscaling.md").read_text().split())
    said = message[message.index("neuron-dra: ") :].split('"')[0]
    assert said in documented, said
    assert said.startswith(
        "neuron-dra: aws.amazon.com/neuroncore: 8 is more than DRA nodes of trn2.3xlarge serve "
        "(at most 4 logical NeuronCores at LNC 2, 32 a pod). Karpenter counts physical "
        "NeuronCores and would launch a node that never runs the pod. Ask for at most 4 "
    )


@pytest.mark.parametrize(
    ("obj", "most"),
    [
        (pod("4", "4", **on("trn2.3xlarge")), 4),  # containers side by side: 8 in all
        (pod("1", init="8", **on("trn2.3xlarge")), 4),  # an init container alone
        (pod("33"), 32),  # no type named: a claim's limit
        (pod("8", **affinity("In", "trn2.3xlarge", "inf2.xlarge")), 4),
        (pod("33", **affinity("NotIn", "trn2.3xlarge")), 32),
    ],
    ids=["two-containers", "init-container", "any-type", "affinity-in", "affinity-not-in"],
)
def test_what_no_allowed_type_serves_is_refused(cluster: Cluster, obj: Obj, most: int) -> None:
    message = refusal(cluster, obj)
    assert message is not None and f"(at most {most} logical NeuronCores" in message


@pytest.mark.parametrize(
    "obj",
    [
        pod("4", **on("trn2.3xlarge")),
        pod("2", "2", init="4", **on("trn2.3xlarge")),
        pod("32"),
        pod("8", **affinity("In", "trn2.3xlarge", "trn2.48xlarge")),
        pod("8", **on("p5.48xlarge")),  # a type the table does not know
        {**pod("1"), "spec": {"containers": [{"name": "c", "image": "none"}]}},
    ],
    ids=["fits", "fits-with-init", "a-claims-limit", "one-type-serves", "unknown-type", "none"],
)
def test_what_an_allowed_type_serves_is_taken(cluster: Cluster, obj: Obj) -> None:
    assert refusal(cluster, copy.deepcopy(obj)) is None
