"""`neuron-dra lint`: check ResourceClaim(Template)s, DeviceClasses and pods against what
the driver publishes, before they are applied; for CI, a release to check against and
warnings that fail the run.

The checks (the `tools` extra) are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from neuron_dra.cli import extra
from neuron_dra.cli.flags import SubParsers
from neuron_dra.hardware.instance_types import INSTANCE_TYPES


def add_command(subparsers: SubParsers) -> None:
    """Register `lint` on the `neuron-dra` command's subparsers."""
    cmd = subparsers.add_parser(
        "lint", help="check ResourceClaim(Template)s against what the driver publishes"
    )
    cmd.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="YAML files to check (-: stdin)"
    )
    cmd.add_argument(
        "--instance-type",
        action="append",
        default=[],
        choices=sorted(INSTANCE_TYPES),
        help="instance types the claims are meant for (default: what selectors pin)",
    )
    cmd.add_argument(
        "--kubernetes-version",
        metavar="MAJOR.MINOR",
        help="the release of the cluster: only what applies there is reported, an error "
        "where a claim never works on it (default: what differs between releases, as warnings)",
    )
    cmd.add_argument(
        "--warnings-as-errors",
        action="store_true",
        help="exit 1 on any warning too, for CI",
    )
    cmd.add_argument(
        "-o",
        "--output",
        default="text",
        choices=["text", "json"],
        help="text: a line a finding and a summary; json: the same as data, for CI",
    )
    cmd.set_defaults(command=_lint)


def _lint(args: argparse.Namespace) -> int:
    from neuron_dra.tools.releases import parse_version  # noqa: PLC0415 (no extra needed)

    # A bad release fails before the files are read.
    release = None if args.kubernetes_version is None else parse_version(args.kubernetes_version)
    with extra.needed("lint"):
        from neuron_dra.tools import lint  # noqa: PLC0415

    findings = lint.lint_files(args.files, args.instance_type, release)
    if args.output == "json":
        print(json.dumps(lint.findings_json(findings), indent=2))
    else:
        for finding in findings:
            print(finding)
        print(lint.summary(findings))
    failing = findings if args.warnings_as_errors else [f for f in findings if f.error]
    return 1 if failing else 0
