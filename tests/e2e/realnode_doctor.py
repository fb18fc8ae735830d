"""`neuron-dra doctor` on the real node (``test_realnode.py`` runs these on its node).

In the plugin's pod, as the troubleshooting page runs it, and on the host (in the
node's mount namespace, as root), on the sound node and then broken one way at a
time: each broken setup fails the check it should, names what is wrong and gives the
fix, and is put back before the next.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from consts import DRIVER_NAME
from neuron_dra_harness.realcluster import RealCluster
from tests import doc_commands

REPO = Path(__file__).resolve().parents[2]
Checks = dict[str, dict[str, Any]]  # name -> the check as -o json gives it
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# A line of the text report: the verdict, the check's name, what it saw.
_LINE = re.compile(r"^(OK|WARN|FAIL) +(\S+(?: \S+)*)  +(.*)$")
# In the plugin's pod on a sound node: what the pod does not mount, and nothing else.
POD_WARNINGS = {"device plugin socket", "runtime CDI"}


def documented(real: RealCluster) -> tuple[str, subprocess.CompletedProcess[str]]:
    """The troubleshooting page's `kubectl exec ... neuron-dra doctor`, run as written."""
    [command] = doc_commands.run_by(doc_commands.DOCTOR)
    return command.text, shell(real, command.text)


def in_the_pod(real: RealCluster, *args: str) -> tuple[int, Checks]:
    """The documented command with `args` (-o json added), exit status and checks."""
    text, _ = documented(real)
    done = shell(real, f"{text} -o json {' '.join(args)}")
    return done.returncode, _parsed(done)


