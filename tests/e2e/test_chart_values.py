"""Chart values operators bring from other charts, and what the chart refuses, with a
real helm (``tests/e2e/test_helm.py`` builds it): the namespace `default`, the two forms
of `imagePullSecrets`, and the `helm test` claim's DeviceClass when the chart's classes
are left out. helm's notes, which only an install renders, against an API server of
their own with no release in it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from tests.e2e.plugin_access import Obj
from tests.e2e.test_helm import (
    CHART,
    IMAGE_VALUES,
    RELEASE,
    by_key,
    helm_env,
    offline,
    ok,
    run,
    template,
)

pytestmark = pytest.mark.e2e
__all__ = ["offline"]  # the fixture, shared with test_helm


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    with Cluster(e2e_binaries) as running:
        yield running


def dry_run(helm_bin: Path, cluster: Cluster, *values: str) -> str:
    """helm's notes of an install with `values`, which ask the server what they look up."""
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    install = [str(helm_bin), "install", RELEASE, str(CHART), "--dry-run=server", *IMAGE_VALUES]
    return ok(run([*install, *values], env)).split("NOTES:", 1)[1]


INSTALL_PAGE = CHART.parents[2] / "docs/operators/install.md"
REFUSED = 'namespace default is refused: the plugin pods need Pod Security "privileged"'
TEST_CLAIM = "--show-only=templates/tests/claim.yaml"


def rendered(helm_bin: Path, env: dict[str, str], *values: str) -> list[Obj]:
    """What `helm template` makes, the `helm test` objects too."""
    out = ok(run([str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, *values], env))
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize(
    "where", [["--namespace=default"], ["--namespace=team", "--set=namespaceOverride=default"]]
)
def test_the_default_namespace_is_refused(
    helm_bin: Path, offline: dict[str, str], where: list[str]
) -> None:
    """Like NVIDIA's DRA driver chart: the plugin pods need Pod Security "privileged",
    which labelling `default` would give every pod there. Whichever namespace the objects
    go to counts, and allowDefaultNamespace is the way round it."""
    result = run([str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, *where], offline)
    assert result.returncode == 1 and REFUSED in result.stderr, result.stderr
    result = run([str(helm_bin), "lint", str(CHART), *IMAGE_VALUES, *where], offline)
    assert REFUSED in result.stderr + result.stdout
    allowed = template(helm_bin, offline, *IMAGE_VALUES, *where, "--set=allowDefaultNamespace=true")
    assert by_key(allowed)[("DaemonSet", "neuron-dra")]["metadata"]["namespace"] == "default"
    moved = template(
        helm_bin, offline, *IMAGE_VALUES, "--namespace=default", "--set=namespaceOverride=team"
    )
    assert by_key(moved)[("DaemonSet", "neuron-dra")]["metadata"]["namespace"] == "team"


def test_image_pull_secrets_take_names_and_name_objects(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    """`[ecr]` as before, and `[{name: ecr}]` as the NVIDIA and AWS charts take them,
    mixed too, on the plugin pods and the `helm test` pod."""
    expected = [{"name": "ecr"}, {"name": "mirror"}]
    for secrets in (["ecr", "mirror"], expected, ["ecr", {"name": "mirror"}]):
        objects = rendered(helm_bin, offline, f"--set-json=imagePullSecrets={json.dumps(secrets)}")
        pods = [
            o["spec"]["template"]["spec"] if o["kind"] == "DaemonSet" else o["spec"]
            for o in objects
            if o["kind"] in ("DaemonSet", "Pod")
        ]
        assert len(pods) == 2
        assert [pod["imagePullSecrets"] for pod in pods] == [expected, expected], secrets
    for bad in ([{"nam": "ecr"}], [{"name": "Not_A_Name"}], [7]):
        args = [
            str(helm_bin),
            "lint",
            str(CHART),
            *IMAGE_VALUES,
            f"--set-json=imagePullSecrets={json.dumps(bad)}",
        ]
        result = run(args, offline)
        assert result.returncode == 1 and "at '/imagePullSecrets/0'" in result.stdout, bad


def test_the_test_claim_asks_only_for_a_class_that_exists(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    """Without the chart's DeviceClasses the `helm test` claim would wait forever for
    neuron.aws.com: it asks for the class tests.deviceClassName names, or there is no
    test pod and helm's notes say why."""

    def test_objects(*values: str) -> dict[tuple[str, str], Obj]:
        return by_key(
            [
                o
                for o in rendered(helm_bin, offline, *values)
                if o["kind"] in ("Pod", "ResourceClaimTemplate")
            ]
        )

    def claim_class(objects: dict[tuple[str, str], Obj]) -> str:
        claim = objects[("ResourceClaimTemplate", "neuron-dra-test-claim")]
        [request] = claim["spec"]["spec"]["devices"]["requests"]
        return str(request["exactly"]["deviceClassName"])

    assert claim_class(test_objects()) == "neuron.aws.com"
    assert not test_objects("--set=deviceClasses.enabled=false")
    mine = test_objects(
        "--set=deviceClasses.enabled=false", "--set=tests.deviceClassName=gpu-like.example.com"
    )
    assert ("Pod", "neuron-dra-test") in mine
    assert claim_class(mine) == "gpu-like.example.com"
    bad = run(
        [str(helm_bin), "lint", str(CHART), *IMAGE_VALUES, "--set=tests.deviceClassName=A B"],
        offline,
    )
    assert bad.returncode == 1 and "at '/tests/deviceClassName'" in bad.stdout, bad.stdout


def test_the_notes_say_when_helm_test_has_no_pod(helm_bin: Path, cluster: Cluster) -> None:
    note = "`helm test` has no pod: deviceClasses.enabled=false leaves out the neuron.aws.com"
    off = "--set=deviceClasses.enabled=false"
    assert note in " ".join(dry_run(helm_bin, cluster, off).split())
    for values in ([], [off, "--set=tests.enabled=false"], [off, "--set=tests.deviceClassName=x"]):
        assert "`helm test` has no pod" not in dry_run(helm_bin, cluster, *values), values


def test_the_notes_check_pod_security_where_the_pods_go(helm_bin: Path, cluster: Cluster) -> None:
    """With namespaceOverride the pods go to that namespace, not the release's: the
    warning is about the namespace that refuses them."""
    for name, level in (("strict-ns", "baseline"), ("open-ns", "privileged")):
        labels = {"pod-security.kubernetes.io/enforce": level}
        cluster.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        )
    warning = 'WARNING: namespace strict-ns enforces Pod Security "baseline"'
    notes = dry_run(helm_bin, cluster, "--namespace=open-ns", "--set=namespaceOverride=strict-ns")
    assert warning in notes
    assert "kubectl label namespace strict-ns --overwrite" in notes
    notes = dry_run(helm_bin, cluster, "--namespace=strict-ns", "--set=namespaceOverride=open-ns")
    assert "WARNING" not in notes, notes


def test_the_install_page_counts_the_objects_helm_installs(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    """install.md's count is what `helm install` makes with the default values; the
    `helm test` pod comes on top, with `helm test`."""
    page = " ".join(INSTALL_PAGE.read_text().split())
    [(count, listed)] = re.findall(r"`helm install` \((\d+) objects: ([^)]*)\)", page)
    installed = template(helm_bin, offline, *IMAGE_VALUES)
    assert int(count) == len(installed), sorted(by_key(installed))
    with_test = rendered(helm_bin, offline)
    assert [o["kind"] for o in with_test if o not in installed] == ["Pod"]
    assert listed.endswith("`helm test` adds its pod"), listed
