"""What the docs say of the `neuron-dra` command agrees with the command and with where
the chart puts things: the in-pod `discover` reads the host's sysfs where the DaemonSet
mounts it, the commands a page names are subcommands, and every `neuron-dra` command
written in the docs, in code blocks or in the prose, parses: no unknown subcommand,
flag or choice."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path

import yaml

from neuron_dra.cli import parser
from tests import doc_commands, doc_programs

REPO = Path(__file__).resolve().parent.parent
OPERATORS = REPO / "docs/operators"


def subparsers(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices or {})


def subcommands() -> set[str]:
    return set(subparsers(parser()))


def lenient_parser() -> argparse.ArgumentParser:
    """The CLI's parser with no flag required: argparse complains of a missing required
    flag before an unknown one, and a mention in the prose may leave one out."""
    top = parser()
    for command in subparsers(top).values():
        for action in command._actions:
            if action.option_strings:
                action.required = False
    return top


def test_the_in_pod_commands_read_where_the_daemonset_mounts_the_host() -> None:
    """In the plugin pod `/sys` is the container's: the host's is under the mount of the
    hostPath /sys, whose parent the documented --sysfs-root must be; `slices` takes its
    node from the $NODE_NAME the DaemonSet sets from the pod's node."""
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
        ["neuron-dra", "discover", "--sysfs-root", root],
        ["neuron-dra", "slices", "--sysfs-root", root],
    ]
    [node_name] = [e for e in container["env"] if e["name"] == "NODE_NAME"]
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_the_release_page_names_only_commands_that_exist() -> None:
    page = " ".join((OPERATORS / "releases.md").read_text().split())
    [listed] = re.findall(r"The CLI's offline tools \(([^)]*)\)", page)
    named = re.findall(r"`([\w-]+)`", listed)
    assert named and set(named) <= subcommands(), named


def parse_error(args: tuple[str, ...]) -> str | None:
    """argparse's complaint about `neuron-dra ARGS`: an unknown subcommand, flag or
    choice; None when it takes them."""
    if len(args) == 1:  # a subcommand named in passing: `neuron-dra lint`
        return None if args[0] in subcommands() else f"no subcommand {args[0]!r}"
    complaint = io.StringIO()
    try:
        with contextlib.redirect_stderr(complaint):
            lenient_parser().parse_args(list(args))
    except SystemExit as exit_:
        error = complaint.getvalue().strip().splitlines()[-1] if exit_.code else ""
        # What a mention leaves out (a required flag it does not name) is no error of it.
        return None if not error or "arguments are required" in error else error
    return None


def test_every_documented_neuron_dra_command_parses() -> None:
    found = doc_programs.invocations("neuron-dra")
    assert len(found) >= 40, found
    refused = [
        f"{invocation}: {error}"
        for invocation in found
        for args in doc_programs.alternatives(invocation.args)
        if (error := parse_error(args))
    ]
    assert not refused, "\n".join(refused)


def test_an_unknown_flag_value_or_subcommand_is_caught() -> None:
    [good] = doc_programs.invocations_in("x:1", "neuron-dra slices --neuron-cores on|off")
    assert [parse_error(args) for args in doc_programs.alternatives(good.args)] == [None, None]
    for text, complaint in (
        ("neuron-dra published -o yaml", "invalid choice: 'published'"),
        ("neuron-dra slices --cores on", "unrecognized arguments: --cores"),
        ("neuron-dra slices --neuron-cores maybe", "invalid choice: 'maybe'"),
        ("kubectl exec ds/neuron-dra -- neuron-dra publish", "no subcommand 'publish'"),
    ):
        [bad] = doc_programs.invocations_in("x:1", text)
        assert complaint in (parse_error(bad.args) or ""), text
