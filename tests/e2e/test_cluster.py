"""The control plane and the kubelet stand-in, without any DRA plugin."""

from __future__ import annotations

import socket

import pytest

from neuron_dra_harness import cluster as cluster_module
from neuron_dra_harness.build import BINARIES, Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.kubeletside import KUBELETSIDE_ERROR_ANNOTATION
from neuron_dra_harness.manifests import (
    DRIVER,
    allocated_devices,
    claim_spec,
    device_class,
    pod,
    resource_slice,
)
from neuron_dra_harness.processes import free_port, processes_running

pytestmark = pytest.mark.e2e


def test_scheduler_allocates_and_binds(cluster: Cluster) -> None:
    node, ns = "alloc-node", "alloc"
    cluster.create_namespace(ns)
    cluster.add_node(node, labels={"neuron.aws.com/test": "alloc"})
    cluster.create(resource_slice(node))
    cluster.create(device_class("neuron-alloc"))
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "two-neurons", "namespace": ns},
            "spec": claim_spec("neuron-alloc"),
        }
    )
    cluster.create(pod("consumer", ns, node, {"resourceClaimName": "two-neurons"}))

    bound = cluster.wait_for_pod_scheduled("consumer", ns)
    assert bound["spec"]["nodeName"] == node

    claim = cluster.wait_for_claim_allocated("two-neurons", ns)
    results = allocated_devices(claim)
    assert len(results) == 2
    assert {r["driver"] for r in results} == {DRIVER}
    assert {r["pool"] for r in results} == {node}
    assert {r["device"] for r in results} <= {"neuron-1", "neuron-2", "neuron-3"}
    reserved = [r["name"] for r in claim["status"].get("reservedFor", [])]
    assert reserved == ["consumer"]


def test_claim_template_and_beta_api(cluster: Cluster) -> None:
    """The resourceclaim controller creates claims from templates, and the
    beta resource.k8s.io versions are served."""
    node, ns = "template-node", "template"
    cluster.create_namespace(ns)
    cluster.add_node(node)
    cluster.create(resource_slice(node))
    cluster.apply(
        {
            "apiVersion": "resource.k8s.io/v1beta1",
            "kind": "DeviceClass",
            "metadata": {"name": "neuron-template"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-neuron", "namespace": ns},
            "spec": {"spec": claim_spec("neuron-template", count=1)},
        }
    )
    cluster.create(pod("templated", ns, node, {"resourceClaimTemplateName": "one-neuron"}))

    def generated_claim() -> str | None:
        p = cluster.get("v1", "Pod", "templated", ns)
        statuses = p.get("status", {}).get("resourceClaimStatuses") or []
        return next((s.get("resourceClaimName") for s in statuses), None)

    claim_name = cluster.wait_for("claim generated from template", generated_claim)
    claim = cluster.wait_for_claim_allocated(claim_name, ns)
    assert len(allocated_devices(claim)) == 1
    assert cluster.wait_for_pod_scheduled("templated", ns)["spec"]["nodeName"] == node


def test_kubeletside_without_plugin(cluster: Cluster) -> None:
    """Without a registered plugin, prepare fails visibly and the pod stays
    Pending; deletion still completes."""
    node, ns = "lonely-node", "lonely"
    cluster.create_namespace(ns)
    cluster.add_node(node)
    stale = resource_slice(node)
    stale["metadata"]["name"] = "stale-slice"
    cluster.create(stale)

    side = cluster.start_kubelet_side(node)
    # Like the kubelet, it wipes the node's slices at start-up, before ready.
    assert cluster.get_or_none("resource.k8s.io/v1", "ResourceSlice", "stale-slice") is None
    assert side.report_events("ready")
    assert side.registry_dir.is_dir()

    cluster.create(resource_slice(node))
    cluster.create(device_class("neuron-lonely"))
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "wanted", "namespace": ns},
            "spec": claim_spec("neuron-lonely", count=1),
        }
    )
    cluster.create(pod("waiting", ns, node, {"resourceClaimName": "wanted"}))

    failed = cluster.wait_for_pod(
        "waiting",
        ns,
        lambda p: KUBELETSIDE_ERROR_ANNOTATION in p["metadata"].get("annotations", {}),
        "prepare error recorded",
    )
    message = failed["metadata"]["annotations"][KUBELETSIDE_ERROR_ANNOTATION]
    assert DRIVER in message
    assert "not registered" in message
    assert failed["status"]["phase"] == "Pending"
    events = cluster.wait_for(
        "FailedPrepareDynamicResources event",
        lambda: [
            e
            for e in cluster.events_for("waiting", ns)
            if e["reason"] == "FailedPrepareDynamicResources"
        ],
    )
    assert events[0]["source"]["host"] == node
    assert side.report_events("prepare-error")
    # The slice published after start-up survives.
    assert cluster.get_or_none("resource.k8s.io/v1", "ResourceSlice", f"{node}-{DRIVER}")

    cluster.delete("v1", "Pod", "waiting", ns)
    cluster.wait_for_pod_gone("waiting", ns)
    # Written right after the delete call returns, so possibly after the
    # pod is already gone.
    cluster.wait_for("deletion reported", lambda: side.report_events("deleted"))


def test_stop_leaves_no_process(e2e_binaries: Binaries) -> None:
    cluster = Cluster(e2e_binaries)
    cluster.start()
    try:
        cluster.add_node("n1")
        cluster.start_kubelet_side("n1")
        pids = cluster.all_pids()
        assert len(pids) == 5
        paths = [e2e_binaries.path(b) for b in BINARIES]
        ours = [(pid, cmd) for pid, cmd in processes_running(paths) if str(cluster.workdir) in cmd]
        # The scan itself must see the running components.
        assert {pid for pid, _ in ours} == set(pids)
    finally:
        cluster.stop()

    assert cluster.stray_processes() == []
    leftovers = [(pid, cmd) for pid, cmd in processes_running(paths) if str(cluster.workdir) in cmd]
    assert leftovers == []


@pytest.mark.parametrize("component", ["etcd", "kube-apiserver"])
def test_a_port_taken_before_its_component_binds_it_is_chosen_again(
    e2e_binaries: Binaries, monkeypatch: pytest.MonkeyPatch, component: str
) -> None:
    """The first port the harness picks for a component is taken by someone else
    before the component binds it, as by a test run beside this one: the component
    exits, and the cluster starts on a port chosen again."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # etcd takes the first two ports chosen, kube-apiserver the third.
        picks = iter([port] if component == "etcd" else [free_port(), free_port(), port])
        monkeypatch.setattr(cluster_module, "free_port", lambda: next(picks, None) or free_port())
        with Cluster(e2e_binaries) as cluster:
            assert port not in (cluster.apiserver_port, int(cluster.etcd_url.rsplit(":", 1)[1]))
            assert cluster.get("v1", "Namespace", "default")["metadata"]["name"] == "default"
            [started] = [c for c in cluster.components if c.name == component]
            assert "address already in use" in started.tail(400)
