"""`neuron-dra doctor`: the node's and the cluster's readiness for the driver, a line a
check with the fix, `-o json` for scripts, exit 1 when a check failed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from neuron_dra.cli.flags import SubParsers, add_sysfs_root


def add_command(subparsers: SubParsers) -> None:
    cmd = subparsers.add_parser(
        "doctor",
        help="check a node and a cluster for the driver, before and after install",
        description="On a node (the host, or the plugin's pod), the node's checks; with "
        "--kubeconfig, the cluster's; both where both are given.",
    )
    add_sysfs_root(cmd)
    cmd.add_argument(
        "--kubelet-dir",
        type=Path,
        default=Path("/var/lib/kubelet"),
        help="the kubelet's --root-dir (default /var/lib/kubelet)",
    )
    cmd.add_argument(
        "--containerd-config",
        type=Path,
        default=Path("/etc/containerd/config.toml"),
        help="the container runtime's configuration, for its CDI setting",
    )
    cmd.add_argument("--kubeconfig", type=Path, help="check this cluster too")
    cmd.add_argument("--no-node", action="store_true", help="skip the node's checks (a laptop, CI)")
    cmd.add_argument(
        "-o",
        "--output",
        default="text",
        choices=["text", "json"],
        help="text: a line a check, with the fix; json: the same as data",
    )
    cmd.set_defaults(command=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from neuron_dra.tools.doctor import verdicts  # noqa: PLC0415 (on demand, as every command)

    if args.no_node and args.kubeconfig is None:
        raise ValueError("nothing to check: --no-node needs --kubeconfig")
    checks = []
    if not args.no_node:
        from neuron_dra.tools.doctor.nodechecks import node_checks  # noqa: PLC0415

        checks += node_checks(args.sysfs_root, args.kubelet_dir, args.containerd_config)
    if args.kubeconfig is not None:
        from neuron_dra.agent.apiclient.kube import Kube  # noqa: PLC0415
        from neuron_dra.tools.doctor.clusterchecks import cluster_checks  # noqa: PLC0415

        kube = Kube.connect(args.kubeconfig)
        try:
            checks += cluster_checks(kube.get_sync, kube.list_sync)
        finally:
            kube.close()
    if args.output == "json":
        print(json.dumps(verdicts.as_json(checks), indent=2))
    else:
        print(verdicts.text(checks))
    return verdicts.exit_status(checks)
