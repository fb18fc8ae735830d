"""`scripts/install-dra-driver.sh` and the deploy/ manifests against a real API server.

The cluster runs the DaemonSet controller too, so a rollout is a real one: a
Neuron node's plugin pod is created by the controller, bound by the scheduler
and reported Ready by the kubelet stand-in. The plugin's permissions are
checked as the API server sees them (``tests/e2e/plugin_access.py``, shared
with the Helm chart's tests): SubjectAccessReviews for the exact RBAC verbs,
and impersonated requests carrying a pod-bound token's node name for the
admission policies.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import yaml

from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools.doctor.clusterchecks import POLICIES
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import DEFAULT_CONTROLLERS, Cluster
from neuron_dra_harness.manifests import INSTALL_SCRIPT, install_environment, run_install_script
from neuron_dra_harness.processes import free_port
from tests import doc_commands
from tests.e2e import aws_driver_standin
from tests.e2e.claim_status_access import (
    check_own_nodes_claim_status,
    check_rbac_for_claim_status,
)
from tests.e2e.node_event_access import check_own_nodes_events
from tests.e2e.plugin_access import (
    NAMESPACE,
    Key,
    Obj,
    add_policy_nodes,
    check_claims_read_only,
    check_no_device_classes,
    check_own_nodes_pool_of_its_own_driver,
    check_own_nodes_slices,
    check_own_nodes_ultraserver_labels,
    check_probes_and_writes,
    check_rbac,
    check_server_version,
    key,
    object_state,
)
from tests.sysfs_tree import FakeNode

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
IMAGE = "registry.invalid/neuron-dra:1.0.0"


def manifest_objects() -> list[Obj]:
    return [
        doc
        for path in sorted(DEPLOY.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


KEYS = [key(obj) for obj in manifest_objects()]


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    """Its own control plane: the DaemonSet controller runs, and uninstall empties it."""
    controllers = (*DEFAULT_CONTROLLERS, "daemonset-controller")
    with Cluster(e2e_binaries, controllers=controllers) as running:
        yield running


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def state(cluster: Cluster) -> dict[Key, tuple[str, int] | None]:
    """resourceVersion and generation of every manifest object; None when absent."""
    return object_state(cluster, KEYS)


def daemonset(cluster: Cluster) -> Obj:
    return cluster.get("apps/v1", "DaemonSet", "neuron-dra", NAMESPACE)


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> str:
    """The driver installed once by the script, waiting for the rollout; its output."""
    return ok(run_install_script(cluster, IMAGE, "--timeout=60s"))


# --------------------------------------------------------------------- errors


def test_missing_image_is_a_usage_error(cluster: Cluster) -> None:
    result = run_install_script(cluster)
    assert result.returncode == 2
    assert "error: missing IMAGE" in result.stderr
    assert "Usage:" in result.stderr
    result = run_install_script(cluster, IMAGE, "--bogus")
    assert (result.returncode, "unknown option --bogus" in result.stderr) == (2, True)
    result = run_install_script(cluster, "bad image;rm")
    assert (result.returncode, "is not an image reference" in result.stderr) == (2, True)


def test_missing_kubectl(cluster: Cluster, tmp_path: Path) -> None:
    result = run_install_script(cluster, IMAGE, env={"KUBECTL": "/nonexistent"})
    assert result.returncode == 3
    assert "KUBECTL=/nonexistent is not an executable kubectl" in result.stderr
    # Without KUBECTL the script looks on PATH, here a directory without kubectl.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "basename", "sed", "grep", "paste"):
        found = subprocess.run(["which", tool], capture_output=True, text=True, check=True)
        (bin_dir / tool).symlink_to(found.stdout.strip())
    environ = {"PATH": str(bin_dir), "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(bin_dir / "bash"), str(INSTALL_SCRIPT), IMAGE],
        check=False,
        env=environ,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 3
    assert "kubectl not found on PATH; install it or set KUBECTL" in result.stderr


def test_unreachable_cluster(cluster: Cluster, tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "gone", "cluster": {"server": f"https://127.0.0.1:{closed}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    result = run_install_script(cluster, IMAGE, env={"KUBECONFIG": str(kubeconfig)})
    assert result.returncode == 3
    assert "cannot reach the cluster of context 'gone'" in result.stderr
    assert f"127.0.0.1:{closed}" in result.stderr


# --------------------------------------------------------------------- install


def test_dry_run_changes_nothing(cluster: Cluster) -> None:
    """Before the install (nothing to create) and after it (nothing to change)."""
    before = state(cluster)
    output = ok(run_install_script(cluster, IMAGE, "--dry-run"))
    assert state(cluster) == before
    if before[("v1", "Namespace", NAMESPACE, None)] is None:
        assert all(found is None for found in before.values())
        assert "checking its objects in namespace default" in output
        assert "serviceaccount/neuron-dra serverside-applied (server dry run)" in output
        assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in output


def test_runs_through_a_symlink(cluster: Cluster, tmp_path: Path) -> None:
    """As examples/scripts/install-dra-driver.sh would: the manifests are still found."""
    link = tmp_path / "examples" / "scripts" / "install-dra-driver.sh"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(INSTALL_SCRIPT, link.parent))
    before = state(cluster)
    result = subprocess.run(
        [str(link), IMAGE, "--dry-run"],
        check=False,
        capture_output=True,
        text=True,
        env={**install_environment(cluster), "HOME": str(tmp_path)},
    )
    assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in ok(result)
    assert state(cluster) == before


def test_install_applies_every_manifest(cluster: Cluster, installed: str) -> None:
    assert "v1beta1" not in installed  # served here: the seed's spellings apply
    assert all(state(cluster).values()), state(cluster)
    assert {k[1] for k in KEYS} >= {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "DaemonSet",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "DeviceClass",
    }
    spec = daemonset(cluster)["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == IMAGE
    affinity = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    values = affinity["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert sorted(values) == sorted(INSTANCE_TYPES)
    # No Neuron node yet: the rollout is complete with no pod, and the script says so.
    assert "no node runs the plugin" in installed
    for name in POLICIES:
        policy = cluster.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", name)
        assert not policy.get("status", {}).get("typeChecking", {}).get("expressionWarnings")


def test_second_install_changes_nothing(cluster: Cluster, installed: str) -> None:
    before = state(cluster)
    ok(run_install_script(cluster, IMAGE, "--no-wait"))
    assert state(cluster) == before
    # A dry run of an upgrade is checked by the server and changes nothing either.
    output = ok(run_install_script(cluster, "registry.invalid/neuron-dra:2.0.0", "--dry-run"))
    assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in output
    assert state(cluster) == before


def test_new_image_rolls_the_daemonset(cluster: Cluster, installed: str) -> None:
    before = state(cluster)
    ok(run_install_script(cluster, "registry.invalid/neuron-dra:1.0.1", "--no-wait"))
    after = state(cluster)
    ds_key = ("apps/v1", "DaemonSet", "neuron-dra", NAMESPACE)
    assert {k for k in KEYS if after[k] != before[k]} == {ds_key}
    assert cast(tuple[str, int], after[ds_key])[1] == cast(tuple[str, int], before[ds_key])[1] + 1
    assert daemonset(cluster)["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.invalid/neuron-dra:1.0.1"
    )
    ok(run_install_script(cluster, IMAGE, "--no-wait"))


def test_rollout_on_a_neuron_node(cluster: Cluster, installed: str) -> None:
    """A trn2 node gets a plugin pod; the script waits for it and tries its logs."""
    cluster.add_node("trn2-install", labels={"node.kubernetes.io/instance-type": "trn2.48xlarge"})
    cluster.start_kubelet_side("trn2-install")
    output = ok(run_install_script(cluster, IMAGE, "--timeout=60s"))
    assert "the plugin runs on 1 node(s)" in output
    pods = cluster.list_objects("v1", "Pod", NAMESPACE)
    assert [p["spec"]["nodeName"] for p in pods] == ["trn2-install"]
    assert pods[0]["spec"]["priorityClassName"] == "system-node-critical"
    env = {e["name"]: e for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # The stand-in kubelet serves no container logs: the script reports it and succeeds.
    assert "logs not available" in output


def test_the_documented_cluster_commands_run(cluster: Cluster, installed: str) -> None:
    """Every kubectl and `neuron-dra --kubeconfig` command of the docs, as written but for
    its placeholders, runs against the driver the script installed (tests/doc_commands.py)."""
    ran = doc_commands.run_by(doc_commands.CLUSTER)
    assert len(ran) >= 20, ran
    node = "troubleshooting"
    if cluster.get_or_none("v1", "Node", node) is None:
        cluster.add_node(node)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "waits", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "none"}],
            "nodeSelector": {"no-such-label": "x"},
        },
    }
    if cluster.get_or_none("v1", "Pod", "waits", "default") is None:
        cluster.create(pod)
    aws_driver_standin.ensure(cluster)  # migration.md's node-by-node steps patch it
    neuron_dra = Path(sys.executable).with_name("neuron-dra")
    values = {"node": node, "pod": "waits", "file": "single-device.yaml"}
    for command in ran:
        text = doc_commands.fill(command.text, **values)
        text = text.replace("~/.kube/config", str(cluster.kubeconfig))
        argv = shlex.split(text.replace("my-claims.yaml", "examples/specs/single-device.yaml"))
        if argv[0] == "kubectl":
            argv = [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}", *argv[1:]]
            result = subprocess.run(argv, check=False, capture_output=True, text=True, cwd=REPO)
            assert result.returncode == 0, (str(command), result.stderr)
        elif argv[:2] == ["neuron-dra", "doctor"]:
            result = subprocess.run(
                [str(neuron_dra), *argv[1:]], check=False, capture_output=True, text=True, cwd=REPO
            )
            # The installed driver's classes and policies pass; the stand-in nodes may not.
            assert result.returncode in (0, 1), (str(command), result.stderr)
            assert "OK    device classes" in result.stdout, result.stdout
            assert "OK    admission policies" in result.stdout, result.stdout
        else:
            assert argv[:2] == ["neuron-dra", "simulate"], command
            result = subprocess.run(
                [str(neuron_dra), *argv[1:]], check=False, capture_output=True, text=True, cwd=REPO
            )
            # 1: the driver would refuse to prepare (the stand-in nodes have no sysfs).
            assert result.returncode in (0, 1) and "claim default/single-device" in result.stdout, (
                str(command),
                result.stdout,
                result.stderr,
            )
    # The AWS driver's DaemonSet keeps to the nodes labelled for it, beside its own choice.
    assert aws_driver_standin.node_selector(cluster) == {
        "kubernetes.io/os": "linux",
        "neuron.aws.com/driver": "aws",
    }
    assert cluster.get("v1", "Node", node)["metadata"]["labels"]["neuron.aws.com/driver"] == "dra"


# --------------------------------------------------------------- permissions


SPECS = Path(__file__).resolve().parents[2] / "examples/specs"
CONFIG_TEMPLATE = """\
apiVersion: resource.k8s.io/{version}
kind: ResourceClaimTemplate
metadata:
  name: config-check
  namespace: default
