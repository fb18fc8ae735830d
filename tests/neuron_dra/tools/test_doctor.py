"""`neuron-dra doctor`'s node checks on simulated nodes, sound and broken."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from consts import DRIVER_NAME
from neuron_dra.agent.kubelet.readiness import READINESS_SERVICE, Health, probe_server
from neuron_dra.cli import main
from neuron_dra.hardware.fakenode import build_fake_node
from neuron_dra.tools.doctor.nodechecks import node_checks
from neuron_dra.tools.doctor.plugincheck import plugin_probes
from neuron_dra.tools.doctor.together import together
from neuron_dra.tools.doctor.verdicts import Check, exit_status, fail, ok
from tests.sysfs_tree import FakeNode


class Node:
    def __init__(self, root: Path, kubelet: Path, config: Path) -> None:
        self.root, self.kubelet, self.config = root, kubelet, config

    def checks(self) -> dict[str, Check]:
        return {c.name: c for c in node_checks(self.root, self.kubelet, self.config)}


POD_UID = "0b7c7a8e-3f0d-4d2e-9a55-6c1f1e0d2a11"


def listen(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    return server


@pytest.fixture
def node(fake_node: FakeNode, tmp_path: Path) -> Iterator[Node]:
    """A trn2 node the driver's pod serves: its sockets (named after the pod, as the
    DaemonSet's are), CDI directory, the device plugins' directory, containerd 2 config."""
    root = fake_node("trn2.48xlarge")
    (root / "var/run/cdi").mkdir(parents=True)
    # Short: a socket's path has at most 107 bytes.
    kubelet = Path(tempfile.mkdtemp(prefix="ndk-"))
    (kubelet / "device-plugins").mkdir()
    sockets = [
        listen(kubelet / "plugins_registry" / f"{DRIVER_NAME}-{POD_UID}-reg.sock"),
        listen(kubelet / "plugins" / DRIVER_NAME / f"dra-{POD_UID}.sock"),
    ]
    config = tmp_path / "config.toml"
    config.write_text('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n')
    yield Node(root, kubelet, config)
    for s in sockets:
        s.close()
    shutil.rmtree(kubelet)


def test_a_sound_node_passes_every_check(node: Node) -> None:
    checks = node.checks()
    assert {n: c.verdict for n, c in checks.items()} == dict.fromkeys(checks, "ok")
    assert checks["neuron devices"].detail == (
        "16 devices of trn2.48xlarge, Neuron driver 2.24.7.0"
    )
    assert exit_status(list(checks.values())) == 0


def test_an_instance_type_missing_from_the_catalogue_is_named(node: Node) -> None:
    (node.root / "sys/devices/virtual/dmi/id/product_name").write_text("trn9.48xlarge\n")
    check = node.checks()["instance type"]
    assert check.verdict == "warn"
    assert check.detail.startswith(
        "trn9.48xlarge is not in this release's catalogue; published as its sysfs says: "
        "connected_devices: 16 devices, 4x4 torus, connected sets of 1, 4, 8, 16;"
    )


def test_a_node_without_the_neuron_driver_fails(tmp_path: Path, node: Node) -> None:
    """A Neuron instance (its DMI table says so) whose kernel driver is not loaded."""
    node.root = tmp_path / "inf2"
    product = node.root / "sys/devices/virtual/dmi/id/product_name"
    product.parent.mkdir(parents=True)
    product.write_text("inf2.xlarge\n")
    check = node.checks()["neuron devices"]
    assert check.verdict == "fail"
    assert "modprobe neuron" in check.fix


def test_off_a_neuron_node_one_line_says_so(tmp_path: Path, node: Node) -> None:
    """A laptop or a CI runner: one check saying what it is and how to check the cluster
    alone, not the kubelet's and the runtime's checks of a node that reads as broken."""
    node.root = tmp_path / "laptop"
    (node.root / "sys/devices/virtual/dmi/id").mkdir(parents=True)
    (node.root / "sys/devices/virtual/dmi/id/product_name").write_text("ThinkPad X1\n")
    (node.root / "dev").mkdir()
    [check] = node.checks().values()
    assert (check.name, check.verdict) == ("neuron node", "fail")
    assert check.detail == (
        f"not a Neuron node: no {node.root}/dev/neuron* and no Neuron sysfs under {node.root}/sys"
    )
    assert "neuron-dra doctor --no-node --kubeconfig" in check.fix


def test_an_unreachable_api_server_is_one_failure_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: prod\n"
        "contexts: [{name: prod, context: {cluster: k, user: u}}]\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    assert main(["doctor", "--no-node", "--kubeconfig", str(kubeconfig)]) == 1
    out = capsys.readouterr().out
    [failure] = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert f"https://127.0.0.1:{port} (context prod of {kubeconfig}): " in failure
    assert "unreachable" in failure
    assert out.rstrip().endswith("0 ok, 0 warnings, 1 failed")


def test_the_device_plugin_beside_the_driver_is_named(node: Node) -> None:
    with listen(node.kubelet / "device-plugins" / "aws.amazon.com_neuron.sock"):
        check = node.checks()["device plugin socket"]
    assert check.verdict == "fail"
    assert "aws.amazon.com_neuron.sock" in check.detail
    assert "migration.md" in check.fix


def test_the_device_plugin_before_the_driver_is_a_warning(node: Node) -> None:
    for path in (node.kubelet / "plugins_registry").iterdir():
        path.unlink()
    for path in (node.kubelet / "plugins" / DRIVER_NAME).iterdir():
        path.unlink()
    with listen(node.kubelet / "device-plugins" / "neuron.sock"):
        checks = node.checks()
    assert checks["device plugin socket"].verdict == "warn"
    assert "neuron.sock" in checks["device plugin socket"].detail
    assert checks["driver sockets"].verdict == "warn"


def test_what_the_plugin_pod_does_not_mount_is_a_warning_not_an_ok(node: Node) -> None:
    """In the plugin's pod neither the device plugins' directory nor the runtime's
    configuration is there: each check says it could not look."""
    (node.kubelet / "device-plugins").rmdir()
    node.config.unlink()
    checks = node.checks()
    assert checks["device plugin socket"].verdict == "warn"
    assert "not visible here" in checks["device plugin socket"].detail
    assert checks["runtime CDI"].verdict == "warn"
    assert "does not mount it" in checks["runtime CDI"].detail


def test_a_stopped_plugins_sockets_fail(node: Node, tmp_path: Path) -> None:
    """Sockets left by a plugin killed before it could remove them: nothing listens."""
    for path in (node.kubelet / "plugins" / DRIVER_NAME).iterdir():
        path.unlink()
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(node.kubelet / "plugins" / DRIVER_NAME / f"dra-{POD_UID}.sock"))
    dead.close()
    check = node.checks()["driver sockets"]
    assert check.verdict == "fail"
    assert f"dra-{POD_UID}.sock refuse connections" in check.detail


@pytest.mark.parametrize(
    ("config", "verdict"),
    [
        ("enable_cdi = false\n", "fail"),
        ("  enable_cdi = true\n", "ok"),
        ("version = 2\n", "warn"),
    ],
)
def test_the_runtime_cdi_setting(node: Node, config: str, verdict: str) -> None:
    node.config.write_text(config)
    assert node.checks()["runtime CDI"].verdict == verdict


def doctor_json(node: Node, *prefix: str) -> subprocess.CompletedProcess[str]:
    """`neuron-dra doctor -o json` on the node, run after `prefix` (another user, say)."""
    return subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "neuron_dra",
            "doctor",
            f"--sysfs-root={node.root}",
            f"--kubelet-dir={node.kubelet}",
            f"--containerd-config={node.config}",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_a_missing_socket_fails_and_the_command_exits_1(node: Node) -> None:
    (node.kubelet / "plugins" / DRIVER_NAME / f"dra-{POD_UID}.sock").unlink()
    assert node.checks()["driver sockets"].verdict == "fail"
    done = doctor_json(node)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] == 1
    [failed] = [c for c in report["checks"] if c["verdict"] == "fail"]
    assert failed["name"] == "driver sockets" and failed["fix"]


def test_not_root_on_the_host_is_told_to_be_root(node: Node) -> None:
    """The kubelet's directories are root's alone: a user's doctor says it could not
    look, not that the driver is missing."""
    node.kubelet.chmod(0o700)
    # The rest of the node readable by all, as a host's /sys, /dev and /etc are.
    public = Path(tempfile.mkdtemp(prefix="ndr-"))
    public.chmod(0o755)
    node.root = build_fake_node(public / "root", "trn2.48xlarge")
    (node.root / "var/run/cdi").mkdir(parents=True)
    shutil.copy(node.config, public / "config.toml")
    node.config = public / "config.toml"
    # Root reads whatever the modes say: the command runs as nobody there.
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    done = doctor_json(node, *(as_user if os.geteuid() == 0 else []))
    shutil.rmtree(public)
    assert done.returncode == 0, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    for name in ("device plugin socket", "kubelet directories", "driver sockets"):
        assert checks[name]["verdict"] == "warn", checks[name]
        assert checks[name]["detail"].endswith("not readable here"), checks[name]
        assert "run doctor as root" in checks[name]["fix"]


def test_the_plugins_probes_are_asked(tmp_path: Path) -> None:
    """The agent's own probe server: not ready until the kubelet registered the plugin,
    then live and ready (ok); its DRA socket gone, not live; the server gone, no answer
    (warn)."""
    dra = tmp_path / "dra.sock"
    dra_server = listen(dra)

    async def asked() -> list[Check]:
        health = Health(dra_socket=dra)
        health.set_serving(True)
        server = probe_server(health)
        target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        try:
            seen = [await asyncio.to_thread(plugin_probes, target)]
            health.set_serving(True, READINESS_SERVICE)
            seen.append(await asyncio.to_thread(plugin_probes, target))
            dra.unlink()
            seen.append(await asyncio.to_thread(plugin_probes, target))
        finally:
            await server.stop(None)
        return [*seen, await asyncio.to_thread(plugin_probes, target, 1.0)]

    not_ready, sound, not_live, gone = asyncio.run(asked())
    dra_server.close()
    verdicts = [c.verdict for c in (not_ready, sound, not_live, gone)]
    assert verdicts == ["fail", "ok", "fail", "warn"]
    assert "has not registered the plugin" in not_ready.detail
    assert "not live: its DRA socket is gone" in not_live.detail
    assert "did not answer (UNAVAILABLE)" in gone.detail


def test_a_node_the_driver_does_not_serve_fails_once_the_cluster_has_it(node: Node) -> None:
    for directory in ("plugins_registry", f"plugins/{DRIVER_NAME}"):
        for path in (node.kubelet / directory).iterdir():
            path.unlink()
    alone = list(node.checks().values())
    installed = [ok("device classes", "neuron.aws.com, neuroncore.neuron.aws.com")]
    before = [fail("device classes", "missing neuron.aws.com", "install the driver")]
    verdicts = {
        name: {c.name: c.verdict for c in together(alone, cluster)}["driver sockets"]
        for name, cluster in (("alone", []), ("before", before), ("installed", installed))
    }
    assert verdicts == {"alone": "warn", "before": "warn", "installed": "fail"}
