"""`neuron-dra`: inspect a node, print its slices, build simulated nodes."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from consts import (
    ENV_CDI_ROOT,
    ENV_HEALTHCHECK_ADDRESS,
    ENV_HEALTHCHECK_PORT,
    ENV_KUBELET_PLUGINS_DIRECTORY_PATH,
    ENV_KUBELET_REGISTRAR_DIRECTORY_PATH,
    ENV_NODE_NAME,
    ENV_POD_UID,
    ENV_SYSFS_ROOT,
)
from neuron_dra import limits, logs
from neuron_dra.cli_tools import add_commands
from neuron_dra.devicegroups import group_ids
from neuron_dra.discovery import Discovery, discover, log_findings
from neuron_dra.fakenode import DEFAULT_DRIVER_VERSION, FakeUltraServer, build_fake_node
from neuron_dra.instance_types import INSTANCE_TYPES
from neuron_dra.slices import SliceOptions, UltraServerDevices, build_slices

_STARTED = time.monotonic()  # start-up time is measured from the first import

log = logging.getLogger("neuron_dra")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    try:
        code: int = args.command(args)
    except ValueError as err:
        print(f"neuron-dra: error: {err}", file=sys.stderr)
        return 2
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neuron-dra", description=__doc__)
    levels = ["debug", "info", "warning", "error"]
    parser.add_argument("--log-level", default="info", choices=levels)
    parser.add_argument("--log-format", default="text", choices=["text", "json"])
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def sysfs_root(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--sysfs-root",
            type=Path,
            default=Path(os.environ.get(ENV_SYSFS_ROOT, "/")),
            help=f"root holding sys/, dev/ and opt/aws/neuron (default ${ENV_SYSFS_ROOT} or /)",
        )

    cmd = commands.add_parser("discover", help="print the node's Neuron inventory")
    sysfs_root(cmd)
    cmd.add_argument("-o", "--output", default="table", choices=["table", "json"])
    cmd.set_defaults(command=_discover)

    cmd = commands.add_parser("slices", help="print the ResourceSlices the driver would publish")
    sysfs_root(cmd)
    cmd.add_argument("--node-name", required=True)
    cmd.add_argument("--node-uid", help="Node UID for the owner reference")
    cmd.add_argument(
        "--ultraserver-devices",
        type=UltraServerDevices,
        default=UltraServerDevices.BOTH,
        choices=list(UltraServerDevices),
        help="UltraServer nodes: publish devices and the whole-node device with shared "
        "counters (both), or only one kind where the cluster lacks counters",
    )
    cmd.add_argument("-o", "--output", default="yaml", choices=["yaml", "json"])
    cmd.set_defaults(command=_slices)

    cmd = commands.add_parser("run", help="run the kubelet plugin on this node")
    sysfs_root(cmd)
    env = os.environ.get
    cmd.add_argument("--node-name", default=env(ENV_NODE_NAME), help=f"(${ENV_NODE_NAME})")
    cmd.add_argument("--pod-uid", default=env(ENV_POD_UID), help=f"socket names (${ENV_POD_UID})")
    cmd.add_argument("--cdi-root", type=Path, default=Path(env(ENV_CDI_ROOT, "/var/run/cdi")))
    cmd.add_argument(
        "--kubelet-registrar-directory-path",
        type=Path,
        default=Path(
            env(ENV_KUBELET_REGISTRAR_DIRECTORY_PATH, "/var/lib/kubelet/plugins_registry")
        ),
    )
    cmd.add_argument(
        "--kubelet-plugins-directory-path",
        type=Path,
        default=Path(env(ENV_KUBELET_PLUGINS_DIRECTORY_PATH, "/var/lib/kubelet/plugins")),
    )
    cmd.add_argument(
        "--healthcheck-port",
        type=int,
        default=int(env(ENV_HEALTHCHECK_PORT, "-1")),
        help=f"gRPC health service port for the liveness probe; -1 disables "
        f"(${ENV_HEALTHCHECK_PORT})",
    )
    cmd.add_argument(
        "--healthcheck-address",
        default=env(ENV_HEALTHCHECK_ADDRESS, "127.0.0.1"),
        help="address of the gRPC health service; in a pod, the pod IP, which the kubelet's "
        f"probe dials (${ENV_HEALTHCHECK_ADDRESS})",
    )
    cmd.add_argument("--kubeconfig", type=Path, help="default: the pod's service account")
    cmd.add_argument(
        "--ultraserver-devices",
        default="auto",
        choices=["auto", *UltraServerDevices],
        help="auto: both kinds with shared counters where the API server serves them, "
        "else only the whole-node device",
    )
    cmd.add_argument("--rediscover-interval", type=float, default=60.0, metavar="SECONDS")
    cmd.add_argument("--health-interval", type=float, default=5.0, metavar="SECONDS")
    cmd.add_argument(
        "--health-recovery",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="return a device to service this long after an error that leaves no state to "
        "re-check (ECC increase, kernel error line); 0 keeps it out until restart",
    )
    cmd.add_argument("--kmsg-path", type=Path, help="kernel log to scan (default: <root>/dev/kmsg)")
    cmd.add_argument(
        "--unhealthy-effect",
        default="NoSchedule",
        choices=["NoSchedule", "NoExecute"],
        help="taint effect for unhealthy devices; NoExecute evicts pods using the device",
    )
    cmd.add_argument(
        "--metrics-port", type=int, default=-1, help="Prometheus /metrics port; -1 disables"
    )
    cmd.set_defaults(command=_run)

    cmd = commands.add_parser("fake-node", help="write a simulated node's sysfs tree")
    cmd.add_argument("--instance-type", required=True, choices=sorted(INSTANCE_TYPES))
    cmd.add_argument("--out", required=True, type=Path)
    cmd.add_argument("--driver-version", default=DEFAULT_DRIVER_VERSION)
    cmd.add_argument("--lnc", type=int, choices=[1, 2])
    cmd.add_argument("--ultraserver-server-id")
    cmd.add_argument("--ultraserver-node-id", type=int, choices=range(4))
    cmd.set_defaults(command=_fake_node)
    add_commands(commands)
    return parser


def _run(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise ValueError(f"--node-name or ${ENV_NODE_NAME} is required")
    # Deferred: the Kubernetes client takes ~0.3 s to import, which only `run` needs.
    from neuron_dra.run import RunOptions, run  # noqa: PLC0415

    options = RunOptions(
        node_name=args.node_name,
        sysfs_root=args.sysfs_root,
        cdi_root=args.cdi_root,
        registrar_dir=args.kubelet_registrar_directory_path,
        plugins_dir=args.kubelet_plugins_directory_path,
        kubeconfig=args.kubeconfig,
        pod_uid=args.pod_uid or None,
        health_port=args.healthcheck_port if args.healthcheck_port >= 0 else None,
        health_address=args.healthcheck_address,
        ultraserver_devices=args.ultraserver_devices,
        rediscover_interval_s=args.rediscover_interval,
        health_interval_s=args.health_interval,
        health_recovery_s=args.health_recovery,
        kmsg=args.kmsg_path,
        unhealthy_effect=args.unhealthy_effect,
        metrics_port=args.metrics_port if args.metrics_port >= 0 else None,
    )
    return run(options, _STARTED)


def _discover(args: argparse.Namespace) -> int:
    result = _discovered(args.sysfs_root)
    if args.output == "json":
        print(json.dumps(_inventory_json(result), indent=2))
    else:
        print(_inventory_table(result))
    return 0


def _slices(args: argparse.Namespace) -> int:
    inventory = _discovered(args.sysfs_root).inventory
    options = SliceOptions(
        node_name=args.node_name,
        node_uid=args.node_uid,
        ultraserver_devices=args.ultraserver_devices,
    )
    slices = build_slices(inventory, options)
    problems = [f"slice {i}: {e}" for i, s in enumerate(slices) for e in limits.validate_slice(s)]
    for problem in problems:
        log.error("slice breaks a resource.k8s.io/v1 limit: %s", problem)
    if args.output == "json":
        print(json.dumps(slices if len(slices) > 1 else slices[0], indent=2))
    else:
        print(yaml.safe_dump_all(slices, sort_keys=False), end="")
    return 1 if problems else 0


def _fake_node(args: argparse.Namespace) -> int:
    has_id = args.ultraserver_server_id is not None or args.ultraserver_node_id is not None
    ultraserver = (
        FakeUltraServer(args.ultraserver_server_id or "us-0", args.ultraserver_node_id or 0)
        if has_id
        else None
    )
    root = build_fake_node(
        args.out,
        args.instance_type,
        driver_version=args.driver_version,
        lnc=args.lnc,
        ultraserver=ultraserver,
    )
    print(root)
    return 0


def _discovered(root: Path) -> Discovery:
    result = discover(root)
    log_findings(result.findings, log)
    return result


def _inventory_json(result: Discovery) -> dict[str, Any]:
    inventory = result.inventory
    ids = group_ids(inventory)
    return {
        "instanceType": inventory.instance_type,
        "driverVersion": inventory.driver_version,
        "logicalNeuronCore": inventory.lnc,
        "shape": inventory.spec.shape.value if inventory.spec else None,
        "ultraserver": inventory.ultraserver and vars(inventory.ultraserver),
        "devices": [
            {
                "name": d.name,
                "index": d.index,
                "cores": d.cores,
                "neighbours": list(d.neighbours),
                "serialNumber": d.serial_number,
                "groupIds": {str(k): v for k, v in sorted(ids.get(d.index, {}).items())},
            }
            for d in inventory.devices
        ],
        "connectedSets": {
            str(size): [sorted(s) for s in sets]
            for size, sets in inventory.connected_sets().items()
        },
        "findings": [{"path": f.path, "message": f.message} for f in result.findings],
    }


def _inventory_table(result: Discovery) -> str:
    inventory = result.inventory
    spec = inventory.spec
    lines = [
        f"instance type  {inventory.instance_type or '?'}"
        f"  ({spec.shape.value if spec else 'unknown topology'})",
        f"driver         {inventory.driver_version or '?'}",
        f"LNC default    {inventory.lnc if inventory.lnc is not None else 'n/a'}",
    ]
    if inventory.ultraserver:
        us = inventory.ultraserver
        lines.append(
            f"UltraServer    server {us.server_id_4} node {us.node_id_4}"
            f" (pair {us.server_id_2} node {us.node_id_2}), modes {us.modes}"
        )
    sets = inventory.connected_sets()
    lines.append("")
    lines.append(f"{'DEVICE':<16}{'CORES':>5}  {'NEIGHBOURS':<14}CONNECTED SETS")
    for device in inventory.devices:
        member_of = [
            _span(s)
            for size, groups in sorted(sets.items())
            if size > 1
            for s in groups
            if device.index in s
        ]
        lines.append(
            f"{device.name:<16}{device.cores if device.cores is not None else '?':>5}  "
            f"{','.join(map(str, device.neighbours)) or '-':<14}{' '.join(member_of) or '-'}"
        )
    if result.findings:
        lines.append("")
        lines.extend(f"! {f.path}: {f.message}" for f in result.findings)
    return "\n".join(lines)


def _span(members: frozenset[int]) -> str:
    ordered = sorted(members)
    return f"{{{ordered[0]}-{ordered[-1]}}}"


if __name__ == "__main__":
    sys.exit(main())
