"""A control plane with one real node running the driver's own image as its DaemonSet.

``real_cluster()`` puts it together for the real-node tests and ``make demo-node``:
the node's bridge, a control plane listening there, the node (``realnode.RealNode``)
on a fake trn2.48xlarge tree with openable device nodes, the pause, test and driver
images imported into its containerd, and the driver installed with
``scripts/install-dra-driver.sh <image> --timeout 300s`` exactly as an operator does.
``unavailable()`` says in one line what this machine lacks for it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuron_dra.hardware.fakenode import build_fake_node
from neuron_dra_harness import images, realnode
from neuron_dra_harness.build import Binaries, build, build_node, committed_k8s_version
from neuron_dra_harness.cluster import DEFAULT_CONTROLLERS, Cluster
from neuron_dra_harness.cluster_api import ClusterError
from neuron_dra_harness.manifests import run_install_script

NODE = "neuron-node"
INSTANCE_TYPE = "trn2.48xlarge"
# /dev/null's number: a container given /dev/neuronN by its CDI spec can open it.
DEVICE_NUMBER = (1, 3)
DRIVER_NAMESPACE = "neuron-dra"
DRIVER_SELECTOR = "app.kubernetes.io/name=neuron-dra"
# After the image, the flags docs/operators/install.md installs with (tests/test_docs.py
# holds the two together).
INSTALL_FLAGS = ("--timeout", "300s")
# What the node needs from the controller manager beyond the simulated nodes' set:
# the ConfigMap service account volumes carry, Ready nodes losing their not-ready
# taint, the driver's DaemonSet.
CONTROLLERS = (
    *DEFAULT_CONTROLLERS,
    "root-ca-cert-publisher",
    "node-lifecycle-controller",
    "daemonset-controller",
)
Obj = dict[str, Any]


def unavailable(binaries: Binaries | None = None) -> str | None:
    """Why a real node cannot run here (with ``binaries``' control plane), in one line;
    None when it can."""
    if shutil.which("go") is None:
        return "no Go toolchain to build the kubelet and containerd"
    release = committed_k8s_version()
    if binaries is not None and binaries.version != release:
        # A kubelet newer than its API server is outside the version skew policy.
        return f"the real node's kubelet is {release}, the control plane {binaries.version}"
    lacks = realnode.missing() + images.missing_tools()
    if lacks:
        return "a real node needs " + ", ".join(lacks)
    return None


@dataclass
class RealCluster:
    cluster: Cluster
    node: realnode.RealNode
    driver: images.Image
    busybox: images.Image
    install_started: float  # time.monotonic() when install-dra-driver.sh was run

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run scripts/install-dra-driver.sh against the cluster as an operator does
        (kubectl on PATH, no KUBECTL); raise on failure."""
        proc = run_install_script(self.cluster, *args, timeout=400.0)
        if proc.returncode != 0:
            raise ClusterError(
                f"install-dra-driver.sh {' '.join(args)} exited {proc.returncode}:\n"
                f"{proc.stdout}{proc.stderr}"
            )
        return proc

    def plugin_pods(self) -> list[Obj]:
        return self.cluster.list_objects(
            "v1", "Pod", DRIVER_NAMESPACE, label_selector=DRIVER_SELECTOR
        )

    def ready_plugin(self) -> Obj | None:
        """The one plugin pod when it is the only one and Ready."""
        pods = self.plugin_pods()
        if len(pods) != 1:
            return None
        conditions = pods[0].get("status", {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pods[0] if ready else None


@contextmanager
def real_cluster(binaries: Binaries | None = None) -> Iterator[RealCluster]:
    """Everything above, torn down on exit (the node first, then the control plane)."""
    node_binaries = build_node()
    pause = images.pause_image(node_binaries.pause)
    busybox = images.busybox_image()
    driver = images.driver_image()
    fake_root = Path(tempfile.mkdtemp(prefix="ndra-root-"))
    try:
        # The default driver version, which 2.26-driver-trn2.yaml selects.
        build_fake_node(fake_root, INSTANCE_TYPE, char_device=DEVICE_NUMBER)
        with (
            realnode.bridge() as address,
            Cluster(binaries or build(), address=address, controllers=CONTROLLERS) as cluster,
        ):
            node = realnode.RealNode(
                cluster,
                node_binaries,
                NODE,
                fake_root,
                labels={"node.kubernetes.io/instance-type": INSTANCE_TYPE},
            )
            with node:
                for image in (pause, busybox, driver):
                    node.import_image(image)
                real = RealCluster(cluster, node, driver, busybox, time.monotonic())
                real.install(driver.name, *INSTALL_FLAGS)
                cluster.wait_for("the plugin pod Ready", real.ready_plugin, 120.0)
                yield real
    finally:
        shutil.rmtree(fake_root, ignore_errors=True)
