"""`neuron-dra simulate`, `convert` and `templates`: allocate claim templates before
applying them, rewrite beta ones as resource.k8s.io/v1, and print what each instance type
publishes (`lint`, registered among them, is in its own module).

The tools and their dependencies (the `tools` extra) are imported only when
one of these commands runs; without the extra, the command says how to get it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from neuron_dra.cli import extra, lint
from neuron_dra.cli.flags import SubParsers
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.resources.slices import UltraServerDevices


def add_commands(subparsers: SubParsers) -> None:
    """Register `simulate` and `lint` on the `neuron-dra` command's subparsers."""
    cmd = subparsers.add_parser(
        "simulate",
        help="allocate ResourceClaim(Template)s as the scheduler would, on simulated nodes "
        "or a live cluster",
    )
    cmd.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="YAML of ResourceClaims, templates, Pods, workloads and DeviceClasses (-: stdin)",
    )
    where = cmd.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--node",
        action="append",
        metavar="TYPE=COUNT",
        help="simulated nodes, named TYPE-0, TYPE-1, ...; repeat for several types",
    )
    where.add_argument("--kubeconfig", type=Path, help="read slices and claims of a live cluster")
    cmd.add_argument(
        "--taken",
        action="append",
        default=[],
        metavar="NODE:DEVICE,...",
        help="devices already allocated (names, or N for neurondeviceN)",
    )
    cmd.add_argument(
        "--ultraserver-devices",
        type=UltraServerDevices,
        default=UltraServerDevices.BOTH,
        choices=list(UltraServerDevices),
        help="what simulated UltraServer nodes publish (default: both, with shared counters)",
    )
    cmd.add_argument("--driver-version", help="Neuron driver version of the simulated nodes")
    cmd.add_argument(
        "--neuron-cores",
        default="on",
        choices=["on", "off"],
        help="on: simulated nodes publish each logical NeuronCore as a device too, as the driver "
        "does where the API server serves partitionable devices (Kubernetes 1.36+); off: whole "
        "devices only, as on 1.34 and 1.35 (default: on)",
    )
    cmd.add_argument(
        "-o",
        "--output",
        default="text",
        choices=["text", "json"],
        help="text: each claim's placement and why not elsewhere; json: the same as data",
    )
    cmd.add_argument("--picture", type=Path, metavar="FILE.svg", help="draw the allocation")
    cmd.set_defaults(command=_simulate)

    lint.add_command(subparsers)

    cmd = subparsers.add_parser(
        "convert",
        help="rewrite ResourceClaim(Template)s and DeviceClasses of resource.k8s.io/v1beta1 "
        "or v1beta2 as v1, offline (Kubernetes 1.38 removes v1beta1, 1.39 v1beta2)",
    )
    cmd.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="YAML files; other objects pass through unchanged (-: stdin)",
    )
    cmd.add_argument(
        "--in-place",
        action="store_true",
        help="rewrite the files that change instead of printing every file on stdout",
    )
    cmd.set_defaults(command=_convert)

    cmd = subparsers.add_parser(
        "templates",
        help="print what a node of each instance type publishes, as Karpenter's "
        "DynamicResources (JSON)",
    )
    cmd.add_argument(
        "--instance-type",
        action="append",
        default=[],
        metavar="TYPE",
        help="only this instance type; repeat for several (default: every type the driver knows)",
    )
    cmd.add_argument(
        "--kubernetes-version",
        default="1.36",
        metavar="MAJOR.MINOR",
        help="the release of the cluster: it decides the counter layout and whether cores "
        "are devices (default: 1.36)",
    )
    cmd.add_argument(
        "--neuron-cores",
        choices=["on", "off"],
        help="on: each logical NeuronCore a device too (1.36+); off: whole devices only "
        "(default: what the agent publishes on that release)",
    )
    cmd.set_defaults(command=_templates)


