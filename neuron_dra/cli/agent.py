"""`neuron-dra run`: the node agent's flags, with the reference DaemonSet's environment names."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from consts import (
    ENV_CDI_ROOT,
    ENV_HEALTHCHECK_ADDRESS,
    ENV_HEALTHCHECK_PORT,
    ENV_KUBELET_PLUGINS_DIRECTORY_PATH,
    ENV_KUBELET_REGISTRAR_DIRECTORY_PATH,
    ENV_NODE_NAME,
    ENV_POD_UID,
    ENV_PROBE_SOCKET,
)
from neuron_dra.agent.options import POD_RESOURCES_INTERVAL_S
from neuron_dra.cli.flags import SubParsers, add_sysfs_root

if TYPE_CHECKING:
    from neuron_dra.agent.run import RunOptions


# "auto" and the values of `resources.slices.UltraServerDevices`, spelled out because
# importing the slice builder would delay the kubelet's sockets (a test keeps them equal).
ULTRASERVER_DEVICES = ("auto", "both", "node", "devices")


def add_command(subparsers: SubParsers) -> None:
    cmd = subparsers.add_parser("run", help="run the kubelet plugin on this node")
    add_sysfs_root(cmd)
    env = os.environ.get
    cmd.add_argument("--node-name", default=env(ENV_NODE_NAME), help=f"(${ENV_NODE_NAME})")
    cmd.add_argument("--pod-uid", default=env(ENV_POD_UID), help=f"socket names (${ENV_POD_UID})")
    cmd.add_argument(
        "--cdi-root",
        type=Path,
        default=Path(env(ENV_CDI_ROOT, "/var/run/cdi")),
        help=f"where CDI specs are written, as the container runtime reads them (${ENV_CDI_ROOT})",
    )
    cmd.add_argument(
        "--kubelet-registrar-directory-path",
        type=Path,
        default=Path(
            env(ENV_KUBELET_REGISTRAR_DIRECTORY_PATH, "/var/lib/kubelet/plugins_registry")
        ),
        help=f"the kubelet's plugin registry (${ENV_KUBELET_REGISTRAR_DIRECTORY_PATH})",
    )
    cmd.add_argument(
        "--kubelet-plugins-directory-path",
        type=Path,
        default=Path(env(ENV_KUBELET_PLUGINS_DIRECTORY_PATH, "/var/lib/kubelet/plugins")),
        help="the kubelet's plugins directory; the DRA socket and checkpoint go in "
        f"<it>/neuron.aws.com (${ENV_KUBELET_PLUGINS_DIRECTORY_PATH})",
    )
    cmd.add_argument(
        "--healthcheck-port",
        type=int,
        default=int(env(ENV_HEALTHCHECK_PORT, "-1")),
        help='gRPC health service port: liveness (service "") and readiness (service '
        f'"readiness"), as `doctor` asks them; -1 disables (${ENV_HEALTHCHECK_PORT})',
    )
    cmd.add_argument(
        "--healthcheck-address",
        default=env(ENV_HEALTHCHECK_ADDRESS, "127.0.0.1"),
        help=f"address of the gRPC health service; in a pod, the pod IP "
        f"(${ENV_HEALTHCHECK_ADDRESS})",
    )
    cmd.add_argument(
        "--probe-socket",
        default=env(ENV_PROBE_SOCKET, ""),
        help="name of the abstract unix socket that answers the kubelet's exec probes "
        "(python3 -m neuron_dra.agent.kubelet.probeclient [readiness]), reachable from the "
        f"pod's own network namespace alone; empty: none (${ENV_PROBE_SOCKET})",
    )
    cmd.add_argument("--kubeconfig", type=Path, help="default: the pod's service account")
    cmd.add_argument(
        "--ultraserver-devices",
        default="auto",
        choices=ULTRASERVER_DEVICES,
        help="auto: both kinds with shared counters where the API server serves them, "
        "else only the whole-node device",
    )
    cmd.add_argument(
        "--neuron-cores",
        default="auto",
        choices=["auto", "off"],
        help="auto: each logical NeuronCore is a device too where the API server serves "
        "shared counters (partitionable devices); off: whole devices only",
    )
    cmd.add_argument(
        "--rediscover-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how often sysfs is read again for devices and UltraServer membership",
    )
    cmd.add_argument(
        "--withdraw-after",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long a claim holds a device whole before the slices leave out its "
        "NeuronCores (0: at once); shorter holds rewrite nothing",
    )
    cmd.add_argument(
        "--health-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often device health (error counters, kernel log) is checked",
    )
    cmd.add_argument(
        "--health-recovery",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="return a device to service this long after an error that leaves no state to "
        "re-check (ECC increase, kernel error line); 0 keeps it out until restart",
    )
    cmd.add_argument(
        "--health-heartbeat-timeout",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="mark a device unhealthy when its firmware heartbeat (driver 2.30+ "
        "health_status/healthcheck_heartbeat) stands still this long, and taint it "
        "neuron.aws.com/heartbeat-slow (effect None) at half of it; 0 never",
    )
    cmd.add_argument("--kmsg-path", type=Path, help="kernel log to scan (default: <root>/dev/kmsg)")
    cmd.add_argument(
        "--pod-resources-socket",
        type=Path,
        metavar="PATH",
        help="the kubelet's PodResources API, which says which containers hold which "
        "devices (default: <kubelet plugins directory>/../pod-resources/kubelet.sock)",
    )
    cmd.add_argument(
        "--pod-resources-interval",
        type=_seconds,
        default=POD_RESOURCES_INTERVAL_S,
        metavar="SECONDS",
        help="ask the kubelet's PodResources API at most once per this many seconds, "
        "however many scrape /metrics (its server allows 100 calls/s to all its clients)",
    )
    cmd.add_argument(
        "--unhealthy-effect",
        default="NoSchedule",
        choices=["NoSchedule", "NoExecute"],
        help="taint effect for unhealthy devices; NoExecute evicts pods using the device",
    )
    cmd.add_argument(
        "--metrics-port", type=int, default=-1, help="Prometheus /metrics port; -1 disables"
    )
    cmd.add_argument(
        "--metrics-auth",
        default="kubernetes",
        choices=["none", "kubernetes"],
        help="kubernetes: /metrics answers only a bearer token the API server authenticates "
        "(TokenReview), of a user allowed to get the non-resource URL /metrics "
        "(SubjectAccessReview); none: anyone who reaches the port reads every series, the "
        "namespace, pod, container and claim of each workload holding a device included",
    )
    cmd.add_argument(
        "--enable-device-metadata",
        default="true",
        choices=["true", "false"],
        help="write each prepared request's device metadata file (KEP-5304: the devices and "
        "their published attributes) and bind-mount it read-only into the claim's "
        "containers under /var/run/kubernetes.io/dra-device-attributes",
    )
    cmd.add_argument(
        "--enable-claim-status",
        default="true",
        choices=["true", "false"],
        help="write each prepared claim's status.devices entries (KEP-4817: Ready, the Neuron "
        "devices, serial numbers and NeuronCores) and clear them at unprepare",
    )
    cmd.set_defaults(command=_run)


def run_options(args: argparse.Namespace) -> RunOptions:
    """The agent's options from parsed `run` flags."""
    if not args.node_name:
        raise ValueError(f"--node-name or ${ENV_NODE_NAME} is required")
    from neuron_dra.agent.run import RunOptions  # noqa: PLC0415

    return RunOptions(
        node_name=args.node_name,
        sysfs_root=args.sysfs_root,
        cdi_root=args.cdi_root,
        registrar_dir=args.kubelet_registrar_directory_path,
        plugins_dir=args.kubelet_plugins_directory_path,
        kubeconfig=args.kubeconfig,
        pod_uid=args.pod_uid or None,
        health_port=args.healthcheck_port if args.healthcheck_port >= 0 else None,
        health_address=args.healthcheck_address,
        probe_socket=args.probe_socket or None,
        ultraserver_devices=args.ultraserver_devices,
        neuron_cores=args.neuron_cores == "auto",
        rediscover_interval_s=args.rediscover_interval,
        withdraw_after_s=args.withdraw_after,
        health_interval_s=args.health_interval,
        health_recovery_s=args.health_recovery,
        kmsg=args.kmsg_path,
        unhealthy_effect=args.unhealthy_effect,
        metrics_port=args.metrics_port if args.metrics_port >= 0 else None,
        metrics_auth=args.metrics_auth == "kubernetes",
        health_heartbeat_timeout_s=args.health_heartbeat_timeout,
        pod_resources_path=args.pod_resources_socket,
        pod_resources_interval_s=args.pod_resources_interval,
        device_metadata=args.enable_device_metadata == "true",
        claim_status=args.enable_claim_status == "true",
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r}: seconds, 0 or more")
    return value


def _run(args: argparse.Namespace) -> int:
    # Deferred: the agent (the Kubernetes client, gRPC) is for this command only.
    from neuron_dra.agent.run import run  # noqa: PLC0415
    from neuron_dra.cli import STARTED  # noqa: PLC0415

    return run(run_options(args), STARTED)
