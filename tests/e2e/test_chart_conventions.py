"""The chart's naming values as the reference charts have them, rendered by a real
helm: nameOverride, fullnameOverride, namespaceOverride, serviceAccount.* and a
`global` key for use as a subchart."""

from __future__ import annotations

from pathlib import Path

import pytest

from consts import ENV_CHART_FULLNAME
from neuron_dra.tools.doctor.clusterchecks import policies
from neuron_dra_harness.cluster_api import Obj
from tests.e2e.test_helm import CHART, IMAGE_VALUES, RELEASE, offline, run, template

pytestmark = pytest.mark.e2e

__all__ = ["offline"]  # the fixture, shared with test_helm.py

# Named by the API, not by the release: the DeviceClasses claims ask for.
API_NAMES = {"DeviceClass"}


def names(objects: list[Obj]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects)


def policy_user(objects: list[Obj], policy: str) -> str:
    [found] = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == policy
    ]
    [condition] = found["spec"]["matchConditions"]
    expression: str = condition["expression"]
    return expression.split('"')[1]


def test_the_defaults_name_everything_neuron_dra(helm_bin: Path, offline: dict[str, str]) -> None:
    objects = template(helm_bin, offline, *IMAGE_VALUES)
    for kind, name in names(objects):
        assert kind in API_NAMES or name.startswith("neuron-dra"), (kind, name)


def test_fullname_override_renames_every_object(helm_bin: Path, offline: dict[str, str]) -> None:
    default = template(helm_bin, offline, *IMAGE_VALUES)
    renamed = template(helm_bin, offline, *IMAGE_VALUES, "--set=fullnameOverride=trn")
    expected = sorted(
        (kind, name if kind in API_NAMES else name.replace("neuron-dra", "trn", 1))
        for kind, name in names(default)
    )
    assert names(renamed) == expected
    [daemonset] = [o for o in renamed if o["kind"] == "DaemonSet"]
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "trn"
    # The selector is immutable and the CLI finds plugins by it: it keeps the name.
    assert daemonset["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "neuron-dra"}
    user = "system:serviceaccount:neuron-dra:trn"  # helm_env's namespace
    assert policy_user(renamed, "trn-resourceslices") == user
    assert policy_user(renamed, "trn-node-labels") == user
    assert policy_user(renamed, "trn-claim-status") == user
    # doctor in the pod reads the renamed policies by the name the chart hands it.
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    rendered = {n for kind, n in names(renamed) if kind == "ValidatingAdmissionPolicy"}
    assert set(policies(env[ENV_CHART_FULLNAME])) <= rendered
    prefixed = template(helm_bin, offline, *IMAGE_VALUES, "--set=nameOverride=accel")
    assert ("DaemonSet", "accel") in names(prefixed)


def test_namespace_override_moves_the_namespaced_objects(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    objects = template(helm_bin, offline, *IMAGE_VALUES, "--set=namespaceOverride=accel-system")
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert {
        o["metadata"]["namespace"]
        for o in namespaced
        if o["kind"] != "Role" and o["kind"] != "RoleBinding"
    } == {"accel-system"}
    assert policy_user(objects, "neuron-dra-resourceslices") == (
        "system:serviceaccount:accel-system:neuron-dra"
    )
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert {s["namespace"] for b in bindings for s in b["subjects"]} == {"accel-system"}


def test_a_service_account_made_elsewhere(helm_bin: Path, offline: dict[str, str]) -> None:
    objects = template(
        helm_bin,
        offline,
        *IMAGE_VALUES,
        "--set=serviceAccount.create=false",
        "--set=serviceAccount.name=neuron-plugin",
    )
    assert "ServiceAccount" not in {o["kind"] for o in objects}
    [daemonset] = [o for o in objects if o["kind"] == "DaemonSet"]
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "neuron-plugin"
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert {s["name"] for b in bindings for s in b["subjects"]} == {"neuron-plugin"}
    assert policy_user(objects, "neuron-dra-resourceslices").endswith(":neuron-plugin")
    refused = run(
        [
            str(helm_bin),
            "template",
            RELEASE,
            str(CHART),
            *IMAGE_VALUES,
            "--set=serviceAccount.create=false",
        ],
        offline,
    )
    assert refused.returncode == 1
    assert "serviceAccount.name is required when serviceAccount.create is false" in (refused.stderr)


def test_service_account_annotations(helm_bin: Path, offline: dict[str, str]) -> None:
    role = "arn:aws:iam::123456789012:role/neuron-dra"
    objects = template(
        helm_bin,
        offline,
        *IMAGE_VALUES,
        f"--set=serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={role}",
    )
    [account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role}


def test_the_chart_works_as_a_subchart(helm_bin: Path, offline: dict[str, str]) -> None:
    """A parent chart passes `global` to every subchart; the strict schema takes it."""
    objects = template(helm_bin, offline, *IMAGE_VALUES, "--set=global.region=us-west-2")
    assert ("DaemonSet", "neuron-dra") in names(objects)
    bad = run(
        [
            str(helm_bin),
            "template",
            RELEASE,
            str(CHART),
            *IMAGE_VALUES,
            "--set=fullnameOverride=Not_A_Name",
        ],
        offline,
    )
    assert bad.returncode == 1
    assert "fullnameOverride" in bad.stderr