class Progress:
    """How far a long step is, on stderr: on a terminal a line rewritten in place once the
    step has taken a second; elsewhere (a CI log) a line every ten seconds from the tenth.

    Its own, not tqdm: a dependency of the tools for these few lines, with a bar that
    would show from the first item rather than only on long runs."""

    def __init__(
        self,
        what: str,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self.clock = clock
        self.tty = self.stream.isatty()
        self.start = clock()
        self.delay, self.every = (1.0, 0.2) if self.tty else (10.0, 10.0)
        self.shown: float | None = None  # when a line was last written

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tty and self.shown is not None:
            self.stream.write("\r\x1b[K")  # the terminal's line, cleared for the output
            self.stream.flush()

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if now - self.start < self.delay or (
            self.shown is not None and now - self.shown < self.every
        ):
            return
        self.shown = now
        text = f"{self.what}: {done:,} of {total:,} ({now - self.start:.0f} s)"
        self.stream.write(f"\r{text}\x1b[K" if self.tty else f"{text}\n")
        self.stream.flush()


def _simulate(args: argparse.Namespace) -> int:
    with extra.needed("simulate"):
        from neuron_dra.tools import convert, picture, simulate  # noqa: PLC0415
        from neuron_dra.tools.counted import counted  # noqa: PLC0415

    # The files first: a bad one fails before minutes of building nodes.
    documents = simulate.load_documents(args.files)
    simulate.check_documents(documents)
    for where, doc in documents:
        if convert.beta(doc):
            name = (doc.get("metadata") or {}).get("name") or "?"
            note = convert.removal(str(doc["apiVersion"]), where.rpartition(":")[0])
            print(f"{where}: warning: {doc['kind']} {name}: {note}", file=sys.stderr)
    if args.kubeconfig is not None:
        live = simulate.live_cluster(args.kubeconfig)
        cluster = simulate.Cluster(live.nodes, live.classes)
        simulate.take_allocated(cluster, live.claims)
        cluster.add_taint_rules([simulate.parse_taint_rule(r, "cluster") for r in live.taint_rules])
        # The cluster's PodGroups first: one among the files is the one to apply.
        documents = [*(("cluster", g) for g in live.pod_groups), *documents]
    else:
        counts = simulate.parse_node_counts(args.node)
        with Progress("simulated nodes built") as progress:
            nodes = simulate.simulated_nodes(
                counts,
                ultraserver_devices=args.ultraserver_devices,
                driver_version=args.driver_version,
                cores=args.neuron_cores == "on",
                progress=progress,
            )
        cluster = simulate.Cluster(nodes, {})
    for node, device in simulate.parse_taken(args.taken):
        cluster.take(node, device, "--taken")
    with Progress("claims allocated") as progress:
        outcomes = simulate.simulate_documents(documents, cluster, progress)
    views = picture.node_views(cluster, outcomes)
    labels = [f"{o.letter}: {o.claim.key}" for o in outcomes]
    if args.picture is not None:
        args.picture.write_text(picture.render_svg(views, labels))
    if args.output == "json":
        document = {
            "deviceTaintRules": [simulate.applied_json(a) for a in cluster.taint_rules],
            "claims": [simulate.outcome_json(o) for o in outcomes],
            "nodes": [
                {
                    "name": v.name,
                    "instanceType": v.instance_type,
                    "devices": {str(i): outcomes[n].claim.key for i, n in sorted(v.owners.items())},
                    "cores": {
                        str(core): outcomes[n].claim.key
                        for held in v.cores.values()
                        for core, n in held
                        if n is not None
                    },
                    "wholeNode": None if v.whole_node is None else outcomes[v.whole_node].claim.key,
                }
                for v in views
            ],
        }
        print(json.dumps(document, indent=2))
    else:
        for applied in cluster.taint_rules:
            print(simulate.describe_applied(applied))
        if cluster.taint_rules:
            print()
        for outcome in outcomes:
            print("\n".join(simulate.describe(outcome)))
            print()
        letters = [o.letter for o in outcomes]
        used = {o.node for o in outcomes if o.node} | {v.name for v in views if v.taken}
        shown = [v for v in views if v.name in used] or views[:1]
        for view in shown:
            print(picture.render_text(view, letters))
        hidden = len(views) - len(shown)
        if hidden:
            print(f"({counted(hidden, 'more node')} with nothing allocated)")
    # A claim placed but one the driver would refuse to prepare fails as surely as one
    # never placed: the pod would not start either way.
    return 0 if all(o.allocated and not o.prepare_error for o in outcomes) else 1


def _templates(args: argparse.Namespace) -> int:
    from neuron_dra.tools import templates  # noqa: PLC0415
    from neuron_dra.tools.releases import ReleaseError  # noqa: PLC0415

    types = args.instance_type or sorted(INSTANCE_TYPES)
    try:
        out = templates.templates(types, args.kubernetes_version, args.neuron_cores)
    except ReleaseError as err:  # TemplateError among them
        print(f"neuron-dra templates: {err}", file=sys.stderr)
        return 2
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def _convert(args: argparse.Namespace) -> int:
    with extra.needed("convert"):
        from neuron_dra.tools import convertyaml  # noqa: PLC0415

    if args.in_place and any(str(f) == "-" for f in args.files):
        raise ValueError("convert: --in-place rewrites files; standard input (-) is not one")
    results = [(path, convertyaml.convert_file(path)) for path in args.files]
    for _, result in results:
        for finding in result.findings:
            print(finding, file=sys.stderr)
    if any(
        result.failed for _, result in results
    ):  # nothing written: half a conversion applied is worse than none
        return 1
    if not args.in_place:
        sys.stdout.write(convertyaml.joined([r.text for _, r in results]))
        return 0
    for path, result in results:
        if result.changed:
            _replace(path, result.text)
            print(f"{path}: converted to resource.k8s.io/v1", file=sys.stderr)
    return 0


def _replace(path: Path, text: str) -> None:
    """`path`'s content replaced whole, keeping its mode: a crash leaves the old file or
    the new one, never half of it."""
    scratch = path.with_name(f".{path.name}.convert")
    scratch.write_text(text)
    scratch.chmod(path.stat().st_mode & 0o7777)
    scratch.replace(path)
