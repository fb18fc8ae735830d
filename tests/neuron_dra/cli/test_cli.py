from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from neuron_dra import cli
from neuron_dra.cli import extra, main
from neuron_dra.cli.tools import Progress
from tests.sysfs_tree import write

REPO = Path(__file__).resolve().parents[3]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_fake_node_then_slices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "us"
    code, out, _ = run(
        capsys,
        "fake-node",
        "--instance-type",
        "trn2u.48xlarge",
        "--out",
        str(root),
        "--ultraserver-server-id",
        "us-9",
        "--ultraserver-node-id",
        "1",
        "--lnc",
        "1",
    )
    assert (code, out.strip()) == (0, str(root))
    args = ("slices", "--sysfs-root", str(root), "--node-name", "n1")
    code, out, _ = run(capsys, *args)
    # Kubernetes 1.36+ by default: the counters in a slice of their own, then the devices
    # and the node device, then the 128 logical cores (LNC 1), 64 devices to a slice.
    pool = list(yaml.safe_load_all(out))
    assert code == 0
    assert [len(s["spec"].get("devices", [])) for s in pool] == [0, 64, 64, 17]
    assert pool[-1]["spec"]["devices"][-1]["name"] == "neuroncore127"
    code, out, _ = run(capsys, *args, "--neuron-cores", "off")  # as on 1.35 with counters
    counters, published = yaml.safe_load_all(out)
    assert counters["spec"]["sharedCounters"] and "devices" not in counters["spec"]
    assert published["spec"]["pool"]["resourceSliceCount"] == 2
    names = [d["name"] for d in published["spec"]["devices"]]
    assert names[-1] == "neuronnode" and len(names) == 17
    node = published["spec"]["devices"][-1]["attributes"]
    assert node["ultraserverServerId4"] == {"string": "us-9"}
    assert node["logicalNeuronCore"] == {"int": 1}
    code, out, _ = run(capsys, *args, "--neuron-cores", "off", "--counter-layout", "beside-devices")
    [beside] = yaml.safe_load_all(out)  # 1.34: one slice, counters beside the devices
    assert (code, beside["spec"]["devices"]) == (0, published["spec"]["devices"])
    assert beside["spec"]["sharedCounters"] == counters["spec"]["sharedCounters"]


def test_slices_name_the_plugin_pods_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the plugin pod `slices` needs no --node-name: the DaemonSet sets $NODE_NAME to
    the pod's node; without either it says what is missing."""
    root = tmp_path / "trn2"
    run(capsys, "fake-node", "--instance-type", "trn2.3xlarge", "--out", str(root))
    monkeypatch.delenv("NODE_NAME", raising=False)
    code, out, err = run(capsys, "slices", "--sysfs-root", str(root))
    assert (code, out) == (2, "")
    assert "--node-name or $NODE_NAME is required" in err
    monkeypatch.setenv("NODE_NAME", "ip-10-0-0-7")
    code, out, _ = run(capsys, "slices", "--sysfs-root", str(root))
    pool = list(yaml.safe_load_all(out))
    assert code == 0
    assert {s["spec"]["pool"]["name"] for s in pool} == {"ip-10-0-0-7"}
    assert {s["spec"].get("nodeName") for s in pool if "devices" in s["spec"]} == {"ip-10-0-0-7"}


def test_discover_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "inf2"
    run(capsys, "fake-node", "--instance-type", "inf2.48xlarge", "--out", str(root))
    code, out, _ = run(capsys, "discover", "--sysfs-root", str(root), "-o", "json")
    inventory = json.loads(out)
    assert code == 0 and inventory["shape"] == "ring" and len(inventory["devices"]) == 12
    assert inventory["devices"][0]["neighbours"] == [11, 1]
    assert inventory["connectedSets"]["6"] == [list(range(6)), list(range(6, 12))]
    code, out, _ = run(capsys, "discover", "--sysfs-root", str(root))
    assert "neurondevice11" in out and "{6-11}" in out


def test_findings_are_logged_and_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "trn1"
    run(capsys, "fake-node", "--instance-type", "trn1.32xlarge", "--out", str(root))
    write(root, "sys/module/neuron/version", "")
    code, out, err = run(capsys, "--log-format", "json", "discover", "--sysfs-root", str(root))
    assert code == 0
    assert "! /sys/module/neuron/version: invalid value '': empty" in out
    logged = json.loads(err.strip().splitlines()[0])
    assert logged["path"] == "/sys/module/neuron/version" and logged["level"] == "warning"


def test_bad_fake_node_arguments_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "fake-node", "--instance-type", "inf2.xlarge", "--out", str(tmp_path), "--lnc", "1"
    )
    assert code == 2 and "inf2.xlarge has no logical NeuronCores" in err


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_output_into_a_closed_pipe_ends_without_a_traceback(buffered: bool) -> None:
    """As `neuron-dra lint ... | head -1` once head has exited: writes to stdout fail."""
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    spec = Path(__file__).resolve().parents[3] / "examples" / "specs" / "l-trn2.yaml"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "neuron_dra", "lint", str(spec)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
    finally:
        os.close(write)
    assert result.stderr == ""
    assert result.returncode == 1


