"""/metrics behind the API server's word: with --metrics-auth=kubernetes the plugin
answers a scrape only with a bearer token the real kube-apiserver authenticates
(TokenReview), of a user its RBAC lets get /metrics (SubjectAccessReview), the
ClusterRole the chart gives scrapers when metrics.authorization is on."""

from __future__ import annotations

import asyncio
import http.client
import os
import secrets
import subprocess
from collections import Counter
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from neuron_dra.agent.apiclient import config as apiconfig
from neuron_dra.agent.apiclient.kube import Kube
from neuron_dra.agent.telemetry.metricsauth import ALLOWED_TTL_S, Authorizer
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


def bind_reader(cluster: Cluster, account: str) -> str:
    """Bind the service account to the chart's scrapers' role; the binding's name."""
    name = f"{account}-reads-metrics"
    cluster.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": READER,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
        }
    )
    return name


@pytest.fixture(scope="module")
def secured(
    e2e_binaries: Binaries, helm_bin: Path
) -> Iterator[tuple[Cluster, int, dict[str, str]]]:
    """A plugin serving /metrics with --metrics-auth=kubernetes, and tokens by name."""
    with Cluster(e2e_binaries) as cluster:
        cluster.apply(reader_role(helm_bin))
        tokens = {name: token_of(cluster, name) for name in ("scraper", "stranger")}
        bind_reader(cluster, "scraper")
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


class Clock:
    """Virtual time for an authorizer in this process: ten minutes of a flood pass in
    the seconds its real reviews take."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


FLOOD_PER_S, FLOOD_S, SCRAPE_EVERY_S = 20, 600, 15
STRANGER_ADDRESS, SCRAPER_ADDRESS = "10.0.0.66", "10.0.0.9"


def test_a_flood_of_random_tokens_leaves_the_scraper_served(
    secured: tuple[Cluster, int, dict[str, str]],
) -> None:
    """A stranger sends 20 random tokens a second for ten minutes while the scraper
    scrapes every 15 s: the reviews go to the real kube-apiserver; the scraper's known
    token is renewed from a budget of its own and the stranger's reviews from its
    address's, so the scraper is answered 200 every time."""
    cluster, _, tokens = secured
    kube = Kube(apiconfig.from_kubeconfig(cluster.kubeconfig), max_connections=1)
    scraper = f"Bearer {tokens['scraper']}"
    # The binding reaches the API server's authorizer within moments.
    cluster.wait_for(
        "the scraper's grant",
        lambda: asyncio.run(Authorizer(kube.create).status(scraper, SCRAPER_ADDRESS)) == 200,
        timeout=30,
    )
    clock = Clock()
    authorizer = Authorizer(kube.create, clock)

    async def flood() -> Counter[int]:
        answers = Counter[int]()
        for step in range(FLOOD_S * FLOOD_PER_S):
            if step % (SCRAPE_EVERY_S * FLOOD_PER_S) == 0:
                answers[await authorizer.status(scraper, SCRAPER_ADDRESS)] += 1
            await authorizer.status(f"Bearer {secrets.token_urlsafe(24)}", STRANGER_ADDRESS)
            clock.now += 1 / FLOOD_PER_S
        return answers

    try:
        answers = asyncio.run(flood())
    finally:
        kube.close()
    assert answers == {200: FLOOD_S // SCRAPE_EVERY_S}, answers


class Reviews:
    """The verdicts of an authorizer's reviews, and an event set at each."""

    def __init__(self) -> None:
        self.verdicts: list[HTTPStatus] = []
        self.event: asyncio.Event | None = None

    def __call__(self, verdict: HTTPStatus) -> None:
        self.verdicts.append(verdict)
        if self.event is not None:
            self.event.set()


def test_an_expired_grant_is_served_until_its_renewal_refuses_it(
    secured: tuple[Cluster, int, dict[str, str]],
) -> None:
    """A grant past its minute is served at once while it is reviewed again; once the
    binding is gone the renewal's refusal replaces it."""
    cluster, _, _ = secured
    token = f"Bearer {token_of(cluster, 'renewed')}"
    binding = bind_reader(cluster, "renewed")
    kube = Kube(apiconfig.from_kubeconfig(cluster.kubeconfig), max_connections=1)
    clock, reviews = Clock(), Reviews()
    authorizer = Authorizer(kube.create, clock, on_review=reviews)
    try:
        cluster.wait_for(
            "the grant",
            lambda: asyncio.run(authorizer.status(token, SCRAPER_ADDRESS)) == 200,
            timeout=30,
        )
        cluster.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", binding)

        async def renewed() -> HTTPStatus:
            """Past the grant's minute: served from it, and the renewal's verdict."""
            reviews.event = asyncio.Event()
            clock.now += ALLOWED_TTL_S
            assert await authorizer.status(token, SCRAPER_ADDRESS) == 200
            await asyncio.wait_for(reviews.event.wait(), 10)
            return reviews.verdicts[-1]

        # The API server's authorizer sees the binding gone within moments.
        cluster.wait_for("the refusal", lambda: asyncio.run(renewed()) == 403, timeout=30)
        assert asyncio.run(authorizer.status(token, SCRAPER_ADDRESS)) == 403
    finally:
        kube.close()


def test_a_plugin_with_default_flags_asks_for_a_token(
    secured: tuple[Cluster, int, dict[str, str]],
) -> None:
    """Only --metrics-port: an anonymous scrape gets 401 and no series at all (no
    workload's namespace, pod or claim); the scraper's token gets them."""
    cluster, _, tokens = secured
    port = free_port()
    add_simulated_node(cluster, "plain", "inf2.xlarge", extra_args=[f"--metrics-port={port}"])
    cluster.wait_for("the metrics endpoint", lambda: get(port, "/healthz")[0] == 200)
    status, _, body = get(port, "/metrics")
    assert (status, body) == (401, b"a bearer token is needed\n")
    status, _, body = get(port, "/metrics", tokens["scraper"])
    assert status == 200 and b"neuron_dra_registered" in body
