"""Fixtures for tests that need a real control plane.

The binaries are built once per cache key (see ``neuron_dra_harness.build``); a warm
cache costs a hash of a few files. Every component logs to a file in the
cluster's temp dir, and a failing test gets the tails of those logs attached
to its report.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_dra_harness import realcluster
from neuron_dra_harness.build import Binaries, build, build_helm, build_promtool
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.patched import patched_binaries, scheduler_patch
from neuron_dra_harness.realcluster import RealCluster
from neuron_dra_harness.realnode import RealNode


@pytest.fixture(scope="session")
def e2e_binaries() -> Binaries:
    """The binaries, built on first use (minutes) and cached afterwards; with
    NEURON_DRA_SCHEDULER_PATCH=NAME, a kube-scheduler with bench/upstream/NAME.patch."""
    if shutil.which("go") is None:
        pytest.skip("the end-to-end tests build Kubernetes from source and need a Go toolchain")
    patch = scheduler_patch()
    return patched_binaries(patch) if patch else build()


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """helm, built on first use and cached beside the Kubernetes binaries."""
    if shutil.which("go") is None:
        pytest.skip("helm is built from source and needs a Go toolchain")
    return build_helm()


@pytest.fixture(scope="session")
def promtool_bin() -> Path:
    """promtool, built on first use and cached beside helm."""
    if shutil.which("go") is None:
        pytest.skip("promtool is built from source and needs a Go toolchain")
    return build_promtool()


@pytest.fixture(scope="session")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    """A control plane shared by the session; tests use their own names."""
    with Cluster(e2e_binaries) as running:
        yield running


@pytest.fixture(autouse=True)
def _versions_check(request: pytest.FixtureRequest, record_property: Any) -> None:
    """Name the compatibility-table row of a `versions` test in its report."""
    marker = request.node.get_closest_marker("versions")
    if marker is not None:
        record_property("check", marker.kwargs["check"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and Cluster.active:
        for running in Cluster.active:
            report.sections.append((f"cluster logs ({running.workdir})", running.log_tails()))
        for node in RealNode.active:
            report.sections.append((f"node logs ({node.dir})", node.log_tails()))
    return report


@pytest.fixture(scope="module")
def real(e2e_binaries: Binaries) -> Iterator[RealCluster]:
    """A control plane with a real kubelet and runtime running the chart's plugin (one
    a test module), or the test skipped with what this machine lacks for one."""
    reason = realcluster.unavailable(e2e_binaries)
    if reason:
        pytest.skip(reason)
    with realcluster.real_cluster(e2e_binaries) as running:
        yield running
