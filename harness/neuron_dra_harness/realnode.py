"""A real Kubernetes node on this machine: kubelet, containerd, runc, CNI and kube-proxy.

The node's programs see a host of their own, made in a mount namespace so that the
machine itself is left alone:

- ``/sys`` is the real sysfs with the fake Neuron tree laid over it (an overlay), the
  cgroup hierarchies bound back on top; ``/dev`` likewise gets the fake
  ``/dev/neuronN`` character devices; ``/opt`` the fake ``/opt/aws/neuron``; the boot
  id is a file of the fake tree, so a test can "reboot" the node by writing it.
- ``/var`` is an overlay whose upper directory is in the node's work dir, so
  ``/var/lib/kubelet`` (the path the driver's DaemonSet mounts) is the node's own and
  the tests read it from outside; ``/run`` is a fresh tmpfs with ``/run/cdi`` bound
  to the node's CDI directory.

The network is the machine's: the CNI bridge ``ndra0`` (``NODE_ADDRESS``, made before
the control plane, whose API server listens there so that pods reach it through the
"kubernetes" Service that kube-proxy programs), and pods in network namespaces of
their own. Every process of the node runs in the cgroup ``/ndra-<node>`` (the
kubelet's cgroup root), which is how ``stop()`` finds and ends all of them,
containers and shims included.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import ClassVar

import yaml

from neuron_dra_harness import images
from neuron_dra_harness.build import NodeBinaries, cache_root
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.cluster_api import ClusterError
from neuron_dra_harness.images import Image
from neuron_dra_harness.processes import Component, die_with_parent, free_port, http_ok

BRIDGE = "ndra0"
NODE_ADDRESS = "10.88.0.1"
POD_CIDR = "10.88.0.0/16"
RUNC = Path("/usr/sbin/runc")
CNI_BIN_DIR = Path("/usr/lib/cni")
CGROUP_FS = Path("/sys/fs/cgroup")
NAMESPACE_K8S = "k8s.io"  # containerd's namespace of the CRI plugin


# The kubelet asks for a negative oom_score_adj for pod sandboxes (-998) and critical
# or Guaranteed pods (-997); lowering it below 0 needs CAP_SYS_RESOURCE, which some
# sandboxed machines withhold even from root. There runc is called through this shim,
# which raises a negative value to 0 in the bundle's spec and changes nothing else.
_RUNC_SHIM = """#!{python}
import json, os, sys
args = sys.argv[1:]
if "--bundle" in args:
    path = os.path.join(args[args.index("--bundle") + 1], "config.json")
    with open(path) as f:
        spec = json.load(f)
    process = spec.get("process") or {{}}
    if process.get("oomScoreAdj", 0) < 0:
        process["oomScoreAdj"] = 0
        with open(path, "w") as f:
            json.dump(spec, f)
os.execv("{runc}", ["{runc}", *args])
"""
_CAP_SYS_RESOURCE = 24


def can_lower_oom_score() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    return False


def missing() -> list[str]:
    """What this machine lacks to run a real node, as names a skip line can show."""
    lacks = []
    if os.geteuid() != 0:
        lacks.append("root")
    if not RUNC.is_file():
        lacks.append("runc (apt-get install runc)")
    if not (CNI_BIN_DIR / "bridge").is_file():
        lacks.append("CNI plugins (apt-get install containernetworking-plugins)")
    for tool in ("unshare", "nsenter", "iptables", "ip"):
        if shutil.which(tool) is None:
            lacks.append(tool)
    if not (CGROUP_FS / "pids").is_dir() and not (CGROUP_FS / "cgroup.controllers").is_file():
        lacks.append("cgroups mounted at /sys/fs/cgroup")
    return lacks


def _cgroup_controllers() -> list[Path]:
    """The cgroup v1 hierarchies (one directory per controller), or the v2 root."""
    if (CGROUP_FS / "cgroup.controllers").is_file():
        return [CGROUP_FS]
    return sorted(
        p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink() and p.name != "unified"
    )


@contextmanager
def bridge() -> Iterator[str]:
    """The node's CNI bridge with its gateway address, for the life of the block. The
    bridge and kube-proxy's rules are the machine's: one real node at a time, so a
    second test session or demo waits here for the first to finish."""
    lock_path = cache_root() / "real-node.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Left by a run that was killed: nothing else can be using it under the lock.
        subprocess.run(["ip", "link", "del", BRIDGE], check=False, capture_output=True)
        for cmd in (
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{NODE_ADDRESS}/16", "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
        ):
            subprocess.run(cmd, check=True, capture_output=True)
        try:
            yield NODE_ADDRESS
        finally:
            subprocess.run(["ip", "link", "del", BRIDGE], check=False, capture_output=True)


_SETUP = r"""
set -eu
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/ndra/sys /run/ndra/dev /run/cdi
mount --rbind /sys /run/ndra/sys
mount -t overlay overlay -o "lowerdir=$FAKE/sys:/run/ndra/sys" /sys
mount --rbind /run/ndra/sys/fs/cgroup /sys/fs/cgroup
mount --rbind /dev /run/ndra/dev
mount -t overlay overlay -o "lowerdir=$FAKE/dev:/run/ndra/dev" /dev
for sub in pts shm mqueue hugepages; do
    if mountpoint -q "/run/ndra/dev/$sub"; then mount --rbind "/run/ndra/dev/$sub" "/dev/$sub"; fi
