"""The Helm chart (``deploy/helm/neuron-dra``) with a real helm against a real API server.

helm is built from the Go module proxy like the Kubernetes binaries
(``harness/neuron_dra_harness/build.py``). Offline: lint, the schema's messages, what values
change in the rendered objects, and that ``deploy/*.yaml`` are the chart's
output. Against the cluster, one install shared by the module: the server
accepts the rendered objects, an upgrade with the same values changes nothing,
a new tag rolls the DaemonSet, the plugin's permissions pass the same checks
as the install script's (``tests/e2e/plugin_access.py``), and uninstall leaves
nothing behind.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import yaml

from neuron_dra.cli import parser
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.tools.doctor.clusterchecks import POLICIES
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import DEFAULT_CONTROLLERS, Cluster
from neuron_dra_harness.manifests import install_monitoring_crds
from tests import doc_commands
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
CHART = DEPLOY / "helm" / "neuron-dra"
RELEASE = "neuron-dra"
# The chart installs into helm's namespace, which also keeps the release.
RELEASE_NAMESPACE = NAMESPACE
REPOSITORY = "registry.invalid/neuron-dra"
IMAGE_VALUES = (f"--set=image.repository={REPOSITORY}", "--set=image.tag=1.0.0")
VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
STANDARD_LABELS = {
    "app.kubernetes.io/name": "neuron-dra",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/version": VERSION,
    "app.kubernetes.io/part-of": "neuron-dra",
    "app.kubernetes.io/managed-by": "Helm",
    "helm.sh/chart": f"neuron-dra-{VERSION}",
}
DS_KEY: Key = ("apps/v1", "DaemonSet", "neuron-dra", NAMESPACE)


def helm_env(home: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """helm's caches and config under `home`, out of the checkout and the user's."""
    # helm's namespace, where no -n gives one: the driver's, as every documented command
    # says; the chart refuses `default`.
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HELM_NAMESPACE": NAMESPACE}
    for name in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{name}_HOME"] = str(home / f"helm-{name.lower()}")
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def run(
    args: list[str],
    env: dict[str, str],
    stdin: str | None = None,
    cwd: Path | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        check=False,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def rollout(cluster: Cluster) -> str:
    """The DaemonSet's rollout as its controller and helm see it: generation, status, and
    each plugin pod's revision, node, phase, readiness, with the events about each."""

    def events(name: str) -> list[str]:
        return [
            f"{e.get('reason')}: {e.get('message')}" for e in cluster.events_for(name, NAMESPACE)
        ]

    ds = cluster.get_or_none(*DS_KEY) or {"metadata": {}}
    lines = [
        f"DaemonSet generation={ds['metadata'].get('generation')} "
        f"status={ds.get('status')} events={events('neuron-dra')}"
    ]
    for pod in cluster.list_objects("v1", "Pod", NAMESPACE):
        meta, status = pod["metadata"], pod.get("status", {})
        conditions = [
            c for c in status.get("conditions", []) if c["type"] in ("Ready", "PodScheduled")
        ]
        lines.append(
            f"pod {meta['name']} rev={meta.get('labels', {}).get('controller-revision-hash')} "
            f"node={pod['spec'].get('nodeName')} phase={status.get('phase')} "
            f"deleting={meta.get('deletionTimestamp')} conditions={conditions} "
            f"events={events(meta['name'])}"
        )
    return "\n".join(lines)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def offline(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return helm_env(tmp_path_factory.mktemp("helm-home"))


def template(helm_bin: Path, env: dict[str, str], *values: str) -> list[Obj]:
    """What `helm install` makes with `values` (not the `helm test` hooks)."""
    out = ok(run([str(helm_bin), "template", RELEASE, str(CHART), "--skip-tests", *values], env))
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_key(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def container_of(objects: list[Obj]) -> Obj:
    [container] = by_key(objects)[("DaemonSet", "neuron-dra")]["spec"]["template"]["spec"][
        "containers"
    ]
    return cast(Obj, container)


# --------------------------------------------------------------------- offline


def test_the_helm_test_pod_claims_one_device(helm_bin: Path, offline: dict[str, str]) -> None:
    """`helm test` runs a pod, a hook the next `helm test` replaces, using the claim
    template for one whole device that the chart installs; the pod runs the plugin's
    image unless `tests.image` names another, and `tests.enabled=false` leaves both
    out. (It runs on the real node: test_realnode.py.)"""
    show = ("--show-only=templates/tests/claim.yaml", *IMAGE_VALUES)
    out = ok(run([str(helm_bin), "template", RELEASE, str(CHART), *show], offline))
    rendered = {doc["kind"]: doc for doc in yaml.safe_load_all(out) if doc}
    claim_template, pod = rendered["ResourceClaimTemplate"], rendered["Pod"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "test"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation"
    # Not a hook: `helm test --logs` would read its logs as a pod's.
    assert "annotations" not in claim_template["metadata"]
    [request] = claim_template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "neuron.aws.com"
    assert request["exactly"]["count"] == 1
    assert pod["spec"]["resourceClaims"] == [
        {"name": "neuron", "resourceClaimTemplateName": claim_template["metadata"]["name"]}
    ]
    # The DaemonSet deletes a pod its selector matches on its node, as one too many.
    [daemonset] = [
        o for o in template(helm_bin, offline, *IMAGE_VALUES) if o["kind"] == "DaemonSet"
    ]
    selector = daemonset["spec"]["selector"]["matchLabels"].items()
    assert not selector <= pod["metadata"]["labels"].items()
    [container] = pod["spec"]["containers"]
    assert container["image"] == f"{REPOSITORY}:1.0.0"
    assert container["resources"]["claims"] == [{"name": "neuron"}]
    assert pod["spec"]["tolerations"][0]["key"] == "aws.amazon.com/neuron"
    other = "registry.example/busybox:1"
    out = ok(
        run(
            [str(helm_bin), "template", RELEASE, str(CHART), *show, f"--set=tests.image={other}"],
            offline,
        )
    )
    [pod] = [doc for doc in yaml.safe_load_all(out) if doc and doc["kind"] == "Pod"]
    assert pod["spec"]["containers"][0]["image"] == other
    off = template(helm_bin, offline, *IMAGE_VALUES, "--set=tests.enabled=false")
    assert not [o for o in off if o["kind"] == "ResourceClaimTemplate"]


def test_lint(helm_bin: Path, offline: dict[str, str]) -> None:
    out = ok(run([str(helm_bin), "lint", "--strict", str(CHART), *IMAGE_VALUES], offline))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    # Lint passes without an image (it only mentions it); rendering does not.
    bare = run([str(helm_bin), "lint", "--strict", str(CHART)], offline)
    assert bare.returncode == 0 and "image.repository is required" in bare.stderr
    failed = run([str(helm_bin), "template", RELEASE, str(CHART)], offline)
    assert failed.returncode == 1
    assert (
        "image.repository is required: the registry/repository the plugin image was pushed to"
        in (failed.stderr)
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "health.unhealthyEffect=Evict",
            "at '/health/unhealthyEffect': value must be one of 'NoSchedule', 'NoExecute'",
        ),
        ("neuronCores=on", "at '/neuronCores': value must be one of 'auto', 'off'"),
        (
            "ultraserverDevices=all",
            "at '/ultraserverDevices': value must be one of 'auto', 'both', 'node', 'devices'",
        ),
        ("logFormat=yaml", "at '/logFormat': value must be one of 'text', 'json'"),
        ("metrics.port=70000", "at '/metrics/port': maximum: got 70,000, want 65,535"),
        ("health.interval=0", "at '/health/interval': exclusiveMinimum: got 0, want 0"),
        ("metrics.prot=9401", "at '/metrics': additional properties 'prot' not allowed"),
        ("image.digest=sha256:abc", "at '/image/digest': 'sha256:abc' does not match pattern"),
        (
            "image.pullPolicy=always",
            "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
        ),
        # The namespace is helm's (-n), not a value.
        ("namespace=drivers", "at '': additional properties 'namespace' not allowed"),
        (
            "securityContext.privilege=true",
            "at '/securityContext': additional properties 'privilege' not allowed",
        ),
        (
            "deviceClasses.extendedResourceNames.neuron=neuron",
            "at '/deviceClasses/extendedResourceNames/neuron': 'neuron' does not match pattern",
        ),
        # Both selectors are the schema's one labelSelector definition ($ref).
        (
            "metrics.networkPolicy.podSelector.matchLabelz.a=b",
            "at '/metrics/networkPolicy/podSelector': additional properties 'matchLabelz'",
        ),
        (
            "metrics.networkPolicy.namespaceSelector.matchLabels.a=1",
            "at '/metrics/networkPolicy/namespaceSelector/matchLabels/a': got number, want string",
        ),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(
    helm_bin: Path, offline: dict[str, str], value: str, message: str
) -> None:
    for command in ("template", "lint"):
        args = [str(helm_bin), command, *([RELEASE] if command == "template" else [])]
        result = run([*args, str(CHART), *IMAGE_VALUES, f"--set={value}"], offline)
        assert result.returncode == 1, (command, result.stdout)
        assert message in result.stdout + result.stderr, (command, result.stdout, result.stderr)


def test_sagemaker_hyperpod_instance_types_are_accepted(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    """HyperPod nodes carry `ml.`-prefixed types (ml.trn1.32xlarge), which the install docs
    tells its users to add; the schema once refused the second dot."""
    types = "--set=instanceTypes={trn2.48xlarge,ml.trn1.32xlarge,ml.trn2.48xlarge}"
    out = ok(run([str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, types], offline))
    assert "- ml.trn1.32xlarge" in out
    bad = run(
        [str(helm_bin), "lint", str(CHART), *IMAGE_VALUES, "--set=instanceTypes={ml.}"], offline
    )
    assert bad.returncode == 1 and "does not match pattern" in bad.stdout + bad.stderr


def test_two_classes_with_one_extended_resource_name_are_refused(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    """A check of the template, not the schema: lint only mentions it, rendering fails."""
    same = "--set=deviceClasses.extendedResourceNames.neuroncore=aws.amazon.com/neuron"
    message = (
        "deviceClasses.extendedResourceNames: aws.amazon.com/neuron is given to both neuron "
        "and neuroncore; each class needs a name of its own"
    )
    result = run([str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, same], offline)
    assert result.returncode == 1 and message in result.stderr
    result = run([str(helm_bin), "lint", str(CHART), *IMAGE_VALUES, same], offline)
    assert message in result.stderr


@pytest.mark.parametrize("create", ["true", "false"])
def test_the_namespaces_default_service_account_is_refused(
    helm_bin: Path, offline: dict[str, str], create: str
) -> None:
    """Every pod of the namespace that names no account runs as `default`: the plugin's
    grants must not go to it, whether the chart makes the account or not. A check of
    the template, for its message (the schema's would only say `not` failed): lint
    mentions it, rendering fails."""
    values = ["--set=serviceAccount.name=default", f"--set=serviceAccount.create={create}"]
    message = "serviceAccount.name: default is refused: every pod of the namespace"
    result = run([str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, *values], offline)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    result = run([str(helm_bin), "lint", str(CHART), *IMAGE_VALUES, *values], offline)
    assert message in result.stderr + result.stdout
    named = "--set=serviceAccount.name=neuron-dra-plugin"
    objects = template(helm_bin, offline, *IMAGE_VALUES, named)
    pod = by_key(objects)[("DaemonSet", "neuron-dra")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "neuron-dra-plugin"
    assert ("ServiceAccount", "neuron-dra-plugin") in by_key(objects)


def test_an_old_cluster_is_refused(helm_bin: Path, offline: dict[str, str]) -> None:
    args = [str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, "--kube-version=1.33.0"]
    result = run(args, offline)
    assert result.returncode == 1
    refused = "chart requires kubeVersion: >=1.34.0-0 which is incompatible with Kubernetes v1.33"
    assert refused in result.stderr


def test_defaults(helm_bin: Path, offline: dict[str, str]) -> None:
    objects = template(helm_bin, offline, *IMAGE_VALUES)
    container = container_of(objects)
    assert container["image"] == f"{REPOSITORY}:1.0.0"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    [untagged] = [
        o
        for o in template(helm_bin, offline, f"--set=image.repository={REPOSITORY}")
        if o["kind"] == "DaemonSet"
    ]
    assert untagged["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"{REPOSITORY}:{chart['appVersion']}"
    )
    kinds = sorted(kind for kind, _ in by_key(objects))
    assert kinds == sorted(
        [
            "ServiceAccount",
            # The plugin's, and the scrapers' (metrics.authorization is on).
            *["ClusterRole"] * 2,
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "DaemonSet",
            *["DeviceClass"] * 5,
            *["ValidatingAdmissionPolicy"] * 6,
            *["ValidatingAdmissionPolicyBinding"] * 6,
            "NetworkPolicy",
            # The `helm test` pod's claim template.
            "ResourceClaimTemplate",
        ]
    )
    service = by_key(objects)[("Service", "neuron-dra-metrics")]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert {"name": "metrics", "containerPort": 9400, "protocol": "TCP"} in container["ports"]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "neuron-dra"}


def test_values_shape_the_objects(helm_bin: Path, offline: dict[str, str]) -> None:
    digest = "sha256:" + "ab" * 32
    objects = template(
        helm_bin,
        offline,
        *IMAGE_VALUES,
        f"--set=image.digest={digest}",
        "--set=image.pullPolicy=Always",
        "--namespace=drivers",
        "--set=priorityClassName=",
        "--set=imagePullSecrets={ecr}",
        "--set=instanceTypes={trn2.48xlarge,trn2u.48xlarge}",
        "--set=tolerations[0].key=dedicated,tolerations[0].operator=Exists",
        "--set=resources.requests.memory=128Mi,resources.limits.memory=256Mi",
        "--set=logFormat=text,logLevel=debug",
        # --set reads 2.5 as a string, which the schema refuses; --set-json a number.
        "--set-json=health.interval=2.5",
        "--set=health.recovery=600",
        "--set=health.unhealthyEffect=NoExecute",
        "--set=rediscoverInterval=30,ultraserverDevices=devices,neuronCores=off",
        "--set=metrics.port=9500,metrics.service.labels.release=prometheus",
        "--set=deviceClasses.extendedResourceNames.neuron=",
        "--set=deviceClasses.extendedResourceNames.neuroncore=example.com/neuroncore",
    )
    found = by_key(objects)
    assert "Namespace" not in {kind for kind, _ in found}
    for (kind, name), obj in found.items():
        if kind in {"ServiceAccount", "Service", "DaemonSet"}:
            assert obj["metadata"]["namespace"] == "drivers", (kind, name)
    binding = found[("ClusterRoleBinding", "neuron-dra")]
    assert binding["subjects"][0]["namespace"] == "drivers"
    for name in POLICIES:
        policy = found[("ValidatingAdmissionPolicy", name)]
        [condition] = policy["spec"]["matchConditions"]
        assert '"system:serviceaccount:drivers:neuron-dra"' in condition["expression"]

    pod = found[("DaemonSet", "neuron-dra")]["spec"]["template"]["spec"]
    container = container_of(objects)
    assert (container["image"], container["imagePullPolicy"]) == (
        f"{REPOSITORY}@{digest}",
        "Always",
    )
    assert "priorityClassName" not in pod and pod["imagePullSecrets"] == [{"name": "ecr"}]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"][0]["values"] == ["trn2.48xlarge", "trn2u.48xlarge"]
    assert pod["tolerations"][-1] == {"key": "dedicated", "operator": "Exists"}
    assert len(pod["tolerations"]) == 4
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }
    args = parser().parse_args(container["command"][1:])
    assert (args.log_format, args.log_level, args.metrics_port) == ("text", "debug", 9500)
    assert (args.health_interval, args.health_recovery, args.unhealthy_effect) == (
        2.5,
        600.0,
        "NoExecute",
    )
    assert (args.rediscover_interval, args.ultraserver_devices, args.neuron_cores) == (
        30.0,
        "devices",
        "off",
    )
    service = found[("Service", "neuron-dra-metrics")]
    assert service["metadata"]["labels"]["release"] == "prometheus"
    assert service["spec"]["ports"][0]["port"] == 9500

    classes = {name: o["spec"] for (kind, name), o in found.items() if kind == "DeviceClass"}
    assert "extended-resource-neuron.neuron.aws.com" not in classes
    assert classes["extended-resource-neuroncore.neuron.aws.com"]["extendedResourceName"] == (
        "example.com/neuroncore"
    )
    assert classes["extended-resource-neurondevice.neuron.aws.com"]["extendedResourceName"] == (
        "aws.amazon.com/neurondevice"
    )


def test_parts_turn_off(helm_bin: Path, offline: dict[str, str]) -> None:
    objects = template(
        helm_bin,
        offline,
        *IMAGE_VALUES,
        "--set=deviceClasses.enabled=false",
        "--set=admissionPolicy.enabled=false",
        "--set=metrics.enabled=false",
        "--set=configPolicy.enabled=false",
        "--set=coreRequestPolicy.enabled=false",
        "--set=networkPolicy.enabled=false",
        "--set=tests.enabled=false",
    )
    assert sorted({o["kind"] for o in objects}) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    container = container_of(objects)
    assert parser().parse_args(container["command"][1:]).metrics_port == -1
    assert [p["name"] for p in container["ports"]] == ["healthz"]
    # The Service alone can go, the metrics port stays.
    objects = template(helm_bin, offline, *IMAGE_VALUES, "--set=metrics.service.enabled=false")
    assert "Service" not in {o["kind"] for o in objects}
    assert [p["name"] for p in container_of(objects)["ports"]] == ["healthz", "metrics"]


def test_the_committed_manifests_are_the_charts_output(
    helm_bin: Path, tmp_path: Path, offline: dict[str, str]
) -> None:
    """What `make lint` checks, and that the check notices an edit to either side."""
    script = [sys.executable, str(REPO / "scripts" / "render_manifests.py"), "--check"]
    env = {**offline, "NEURON_DRA_HELM": str(helm_bin)}
    assert "deploy/*.yaml match the chart" in ok(run(script, env))
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    values = copy / "helm" / "neuron-dra" / "values.yaml"
    values.write_text(values.read_text().replace("  interval: 5\n", "  interval: 7\n"))
    stale = run([*script, f"--deploy-dir={copy}"], env)
    assert stale.returncode == 1
    assert "-        - --health-interval=5\n+        - --health-interval=7" in stale.stderr
    assert "differ from the chart: run `python scripts/render_manifests.py`" in stale.stderr
    (copy / "extra.yaml").write_text("{}\n")
    stale = run([*script, f"--deploy-dir={copy}"], env)
    assert "deploy/extra.yaml: no template renders it" in stale.stderr


# --------------------------------------------------------------- the cluster


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    """Its own control plane with the DaemonSet controller; uninstall empties it. The
    Prometheus Operator's kinds are served, for the documented upgrade that turns on the
    chart's monitoring objects."""
    controllers = (*DEFAULT_CONTROLLERS, "daemonset-controller")
    with Cluster(e2e_binaries, controllers=controllers) as running:
        install_monitoring_crds(running)
        yield running


def helm(helm_bin: Path, cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    return run([str(helm_bin), *args, f"--namespace={RELEASE_NAMESPACE}"], env)


def upgrade(helm_bin: Path, cluster: Cluster, *values: str) -> str:
    return ok(
        helm(helm_bin, cluster, "upgrade", RELEASE, str(CHART), "--wait", "--timeout=60s", *values)
    )


@pytest.fixture(scope="module")
def installed(helm_bin: Path, cluster: Cluster) -> tuple[str, list[Key]]:
    """`helm install --wait` once for the module: its output and the objects it made."""
    output = ok(
        helm(
            helm_bin,
            cluster,
            "install",
            RELEASE,
            str(CHART),
            "--wait",
            "--timeout=60s",
            "--create-namespace",
            *IMAGE_VALUES,
        )
    )
    manifest = ok(helm(helm_bin, cluster, "get", "manifest", RELEASE))
    return output, [key(o) for o in yaml.safe_load_all(manifest) if o]


def test_install(cluster: Cluster, installed: tuple[str, list[Key]]) -> None:
    output, keys = installed
    assert "STATUS: deployed" in output and "REVISION: 1" in output
    assert all(object_state(cluster, keys).values())
    assert len(keys) == 27, keys
    for k in keys:
        labels = cluster.get(*k)["metadata"]["labels"]
        assert {name: labels.get(name) for name in STANDARD_LABELS} == STANDARD_LABELS, k
    spec = cluster.get(*DS_KEY)["spec"]
    assert spec["template"]["spec"]["containers"][0]["image"] == f"{REPOSITORY}:1.0.0"
    affinity = spec["template"]["spec"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["values"] == list(INSTANCE_TYPES)
    for name in POLICIES:
        policy = cluster.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", name)
        assert not policy.get("status", {}).get("typeChecking", {}).get("expressionWarnings")


def test_the_server_accepts_the_rendered_objects(
    helm_bin: Path, cluster: Cluster, installed: tuple[str, list[Key]]
) -> None:
    """`helm template`, then a server-side dry run of every object (the `helm test` ones
    too): schema, defaults and admission as for a real write, and nothing changes."""
    _, keys = installed
    before = object_state(cluster, keys)
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    rendered = ok(
        run(
            [
                str(helm_bin),
                "template",
                RELEASE,
                str(CHART),
                *IMAGE_VALUES,
                "--set=image.tag=1.0.1",
            ],
            env,
        )
    )
    kubectl = [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
    applied = ok(
        run(
            [
                *kubectl,
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
                "--field-manager=dry-run-check",
                "-f",
                "-",
            ],
            env,
            stdin=rendered,
        )
    )
    assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in applied
    # What the install made, and the `helm test` pod, which the template shows too.
    assert "pod/neuron-dra-test serverside-applied (server dry run)" in applied
    assert applied.count("(server dry run)") == len(keys) + 1
    assert object_state(cluster, keys) == before


def test_the_notes_commands_run(cluster: Cluster, installed: tuple[str, list[Key]]) -> None:
    """What NOTES.txt tells an operator to run to verify the install runs, as shown."""
    output, _ = installed
    notes = output.split("NOTES:", 1)[1]
    commands = [
        line.split("#", 1)[0].split()
        for line in notes.splitlines()
        if line.strip().startswith("kubectl") and " apply " not in line
    ]
    assert len(commands) == 4, notes  # the scrapers' binding, and three checks
    kubectl = [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
    for command in commands:
        result = subprocess.run(
            [*kubectl, *command[1:], *(["--timeout=60s"] if "rollout" in command else [])],
            check=False,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, (command, result.stderr)


OPERATOR_VALUES = (
    "--set=nodeSelector.pool=neuron",
    "--set=podLabels.team=ml",
    "--set=podAnnotations.example\\.com/scrape=yes",
    "--set=kubeletRootDir=/data/kubelet",
    "--set=securityContext.seLinuxOptions.type=spc_t",
    # What reading /dev/kmsg takes; the server refuses privileged without escalation.
    "--set=securityContext.privileged=true,securityContext.allowPrivilegeEscalation=true",
    '--set-json=affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":'
    '{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"Exists"}]}]}}}',
)


def test_the_values_operators_expect_from_other_charts(
    helm_bin: Path, cluster: Cluster, installed: tuple[str, list[Key]]
) -> None:
    """nodeSelector, affinity, pod labels and annotations, the kubelet's root directory
    and the container's securityContext (merged over the driver's) land where an operator
    looks for them, and the server takes it."""
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    rendered = ok(
        run([str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, *OPERATOR_VALUES], env)
    )
    [daemonset] = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["annotations"] == {"example.com/scrape": "yes"}
    assert daemonset["spec"]["selector"]["matchLabels"].get("team") is None
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "neuron"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}
    ]
    [container] = spec["containers"]
    assert container["securityContext"] == {
        "seLinuxOptions": {"type": "spc_t"},
        "privileged": True,
        "allowPrivilegeEscalation": True,
        "runAsUser": 0,
        "runAsGroup": 0,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    env_vars = {e["name"]: e.get("value") for e in container["env"]}
    assert env_vars["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/data/kubelet/plugins_registry"
    assert env_vars["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/data/kubelet/plugins"
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    for name in ("plugins-registry", "plugin-dir"):
        assert paths[name] == mounts[name] and paths[name].startswith("/data/kubelet/")
    kubectl = [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
    applied = ok(
        run(
            [
                *kubectl,
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
                "--field-manager=dry-run-check",
                "-f",
                "-",
            ],
            env,
            stdin=rendered,
        )
    )
    assert "daemonset.apps/neuron-dra serverside-applied (server dry run)" in applied


def test_an_upgrade_with_the_same_values_changes_nothing(
    helm_bin: Path, cluster: Cluster, installed: tuple[str, list[Key]]
) -> None:
    _, keys = installed
    before = object_state(cluster, keys)
    assert "STATUS: deployed" in upgrade(helm_bin, cluster, *IMAGE_VALUES)
    assert object_state(cluster, keys) == before


def test_a_new_tag_rolls_the_daemonset(
    helm_bin: Path, cluster: Cluster, installed: tuple[str, list[Key]]
) -> None:
    _, keys = installed
    before = object_state(cluster, keys)
    upgrade(helm_bin, cluster, *IMAGE_VALUES, "--set=image.tag=1.0.1")
    after = object_state(cluster, keys)
    assert {k for k in keys if after[k] != before[k]} == {DS_KEY}
    assert cast(tuple[str, int], after[DS_KEY])[1] == cast(tuple[str, int], before[DS_KEY])[1] + 1
    template = cluster.get(*DS_KEY)["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == f"{REPOSITORY}:1.0.1"
    upgrade(helm_bin, cluster, *IMAGE_VALUES)
    assert cluster.get(*DS_KEY)["spec"]["template"] != template


def test_a_neuron_node_gets_a_plugin_pod(
    cluster: Cluster, installed: tuple[str, list[Key]]
) -> None:
    """Available only minReadySeconds after the kubelet stand-in reports it ready."""
    cluster.add_node("trn2-helm", labels={"node.kubernetes.io/instance-type": "trn2.48xlarge"})
    cluster.start_kubelet_side("trn2-helm")

    def available() -> Obj | None:
        status = cast(Obj, cluster.get(*DS_KEY)["status"])
        done = (status.get("desiredNumberScheduled"), status.get("numberAvailable")) == (1, 1)
        return status if done else None

    cluster.wait_for("the plugin pod available", available, timeout=60)
    [pod] = cluster.list_objects("v1", "Pod", NAMESPACE)
    assert pod["spec"]["nodeName"] == "trn2-helm"
    [container] = pod["spec"]["containers"]
    assert container["readinessProbe"]["exec"] == {
        "command": ["python3", "-I", "-m", "neuron_dra.agent.kubelet.probeclient", "readiness"]
    }
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert cluster.get(*DS_KEY)["spec"]["minReadySeconds"] == 10


# --------------------------------------------------------------- permissions


@pytest.fixture(scope="module")
def policy_nodes(cluster: Cluster, installed: tuple[str, list[Key]]) -> tuple[str, str]:
    own, other = "policy-a", "policy-b"
    add_policy_nodes(cluster, own, other)
    return own, other


def test_rbac_grants_exactly_what_the_plugin_calls(
    cluster: Cluster, installed: tuple[str, list[Key]]
) -> None:
    check_rbac(cluster)


def test_admission_policies_keep_the_plugin_to_its_node(
    cluster: Cluster,
    policy_nodes: tuple[str, str],
    fake_node: FakeNode,
    caplog: pytest.LogCaptureFixture,
) -> None:
    check_own_nodes_slices(cluster, *policy_nodes)
    check_own_nodes_pool_of_its_own_driver(cluster, *policy_nodes)
    check_own_nodes_ultraserver_labels(cluster, *policy_nodes)
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-helm", 0))
    check_probes_and_writes(cluster, policy_nodes[0], root, caplog)


def test_plugin_reads_what_it_needs_and_nothing_more(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    own, _ = policy_nodes
    check_server_version(cluster, own)
    check_no_device_classes(cluster, own)
    check_claims_read_only(cluster, own, "helm-claims")


def test_plugin_writes_device_status_only_of_its_own_nodes_claims(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    check_rbac_for_claim_status(cluster)
    check_own_nodes_claim_status(cluster, *policy_nodes, "helm-status")


def test_plugin_creates_events_only_about_its_own_node(
    cluster: Cluster, policy_nodes: tuple[str, str]
) -> None:
    check_own_nodes_events(cluster, *policy_nodes)


# --------------------------------------------------------------- uninstall


def test_uninstall_leaves_nothing(
    helm_bin: Path, cluster: Cluster, installed: tuple[str, list[Key]]
) -> None:
    _, keys = installed
    output = ok(helm(helm_bin, cluster, "uninstall", RELEASE, "--wait", "--timeout=60s"))
    assert f'release "{RELEASE}" uninstalled' in output
    assert object_state(cluster, keys) == dict.fromkeys(keys)
    # The namespace is the operator's (made by --create-namespace): it stays, empty.
    assert ("v1", "Namespace", NAMESPACE, None) not in keys
    assert cluster.get_or_none("v1", "Namespace", NAMESPACE) is not None
    assert cluster.list_objects("v1", "Pod", NAMESPACE) == []
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        found = cluster.list_objects("rbac.authorization.k8s.io/v1", kind)
        assert not [o for o in found if o["metadata"]["name"].startswith("neuron-dra")]
    assert not [
        c
        for c in cluster.list_objects("resource.k8s.io/v1", "DeviceClass")
        if c["metadata"]["name"].endswith("neuron.aws.com")
    ]
    # helm's own record of the release is gone too.
    secrets = cluster.list_objects("v1", "Secret", RELEASE_NAMESPACE)
    assert not [s for s in secrets if s["metadata"].get("labels", {}).get("owner") == "helm"]


def test_the_documented_helm_commands_run(helm_bin: Path, cluster: Cluster) -> None:
    """Each helm command of the docs as written, but for <registry> and a --timeout, from the
    repository root: every install, each followed by the upgrades and the uninstall. Last in
    the module: it first uninstalls the module's release, if still there."""
    ran = doc_commands.run_by(doc_commands.HELM)
    verbs = {c.argv[1] for c in ran}
    assert verbs == {"install", "upgrade", "uninstall"}, ran
    if helm(helm_bin, cluster, "status", RELEASE).returncode == 0:
        ok(helm(helm_bin, cluster, "uninstall", RELEASE, "--wait", "--timeout=60s"))
    env = helm_env(cluster.workdir, cluster.kubeconfig)

    def rolled_out() -> bool:
        status = cluster.get(*DS_KEY)["status"]
        desired = status.get("desiredNumberScheduled")
        return bool(desired) and status.get("numberAvailable") == desired

    def go(command: doc_commands.DocCommand) -> str:
        argv = shlex.split(doc_commands.fill(command.text, registry="registry.invalid"))
        # helm waits on the DaemonSet's rollout: minReadySeconds, scheduling and the kubelet
        # stand-in on a loaded machine. A wait that still ends says what it was waiting on.
        result = run([str(helm_bin), *argv[1:], "--timeout=300s"], env, cwd=REPO, timeout=360)
        assert result.returncode == 0, f"{command.text}\n{result.stderr}\n{rollout(cluster)}"
        return result.stdout

    for install in [c for c in ran if c.argv[1] == "install"]:
        assert "STATUS: deployed" in go(install), install
        assert cluster.get(*DS_KEY)["metadata"]["labels"] == STANDARD_LABELS
        # As the docs go on: verified (rollout status) before an upgrade. An upgrade within
        # minReadySeconds of the install stalled the kube-controller-manager's rollout here
        # until something re-queued the DaemonSet.
        cluster.wait_for("the plugin pod available", rolled_out, timeout=60)
        for command in [c for c in ran if c.argv[1] == "upgrade"]:
            assert "STATUS: deployed" in go(command), command
        for command in [c for c in ran if c.argv[1] == "uninstall"]:
            assert "uninstalled" in go(command), command
        assert cluster.get_or_none(*DS_KEY) is None