spec:
  spec:
    devices:
      requests:
      - name: neurons
        {request}
      config:
      - opaque:
          driver: neuron.aws.com
          parameters: {parameters}
"""
V1_REQUEST = "exactly: {deviceClassName: neuron.aws.com}"


@pytest.mark.parametrize(
    ("parameters", "refused"),
    [
        (
            "{apiVersion: neuron.aws.com/v1, kind: NeuronConfig, logicalNeuronCore: 3}",
            "logicalNeuronCore must be 1 or 2",
        ),
        (
            "{apiVersion: neuron.aws.com/v1, kind: NeuronConfig, logicalNeuronCore: true}",
            "logicalNeuronCore must be 1 or 2",
        ),
        ("{apiVersion: neuron.aws.com/v1, kind: NeuronConfig, lnc: 1}", "no other field is known"),
        ("{apiVersion: neuron.aws.com/v2, kind: NeuronConfig}", "apiVersion must be"),
        ("{apiVersion: neuron.aws.com/v1, kind: NeuronSettings}", "kind must be NeuronConfig or"),
        (
            "{apiVersion: neuron.aws.com/v1, kind: UltraServerConfig}",
            "ultraserverMode is required and must be 1, 2 or 4",
        ),
        (
            "{apiVersion: neuron.aws.com/v1, kind: UltraServerConfig, ultraserverMode: 3}",
            "ultraserverMode is required and must be 1, 2 or 4",
        ),
    ],
)
def test_a_bad_opaque_config_is_refused_at_apply(
    cluster: Cluster, installed: str, tmp_path: Path, parameters: str, refused: str
) -> None:
    """The plugin would refuse each at pod start (api/config.py); the policy refuses
    it at `kubectl apply`, naming the field."""
    manifest = tmp_path / "template.yaml"
    manifest.write_text(
        CONFIG_TEMPLATE.format(version="v1", request=V1_REQUEST, parameters=parameters)
    )
    result = cluster.kubectl("create", "--dry-run=server", "-f", str(manifest), check=False)
    assert result.returncode != 0, result.stdout
    assert "neuron-dra-opaque-config" in result.stderr and refused in result.stderr


def test_good_opaque_configs_pass_the_policy_in_every_version(
    cluster: Cluster, installed: str, tmp_path: Path
) -> None:
    """The claims and templates of every example with a config, v1beta1 ones included
    (checked as their v1 form)."""
    checked = 0
    for path in sorted(SPECS.rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        claims = [d for d in docs if d["kind"] in ("ResourceClaim", "ResourceClaimTemplate")]
        if not any("opaque" in str(d) for d in claims):
            continue
        for doc in claims:
            doc["metadata"]["namespace"] = "default"
        manifest = tmp_path / path.name
        manifest.write_text(yaml.safe_dump_all(claims))
        result = cluster.kubectl("create", "--dry-run=server", "-f", str(manifest), check=False)
        assert result.returncode == 0, (path.name, result.stderr)
        checked += 1
    assert checked >= 5


def test_rbac_grants_exactly_what_the_plugin_calls(cluster: Cluster, installed: str) -> None:
    check_rbac(cluster)


@pytest.fixture(scope="module")
def policy_nodes(cluster: Cluster, installed: str) -> tuple[str, str]:
    """Two nodes, once the API server enforces the just created admission policies."""
    own, other = "policy-a", "policy-b"
    add_policy_nodes(cluster, own, other)
    return own, other


def test_plugin_writes_only_its_own_nodes_slices(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    check_own_nodes_slices(cluster, *policy_nodes)


def test_plugin_writes_only_its_own_nodes_pool_of_its_own_driver(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    check_own_nodes_pool_of_its_own_driver(cluster, *policy_nodes)


def test_the_plugins_probes_and_writes_pass_the_policy(
    cluster: Cluster,
    policy_nodes: tuple[str, str],
    fake_node: FakeNode,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-policy", 0))
    check_probes_and_writes(cluster, policy_nodes[0], root, caplog)


def test_plugin_reads_the_server_version_without_a_rule(cluster: Cluster, installed: str) -> None:
    check_server_version(cluster, "policy-a")


def test_plugin_cannot_create_device_classes(cluster: Cluster, installed: str) -> None:
    check_no_device_classes(cluster, "policy-a")


def test_plugin_reads_claims_but_cannot_replace_them(cluster: Cluster, installed: str) -> None:
    check_claims_read_only(cluster, "policy-a", "install-claims")


def test_plugin_writes_device_status_only_of_its_own_nodes_claims(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    check_rbac_for_claim_status(cluster)
    check_own_nodes_claim_status(cluster, *policy_nodes, "install-status")


def test_plugin_creates_events_only_about_its_own_node(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    check_own_nodes_events(cluster, *policy_nodes)


def test_plugin_patches_only_its_own_nodes_ultraserver_labels(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    check_own_nodes_ultraserver_labels(cluster, *policy_nodes)


# --------------------------------------------------------------------- uninstall


def test_uninstall_removes_everything(cluster: Cluster, installed: str) -> None:
    before = state(cluster)
    ok(run_install_script(cluster, "--uninstall", "--dry-run"))
    assert state(cluster) == before

    output = ok(run_install_script(cluster, "--uninstall", "--timeout=60s"))
    assert state(cluster) == dict.fromkeys(KEYS)
    assert "ResourceSlices the plugins published are deleted by each node's kubelet" in output
    assert cluster.list_objects("v1", "Pod", NAMESPACE) == []
    # Nothing left to delete is not an error.
    ok(run_install_script(cluster, "--uninstall"))


def test_the_documented_script_commands_run(cluster: Cluster) -> None:
    """The script's commands of the docs exactly as written, in their order, as an operator
    runs them (kubectl on PATH, no KUBECTL): a dry run changes nothing, the install rolls
    out the image, the uninstall leaves nothing. After the module's own uninstall, so the
    first dry run meets an empty cluster."""
    ran = doc_commands.run_by(doc_commands.SCRIPT)
    assert len(ran) >= 3, ran
    assert {"--dry-run", "--uninstall", "--timeout"} <= {a for c in ran for a in c.argv}, ran
    for command in ran:
        argv = shlex.split(doc_commands.fill(command.text, registry="registry.example"))
        before = state(cluster)
        result = run_install_script(cluster, *argv[1:], timeout=400.0)
        assert result.returncode == 0, (str(command), result.stdout, result.stderr)
        if "--dry-run" in argv:
            assert state(cluster) == before, command
        elif "--uninstall" in argv:
            assert state(cluster) == dict.fromkeys(KEYS), command
        else:
            assert all(state(cluster).values()), command
            image = daemonset(cluster)["spec"]["template"]["spec"]["containers"][0]["image"]
            assert image == argv[1], command


# ------------------------------------------------------------- old clusters


def test_cluster_without_v1beta1_says_so_in_one_line(e2e_binaries: Binaries) -> None:
    """resource.k8s.io/v1beta1 off, as every release ships it. The install goes on."""
    gates = "resource.k8s.io/v1beta1=false"
    with Cluster(
        e2e_binaries, controllers=["serviceaccount-controller"], runtime_config=gates
    ) as shipped:
        output = ok(run_install_script(shipped, IMAGE, "--dry-run"))
    [note] = [line for line in output.splitlines() if "v1beta1" in line]
    assert note.startswith("note: resource.k8s.io/v1beta1 is not served here"), note


def test_cluster_without_resource_v1(e2e_binaries: Binaries) -> None:
    """A control plane serving DRA only in beta, as before 1.34."""
    with Cluster(
        e2e_binaries,
        controllers=["serviceaccount-controller"],
        runtime_config="resource.k8s.io/v1=false,resource.k8s.io/v1beta1=true",
    ) as old:
        result = run_install_script(old, IMAGE)
    assert result.returncode == 3, result.stderr
    assert "serves only resource.k8s.io/v1beta1 of Dynamic Resource Allocation" in result.stderr
    assert "older than Kubernetes 1.34" in result.stderr