done
mount --bind "$FAKE/proc/sys/kernel/random/boot_id" /proc/sys/kernel/random/boot_id
mkdir -p "$NODE/var" "$NODE/.var" "$NODE/opt" "$NODE/.opt"
mount -t overlay overlay -o "lowerdir=/var,upperdir=$NODE/var,workdir=$NODE/.var" /var
mount -t overlay overlay -o "lowerdir=$FAKE/opt:/opt,upperdir=$NODE/opt,workdir=$NODE/.opt" /opt
mount --bind "$NODE/cdi" /run/cdi
"""


class RealNode:
    """One real node named ``name`` of ``cluster``, its Neuron hardware the fake tree
    at ``fake_root`` (made with character devices, see ``build_fake_node``)."""

    # Nodes that are running, for the failure hook that prints logs.
    active: ClassVar[list[RealNode]] = []

    def __init__(
        self,
        cluster: Cluster,
        binaries: NodeBinaries,
        name: str,
        fake_root: Path,
        *,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.binaries = binaries
        self.name = name
        self.fake_root = fake_root
        self.labels = dict(labels or {})
        self.dir = cluster.workdir / "node" / name
        self.cdi_dir = self.dir / "cdi"
        self.kubelet_dir = self.dir / "var" / "lib" / "kubelet"
        self.socket = self.dir / "containerd.sock"
        self.cgroup = f"/ndra-{name}"
        self._holder: subprocess.Popen[bytes] | None = None
        self.components: dict[str, Component] = {}
        self._kubelet_port = free_port()
        self._kubelet_healthz = free_port()

    # ----------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 120.0) -> None:
        RealNode.active.append(self)
        try:
            self._enter_namespace()
            self._make_cgroups()
            self._start_containerd(timeout)
            self.start_kubelet(timeout)
            self._start_kube_proxy()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End every process of the node (pods too), then remove its cgroups and the
        rules kube-proxy made; the mounts go with the namespace."""
        if self in RealNode.active:
            RealNode.active.remove(self)
        for name in ("kube-proxy", "kubelet", "containerd"):
            comp = self.components.pop(name, None)
            if comp is not None:
                comp.stop()
        self._kill_cgroup()
        if self._holder is not None:
            self._holder.kill()
            self._holder.wait()
            self._holder = None
        proxy = self.binaries.kube_proxy
        subprocess.run([str(proxy), "--cleanup"], check=False, capture_output=True)

    def power_off(self) -> None:
        """As a power cut: every process of the node killed at once, pods included;
        what is on disk (and the mounts of the namespace) stays."""
        for name in ("kube-proxy", "kubelet", "containerd"):
            comp = self.components.pop(name, None)
            if comp is not None:
                comp.process.kill()
                comp.process.wait()
        self._kill_cgroup()

    def power_on(self, boot_id: str, timeout: float = 120.0) -> None:
        """Boot again with a new boot id: the runtime, the kubelet and kube-proxy."""
        boot_file = self.fake_root / "proc/sys/kernel/random/boot_id"
        with boot_file.open("w") as out:  # in place: the namespace binds this inode
            out.write(boot_id + "\n")
        self._make_cgroups()
        self._start_containerd(timeout)
        self.start_kubelet(timeout)
        self._start_kube_proxy()

    def __enter__(self) -> RealNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- namespace

    def _enter_namespace(self) -> None:
        for sub in ("cdi", "cni", "containerd", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.fake_root / "opt/aws/neuron").mkdir(parents=True, exist_ok=True)
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509
        )
        env = {"FAKE": str(self.fake_root), "NODE": str(self.dir), "PATH": os.environ["PATH"]}
        self.wait_for_namespace()
        proc = self.nsenter(["sh", "-c", _SETUP], env=env)
        if proc.returncode != 0:
            raise ClusterError(f"setting up the node's mounts failed: {proc.stderr.strip()}")

    def wait_for_namespace(self) -> None:
        assert self._holder is not None
        own = Path("/proc/self/ns/mnt").readlink()
        path = Path(f"/proc/{self._holder.pid}/ns/mnt")
        self.cluster.wait_for(
            "the node's mount namespace", lambda: path.exists() and path.readlink() != own, 10.0
        )

    def nsenter(
        self, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in the node's mount namespace and wait for it."""
        return subprocess.run(
            self._in_namespace(argv), check=False, capture_output=True, text=True, env=env
        )

    def _in_namespace(self, argv: Sequence[str]) -> list[str]:
        assert self._holder is not None
        return ["nsenter", f"--target={self._holder.pid}", "--mount", "--", *argv]

    # ----------------------------------------------------------------- cgroups

    def _make_cgroups(self) -> None:
        for hierarchy in _cgroup_controllers():
            for sub in ("", "runtime"):
                path = hierarchy / self.cgroup.lstrip("/") / sub
                path.mkdir(parents=True, exist_ok=True)
                if (path / "cpuset.cpus").exists():
                    # A cpuset cgroup takes no task before it has CPUs and memory nodes.
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (path / knob).write_text((path.parent / knob).read_text())

    def _join_runtime_cgroup(self) -> None:
        # Runs in the child between fork and exec: only writes to files.
        for hierarchy in _cgroup_controllers():
            procs = hierarchy / self.cgroup.lstrip("/") / "runtime" / "cgroup.procs"
            procs.write_text(f"{os.getpid()}\n")

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for hierarchy in _cgroup_controllers():
            root = hierarchy / self.cgroup.lstrip("/")
            if root.is_dir():
                for procs in root.rglob("cgroup.procs"):
                    pids.update(int(p) for p in procs.read_text().split())
        return pids

    def _kill_cgroup(self) -> None:
        """SIGKILL every process in the node's cgroups until none is left, then
        remove the cgroups, deepest first."""
        deadline = time.monotonic() + 30.0
        while pids := self._cgroup_pids():
            for pid in pids:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise ClusterError(f"processes of node {self.name} survive SIGKILL: {pids}")
            time.sleep(0.05)  # the kernel reaps asynchronously; nothing to wait on
        for hierarchy in _cgroup_controllers():
            root = hierarchy / self.cgroup.lstrip("/")
            if root.is_dir():
                for path in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):
                    if path.is_dir():
                        path.rmdir()
                root.rmdir()

    # ----------------------------------------------------------------- programs

    def _spawn(self, name: str, argv: Sequence[str]) -> Component:
        log_path = self.dir / "logs" / f"{name}.log"
        env = {**os.environ, "PATH": f"{self.binaries.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                self._in_namespace(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=self._join_runtime_cgroup,  # noqa: PLW1509
            )
        comp = Component(name, list(argv), log_path, process)
        self.components[name] = comp
        return comp

    def _start_containerd(self, timeout: float) -> None:
        config = self.dir / "containerd.toml"
        config.write_text(self._containerd_config())
        (self.dir / "cni" / "10-ndra.conflist").write_text(json.dumps(self._cni_config()))
        self._spawn("containerd", [str(self.binaries.containerd), f"--config={config}"])
        self.cluster.wait_for(
            "containerd serving",
            lambda: self.ctr(["version"], check=False).returncode == 0,
            timeout,
        )

    def _runc(self) -> Path:
        """runc, or where the machine needs it the oom_score_adj shim in front of it."""
        if can_lower_oom_score():
            return RUNC
        shim = self.dir / "runc"
        shim.write_text(_RUNC_SHIM.format(python=sys.executable, runc=RUNC))
        shim.chmod(0o755)
        return shim

    def _containerd_config(self) -> str:
        cri = "io.containerd.cri.v1"
        return f"""\
version = 3
root = "{self.dir / "containerd" / "root"}"
state = "{self.dir / "containerd" / "state"}"

[grpc]
address = "{self.socket}"

[plugins."{cri}.images"]
snapshotter = "overlayfs"

[plugins."{cri}.images".pinned_images]
sandbox = "{images.PAUSE_NAME}"

[plugins."{cri}.runtime"]
cdi_spec_dirs = ["/run/cdi"]

[plugins."{cri}.runtime".cni]
bin_dirs = ["{CNI_BIN_DIR}"]
conf_dir = "{self.dir / "cni"}"

[plugins."{cri}.runtime".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."{cri}.runtime".containerd.runtimes.runc.options]
BinaryName = "{self._runc()}"
SystemdCgroup = false
"""

    def _cni_config(self) -> dict[str, object]:
        ipam = {
            "type": "host-local",
            "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_ADDRESS}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(self.dir / "cni" / "ipam"),
        }
        bridge_plugin = {
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": ipam,
        }
        return {"cniVersion": "1.0.0", "name": "ndra", "plugins": [bridge_plugin]}

    def ctr(self, args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binaries.ctr), f"--address={self.socket}", "-n", NAMESPACE_K8S, *args]
        proc = subprocess.run(argv, check=False, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def import_image(self, image: Image) -> None:
        self.ctr(["images", "import", "--all-platforms", str(image.archive)])

    def start_kubelet(self, timeout: float = 120.0) -> None:
        config = self.dir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config(), sort_keys=False))
        labels = {
            "kubernetes.io/os": "linux",
            **self.labels,
        }
        argv = [
            str(self.binaries.kubelet),
            f"--config={config}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--hostname-override={self.name}",
            f"--node-ip={NODE_ADDRESS}",
            f"--node-labels={','.join(f'{k}={v}' for k, v in sorted(labels.items()))}",
            "-v=2",
        ]
        self._spawn("kubelet", argv)
        url = f"http://127.0.0.1:{self._kubelet_healthz}/healthz"
        self.cluster.wait_for("kubelet /healthz", lambda: http_ok(url), timeout)
        self.cluster.wait_for("node Ready", self.ready, timeout)

    def stop_kubelet(self) -> None:
        self.components.pop("kubelet").stop()

    def ready(self) -> bool:
        node = self.cluster.get_or_none("v1", "Node", self.name)
        if node is None:
            return False
        conditions = node.get("status", {}).get("conditions") or []
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return False
        return not any(
            t.get("key") == "node.kubernetes.io/not-ready"
            for t in node.get("spec", {}).get("taints") or []
        )

    def _kubelet_config(self) -> dict[str, object]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_ADDRESS,
            "port": self._kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self._kubelet_healthz,
            # The API server's requests for logs and exec are the only callers.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup,
            # This machine has cgroup v1; from 1.35 the kubelet refuses it unless told.
            "failCgroupV1": False,
            "failSwapOn": False,
            "resolvConf": "",
            # Disk and memory are the machine's: no eviction, no image GC.
            "evictionHard": {
                "memory.available": "0%",
                "nodefs.available": "0%",
                "imagefs.available": "0%",
            },
            "imageGCHighThresholdPercent": 100,
            "localStorageCapacityIsolation": False,
            "protectKernelDefaults": False,
            "makeIPTablesUtilChains": False,
            "syncFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
        }

    def _start_kube_proxy(self) -> None:
        argv = [
            str(self.binaries.kube_proxy),
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--hostname-override={self.name}",
            "--proxy-mode=iptables",
            f"--cluster-cidr={POD_CIDR}",
            # Leaves the machine's conntrack table size alone.
            "--conntrack-max-per-core=0",
            f"--healthz-bind-address=127.0.0.1:{free_port()}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
        ]
        self._spawn("kube-proxy", argv)

    def log_tails(self, lines: int = 40) -> str:
        parts = [f"node {self.name}: {self.dir}"]
        parts += [comp.report(lines) for comp in self.components.values()]
        return "\n".join(parts)
