"""The plugin's metrics endpoint as the tests and benchmarks read it: one GET of
`/metrics`, parsed by prometheus_client's own text parser, with a bearer token where
the plugin asks for one (--metrics-auth=kubernetes, its default)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from neuron_dra_harness.cluster_api import ClusterApi

Series = dict[str, list[dict[str, str]]]


READER_ROLE = "neuron-dra-metrics-reader"


def reader_token(cluster: ClusterApi, account: str, namespace: str = "default") -> str:
    """A token of a new service account bound to the chart's scrapers' role, as a
    Prometheus' account is: what a plugin with --metrics-auth=kubernetes answers."""
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace},
        }
    )
    cluster.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{account}-reads-metrics"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
    )
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    answer = cluster.request("POST", path, request)
    assert isinstance(answer, dict)
    return str(answer["status"]["token"])


def samples(url: str, timeout_s: float = 5.0, token: str | None = None) -> list[Sample]:
    """Every sample the endpoint at `url` exposes now, asked with `token` if given."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(
        urllib.request.Request(url, headers=headers), timeout=timeout_s
    ) as answer:
        text = answer.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def by_name(url: str) -> Series:
    """Each sample's labels, and its value under "value" (its repr), by sample name."""
    found: Series = {}
    for sample in samples(url):
        found.setdefault(sample.name, []).append({**sample.labels, "value": repr(sample.value)})
    return found
