"""What a node needs for the driver, read from its own files: on the host (`/`), or
in the plugin's pod, whose mounts put the host's /sys, /dev, the kubelet's plugin
directories and the CDI directory where `--sysfs-root`, `--kubelet-dir` and
`--cdi-dir` say. What the pod does not mount (the device plugins' directory, the
runtime's configuration) is a warning that says so, never an OK."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from consts import DRIVER_NAME
from neuron_dra.agent.kubelet.sockets import driver_sockets, serving
from neuron_dra.hardware.discovery import CLASS_DIR, DEVICES_DIR, discover
from neuron_dra.hardware.driverformats import NEWEST_KNOWN, beyond_known
from neuron_dra.hardware.instance_types import lookup
from neuron_dra.tools.doctor.verdicts import Check, fail, ok, warn

# Sockets the Neuron device plugin registers with the kubelet, by resource name.
_DEVICE_PLUGIN_SOCKET = re.compile(r"^(aws\.amazon\.com_neuron|neuron).*\.sock$")
_CDI_DIRS = ("etc/cdi", "var/run/cdi")
NOT_MOUNTED = "the plugin's pod does not mount it"
NOT_SERVING = "the driver is not serving this node"
NOT_NEURON = "neuron node"  # the one check off a Neuron node
AS_ROOT = "run doctor as root (sudo): the kubelet's directories are root's alone"


def node_checks(
    root: Path,
    kubelet_dir: Path,
    containerd_config: Path,
    cdi_dirs: Sequence[Path] | None = None,
) -> list[Check]:
    """Every node check; `root` is what the node's `/` is here, `cdi_dirs` where the
    CDI directories are (default /etc/cdi and /var/run/cdi under `root`)."""
    neuron = _neuron_driver(root)
    if neuron[0].name == NOT_NEURON:
        return neuron  # the rest would be noise on a laptop or a CI runner
    agent = _agent(kubelet_dir)
    return [
        *neuron,
        _device_plugin(kubelet_dir, driver_serving=agent.verdict == "ok"),
        _kubelet_dirs(kubelet_dir),
        _cdi_dirs(cdi_dirs or [root / d for d in _CDI_DIRS]),
        _containerd_cdi(containerd_config),
        agent,
    ]


def _neuron_driver(root: Path) -> list[Check]:
    found = discover(root)
    inventory = found.inventory
    problems = "; ".join(f"{f.path}: {f.message}" for f in found.findings)
    if not inventory.devices and not _neuron_traces(root, inventory.instance_type):
        return [
            fail(
                NOT_NEURON,
                f"not a Neuron node: no {root / 'dev'}/neuron* and no Neuron sysfs under "
                f"{root / 'sys'}",
                "to check a cluster from here, run its checks alone: neuron-dra doctor "
                "--no-node --kubeconfig ~/.kube/config; on a Neuron node, install the Neuron "
                "kernel driver (aws-neuronx-dkms) and load it (modprobe neuron)",
            )
        ]
    if not inventory.devices:
        fix = (
            "install the Neuron kernel driver (aws-neuronx-dkms) and load it (modprobe "
            "neuron); on EKS use a Neuron AMI"
        )
        return [fail("neuron devices", f"no Neuron device under {root / 'sys'}", fix)]
    version = inventory.driver_version or "unknown"
    what = (
        f"{len(inventory.devices)} devices of {inventory.instance_type or 'an unknown type'}, "
        f"Neuron driver {version}"
    )
    checks = [
        ok("neuron devices", what)
        if not problems
        else warn("neuron devices", f"{what}; {problems}", "see the findings' paths")
    ]
    if inventory.derived is not None:
        checks.append(
            warn(
                "instance type",
                f"{inventory.instance_type} is not in this release's catalogue; published as "
                f"its sysfs says: {inventory.derived.summary()}",
                "upgrade neuron-dra for a release whose catalogue has it",
            )
        )
    if beyond_known(inventory.driver_version):
        checks.append(
            warn(
                "driver layout",
                f"driver {version} is newer than {NEWEST_KNOWN}, the newest whose sysfs "
                "layout this release reads",
                "check `neuron-dra discover` and upgrade neuron-dra",
            )
        )
    missing = [
        f"/dev/neuron{d.index}"
        for d in inventory.devices
        # os.path's tests, not Path's: those raise on a path this user may not see.
        if not os.path.exists(root / "dev" / f"neuron{d.index}")  # noqa: PTH110
    ]
    checks.append(
        fail("device nodes", f"missing {', '.join(missing)}", "reload the Neuron driver")
        if missing
        else ok("device nodes", f"{len(inventory.devices)} /dev/neuronN present")
    )
    return checks


def _neuron_traces(root: Path, instance_type: str | None) -> bool:
    """Whether anything says this is a Neuron node, devices or not: the Neuron driver's
    sysfs or module, a /dev/neuron* node, or a Neuron instance type in the DMI table (a
    node whose kernel driver is not loaded)."""
    sysfs = (DEVICES_DIR, CLASS_DIR, "sys/module/neuron")
    # os.path's tests, not Path's: those raise on a path this user may not see.
    if any(os.path.exists(root / path) for path in sysfs):  # noqa: PTH110
        return True
    if instance_type is not None and lookup(instance_type) is not None:
        return True
    try:
        return any(p.name.startswith("neuron") for p in (root / "dev").iterdir())
    except OSError:
        return False


def _denied(path: Path) -> bool:
    """Whether this process may not look into the directory `path` (or a parent)."""
    try:
        with os.scandir(path):
            return False
    except PermissionError:
        return True
    except OSError:
        return False


def _device_plugin(kubelet_dir: Path, *, driver_serving: bool) -> Check:
    directory = kubelet_dir / "device-plugins"
    if _denied(directory):
        return warn("device plugin socket", f"{directory} not readable here", AS_ROOT)
    if not directory.is_dir():
        return warn(
            "device plugin socket",
            f"{directory} is not visible here ({NOT_MOUNTED}): a Neuron device plugin "
            "socket there is not looked for",
            "the cluster's `device plugin` check (--in-cluster or --kubeconfig) reads each "
            "node's allocatable instead; or run doctor on the host",
        )
    try:
        sockets = sorted(p.name for p in directory.iterdir() if _DEVICE_PLUGIN_SOCKET.match(p.name))
    except OSError as err:
        return warn("device plugin socket", f"{directory} not read: {err}", AS_ROOT)
    if not sockets:
        return ok("device plugin socket", f"no Neuron device plugin socket in {directory}")
    detail = f"the Neuron device plugin serves this node ({', '.join(sockets)} in {directory})"
    fix = (
        "move the node over as docs/operators/migration.md says: label it, so that the "
        "device plugin's DaemonSet leaves it, before the driver runs there"
    )
    if driver_serving:
        return fail(
            "device plugin socket",
            f"{detail} beside the driver: two pods could get one device",
            fix,
        )
    return warn("device plugin socket", f"{detail}: the driver must not run here beside it", fix)


def _kubelet_dirs(kubelet_dir: Path) -> Check:
    if _denied(kubelet_dir):
        return warn("kubelet directories", f"{kubelet_dir} not readable here", AS_ROOT)
    missing = [d for d in ("plugins_registry", "plugins") if not (kubelet_dir / d).is_dir()]
    if missing:
        return fail(
            "kubelet directories",
            f"no {', '.join(str(kubelet_dir / d) for d in missing)}",
            "pass the kubelet's --root-dir as --kubelet-dir (the chart's kubeletRootDir)",
        )
    return ok("kubelet directories", f"{kubelet_dir}/plugins_registry and plugins")


def _cdi_dirs(dirs: Sequence[Path]) -> Check:
    # os.path.isdir: Path.is_dir raises on a directory this user may not see.
    present = [str(d) for d in dirs if os.path.isdir(d)]  # noqa: PTH112
    if not present:
        return warn(
            "CDI directories",
            f"no {' nor '.join(map(str, dirs))}",
            "the plugin creates /var/run/cdi; the runtime must read it (next check)",
        )
    return ok("CDI directories", ", ".join(present))


def _containerd_cdi(config: Path) -> Check:
    try:
        text = config.read_text()
    except FileNotFoundError:
        return warn(
            "runtime CDI",
            f"no {config} here ({NOT_MOUNTED}): the runtime's CDI setting is unknown",
            "run doctor on the host with --containerd-config; containerd 2.0 and CRI-O read "
            "CDI specs by default, containerd 1.7 needs enable_cdi = true",
        )
    except OSError:
        return warn(
            "runtime CDI",
            f"{config} not readable: the runtime's CDI setting is unknown",
            "containerd 2.0 and CRI-O read CDI specs by default; containerd 1.7 needs "
            "enable_cdi = true in its CRI plugin's configuration",
        )
    if re.search(r"^\s*enable_cdi\s*=\s*false", text, re.MULTILINE):
        return fail(
            "runtime CDI",
            f"{config} turns CDI off (enable_cdi = false)",
            "set enable_cdi = true and restart containerd",
        )
    if re.search(r"^\s*enable_cdi\s*=\s*true", text, re.MULTILINE):
        return ok("runtime CDI", f"{config}: enable_cdi = true")
    if re.search(r"^\s*version\s*=\s*3\b", text, re.MULTILINE):
        return ok("runtime CDI", f"{config}: containerd 2 configuration, CDI on by default")
    return warn(
        "runtime CDI",
        f"{config} does not say enable_cdi: on by default in containerd 2.0, off in 1.7",
        "on containerd 1.7 set enable_cdi = true under the CRI plugin and restart it",
    )


def _agent(kubelet_dir: Path) -> Check:
    """The driver's sockets, of any pod (their names carry its UID): one of each kind
    that accepts connections is a plugin serving the kubelet."""
    registry, plugin_dir = kubelet_dir / "plugins_registry", kubelet_dir / "plugins" / DRIVER_NAME
    denied = [str(d) for d in (registry, plugin_dir) if _denied(d)]
    if denied:
        return warn("driver sockets", f"{' and '.join(denied)} not readable here", AS_ROOT)
    registrations, dras = driver_sockets(registry, plugin_dir)
    if not registrations and not dras:
        return warn(
            "driver sockets",
            f"{NOT_SERVING} (no socket of its in {registry} nor {plugin_dir})",
            "before install this is expected; after it, see `kubectl -n neuron-dra logs` "
            "of this node's plugin pod",
        )
    problems, serving_now = [], []
    for kind, directory, found in (
        ("registration", registry, registrations),
        ("DRA", plugin_dir, dras),
    ):
        live = [p for p in found if serving(p)]
        serving_now += live
        if live:
            continue
        dead = f": {', '.join(p.name for p in found)} refuse connections" if found else ""
        problems.append(f"no {kind} socket serving in {directory}{dead}")
    if problems:
        return fail(
            "driver sockets",
            "; ".join(problems),
            "restart the node's plugin pod; its log says why a socket is gone",
        )
    return ok("driver sockets", ", ".join(map(str, serving_now)))
