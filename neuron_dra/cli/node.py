"""`neuron-dra discover`, `slices` and `fake-node`: a node's inventory and slices."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from consts import ENV_NODE_NAME
from neuron_dra.cli.flags import SubParsers, add_sysfs_root
from neuron_dra.hardware.devicegroups import group_ids
from neuron_dra.hardware.discovery import Discovery, discover, log_findings
from neuron_dra.hardware.driverformats import FAKE_VERSIONS
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources import limits
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices

log = logging.getLogger("neuron_dra")


def add_commands(subparsers: SubParsers) -> None:
    cmd = subparsers.add_parser("discover", help="print the node's Neuron inventory")
    add_sysfs_root(cmd)
    cmd.add_argument(
        "-o",
        "--output",
        default="table",
        choices=["table", "json"],
        help="table: devices and findings for a person; json: the whole inventory",
    )
    cmd.set_defaults(command=_discover)

    cmd = subparsers.add_parser("slices", help="print the ResourceSlices the driver would publish")
    add_sysfs_root(cmd)
    # Defaults to the plugin pod's own node, so that `kubectl exec ... neuron-dra slices`
    # there prints that node's slices with nothing to look up first.
    cmd.add_argument(
        "--node-name",
        default=os.environ.get(ENV_NODE_NAME),
        help=f"the pool's name and the slices' node (${ENV_NODE_NAME}, set in the plugin pod)",
    )
    cmd.add_argument("--node-uid", help="Node UID for the owner reference")
    cmd.add_argument(
        "--ultraserver-devices",
        type=UltraServerDevices,
        default=UltraServerDevices.BOTH,
        choices=list(UltraServerDevices),
        help="UltraServer nodes: publish devices and the whole-node device with shared "
        "counters (both), or only one kind where the cluster lacks counters",
    )
    cmd.add_argument(
        "--counter-layout",
        type=CounterLayout,
        default=CounterLayout.OWN_SLICE,
        choices=list(CounterLayout),
        help="where shared counters go: own-slice (Kubernetes 1.35 and later) or "
        "beside-devices (1.34); the running driver asks its API server",
    )
    cmd.add_argument(
        "--neuron-cores",
        default="on",
        choices=["on", "off"],
        help="each logical NeuronCore a device too, as the driver publishes them where the API "
        "server serves shared counters (1.36+ by default); off: as on 1.34 and 1.35",
    )
    cmd.add_argument(
        "-o", "--output", default="yaml", choices=["yaml", "json"], help="the slices' format"
    )
    cmd.set_defaults(command=_slices)

    cmd = subparsers.add_parser("fake-node", help="write a simulated node's sysfs tree")
    cmd.add_argument(
        "--instance-type",
        required=True,
        choices=sorted(INSTANCE_TYPES),
        metavar="TYPE",
        help=f"one of {', '.join(sorted(INSTANCE_TYPES))}",
    )
    cmd.add_argument("--out", required=True, type=Path, help="directory to write the tree in")
    cmd.add_argument(
        "--driver-version",
        metavar="VERSION",
        help="the Neuron driver release whose sysfs files and formats to write: "
        f"{', '.join(FAKE_VERSIONS)} (a later version writes the layout of the last "
        f"release before it; default {FAKE_VERSIONS[0]}, as the examples select)",
    )
    cmd.add_argument(
        "--lnc",
        type=int,
        choices=[1, 2],
        help="logical NeuronCore size in the node's Neuron config (trn2 and trn3)",
    )
    cmd.add_argument(
        "--ultraserver-server-id", help="UltraServer types: the 4-node unit's id (default us-0)"
    )
    cmd.add_argument(
        "--ultraserver-node-id",
        type=int,
        choices=range(4),
        help="UltraServer types: the node's place in its unit, 0-3 (default 0)",
    )
    cmd.set_defaults(command=_fake_node)


def _discover(args: argparse.Namespace) -> int:
    result = _discovered(args.sysfs_root)
    if args.output == "json":
        print(json.dumps(_inventory_json(result), indent=2))
    else:
        print(_inventory_table(result))
    return 0


def _slices(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise ValueError(f"slices: --node-name or ${ENV_NODE_NAME} is required")
    inventory = _discovered(args.sysfs_root).inventory
    options = SliceOptions(
        node_name=args.node_name,
        node_uid=args.node_uid,
        ultraserver_devices=args.ultraserver_devices,
        counter_layout=args.counter_layout,
        cores=args.neuron_cores == "on",
    )
    slices = build_slices(inventory, options)
    problems = limits.validate_pool(slices, options.counter_layout)
    for problem in problems:
        log.error("slice breaks a resource.k8s.io/v1 limit: %s", problem)
    if args.output == "json":
        print(json.dumps(slices if len(slices) > 1 else slices[0], indent=2))
    else:
        # Deferred: `neuron-dra run` parses these flags too, and starts faster without it.
        import yaml  # noqa: PLC0415

        print(yaml.safe_dump_all(slices, sort_keys=False), end="")
    return 1 if problems else 0


def _fake_node(args: argparse.Namespace) -> int:
    # Deferred: fake trees are for tests and demos, never for `run`.
    from neuron_dra.hardware import fakenode  # noqa: PLC0415

    has_id = args.ultraserver_server_id is not None or args.ultraserver_node_id is not None
    ultraserver = (
        fakenode.FakeUltraServer(
            args.ultraserver_server_id or "us-0", args.ultraserver_node_id or 0
        )
        if has_id
        else None
    )
    root = fakenode.build_fake_node(
        args.out,
        args.instance_type,
        driver_version=args.driver_version or fakenode.DEFAULT_DRIVER_VERSION,
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
        # Of a type the catalogue does not have: what its sysfs gave, and what it did not.
        "derived": inventory.derived and inventory.derived.summary(),
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
    spec, found = inventory.spec, inventory.derived
    shape = spec.shape.value if spec else f"derived: {found.graph}" if found else "unknown topology"
    lines = [
        f"instance type  {inventory.instance_type or '?'}  ({shape})",
        f"driver         {inventory.driver_version or '?'}",
        f"LNC default    {inventory.lnc if inventory.lnc is not None else 'n/a'}",
    ]
    if inventory.ultraserver:
        us = inventory.ultraserver
        units = [
            f"{'pair' if nodes == 2 else 'server'} {unit[0]} node {unit[1]}"
            for nodes in (4, 2)
            if (unit := us.unit(nodes)) is not None
        ]
        lines.append(f"UltraServer    {', '.join(units)}, modes {us.modes}")
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
    if found is not None:
        lines.extend(("", f"not in the catalogue; derived from sysfs: {found.summary()}"))
    if result.findings:
        lines.append("")
        lines.extend(f"! {f.path}: {f.message}" for f in result.findings)
    return "\n".join(lines)


def _span(members: frozenset[int]) -> str:
    ordered = sorted(members)
    return f"{{{ordered[0]}-{ordered[-1]}}}"
