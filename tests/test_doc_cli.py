"""What the docs say of the `neuron-dra` command agrees with the command and with where
the chart puts things: the in-pod `discover` reads the host's sysfs where the DaemonSet
mounts it, and the commands a page names are subcommands."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from neuron_dra.cli import parser
from tests import doc_commands

REPO = Path(__file__).resolve().parent.parent
OPERATORS = REPO / "docs/operators"


def subcommands() -> set[str]:
    [action] = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices or ())


def test_the_in_pod_discover_reads_where_the_daemonset_mounts_the_host() -> None:
    """In the plugin pod `/sys` is the container's: the host's is under the mount of the
    hostPath /sys, whose parent the documented --sysfs-root must be."""
    daemonset = yaml.safe_load((REPO / "deploy/daemonset.yaml").read_text())
    spec = daemonset["spec"]["template"]["spec"]
    [container] = spec["containers"]
    [host_sys] = [v["name"] for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/sys"]
    [mounted] = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == host_sys]
    root = str(Path(mounted).parent)
    assert {e["name"]: e.get("value") for e in container["env"]}["SYSFS_ROOT"] == root
    documented = [
        c
        for c in doc_commands.run_by(doc_commands.EXEC)
        if c.page == "docs/operators/inspecting-a-node.md"
    ]
    assert [c.argv[c.argv.index("--") + 1 :] for c in documented] == [
        ["neuron-dra", "discover", "--sysfs-root", root]
    ]


def test_the_release_page_names_only_commands_that_exist() -> None:
    page = " ".join((OPERATORS / "releases.md").read_text().split())
    [listed] = re.findall(r"The CLI's offline tools \(([^)]*)\)", page)
    named = re.findall(r"`([\w-]+)`", listed)
    assert named and set(named) <= subcommands(), named
