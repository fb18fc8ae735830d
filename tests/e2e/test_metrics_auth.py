"""/metrics behind the API server's word: with --metrics-auth=kubernetes the plugin
answers a scrape only with a bearer token the real kube-apiserver authenticates
(TokenReview), of a user its RBAC lets get /metrics (SubjectAccessReview), the
ClusterRole the chart gives scrapers when metrics.authorization is on."""

from __future__ import annotations

import http.client
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import add_simulated_node
from neuron_dra_harness.processes import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
READER = "neuron-dra-metrics-reader"
NAMESPACE = "default"


def reader_role(helm_bin: Path) -> dict[str, Any]:
    """The chart's role for scrapers, which it renders with metrics.authorization on."""
    rendered = subprocess.run(
        [
            str(helm_bin),
            "template",
            "neuron-dra",
            str(REPO / "deploy/helm/neuron-dra"),
            "--set=image.repository=registry.invalid/neuron-dra",
            "--set=metrics.authorization.enabled=true",
            "--namespace=neuron-dra",
            "--show-only=templates/rbac.yaml",
        ],
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    [role] = [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == READER
    ]
    return dict(role)


def token_of(cluster: Cluster, account: str) -> str:
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": NAMESPACE},
        }
    )
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token"
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    return str(cluster.request("POST", path, request)["status"]["token"])


@pytest.fixture(scope="module")
def secured(
    e2e_binaries: Binaries, helm_bin: Path
) -> Iterator[tuple[Cluster, int, dict[str, str]]]:
    """A plugin serving /metrics with --metrics-auth=kubernetes, and tokens by name."""
    with Cluster(e2e_binaries) as cluster:
        cluster.apply(reader_role(helm_bin))
        tokens = {name: token_of(cluster, name) for name in ("scraper", "stranger")}
        cluster.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "scraper-reads-metrics"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": READER,
                },
                "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": NAMESPACE}],
            }
        )
        port = free_port()
        add_simulated_node(
            cluster,
            "sec",
            "inf2.xlarge",
            extra_args=[f"--metrics-port={port}", "--metrics-auth=kubernetes"],
        )
        yield cluster, port, tokens


def get(port: int, path: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def reviews(body: bytes) -> dict[str, float]:
    """The tokens this plugin sent for review, by result, from its own counter: the API
    server's request counts are the whole cluster's."""
    return {
        s.labels["result"]: s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name == "neuron_dra_metrics_token_reviews_total"
    }


def test_a_scrape_needs_a_token_of_a_user_allowed_to_get_metrics(
    secured: tuple[Cluster, int, dict[str, str]],
) -> None:
    cluster, port, tokens = secured
    # The endpoint is up (its health path asks nothing) before any scrape counts.
    cluster.wait_for("the metrics endpoint", lambda: get(port, "/healthz")[0] == 200)
    status, headers, _ = get(port, "/metrics")
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    assert get(port, "/metrics", "not-a-token")[0] == 401
    assert get(port, "/metrics", tokens["stranger"])[0] == 403

    # RBAC grants reach the API server's authorizer within moments; a refusal is
    # kept 10 s, a grant a minute.
    def granted() -> bytes | None:
        status, _, body = get(port, "/metrics", tokens["scraper"])
        return body if status == 200 else None

    body = cluster.wait_for("the scraper's grant", granted, timeout=30)
    assert b"neuron_dra_registered" in body
    assert get(port, "/metrics", tokens["stranger"])[0] == 403
    # Verdicts are kept: scrapes with known tokens ask the API server nothing more.
    before = reviews(get(port, "/metrics", tokens["scraper"])[2])
    assert before.get("unauthorized", 0) >= 1  # not-a-token
    assert before.get("forbidden", 0) >= 1 and before.get("allowed", 0) >= 1
    for _ in range(20):
        status, _, body = get(port, "/metrics", tokens["scraper"])
        assert status == 200
    assert reviews(body) == before
