"""What a prepare and an unprepare cost the API server, counted by the API server.

The kubelet's calls go straight to the agent's DRA socket, one claim at a time, and
each claim's status is let land before it is unprepared and cleared. The count is
kube-apiserver's own `apiserver_request_total`, read before and after: no other
client of this cluster GETs a ResourceClaim (the scheduler and controllers watch
them), so every GET of one counted here is the agent's. A prepare reads its claim
once; the status write that follows, and the unprepare's clear, read nothing.
"""

from __future__ import annotations

import ssl
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from consts import DRIVER_NAME
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import DEVICE_CLASSES, SimulatedNode, add_simulated_node
from tests.reliability.test_crash_storm import allocated_claim
from tests.reliability.test_outages import call, claim_ref

pytestmark = pytest.mark.e2e

NODE = "reads-a"
CLAIMS = 6
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[SimulatedNode]:
    cluster.apply_yaml(DEVICE_CLASSES.read_text())
    found = add_simulated_node(cluster, NODE, "trn2.48xlarge")
    yield found
    if found.plugin is not None:
        cluster.stop_process(found.plugin)
    cluster.stop_kubelet_side(NODE)


def claim_requests(cluster: Cluster) -> dict[str, float]:
    """kube-apiserver's count of ResourceClaim requests so far, by verb and subresource."""
    request = urllib.request.Request(
        cluster.server + "/metrics", headers={"Authorization": f"Bearer {cluster.token}"}
    )
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name != "apiserver_request_total":
                continue
            if labels.get("resource") == "resourceclaims":
                key = f"{labels.get('verb')} {labels.get('subresource') or '-'}"
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def entries(cluster: Cluster, name: str) -> list[Obj]:
    """The agent's status entries of claim `name`, read with a LIST (not counted as a GET)."""
    listed = cluster.list_objects("resource.k8s.io/v1", "ResourceClaim", "default")
    [obj] = [c for c in listed if c["metadata"]["name"] == name]
    devices = (obj.get("status") or {}).get("devices") or []
    return [d for d in devices if d.get("driver") == DRIVER_NAME]


def wait_for_entries(cluster: Cluster, name: str, *, present: bool) -> None:
    deadline = time.monotonic() + 20.0
    while bool(entries(cluster, name)) != present:
        assert time.monotonic() < deadline, (
            f"{name}'s status {'not written' if present else 'kept'}"
        )
        time.sleep(0.05)


def test_a_prepare_reads_its_claim_once(cluster: Cluster, node: SimulatedNode) -> None:
    """Each claim prepared, its status written, unprepared and its status cleared: one
    GET of the claim for all of it, one apply to write and one to clear."""
    claims = [allocated_claim(cluster, f"reads-{i}", NODE, i) for i in range(CLAIMS)]
    before = claim_requests(cluster)
    for obj in claims:
        name = obj["metadata"]["name"]
        error, _ = call(node, "prepare", claim_ref(obj))
        assert not error
        wait_for_entries(cluster, name, present=True)
        error, _ = call(node, "unprepare", claim_ref(obj))
        assert not error
        wait_for_entries(cluster, name, present=False)
    time.sleep(1.0)  # nothing more may come
    after = claim_requests(cluster)
    spent = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert spent.get("GET -", 0.0) == CLAIMS, spent
    writes = sum(v for k, v in spent.items() if k.endswith(" status"))
    assert writes == 2 * CLAIMS, spent
