"""Local demo: a real control plane, simulated Neuron nodes running `neuron-dra run`,
and the examples scheduled onto them.

Builds (or reuses) Kubernetes from the Go module proxy, starts etcd, the API
server, scheduler and controller manager, adds two trn2.48xlarge, one
inf2.48xlarge and four trn2u.48xlarge nodes of one UltraServer, each with the
kubelet's own DRA code and the plugin, applies the examples and prints what
every pod got. With a terminal attached it keeps the cluster up for kubectl
until Ctrl-C.

With --real-node it runs a real kubelet, containerd and runc on this machine instead
(root needed), installs the driver's own image with scripts/install-dra-driver.sh and
runs an example pod whose own shell prints its Neuron devices and environment.
"""

from __future__ import annotations

import argparse
import copy
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra_harness.build import build
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import add_simulated_node, env_of
from neuron_dra_harness.realcluster import NODE, real_cluster, unavailable

REPO = Path(__file__).resolve().parents[1]

SPECS = REPO / "examples" / "specs"
Obj = dict[str, Any]

# (template file, pod name, node pin): what the demo runs.
# A row, a half and another row fill trn2-a exactly, with connected sets only.
WORKLOADS = [
    ("1x4-connected-devices.yaml", "row", "trn2-a"),
    ("l-trn2.yaml", "half", "trn2-a"),
    ("v1beta1/1x4-connected-devices.yaml", "row-v1beta1", "trn2-a"),
    ("lnc-setting-trn2.yaml", "all-lnc1", "trn2-b"),
    ("inf2-2-connected.yaml", "inf2-pair", "inf2-a"),
    *[("us-4-node-config.yaml", f"us-worker-{i}", f"trn2u-{i}") for i in range(4)],
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--keep",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the cluster running (default: when a terminal is attached)",
    )
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="a real kubelet, containerd and runc running the driver's image (needs root)",
    )
    args = parser.parse_args()
    keep = sys.stdin.isatty() if args.keep is None else args.keep
    if args.real_node:
        return real_node_demo(keep)

    binaries = build()
    print("\nstarting etcd, kube-apiserver, kube-scheduler, kube-controller-manager ...")
    with Cluster(binaries, keep_workdir=keep) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        nodes = [
            ("trn2-a", "trn2.48xlarge", None),
            ("trn2-b", "trn2.48xlarge", None),
            ("inf2-a", "inf2.48xlarge", None),
            *[(f"trn2u-{i}", "trn2u.48xlarge", FakeUltraServer("us-demo", i)) for i in range(4)],
        ]
        for name, instance_type, ultraserver in nodes:
            add_simulated_node(cluster, name, instance_type, ultraserver=ultraserver)
            print(f"  node {name:<9} {instance_type:<15} plugin registered, slices published")

        for spec_file, pod_name, pin in WORKLOADS:
            docs = [d for d in yaml.safe_load_all((SPECS / spec_file).read_text()) if d]
            template = next(d for d in docs if d["kind"] == "ResourceClaimTemplate")
            namespace = "v1beta1" if spec_file.startswith("v1beta1/") else "default"
            if namespace != "default" and cluster.get_or_none("v1", "Namespace", namespace) is None:
                cluster.create_namespace(namespace)
            template = copy.deepcopy(template)
            template["metadata"]["namespace"] = namespace
            cluster.apply(template)
            cluster.create(_pod(pod_name, namespace, template["metadata"]["name"], pin))

        print(f"\n{'POD':<22}{'NODE':<10}{'DEVICES':<28}CONTAINER ENVIRONMENT")
        for spec_file, pod_name, _ in WORKLOADS:
            namespace = "v1beta1" if spec_file.startswith("v1beta1/") else "default"
            pod = cluster.wait_for_pod_running(pod_name, namespace, timeout=120)
            claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            claim = cluster.get("resource.k8s.io/v1", "ResourceClaim", claim_name, namespace)
            results = claim["status"]["allocation"]["devices"]["results"]
            devices = _compact([r["device"] for r in results])
            env = " ".join(f"{k}={v}" for k, v in sorted(env_of(pod, "ctr0").items()))
            print(
                f"{namespace + '/' + pod_name:<22}{pod['spec']['nodeName']:<10}{devices:<28}{env}"
            )

        if keep:
            print(f"\n{binaries.kubectl} --kubeconfig={cluster.kubeconfig} get resourceslices")
            print("cluster running for kubectl as above; Ctrl-C stops it and every process")
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        else:
            print("\n(run `make demo` in a terminal to keep the cluster up for kubectl)")
    return 0


# The pod's own shell says what it got: its device nodes, then its Neuron environment.
SHOW = "ls -l /dev/neuron*; env | grep ^NEURON_ | sort; trap 'exit 0' TERM; sleep 9999 & wait"


def real_node_demo(keep: bool) -> int:
    reason = unavailable()
    if reason:
        print(f"cannot run a real node on this machine: {reason}", file=sys.stderr)
        return 1
    print("building (or reusing) Kubernetes, the kubelet, containerd and the images ...")
    with real_cluster() as real:
        cluster = real.cluster
        ready = time.monotonic() - real.install_started
        print(f"\nnode {NODE}: kubelet, containerd, runc; trn2.48xlarge fake devices")
        print(f"install-dra-driver.sh {real.driver.name}: plugin pod Ready in {ready:.1f}s")
        docs = [d for d in yaml.safe_load_all((SPECS / "1x4-connected-devices.yaml").read_text())]
        for doc in docs:
            if doc["kind"] == "Pod":
                [container] = doc["spec"]["containers"]
                container |= {"image": real.busybox.name, "imagePullPolicy": "Never"}
                container["args"] = [SHOW]
            cluster.create({**doc, "metadata": {**doc["metadata"], "namespace": "default"}})
        cluster.wait_for_pod_running("pod0", "default", timeout=120)
        running = time.monotonic() - real.install_started
        print(f"1x4-connected-devices.yaml: pod0 Running {running:.1f}s after the install")
        log = cluster.wait_for(
            "pod0's output", lambda: cluster.kubectl("logs", "pod0").stdout or None, 30.0
        )
        print("\npod0's own shell says:\n" + log)
        if keep:
            print(
                f"{cluster.binaries.kubectl} --kubeconfig={cluster.kubeconfig} exec -it pod0 -- sh"
            )
            print("node running for kubectl as above; Ctrl-C stops it and every process")
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


def _pod(name: str, namespace: str, template: str, node: str | None) -> Obj:
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "ctr0",
                    "image": "public.ecr.aws/ubuntu/ubuntu:22.04",
                    "resources": {"claims": [{"name": "neurons"}]},
                }
            ],
            "resourceClaims": [{"name": "neurons", "resourceClaimTemplateName": template}],
        },
    }
    if node:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def _compact(devices: list[str]) -> str:
    if devices == ["neuronnode"]:
        return "neuronnode (whole node)"
    indices = sorted(int(d.removeprefix("neurondevice")) for d in devices)
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"neurondevice{indices[0]}-{indices[-1]}"
    return ",".join(map(str, indices))


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"demo finished in {time.monotonic() - started:.1f}s")
    sys.exit(code)
