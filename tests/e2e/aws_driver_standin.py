"""A stand-in for the AWS Neuron DRA driver's DaemonSet, under the names its chart
gives it (namespace `neuron-dra-driver`, DaemonSet `neuron-dra-driver-kubelet-plugin`,
as docs/operators/migration.md's table lists them), so that the documented node-by-node
migration commands that patch it run against a real API server as typed. Its pod never
starts (no image): what the commands change is the DaemonSet's node selection."""

from __future__ import annotations

from neuron_dra_harness.cluster import Cluster

NAMESPACE = "neuron-dra-driver"
NAME = "neuron-dra-driver-kubelet-plugin"


def ensure(cluster: Cluster) -> None:
    if cluster.get_or_none("v1", "Namespace", NAMESPACE) is None:
        cluster.create_namespace(NAMESPACE)
    if cluster.get_or_none("apps/v1", "DaemonSet", NAME, NAMESPACE) is not None:
        return
    labels = {"app.kubernetes.io/name": NAME}
    cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        "containers": [{"name": "plugin", "image": "none"}],
                    },
                },
            },
        }
    )


def node_selector(cluster: Cluster) -> dict[str, str]:
    daemonset = cluster.get("apps/v1", "DaemonSet", NAME, NAMESPACE)
    return dict(daemonset["spec"]["template"]["spec"].get("nodeSelector", {}))