def on_the_host(real: RealCluster) -> tuple[int, Checks]:
    """doctor as root on the node's host: its sysfs, /dev, kubelet directory and
    containerd's configuration at their places, and the cluster by its kubeconfig."""
    done = real.node.nsenter(
        [
            sys.executable,
            "-m",
            "neuron_dra",
            "doctor",
            f"--containerd-config={real.node.dir / 'containerd.toml'}",
            f"--kubeconfig={real.cluster.kubeconfig}",
            "-o",
            "json",
        ],
        env={**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"},
    )
    return done.returncode, _parsed(done)


def text_verdicts(stdout: str) -> dict[str, str]:
    """name -> verdict of each line of the text report (its fix lines skipped)."""
    found = {}
    for line in stdout.splitlines():
        matched = _LINE.match(line)
        if matched:
            found[matched[2]] = matched[1].lower()
    return found


def shell(real: RealCluster, command: str) -> subprocess.CompletedProcess[str]:
    """A documented command, as a user types it: the cluster's kubeconfig and its
    kubectl on the PATH, from the repository's root."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        env={
            **os.environ,
            "KUBECONFIG": str(real.cluster.kubeconfig),
            "PATH": f"{real.cluster.binaries.kubectl.parent}:{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _parsed(done: subprocess.CompletedProcess[str]) -> Checks:
    assert done.returncode in (0, 1), f"{done.returncode}\n{done.stdout}\n{done.stderr}"
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert len(checks) == len(report["checks"]), "two checks of one name"
    assert report["failed"] == sum(c["verdict"] == "fail" for c in checks.values())
    return checks


def not_ok(checks: Checks) -> dict[str, str]:
    return {name: c["verdict"] for name, c in checks.items() if c["verdict"] != "ok"}


def check_in_the_pod_on_a_sound_node(real: RealCluster) -> None:
    text, done = documented(real)
    assert done.returncode == 0, f"{text}\n{done.stdout}\n{done.stderr}"
    verdicts = text_verdicts(done.stdout)
    code, checks = in_the_pod(real)
    assert code == 0
    assert verdicts == {name: c["verdict"] for name, c in checks.items()}, done.stdout
    assert not_ok(checks) == dict.fromkeys(POD_WARNINGS, "warn"), done.stdout
    for name in POD_WARNINGS:
        assert "does not mount it" in checks[name]["detail"], checks[name]
    # What only a serving plugin and an installed driver pass, seen from the pod.
    assert f"{DRIVER_NAME}-" in checks["driver sockets"]["detail"]
    assert checks["neuron nodes"]["detail"] == "1 publish their devices"
    assert checks["plugin probes"]["detail"].endswith("live, and ready: the kubelet registered it")


def check_on_the_host_broken_one_way_at_a_time(real: RealCluster) -> None:
    """Sound, then containerd's CDI off, then a Neuron device plugin socket beside the
    driver: each fails its check with the fix, exit status 1, and is put back."""
    code, checks = on_the_host(real)
    assert (code, not_ok(checks)) == (0, {}), checks

    config = real.node.dir / "containerd.toml"
    sound = config.read_text()
    runtime = '[plugins."io.containerd.cri.v1.runtime"]\n'
    config.write_text(sound.replace(runtime, f"{runtime}enable_cdi = false\n"))
    try:
        code, checks = on_the_host(real)
    finally:
        config.write_text(sound)
    assert (code, not_ok(checks)) == (1, {"runtime CDI": "fail"}), checks
    assert checks["runtime CDI"]["fix"] == "set enable_cdi = true and restart containerd"

    socket = f"{DEVICE_PLUGIN_DIR}/aws.amazon.com_neuron.sock"
    bind = f"import socket; socket.socket(socket.AF_UNIX).bind({socket!r})"
    assert real.node.nsenter([sys.executable, "-c", bind]).returncode == 0
    try:
        code, checks = on_the_host(real)
    finally:
        real.node.nsenter(["rm", "-f", socket])
    assert (code, not_ok(checks)) == (1, {"device plugin socket": "fail"}), checks
    check = checks["device plugin socket"]
    assert "aws.amazon.com_neuron.sock" in check["detail"], check
    assert "migration.md" in check["fix"]
    code, checks = on_the_host(real)
    assert (code, not_ok(checks)) == (0, {}), checks


def check_a_deleted_admission_policy(real: RealCluster) -> None:
    """Seen from the pod, `-o json`: the failure and its fix, exit 1; the fix (the
    install applied again) makes it pass."""
    api = "admissionregistration.k8s.io/v1"
    real.cluster.delete(api, "ValidatingAdmissionPolicy", "neuron-dra-node-labels")
    code, checks = in_the_pod(real)
    assert (code, not_ok(checks)) == (
        1,
        {**dict.fromkeys(POD_WARNINGS, "warn"), "admission policies": "fail"},
    )
    check = checks["admission policies"]
    assert check["detail"].startswith("missing validatingadmissionpolicies neuron-dra-node-labels")
    assert "apply the chart again" in check["fix"]
    real.install(real.driver.name, "--no-wait")
    code, checks = in_the_pod(real)
    assert (code, checks["admission policies"]["verdict"]) == (0, "ok")


def check_a_plugin_without_its_dra_socket(real: RealCluster) -> None:
    """The DRA socket removed under a running plugin: the kubelet can no longer call
    it. Fails from the pod, its sockets and its liveness; a new pod (the fix, which the
    kubelet's liveness probe would make too) serves again."""
    [old] = real.plugin_pods()
    gone = real.node.nsenter(["sh", "-c", f"rm /var/lib/kubelet/plugins/{DRIVER_NAME}/dra-*.sock"])
    assert gone.returncode == 0, gone.stderr
    code, checks = in_the_pod(real)
    assert code == 1
    assert not_ok(checks) == {
        **dict.fromkeys(POD_WARNINGS, "warn"),
        "driver sockets": "fail",
        "plugin probes": "fail",
    }, checks
    assert "no DRA socket serving" in checks["driver sockets"]["detail"]
    assert "restart the node's plugin pod" in checks["driver sockets"]["fix"]
    assert "not live: its DRA socket is gone" in checks["plugin probes"]["detail"]
    real.cluster.delete("v1", "Pod", old["metadata"]["name"], "neuron-dra")
    real.cluster.wait_for(
        "a new plugin pod Ready",
        lambda: (p := real.ready_plugin()) and p["metadata"]["uid"] != old["metadata"]["uid"],
        120.0,
    )
    code, checks = in_the_pod(real)
    assert (code, not_ok(checks)) == (0, dict.fromkeys(POD_WARNINGS, "warn")), checks


def check_on_the_host_without_its_plugin(real: RealCluster) -> None:
    """The driver installed but its pod kept off the node (a node selector it does not
    match): on the host, the node's missing sockets fail, as the cluster has the driver;
    the DaemonSet's pod back (the fix), it passes."""
    away = {"neuron-dra.test/away": "true"}
    selector = {"spec": {"template": {"spec": {"nodeSelector": away}}}}
    real.cluster.patch("apps/v1", "DaemonSet", "neuron-dra", selector, "neuron-dra")
    real.cluster.wait_for("the plugin pod gone", lambda: not real.plugin_pods(), 60.0)
    try:
        code, checks = on_the_host(real)
    finally:
        back = {"spec": {"template": {"spec": {"nodeSelector": dict.fromkeys(away)}}}}
        real.cluster.patch("apps/v1", "DaemonSet", "neuron-dra", back, "neuron-dra")
        real.cluster.wait_for("the plugin pod Ready again", real.ready_plugin, 120.0)
    assert code == 1
    assert not_ok(checks) == {"driver sockets": "fail"}, checks
    check = checks["driver sockets"]
    assert check["detail"].endswith("though the cluster has the driver"), check
    assert "kubectl -n neuron-dra get pods -o wide" in check["fix"]
    code, checks = on_the_host(real)
    assert (code, not_ok(checks)) == (0, {}), checks
