"""`neuron-dra doctor`: the node's and the cluster's readiness for the driver, a line a
check with the fix, `-o json` for scripts, exit 1 when a check failed."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from consts import (
    ENV_CDI_ROOT,
    ENV_CHART_FULLNAME,
    ENV_HEALTHCHECK_ADDRESS,
    ENV_HEALTHCHECK_PORT,
    ENV_KUBELET_REGISTRAR_DIRECTORY_PATH,
)
from neuron_dra.cli.flags import SubParsers, add_sysfs_root

if TYPE_CHECKING:
    from neuron_dra.tools.doctor.verdicts import Check


def _kubelet_dir() -> Path:
    """The plugin pod's: its registration directory's parent; else the kubelet's default."""
    registrar = os.environ.get(ENV_KUBELET_REGISTRAR_DIRECTORY_PATH)
    return Path(registrar).parent if registrar else Path("/var/lib/kubelet")


def add_command(subparsers: SubParsers) -> None:
    cmd = subparsers.add_parser(
        "doctor",
        help="check a node and a cluster for the driver, before and after install",
        description="On a node (the host, or the plugin's pod), the node's checks; with "
        "--kubeconfig or --in-cluster, the cluster's; both where both are given.",
    )
    add_sysfs_root(cmd)
    cmd.add_argument(
        "--kubelet-dir",
        type=Path,
        default=_kubelet_dir(),
        help="the kubelet's --root-dir (default: the parent of "
        f"${ENV_KUBELET_REGISTRAR_DIRECTORY_PATH}, as in the plugin's pod, or /var/lib/kubelet)",
    )
    cmd.add_argument(
        "--cdi-dir",
        type=Path,
        action="append",
        help=f"a CDI directory, repeated for several (default ${ENV_CDI_ROOT}, as in the "
        "plugin's pod, or /etc/cdi and /var/run/cdi under --sysfs-root)",
    )
    cmd.add_argument(
        "--containerd-config",
        type=Path,
        default=Path("/etc/containerd/config.toml"),
        help="the container runtime's configuration, for its CDI setting",
    )
    cmd.add_argument(
        "--plugin-probe",
        metavar="HOST:PORT",
        help=f"ask the plugin's probes there (default ${ENV_HEALTHCHECK_ADDRESS}:"
        f"${ENV_HEALTHCHECK_PORT}, as in the plugin's pod; elsewhere not asked)",
    )
    cluster = cmd.add_mutually_exclusive_group()
    cluster.add_argument("--kubeconfig", type=Path, help="check this cluster too")
    cluster.add_argument(
        "--in-cluster",
        action="store_true",
        help="check the cluster too, as the pod's service account (in the plugin's pod)",
    )
    cmd.add_argument(
        "--fullname",
        default=os.environ.get(ENV_CHART_FULLNAME, "neuron-dra"),
        help="the chart's full name, which names its admission policies: neuron-dra, or "
        f"its fullnameOverride (default ${ENV_CHART_FULLNAME}, as in the plugin's pod, or "
        "neuron-dra)",
    )
    cmd.add_argument("--no-node", action="store_true", help="skip the node's checks (a laptop, CI)")
    cmd.add_argument(
        "-o",
        "--output",
        default="text",
        choices=["text", "json"],
        help="text: a line a check, with the fix; json: the same as data",
    )
    cmd.set_defaults(command=_doctor)


def _probe_in_the_pod() -> str | None:
    host, port = os.environ.get(ENV_HEALTHCHECK_ADDRESS), os.environ.get(ENV_HEALTHCHECK_PORT)
    if not host or not port:
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _source(kubeconfig: Path | None) -> str:
    """Where the server's address came from: the kubeconfig's current context, or the
    pod's service account."""
    if kubeconfig is None:
        return "the pod's service account"
    import yaml  # noqa: PLC0415 (read, as the client did, only when asked)

    try:
        context = (yaml.safe_load(kubeconfig.read_text()) or {}).get("current-context")
    except (OSError, yaml.YAMLError, AttributeError):
        context = None  # the client read it; this is only its name
    return f"context {context} of {kubeconfig}" if context else str(kubeconfig)


def _doctor(args: argparse.Namespace) -> int:
    from neuron_dra.tools.doctor import verdicts  # noqa: PLC0415 (on demand, as every command)

    cluster = args.kubeconfig is not None or args.in_cluster
    if args.no_node and not cluster:
        raise ValueError("nothing to check: --no-node needs --kubeconfig or --in-cluster")
    node: list[Check] = []
    if not args.no_node:
        from neuron_dra.tools.doctor.nodechecks import node_checks  # noqa: PLC0415

        cdi_root = os.environ.get(ENV_CDI_ROOT)
        cdi_dirs = args.cdi_dir or ([Path(cdi_root)] if cdi_root else None)
        node += node_checks(args.sysfs_root, args.kubelet_dir, args.containerd_config, cdi_dirs)
        probe = args.plugin_probe or _probe_in_the_pod()
        if probe:
            from neuron_dra.tools.doctor.plugincheck import plugin_probes  # noqa: PLC0415

            node.append(plugin_probes(probe))
    in_cluster: list[Check] = []
    if cluster:
        from neuron_dra.agent.apiclient.config import load  # noqa: PLC0415
        from neuron_dra.agent.apiclient.kube import Kube  # noqa: PLC0415
        from neuron_dra.tools.doctor.clusterchecks import cluster_checks  # noqa: PLC0415

        config = load(args.kubeconfig)
        kube = Kube(config)
        server = f"{config.server} ({_source(args.kubeconfig)})"
        try:
            in_cluster += cluster_checks(kube.get_sync, kube.list_sync, args.fullname, server)
        finally:
            kube.close()
    from neuron_dra.tools.doctor.together import together  # noqa: PLC0415

    checks = together(node, in_cluster)
    if args.output == "json":
        print(json.dumps(verdicts.as_json(checks), indent=2))
    else:
        print(verdicts.text(checks))
    return verdicts.exit_status(checks)
