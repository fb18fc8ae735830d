"""`neuron-dra doctor --kubeconfig` against a real API server, broken then mended:
each failing check names what is wrong, and the fix makes it pass."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from consts import DRIVER_NAME
from neuron_dra.tools.doctor.clusterchecks import POLICIES
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TYPE = {"node.kubernetes.io/instance-type": "trn2.48xlarge"}


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    with Cluster(e2e_binaries) as cluster:
        yield cluster


def doctor(
    cluster: Cluster, kubeconfig: Path | None = None, *extra: str
) -> tuple[int, dict[str, dict[str, Any]]]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuron_dra",
            "doctor",
            "--no-node",
            f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
            "-o",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def publish(cluster: Cluster, node: str) -> None:
    """A slice of the driver's for `node`, as its plugin would publish."""
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER_NAME}"},
            "spec": {
                "driver": DRIVER_NAME,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "neurondevice0"}],
            },
        }
    )


def test_a_cluster_before_install_then_after(cluster: Cluster) -> None:
    cluster.add_node("trn-a", TYPE)
    code, checks = doctor(cluster)
    assert code == 1
    assert checks["kubernetes"]["verdict"] == "ok"
    assert checks["DRA API"]["verdict"] == "ok"
    assert checks["device classes"]["verdict"] == "fail"
    assert "missing neuron.aws.com, neuroncore.neuron.aws.com" in checks["device classes"]["detail"]
    assert checks["admission policies"]["verdict"] == "warn"
    assert checks["neuron nodes"]["verdict"] == "fail"
    assert checks["neuron nodes"]["detail"] == "1 of 1 publish no devices: trn-a"

    cluster.apply_yaml((REPO / "deploy/deviceclass.yaml").read_text())
    cluster.apply_yaml((REPO / "deploy/admission-policy.yaml").read_text())
    publish(cluster, "trn-a")
    code, checks = doctor(cluster)
    assert code == 0, checks
    assert {c["verdict"] for c in checks.values()} == {"ok"}


def test_a_node_the_device_plugin_serves_too(cluster: Cluster) -> None:
    cluster.add_node("trn-b", TYPE, allocatable={"aws.amazon.com/neuron": "16"})
    publish(cluster, "trn-b")
    code, checks = doctor(cluster)
    assert code == 1
    check = checks["device plugin"]
    assert check["verdict"] == "fail"
    assert "also serves trn-b" in check["detail"]


def test_a_deleted_admission_policy_fails_until_applied_again(cluster: Cluster) -> None:
    """One policy gone from an install that has the others: a broken install, not one
    without policies."""
    cluster.apply_yaml((REPO / "deploy/admission-policy.yaml").read_text())
    api = "admissionregistration.k8s.io/v1"
    cluster.delete(api, "ValidatingAdmissionPolicy", "neuron-dra-claim-status")
    _, checks = doctor(cluster)
    check = checks["admission policies"]
    assert check["verdict"] == "fail"
    assert "validatingadmissionpolicies neuron-dra-claim-status" in check["detail"]
    assert "apply the chart again" in check["fix"]
    cluster.apply_yaml((REPO / "deploy/admission-policy.yaml").read_text())
    _, checks = doctor(cluster)
    assert checks["admission policies"]["verdict"] == "ok"


def test_what_the_account_may_not_read_is_a_warning_that_says_so(
    cluster: Cluster, tmp_path: Path
) -> None:
    """As a service account granted nothing: the checks it may not read warn that the
    server forbade them, with the fix; those it may still pass."""
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}})
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nobody", "namespace": "bare"},
        }
    )
    path = "/api/v1/namespaces/bare/serviceaccounts/nobody/token"
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    token = cluster.request("POST", path, request)["status"]["token"]
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    kubeconfig = tmp_path / "nobody.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    code, checks = doctor(cluster, kubeconfig)
    assert code == 0
    assert checks["kubernetes"]["verdict"] == checks["DRA API"]["verdict"] == "ok"
    for name in ("device classes", "admission policies", "neuron nodes"):
        check = checks[name]
        assert check["verdict"] == "warn", check
        assert check["detail"].startswith("could not read: 403"), check
        assert "give the account doctor runs as get on it" in check["fix"]


def test_policies_of_a_renamed_chart_are_read_by_its_name(cluster: Cluster) -> None:
    """With fullnameOverride the chart names its policies after it: doctor, told the
    name (--fullname, which the chart hands the plugin's pod), reads those."""
    policies = (REPO / "deploy/admission-policy.yaml").read_text()
    renamed = policies.replace("name: neuron-dra-", "name: trn-").replace(
        "policyName: neuron-dra-", "policyName: trn-"
    )
    api = "admissionregistration.k8s.io/v1"
    for name in POLICIES:
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            cluster.delete(api, kind, name)
    cluster.apply_yaml(renamed)
    try:
        _, checks = doctor(cluster)
        assert checks["admission policies"]["verdict"] == "warn"
        _, checks = doctor(cluster, None, "--fullname=trn")
        check = checks["admission policies"]
        assert check["verdict"] == "ok", check
        bound = "trn-resourceslices, trn-claim-status, trn-node-labels, trn-node-events, each bound"
        assert check["detail"] == bound
    finally:
        cluster.apply_yaml(policies)