def test_lint_piped_into_head_ends_without_a_traceback(tmp_path: Path) -> None:
    # More than a pipe's buffer of findings (missing files are the cheapest), so
    # the writes outlast `head` whichever of the two runs first.
    files = " ".join(shlex.quote(str(tmp_path / f"missing-{i:04}.yaml")) for i in range(1000))
    result = subprocess.run(
        f"{shlex.quote(sys.executable)} -m neuron_dra lint {files} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.stdout.endswith("missing-0000.yaml: error: No such file or directory\n")
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr


def test_a_broken_pipe_other_than_stdout_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def lose_a_connection(_: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("neuron_dra.cli.lint._lint", lose_a_connection)
    with pytest.raises(BrokenPipeError):
        main(["lint", str(tmp_path / "any.yaml")])


def _flags_without_help() -> list[str]:
    top = cli.parser()
    parsers = [("", top)]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers += [(f"{name} ", sub) for name, sub in action.choices.items()]
    return [
        f"{command}{'/'.join(action.option_strings) or action.dest}"
        for command, parser in parsers
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and not action.help
    ]


def test_every_flag_has_help() -> None:
    assert _flags_without_help() == []


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"neuron-dra {importlib.metadata.version('neuron-dra')}\n"


def test_run_parses_its_flags_before_the_tools_are_imported() -> None:
    """`run` builds only its own parser: what the other commands' flags import, and the
    package metadata, would delay the kubelet's sockets."""
    code = (
        "import sys; from neuron_dra import cli; args = cli.parse(sys.argv[1:]); "
        "print(args.ultraserver_devices, sorted(m for m in sys.modules if m.startswith("
        "('neuron_dra.hardware', 'neuron_dra.resources', 'neuron_dra.cli.node', "
        "'neuron_dra.cli.tools', 'importlib.metadata'))))"
    )
    argv = ["--log-level", "debug", "run", "--node-name", "n", "--ultraserver-devices", "node"]
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True
    ).stdout
    assert out == "node []\n"


def test_runs_ultraserver_choices_are_the_slice_builders() -> None:
    from neuron_dra.cli.agent import ULTRASERVER_DEVICES  # noqa: PLC0415
    from neuron_dra.resources.slices import UltraServerDevices  # noqa: PLC0415

    assert ("auto", *UltraServerDevices) == ULTRASERVER_DEVICES


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["run"], "run"),
        (["--log-format", "json", "run", "--node-name", "run"], "run"),
        (["--log-format=json", "discover"], "discover"),
        (["lint", "run"], "lint"),
        (["--version"], None),
        (["--log-level", "loud", "run"], "run"),
        ([], None),
    ],
)
def test_the_command_is_read_past_the_global_flags(argv: list[str], command: str | None) -> None:
    assert cli._command(argv) == command


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("garbage: [\n", "not valid YAML: while parsing a flow node"),
        ("apiVersion: v1\n", "current-context: missing"),
    ],
)
def test_a_bad_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    spec = Path(__file__).resolve().parents[3] / "examples/specs/single-device.yaml"
    assert cli.main(["simulate", "--kubeconfig", str(kubeconfig), str(spec)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"neuron-dra: error: {kubeconfig}: ") and message in line


LNC_ON_INF2 = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: t
spec:
  spec:
    devices:
      requests:
      - name: neurons
        exactly:
          deviceClassName: neuron.aws.com
      config:
      - opaque:
          driver: neuron.aws.com
          parameters: {apiVersion: neuron.aws.com/v1, kind: NeuronConfig, logicalNeuronCore: 1}
"""


def test_simulate_fails_when_the_driver_would_refuse_to_prepare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Placed, but the plugin would refuse it (LNC on inf2): the pod would not start."""
    spec = tmp_path / "lnc.yaml"
    spec.write_text(LNC_ON_INF2)
    code, out, _ = run(capsys, "simulate", "--node", "inf2.xlarge=1", str(spec))
    assert code == 1
    assert "has no logical NeuronCores" in out


def test_simulate_refuses_what_the_api_server_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "flat.yaml"
    spec.write_text(LNC_ON_INF2.replace("spec:\n  spec:\n    devices:", "spec:\n  devices:"))
    code, _, err = run(capsys, "simulate", "--node", "inf2.xlarge=1", str(spec))
    assert code == 2
    assert "ResourceClaimTemplate t: spec: unknown field devices" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_progress_shows_only_on_long_steps(tty: bool) -> None:
    now = [0.0]
    stream = _Terminal() if tty else io.StringIO()
    with Progress("nodes built", stream, clock=lambda: now[0]) as progress:
        progress(1, 5000)  # at once: nothing
        now[0] = 1.5
        progress(100, 5000)  # a terminal shows it from a second, a log from ten
        now[0] = 12.0
        progress(4000, 5000)
        progress(4001, 5000)  # too soon after the last
    if tty:
        assert stream.getvalue() == (
            "\rnodes built: 100 of 5,000 (2 s)\x1b[K\rnodes built: 4,000 of 5,000 (12 s)\x1b[K"
            "\r\x1b[K"
        )
    else:
        assert stream.getvalue() == "nodes built: 4,000 of 5,000 (12 s)\n"


UNKNOWN_ATTRIBUTE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: x}
spec:
  devices:
    requests:
    - name: a
      exactly:
        deviceClassName: neuron.aws.com
        selectors: [{cel: {expression: 'device.attributes["neuron.aws.com"].nope == 1'}}]
