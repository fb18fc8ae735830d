"""The chart's metrics scrape, its NetworkPolicy and its install notes, with a real helm.

Offline: what metrics.authorization and the policies render. Against an API server of
their own (no release installed: a dry run of one would meet its objects): what helm's
notes warn of.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.cli import parser
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from tests.e2e.test_helm import (
    CHART,
    IMAGE_VALUES,
    RELEASE,
    by_key,
    container_of,
    helm_env,
    ok,
    run,
    template,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def offline(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return helm_env(tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    """An API server with no release of the chart in it."""
    with Cluster(e2e_binaries) as running:
        yield running


def test_metrics_ask_for_a_token_by_default_and_can_ask_for_a_scrapers_namespace(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    """metrics.authorization, on by default: the agent reviews tokens, with the RBAC to,
    scrapers have a role to be bound to, and the ServiceMonitor sends Prometheus' token.
    Off, none of it. metrics.networkPolicy: only the monitoring namespace reaches the
    metrics port."""
    reviews = {("tokenreviews", "create"), ("subjectaccessreviews", "create")}

    def granted(found: dict[tuple[str, str], Any]) -> set[tuple[str, str]]:
        return {
            (r, v)
            for rule in found[("ClusterRole", "neuron-dra")]["rules"]
            for r in rule.get("resources", [])
            for v in rule["verbs"]
        }

    off = template(helm_bin, offline, *IMAGE_VALUES, "--set=metrics.authorization.enabled=false")
    assert not reviews & granted(by_key(off))
    assert parser().parse_args(container_of(off)["command"][1:]).metrics_auth == "none"
    # The scrapers' role only where scrapes need it.
    assert ("ClusterRole", "neuron-dra-metrics-reader") not in by_key(off)

    objects = template(
        helm_bin,
        offline,
        *IMAGE_VALUES,
        "--set=metrics.serviceMonitor.enabled=true",
        "--set=metrics.networkPolicy.enabled=true",
        "--set-json=metrics.podResourcesInterval=30",
    )
    found = by_key(objects)
    args = parser().parse_args(container_of(objects)["command"][1:])
    assert (args.metrics_auth, args.pod_resources_interval) == ("kubernetes", 30.0)
    assert reviews <= granted(found)
    assert found[("ClusterRole", "neuron-dra-metrics-reader")]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    [endpoint] = found[("ServiceMonitor", "neuron-dra")]["spec"]["endpoints"]
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    # Sent over plain HTTP: docs/operators/security.md says what that exposes; it changes
    # with this.
    assert "scheme" not in endpoint and "tlsConfig" not in endpoint
    off_monitor = by_key(
        template(
            helm_bin,
            offline,
            *IMAGE_VALUES,
            "--set=metrics.serviceMonitor.enabled=true",
            "--set=metrics.authorization.enabled=false",
        )
    )
    [endpoint] = off_monitor[("ServiceMonitor", "neuron-dra")]["spec"]["endpoints"]
    assert "bearerTokenFile" not in endpoint
    [rule] = found[("NetworkPolicy", "neuron-dra")]["spec"]["ingress"]
    assert rule == {
        "ports": [{"port": "metrics", "protocol": "TCP"}],
        "from": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {},
            }
        ],
    }
    # No metrics: no port open at all; a scrapers' rule without the policy is refused.
    closed = by_key(template(helm_bin, offline, *IMAGE_VALUES, "--set=metrics.enabled=false"))
    assert closed[("NetworkPolicy", "neuron-dra")]["spec"]["ingress"] == []
    refused = run(
        [
            str(helm_bin),
            "template",
            RELEASE,
            str(CHART),
            *IMAGE_VALUES,
            "--set=networkPolicy.enabled=false",
            "--set=metrics.networkPolicy.enabled=true",
        ],
        offline,
    )
    assert refused.returncode != 0
    assert "metrics.networkPolicy.enabled needs networkPolicy.enabled" in refused.stderr


def test_notes_warn_of_a_namespace_that_refuses_the_pods(helm_bin: Path, cluster: Cluster) -> None:
    """The pods mount host paths: a namespace enforcing "baseline" refuses them, and the
    notes say how to allow them; a namespace that allows them gets no warning."""
    strict = "baseline-ns"
    if cluster.get_or_none("v1", "Namespace", strict) is None:
        cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": strict,
                    "labels": {"pod-security.kubernetes.io/enforce": "baseline"},
                },
            }
        )
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    dry_run = [str(helm_bin), "install", "second", str(CHART), "--dry-run=server", *IMAGE_VALUES]
    notes = ok(run([*dry_run, f"--namespace={strict}"], env))
    assert f'WARNING: namespace {strict} enforces Pod Security "baseline"' in notes
    allow = "--overwrite pod-security.kubernetes.io/enforce=privileged"
    assert f"kubectl label namespace {strict} {allow}" in notes
    assert "WARNING" not in ok(run([*dry_run, "--namespace=open"], env))


def test_the_notes_say_a_privileged_plugin_is_host_root(helm_bin: Path, cluster: Cluster) -> None:
    """securityContext.privileged (what reading /dev/kmsg takes) makes every plugin pod
    root on its node: helm's notes say so when it is set, and only then. helm's client
    dry run still asks the server for its version."""
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    install = [str(helm_bin), "install", "second", str(CHART), "--dry-run=client", *IMAGE_VALUES]
    privileged = (
        "--set=securityContext.privileged=true,securityContext.allowPrivilegeEscalation=true"
    )
    notes = ok(run([*install, privileged], env)).split("NOTES:", 1)[1]
    assert "WARNING: securityContext.privileged is set: every plugin pod is root on its node" in (
        " ".join(notes.split())
    ), notes
    assert "securityContext.privileged" not in ok(run(install, env))
    assert "securityContext.privileged" not in ok(
        run([*install, "--set=securityContext.seLinuxOptions.type=spc_t"], env)
    )


def test_the_notes_say_who_reads_the_metrics(helm_bin: Path, cluster: Cluster) -> None:
    """By default the notes say a scrape needs a token and how to bind a scraper; with
    metrics.authorization off they warn that anyone reads the workloads' names."""
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    install = [str(helm_bin), "install", "second", str(CHART), "--dry-run=client", *IMAGE_VALUES]
    notes = " ".join(ok(run(install, env)).split("NOTES:", 1)[1].split())
    assert "answer only a bearer token of a user allowed to get /metrics" in notes, notes
    assert "--clusterrole=neuron-dra-metrics-reader" in notes
    assert "WARNING" not in notes
    off = " ".join(ok(run([*install, "--set=metrics.authorization.enabled=false"], env)).split())
    assert "WARNING: metrics.authorization is off: anyone who reaches port 9400 reads" in off
