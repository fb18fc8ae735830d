"""The Kubernetes releases the harness builds: versions, tags, modules, toolchains."""

from __future__ import annotations

import re
import subprocess

import pytest

from neuron_dra_harness import build, standins
from tests.e2e import versions

NEXT = "v1.38.0-beta.0"


def test_a_beta_is_a_release_version_of_its_minor() -> None:
    assert build.minor(NEXT) == 38
    assert build.release_tags(NEXT).split(",")[-1] == "k8s1.38"
    assert build.staging_version(NEXT) == "v0.38.0-beta.0"
    assert build.ldflags(NEXT).count(f"gitVersion={NEXT}") == 2


@pytest.mark.parametrize("bad", ["v1.38", "1.38.0", "v1.38.0-beta", "v1.38.0-preview.1"])
def test_other_spellings_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"must look like v1\.Y\.Z"):
        build.minor(bad)


def test_staging_modules_split_out_in_1_38_are_pinned_from_1_38_only() -> None:
    new = {"apiextensions-api", "ktesting", "streaming"}
    assert not new & set(build.staging_modules("v1.37.2"))
    assert new <= set(build.staging_modules(NEXT))
    assert set(build.STAGING_MODULES) <= set(build.staging_modules(NEXT))


def test_only_the_next_release_builds_with_another_go() -> None:
    assert build.toolchain(NEXT) == "go1.27.3"
    assert all(build.toolchain(v) == "local" for v in build.RELEASES)
    assert build.toolchain() == "local"
    assert all(re.fullmatch(r"go\d+\.\d+\.\d+", go) for go in build.TOOLCHAINS.values())


def test_the_next_release_runs_in_test_versions_but_is_never_the_default() -> None:
    assert versions.Combination(NEXT, NEXT) in versions.COMBINATIONS
    assert build.K8S_VERSION not in build.NEXT_RELEASES
    # `make test` runs the oldest of RELEASES; the upgrade test goes to the newest.
    assert not set(build.NEXT_RELEASES) & set(build.RELEASES)


# What `go` printed building 1.38's binaries where the module proxy refused them.
REFUSED = """\
go: neuron-dra/tests/e2e/k8s imports
\tk8s.io/kubernetes/cmd/kubelet/app imports
\tk8s.io/ktesting/initoption: k8s.io/ktesting@v0.38.0-beta.0: reading \
https://proxy.golang.org/k8s.io/ktesting/@v/v0.38.0-beta.0.zip: 403 Forbidden
\tserver response: This module version is not available.
\tsigs.k8s.io/structured-merge-diff/v7/merge: sigs.k8s.io/structured-merge-diff/v7@v7.0.1: \
reading https://proxy.golang.org/sigs.k8s.io/structured-merge-diff/v7/@v/v7.0.1.zip: \
403 Forbidden
"""


def test_the_modules_the_proxy_refused_are_named() -> None:
    assert standins.refused_modules(REFUSED) == [
        "k8s.io/ktesting@v0.38.0-beta.0",
        "sigs.k8s.io/structured-merge-diff/v7@v7.0.1",
    ]
    assert standins.refused_modules("go: some other build error") == []


def test_a_release_that_cannot_be_built_is_a_column_saying_so() -> None:
    """Every row of an unbuilt release names why; only a supported release unbuilt (not
    the next one's beta) makes test-versions fail."""
    oldest, beta = (versions.Combination(v, v) for v in (build.RELEASES[0], NEXT))
    why = "not built here: the Go module proxy refuses k8s.io/ktesting@v0.38.0-beta.0"
    results = {
        oldest: [
            versions.Outcome("health", "t1", "passed", ""),
            versions.Outcome("registration", "t2", "passed", "DRA gRPC v1"),
        ],
        beta: [versions.Outcome("(build)", "(build)", versions.UNBUILT, why)],
    }
    rows = versions.table(results).splitlines()[2:]
    assert rows[2:] == [
        "| health | ok | not built here |",
        "| registration | ok (DRA gRPC v1) | not built here |",
        "",
        f"{NEXT}: {why}.",
    ]
    assert not versions.failed(results)
    assert versions.failed(
        {oldest: [versions.Outcome("(build)", "(build)", versions.UNBUILT, why)]}
    )


def test_the_compatibility_table_is_the_kept_results() -> None:
    """docs/operators/kubernetes-releases.md's table is generated from the raw results in
    bench/results/versions/ (`python -m tests.e2e.versions --table-only PAGE`), and every
    release of `make test-versions` has its column there."""
    page = (versions.REPO / "docs/operators/kubernetes-releases.md").read_text()
    shown = page[page.index(versions.BEGIN) + len(versions.BEGIN) : page.index(versions.END)]
    results, runs = versions.stored()
    assert shown.strip() == versions.table(results, runs)
    assert list(results) == list(versions.COMBINATIONS)


@pytest.mark.usefixtures("git_history")
def test_every_kept_column_ran_from_a_commit_that_exists() -> None:
    _, runs = versions.stored()
    for combination, run in runs.items():
        assert not run.dirty, f"{combination.label} ran on a tree with uncommitted changes"
        found = subprocess.run(
            ["git", "cat-file", "-e", f"{run.commit}^{{commit}}"],
            cwd=versions.REPO,
            capture_output=True,
            check=False,
        )
        assert found.returncode == 0, f"{combination.label}: commit {run.commit} is not here"


def test_a_module_skipped_whole_is_no_row_but_a_failure_still_fails() -> None:
    oldest = versions.Combination(build.RELEASES[0], build.RELEASES[0])
    skipped = versions.Outcome(versions.UNMARKED, "tests.e2e.test_karpenter", "skipped", "")
    results = {oldest: [versions.Outcome("health", "t1", "passed", ""), skipped]}
    assert versions.UNMARKED not in versions.table(results)
    broken = versions.Outcome(versions.UNMARKED, "tests.e2e.test_x", "failed", "import error")
    assert versions.failed({oldest: [broken]})