"""


def test_lint_reads_standard_input_and_writes_json() -> None:
    """`-` is standard input, as kubectl's `-f -`; `-o json` gives CI the same findings."""
    done = subprocess.run(
        [sys.executable, "-m", "neuron_dra", "lint", "-", "-o", "json"],
        input=UNKNOWN_ATTRIBUTE,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert (report["errors"], report["warnings"]) == (1, 0)
    [finding] = report["findings"]
    assert finding["file"] == "<stdin>" and finding["line"] == 10  # the selectors' line
    assert finding["level"] == "error"
    assert finding["message"] == "attribute neuron.aws.com/nope is never published by the driver"
    text = subprocess.run(
        [sys.executable, "-m", "neuron_dra", "lint", "-"],
        input=UNKNOWN_ATTRIBUTE,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert text.stdout.startswith("<stdin>:10: error: ResourceClaim x: request a: selectors[0]")


def test_bash_completes_commands_and_flags(tmp_path: Path) -> None:
    """The shell code `completion bash` prints, loaded in a real bash, completes through
    `neuron-dra` itself."""
    launcher = tmp_path / "neuron-dra"
    launcher.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m neuron_dra "$@"\n')
    launcher.chmod(0o755)
    code = subprocess.run(
        [str(launcher), "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    script = tmp_path / "complete.sh"
    script.write_text(
        code
        + """
complete_line() {
    COMP_LINE="$1"; COMP_POINT=${#1}; read -r -a COMP_WORDS <<< "$1"
    [[ $1 == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
    _python_argcomplete neuron-dra "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf '%s\\n' "${COMPREPLY[@]}"
}
complete_line "neuron-dra li"
echo --
complete_line "neuron-dra lint -o "
echo --
complete_line "neuron-dra conv"
"""
    )
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    first, second, third = done.stdout.split("--\n")
    assert first.split() == ["lint"]
    assert sorted(second.split()) == ["json", "text"]
    assert third.split() == ["convert"]


@pytest.mark.parametrize(
    ("argv", "blocked"),
    [
        (["lint", "examples/specs/single-device.yaml"], "celpy"),
        (["simulate", "examples/specs/single-device.yaml", "--node", "inf2.xlarge=1"], "celpy"),
        (["completion", "bash"], "argcomplete"),
    ],
)
def test_a_missing_extra_names_the_ways_that_install_it(argv: list[str], blocked: str) -> None:
    """Without the tools extra the command says how to get it: a clone, a release's wheel
    or the plugin pod, never a package name the index does not have."""
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from neuron_dra.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert done.returncode == 2, done.stderr
    assert f"({blocked} is not installed)" in done.stderr
    assert "pip install -e '.[tools]'" in done.stderr
    assert "neuron_dra-<version>-py3-none-any.whl[tools]" in done.stderr
    assert "kubectl exec -i -n neuron-dra ds/neuron-dra -- neuron-dra lint -" in done.stderr
    assert "neuron-dra[tools]" not in done.stderr


def test_the_plugin_pod_named_is_the_charts() -> None:
    daemonset = next(
        d
        for d in yaml.safe_load_all((REPO / "deploy/daemonset.yaml").read_text())
        if d and d["kind"] == "DaemonSet"
    )
    meta = daemonset["metadata"]
    assert f"-n {meta['namespace']} ds/{meta['name']}" == extra.PLUGIN_POD


def test_every_help_names_the_options_defaults() -> None:
    """`--help` of each command names every option's default where it has one: the value,
    or what the help says it is (an environment variable, the chart's setting)."""
    top = cli.parser()
    [commands] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    checked = 0
    for name, command in {"neuron-dra": top, **commands.choices}.items():
        formatter = command._get_formatter()
        for action in command._actions:
            if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
                continue
            text = formatter._get_help_string(action) or ""
            assert "default" in text, (name, action.option_strings, text)
            checked += 1
    assert checked >= 30
    assert "(default: text)" in " ".join(commands.choices["lint"].format_help().split())
