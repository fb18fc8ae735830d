"""A real, local Kubernetes control plane plus simulated kubelets.

``Cluster`` owns the lifecycle: it runs etcd, kube-apiserver, kube-scheduler
and kube-controller-manager (built by ``neuron_dra_harness.build``) on free 127.0.0.1
ports in a temp dir, with their PKI and kubeconfig, creates Node objects,
starts one ``kubeletside`` process per simulated node, and stops all of it
again, checking that nothing survives. Its API and wait helpers come from its
base, ``neuron_dra_harness.cluster_api.ClusterApi``: all API calls go through the
``kubernetes`` package's ``ApiClient`` against that server; nothing is mocked.

Usable from pytest (see ``conftest.py``) and from scripts::

    with Cluster(build()) as cluster:
        cluster.add_node("node-a")
        side = cluster.start_kubelet_side("node-a")
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar

import yaml
from kubernetes import client as k8s_client

from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster_api import DEFAULT_NAMESPACE, ClusterError
from neuron_dra_harness.kubeletside import KubeletSide
from neuron_dra_harness.node_objects import NodeObjects
from neuron_dra_harness.pki import ADMIN_USER, write_pki
from neuron_dra_harness.processes import (
    Component,
    cmdline,
    die_with_parent,
    free_port,
    http_ok,
    pid_alive,
)

# resourceclaim-controller turns ResourceClaimTemplates into claims and
# releases reservations; garbage-collector-controller deletes generated claims
# with their pods. serviceaccount-controller creates the "default"
# ServiceAccount in every namespace, so pods need no special fields (the
# ServiceAccount admission plugin stays on, as in real clusters); the
# namespace controller lets tests delete namespaces. The node lifecycle
# controller is deliberately absent: there are no real kubelets renewing
# leases, and it would mark every node NotReady.
DEFAULT_CONTROLLERS = (
    "resourceclaim-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "namespace-controller",
)

# Enables the beta resource.k8s.io versions next to the GA v1, so that
# v1beta1/v1beta2 manifests apply as written.
DEFAULT_RUNTIME_CONFIG = "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"

SERVICE_CIDR = "10.96.0.0/24"


def _gates(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


class Cluster(NodeObjects):
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager."""

    # Clusters that are running, for the failure hook that prints logs.
    active: ClassVar[list[Cluster]] = []

    def __init__(
        self,
        binaries: Binaries,
        *,
        workdir: Path | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        runtime_config: str = DEFAULT_RUNTIME_CONFIG,
        extra_args: Mapping[str, Sequence[str]] | None = None,
        keep_workdir: bool | None = None,
        address: str = "127.0.0.1",
    ) -> None:
        """``address``: where kube-apiserver listens and what it advertises. Loopback
        for simulated nodes; a real node's pods reach the API server through the
        "kubernetes" Service, so there it is an address of the node's own bridge."""
        self.binaries = binaries
        self.address = address
        self._own_workdir = workdir is None
        # Short paths: kubelet plugin sockets live below it and unix socket
        # paths are limited to 107 bytes.
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="ndra-e2e-"))
        self.feature_gates = dict(feature_gates or {})
        self.controllers = list(controllers)
        self.runtime_config = runtime_config
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.keep_workdir = (
            keep_workdir
            if keep_workdir is not None
            else bool(os.environ.get("NEURON_DRA_E2E_KEEP"))
        )
        self.token = secrets.token_hex(16)
        self.components: list[Component] = []
        # Stopped early on purpose; still checked for by stray_processes().
        self._stopped: list[Component] = []
        self.kubelet_sides: dict[str, KubeletSide] = {}
        self.ca_file = self.workdir / "pki" / "serving.crt"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.agent_kubeconfig = self.workdir / "kubeconfig.json"
        self.etcd_url = ""
        self.apiserver_port = 0
        self.server = ""
        self._health_urls: dict[str, str] = {}
        self._api = None
        self._plurals = {}
        self._started = False

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout: float = 90.0) -> None:
        """Start all components and wait until they are ready."""
        Cluster.active.append(self)
        self._started = True
        try:
            write_pki(self.workdir / "pki", self.ca_file, self.token, self.address)
            self._start_etcd()
            self._start_apiserver(timeout)
            self._write_kubeconfig()
            self._start_scheduler()
            self._start_controller_manager()
            self._connect()
            for name in ("kube-scheduler", "kube-controller-manager"):
                self._wait_component_healthy(name, timeout)
            # Pods in "default" can only be created once its ServiceAccount exists.
            self.wait_for_service_account(DEFAULT_NAMESPACE, timeout=timeout)
        except BaseException:
            self.stop(check=False)
            raise

    def stop(self, check: bool = True) -> None:
        """Stop everything; with ``check``, fail if any process of this
        cluster survived."""
        if not self._started:
            return
        self._started = False
        for side in list(self.kubelet_sides.values()):
            side.stop()
        for comp in reversed(self.components):
            comp.stop()
        if self._api is not None:
            self._api.close()
            self._api = None
        if self in Cluster.active:
            Cluster.active.remove(self)
        strays = self.stray_processes()
        if not strays and self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if strays and check:
            raise ClusterError(f"processes of the cluster in {self.workdir} survived: {strays}")

    def all_pids(self) -> list[int]:
        return [c.pid for c in self.components + self._stopped] + [
            s.component.pid for s in self.kubelet_sides.values()
        ]

    def stray_processes(self) -> list[tuple[int, str]]:
        """Live processes (pid, cmdline) that belong to this cluster: its
        components' PIDs plus anything whose command line names the workdir."""
        found: dict[int, str] = {}
        # With the separator, /tmp/x does not match /tmp/xy.
        marker = f"{self.workdir}{os.sep}"
        for pid in self.all_pids():
            if pid_alive(pid):
                found[pid] = cmdline(pid)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            cmd = cmdline(int(entry.name))
            if marker in cmd and int(entry.name) != os.getpid():
                found[int(entry.name)] = cmd
        return sorted(found.items())

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every component's log, for failure reports."""
        parts = [f"cluster workdir: {self.workdir}"]
        comps = self.components + [s.component for s in self.kubelet_sides.values()]
        parts += [comp.report(lines) for comp in comps]
        return "\n".join(parts)

    def check_components(self) -> None:
        """Raise if a component process died."""
        comps = self.components + [s.component for s in self.kubelet_sides.values()]
        for comp in comps:
            if not comp.alive():
                raise ClusterError(
                    f"{comp.name} exited with {comp.process.returncode}:\n{comp.tail(60)}"
                )

    # ----------------------------------------------------------------- components

    def start_process(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> Component:
        """Run an extra process (e.g. a DRA plugin) with its output in the
        cluster's logs, `env` added to this one's environment; it is stopped, and
        checked for, by ``stop()``."""
        return self._spawn(name, list(argv), env)

    def stop_process(self, component: Component, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop a process started with ``start_process`` before the cluster, with `sig`."""
        # Out of the checked components first: a check running meanwhile (another
        # thread's wait) must not take the stopping process for a crashed one.
        self.components.remove(component)
        self._stopped.append(component)
        component.stop(sig=sig)

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Component:
        log_dir = self.workdir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**os.environ, **env} if env else None,
                start_new_session=True,
                # Safe here: the callback only calls prctl, no locks.
                preexec_fn=die_with_parent,  # noqa: PLW1509
            )
        comp = Component(name, argv, log_path, process)
        if name.startswith("kubeletside"):
            return comp
        self.components.append(comp)
        return comp

    def _bound(
        self, start: Callable[[], Component], ready: Callable[[], object], attempts: int = 3
    ) -> None:
        """Start a component on ports `start` chooses, then wait for `ready`. Another
        process (a test run beside this one) may take a port between its choice and the
        component's bind: the component then exits, and `start` chooses again, up to
        `attempts` times."""
        for attempt in range(1, attempts + 1):
            component = start()
            try:
                ready()
                return
            except ClusterError:
                taken = not component.alive() and "address already in use" in component.tail(5)
                if not taken or attempt == attempts:
                    raise
                self.components.remove(component)

    def _start_etcd(self) -> None:
        def start() -> Component:
            client_port, peer_port = free_port(), free_port()
            self.etcd_url = f"http://127.0.0.1:{client_port}"
            peer = f"http://127.0.0.1:{peer_port}"
            return self._spawn(
                "etcd",
                [
                    str(self.binaries.etcd),
                    "--name=e2e",
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls={self.etcd_url}",
                    f"--advertise-client-urls={self.etcd_url}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=e2e={peer}",
                    # Durability is pointless for a throw-away store; fsync
                    # dominates request latency otherwise.
                    "--unsafe-no-fsync",
                    "--log-level=warn",
                    *self.extra_args.get("etcd", []),
                ],
            )

        def ready() -> None:
            self.wait_for("etcd healthy", lambda: http_ok(self.etcd_url + "/health"), 30.0)

        self._bound(start, ready)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver: every client sees an outage until start_apiserver()."""
        [component] = [c for c in self.components if c.name == "kube-apiserver"]
        self.stop_process(component)

    def upgrade(
        self,
        binaries: Binaries,
        feature_gates: Mapping[str, bool] | None = None,
        timeout: float = 90.0,
    ) -> None:
        """Run the control plane of another release on the same etcd and address, the
        way a cluster is upgraded (or downgraded): the API server first, then the
        scheduler and controller manager. Kubelet sides keep their release."""
        for name in ("kube-controller-manager", "kube-scheduler", "kube-apiserver"):
            [component] = [c for c in self.components if c.name == name]
            self.stop_process(component)
        self.binaries = dataclasses.replace(
            binaries,
            kubelet_dir=self.binaries.path("kubeletside").parent,
            kubelet_version=self.binaries.kubelet_release,
        )
        self.feature_gates = dict(feature_gates or {})
        self._start_apiserver(timeout, port=self.apiserver_port)
        self._start_scheduler()
        self._start_controller_manager()
        for name in ("kube-scheduler", "kube-controller-manager"):
            self._wait_component_healthy(name, timeout)

    def start_apiserver(self, timeout: float = 60.0) -> None:
        """Start kube-apiserver again, on the same address, after stop_apiserver()."""
        self._start_apiserver(timeout, port=self.apiserver_port)

    def _start_apiserver(self, timeout: float, port: int | None = None) -> None:
        """Start kube-apiserver on `port`, or on a free one (chosen again if taken)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))

        def ready() -> bool:
            req = urllib.request.Request(
                self.server + "/readyz", headers={"Authorization": f"Bearer {self.token}"}
            )
            return http_ok(req, ctx)

        self._bound(
            lambda: self._spawn_apiserver(port or free_port()),
            lambda: self.wait_for("kube-apiserver /readyz", ready, timeout),
            attempts=1 if port else 3,
        )

    def _spawn_apiserver(self, port: int) -> Component:
        pki = self.workdir / "pki"
        self.apiserver_port = port
        self.server = f"https://{self.address}:{self.apiserver_port}"
        loopback = self.address == "127.0.0.1"
        args = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={self.ca_file}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--cert-dir={pki}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--runtime-config={self.runtime_config}",
            "--allow-privileged=true",
            # A loopback address is not a valid Endpoints address, so the
            # "kubernetes" Service endpoints are not maintained there.
            f"--endpoint-reconciler-type={'none' if loopback else 'lease'}",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ]
        if not loopback:
            # A real node's name resolves nowhere: reach its kubelet (logs, exec) by IP.
            args.append("--kubelet-preferred-address-types=InternalIP")
        if self.feature_gates:
            args.append(f"--feature-gates={_gates(self.feature_gates)}")
        args += self.extra_args.get("kube-apiserver", [])
        return self._spawn("kube-apiserver", args)

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": ADMIN_USER}}],
            "current-context": "e2e",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        # The same in JSON, for the driver's agents: like an agent in a pod, which reads
        # its service account, they then load no YAML parser.
        self.agent_kubeconfig.write_text(json.dumps(config, indent=2))

    def _common_component_args(self, name: str) -> list[str]:
        port = free_port()
        self._health_urls[name] = f"https://127.0.0.1:{port}/healthz"
        args = [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / name}",
        ]
        if self.feature_gates:
            args.append(f"--feature-gates={_gates(self.feature_gates)}")
        return args

    def _start_scheduler(self) -> None:
        args = [str(self.binaries.kube_scheduler), *self._common_component_args("kube-scheduler")]
        self._spawn("kube-scheduler", args + self.extra_args.get("kube-scheduler", []))

    def _start_controller_manager(self) -> None:
        args = [
            str(self.binaries.kube_controller_manager),
            *self._common_component_args("kube-controller-manager"),
            f"--controllers={','.join(self.controllers)}",
            "--use-service-account-credentials=false",
            # Published as the kube-root-ca.crt ConfigMap that service account
            # token volumes carry (root-ca-cert-publisher, on a real node).
            f"--root-ca-file={self.ca_file}",
        ]
        self._spawn(
            "kube-controller-manager", args + self.extra_args.get("kube-controller-manager", [])
        )

    def _wait_component_healthy(self, name: str, timeout: float) -> None:
        # Their serving certs are self-signed in memory; only liveness matters.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        url = self._health_urls[name]
        self.wait_for(f"{name} /healthz", lambda: http_ok(url, ctx), timeout)

    def _connect(self) -> None:
        conf = k8s_client.Configuration()
        conf.host = self.server
        conf.ssl_ca_cert = str(self.ca_file)
        conf.api_key = {"authorization": self.token}
        conf.api_key_prefix = {"authorization": "Bearer"}
        self._api = k8s_client.ApiClient(conf)

    def start_kubelet_side(
        self,
        node_name: str,
        *,
        root_dir: Path | None = None,
        cdi_dir: Path | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        verbosity: int = 2,
        timeout: float = 30.0,
    ) -> KubeletSide:
        """Start the kubelet stand-in for an existing Node and wait until it
        is ready: pod informer synced and the start-up wipe of the node's
        ResourceSlices done (slices published afterwards stay).

        `root_dir` is the kubelet's root directory (plugin sockets and checkpoints), by
        default under the cluster's work directory, where the CDI directory stays unless
        `cdi_dir` says otherwise: a benchmark puts the root on a disk, as a node has
        /var/lib/kubelet, and keeps CDI on tmpfs, as a node has /var/run/cdi."""
        if node_name in self.kubelet_sides:
            raise ClusterError(f"a kubeletside for {node_name} is already running")
        root = root_dir or (self.workdir / "k" / node_name)
        cdi = cdi_dir or (self.workdir / "k" / node_name / "cdi")
        root.mkdir(parents=True, exist_ok=True)
        cdi.mkdir(parents=True, exist_ok=True)
        report = root / "report.jsonl"
        port = free_port()
        gates = self.feature_gates if feature_gates is None else feature_gates
        argv = [
            str(self.binaries.kubeletside),
            f"--kubeconfig={self.kubeconfig}",
            f"--node-name={node_name}",
            f"--root-dir={root}",
            f"--cdi-dir={cdi}",
            f"--report-file={report}",
            f"--status-addr=127.0.0.1:{port}",
            f"-v={verbosity}",
        ]
        if gates:
            argv.append(f"--feature-gates={_gates(gates)}")
        comp = self._spawn(f"kubeletside-{node_name}", argv)
        side = KubeletSide(node_name, root, cdi, report, f"http://127.0.0.1:{port}", comp, self)
        self.kubelet_sides[node_name] = side
        self.wait_for(
            f"kubeletside {node_name} ready", lambda: http_ok(side.status_url + "/readyz"), timeout
        )
        return side

    def stop_kubelet_side(self, node_name: str) -> None:
        side = self.kubelet_sides.pop(node_name)
        side.stop()
        self._stopped.append(side.component)
