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
from tests import doc_programs
from tests.e2e.plugin_access import Obj
from tests.e2e.test_helm import (
    CHART,
    IMAGE_VALUES,
    RELEASE,
    REPOSITORY,
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


# Flags of `helm upgrade` that `helm template` has not; the rest it shares with install.
UPGRADE_ONLY = {"--install", "-i", "--reset-then-reuse-values", "--reuse-values", "--reset-values"}
VALUED = {"-n", "--namespace", "--set", "--set-string", "--set-json", "-f", "--values"}
VALUED |= {"--version", "--timeout"}
# The chart as the docs name it: in the repository, its package, its OCI reference.
OUR_CHARTS = re.compile(r"^(deploy/helm/neuron-dra|neuron-dra-[\d.]+\.tgz|oci://.*/neuron-dra)$")


def positionals(args: tuple[str, ...]) -> list[str]:
    found, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in VALUED
        else:
            found.append(arg)
    return found


def helm_complaint(helm_bin: Path, env: dict[str, str], args: tuple[str, ...]) -> str | None:
    """What helm says of a documented command: its flags as `--help` parses them (an
    unknown flag fails), and the chart's values as `helm template` renders them (an
    unknown key or a refused value fails the schema). None when both pass."""
    flags = run([str(helm_bin), *args, "--help"], env)
    if flags.returncode:
        return flags.stderr.strip()
    command, *names = positionals(args)
    if command not in ("install", "upgrade", "template") or len(names) != 2:
        return None
    if not OUR_CHARTS.match(names[1]):
        return None  # another chart: its flags only
    values = [a for a in args[1:] if a not in UPGRADE_ONLY and a != names[1]]
    # Before the documented values: what an upgrade reuses from the install.
    base = [f"--set=image.repository={REPOSITORY}"]
    rendered_ = run([str(helm_bin), "template", *base, *values, str(CHART)], env)
    return rendered_.stderr.strip() or None if rendered_.returncode else None


def test_every_documented_helm_command_parses_and_renders(helm_bin: Path, tmp_path: Path) -> None:
    """Every `helm` command of the docs, in code blocks and in the prose, placeholders
    filled. No default namespace from the environment: a command without -n installs
    into `default`, which the chart refuses."""
    env = {k: v for k, v in helm_env(tmp_path).items() if k != "HELM_NAMESPACE"}
    found = doc_programs.invocations("helm")
    assert len([i for i in found if len(positionals(i.args)) == 3]) >= 6, found
    refused = [
        f"{invocation}: {complaint}"
        for invocation in found
        if (complaint := helm_complaint(helm_bin, env, invocation.args))
    ]
    assert not refused, "\n".join(refused)
    for text, says in (
        ("helm install neuron-dra deploy/helm/neuron-dra -n x --wiat", "unknown flag: --wiat"),
        ("helm install neuron-dra deploy/helm/neuron-dra -n x --set imag.tag=1", "imag"),
        ("helm upgrade neuron-dra deploy/helm/neuron-dra --reuse-values", "namespace default"),
    ):
        [bad] = doc_programs.invocations_in("x:1", text)
        assert says in (helm_complaint(helm_bin, env, bad.args) or ""), text
