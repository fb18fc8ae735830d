"""A real, local Kubernetes control plane plus simulated kubelets.

``Cluster`` runs etcd, kube-apiserver, kube-scheduler and
kube-controller-manager (built by ``tests.e2e.build``) on free 127.0.0.1
ports in a temp dir, creates Node objects, and starts one ``kubeletside``
process per simulated node. All API calls go through the ``kubernetes``
package's ``ApiClient`` against that server; nothing is mocked.

Usable from pytest (see ``conftest.py``) and from scripts::

    with Cluster(build()) as cluster:
        cluster.add_node("node-a")
        side = cluster.start_kubelet_side("node-a")
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar, cast

import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from tests.e2e.build import Binaries

T = TypeVar("T")
Obj = dict[str, Any]

ADMIN_USER = "e2e-admin"
DEFAULT_NAMESPACE = "default"

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

# Set by the TaintNodesByCondition admission plugin on every new Node; the
# node lifecycle controller would lift it once the node reports Ready.
_NOT_READY_TAINT = "node.kubernetes.io/not-ready"

KUBELETSIDE_CDI_ANNOTATION = "kubeletside.neuron.test/cdi-devices"
KUBELETSIDE_ERROR_ANNOTATION = "kubeletside.neuron.test/prepare-error"

_PR_SET_PDEATHSIG = 1


class ClusterError(RuntimeError):
    """A component failed or a wait ran out of time."""


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # If the test process is killed, its components must not outlive it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _gates(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Component:
    """One running binary with its log file."""

    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        # Children a component may have spawned share its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class KubeletSide:
    """A running ``kubeletside`` for one simulated node."""

    node_name: str
    root_dir: Path
    cdi_dir: Path
    report_file: Path
    status_url: str
    component: Component
    cluster: Cluster = field(repr=False)

    @property
    def registry_dir(self) -> Path:
        """Where DRA plugins put their registration sockets."""
        return self.root_dir / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """Parent dir of the plugins' DRA sockets (``plugins/<driver>/dra.sock``)."""
        return self.root_dir / "plugins"

    def report(self) -> list[Obj]:
        """All JSON-lines report entries so far."""
        if not self.report_file.exists():
            return []
        entries: list[Obj] = []
        for line in self.report_file.read_text().splitlines():
            if line.strip():
                entries.append(cast(Obj, json.loads(line)))
        return entries

    def report_events(self, event: str) -> list[Obj]:
        return [e for e in self.report() if e.get("event") == event]

    def registered_plugins(self) -> dict[str, str]:
        """Driver name -> DRA endpoint of the plugins currently registered."""
        with urllib.request.urlopen(self.status_url + "/plugins", timeout=5) as resp:
            return cast(dict[str, str], json.loads(resp.read()))

    def wait_for_plugin(self, driver: str, timeout: float = 30.0) -> str:
        """Wait until ``driver`` is registered; return its endpoint."""
        return self.cluster.wait_for(
            f"DRA driver {driver} registered on {self.node_name}",
            lambda: self.registered_plugins().get(driver),
            timeout,
        )

    def stop(self) -> None:
        self.component.stop()


class Cluster:
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
    ) -> None:
        self.binaries = binaries
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
        self.etcd_url = ""
        self.apiserver_port = 0
        self.server = ""
        self._health_urls: dict[str, str] = {}
        self._api: Any = None
        self._plurals: dict[tuple[str, str], tuple[str, bool]] = {}
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
            self._write_pki()
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
            if _pid_alive(pid):
                found[pid] = _cmdline(pid)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            cmd = _cmdline(int(entry.name))
            if marker in cmd and int(entry.name) != os.getpid():
                found[int(entry.name)] = cmd
        return sorted(found.items())

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every component's log, for failure reports."""
        parts = [f"cluster workdir: {self.workdir}"]
        comps = self.components + [s.component for s in self.kubelet_sides.values()]
        for comp in comps:
            state = "running" if comp.alive() else f"exited {comp.process.returncode}"
            parts.append(f"----- {comp.name} ({state}) {comp.log_path} -----")
            parts.append(comp.tail(lines))
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

    def start_process(self, name: str, argv: Sequence[str]) -> Component:
        """Run an extra process (e.g. a DRA plugin) with its output in the
        cluster's logs; it is stopped, and checked for, by ``stop()``."""
        return self._spawn(name, list(argv))

    def stop_process(self, component: Component) -> None:
        """Stop a process started with ``start_process`` before the cluster."""
        component.stop()
        self._stopped.append(component)
        self.components.remove(component)

    def _spawn(self, name: str, argv: list[str]) -> Component:
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
                start_new_session=True,
                # Safe here: the callback only calls prctl, no locks.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        comp = Component(name, argv, log_path, process)
        if name.startswith("kubeletside"):
            return comp
        self.components.append(comp)
        return comp

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def _write_pki(self) -> None:
        # openssl CLI: the project does not depend on a crypto package.
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self._openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "7", "-subj", "/CN=kube-apiserver",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(pki / "serving.key"), "-out", str(self.ca_file),
        )  # fmt: skip
        self._openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-out", str(pki / "sa.key"),
        )  # fmt: skip
        self._openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
        (pki / "tokens.csv").write_text(
            f'{self.token},{ADMIN_USER},e2e-admin-uid,"system:masters"\n'
        )

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self._spawn(
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
        self.wait_for("etcd healthy", lambda: _http_ok(self.etcd_url + "/health"), 30.0)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver: every client sees an outage until start_apiserver()."""
        [component] = [c for c in self.components if c.name == "kube-apiserver"]
        self.stop_process(component)

    def start_apiserver(self, timeout: float = 60.0) -> None:
        """Start kube-apiserver again, on the same address, after stop_apiserver()."""
        self._start_apiserver(timeout, port=self.apiserver_port)

    def _start_apiserver(self, timeout: float, port: int | None = None) -> None:
        pki = self.workdir / "pki"
        self.apiserver_port = port or free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        args = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={self.ca_file}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--cert-dir={pki}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/24",
            f"--runtime-config={self.runtime_config}",
            "--allow-privileged=true",
            # A loopback address is not a valid Endpoints address, so the
            # "kubernetes" Service endpoints are not maintained.
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ]
        if self.feature_gates:
            args.append(f"--feature-gates={_gates(self.feature_gates)}")
        args += self.extra_args.get("kube-apiserver", [])
        self._spawn("kube-apiserver", args)
        ctx = ssl.create_default_context(cafile=str(self.ca_file))

        def ready() -> bool:
            req = urllib.request.Request(
                self.server + "/readyz", headers={"Authorization": f"Bearer {self.token}"}
            )
            return _http_ok(req, ctx)

        self.wait_for("kube-apiserver /readyz", ready, timeout)

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
        self.wait_for(f"{name} /healthz", lambda: _http_ok(url, ctx), timeout)

    def _connect(self) -> None:
        conf = k8s_client.Configuration()
        conf.host = self.server
        conf.ssl_ca_cert = str(self.ca_file)
        conf.api_key = {"authorization": self.token}
        conf.api_key_prefix = {"authorization": "Bearer"}
        self._api = k8s_client.ApiClient(conf)

    @property
    def api_client(self) -> Any:
        """The ``kubernetes.client.ApiClient`` for typed API classes, e.g.
        ``kubernetes.client.CoreV1Api(cluster.api_client)``."""
        if self._api is None:
            raise ClusterError("cluster is not running")
        return self._api

    # ----------------------------------------------------------------- raw API

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One API request; returns the decoded JSON body."""
        params = [
            (k, str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items()
        ]
        method_, url, headers, payload, post = self.api_client.param_serialize(
            method,
            path,
            query_params=params,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api_client.call_api(method_, url, headers, payload, post)
        data = resp.read()
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")
        if not 200 <= resp.status < 300:
            raise ApiException.from_response(http_resp=resp, body=text, data=None)
        return json.loads(text) if text else None

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """Plural name and namespaced-ness of a kind, from API discovery."""
        key = (api_version, kind)
        if key not in self._plurals:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = cast(Obj, self.request("GET", base))
            for res in listing.get("resources", []):
                if "/" not in res["name"]:
                    self._plurals[(api_version, res["kind"])] = (res["name"], res["namespaced"])
        if key not in self._plurals:
            raise ClusterError(f"{kind} is not served in {api_version}")
        return self._plurals[key]

    def path(
        self, api_version: str, kind: str, name: str | None = None, namespace: str | None = None
    ) -> str:
        """URL path of a collection or of one object."""
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            base += f"/namespaces/{namespace or DEFAULT_NAMESPACE}"
        base += f"/{plural}"
        return f"{base}/{name}" if name else base

    def create(self, obj: Obj) -> Obj:
        meta = obj.get("metadata", {})
        path = self.path(obj["apiVersion"], obj["kind"], namespace=meta.get("namespace"))
        return cast(Obj, self.request("POST", path, obj))

    def apply(self, obj: Obj, field_manager: str = "e2e") -> Obj:
        """Server-side apply (create or update)."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        return cast(
            Obj,
            self.request(
                "PATCH",
                path,
                obj,
                query={"fieldManager": field_manager, "force": True},
                content_type="application/apply-patch+yaml",
            ),
        )

    def apply_yaml(self, text: str) -> list[Obj]:
        """Apply every document of a YAML manifest."""
        return [self.apply(doc) for doc in yaml.safe_load_all(text) if doc]

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        return cast(Obj, self.request("GET", self.path(api_version, kind, name, namespace)))

    def get_or_none(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_objects(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        query: dict[str, str | int | bool] = {}
        if field_selector:
            query["fieldSelector"] = field_selector
        if label_selector:
            query["labelSelector"] = label_selector
        result = cast(
            Obj, self.request("GET", self.path(api_version, kind, None, namespace), query=query)
        )
        return cast(list[Obj], result.get("items") or [])

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """JSON merge patch, optionally of a subresource such as ``status``."""
        path = self.path(api_version, kind, name, namespace)
        if subresource:
            path += f"/{subresource}"
        return cast(
            Obj, self.request("PATCH", path, patch, content_type="application/merge-patch+json")
        )

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
    ) -> None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        try:
            self.request("DELETE", self.path(api_version, kind, name, namespace), body)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            capture_output=True,
            text=True,
        )

    # ----------------------------------------------------------------- waiting

    def wait_for(
        self,
        what: str,
        check: Callable[[], T | None],
        timeout: float = 30.0,
        interval: float = 0.1,
    ) -> T:
        """Poll ``check`` until it returns something truthy or the deadline
        passes; fails early if a component died. API errors count as "not yet"."""
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            try:
                result = check()
                if result:
                    return result
            except (ApiException, OSError, ValueError) as exc:
                last_error = exc
            self.check_components()
            if time.monotonic() >= deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
            time.sleep(interval)

    def wait_for_service_account(self, namespace: str, timeout: float = 30.0) -> None:
        self.wait_for(
            f"ServiceAccount {namespace}/default",
            lambda: self.get_or_none("v1", "ServiceAccount", "default", namespace),
            timeout,
        )

    def create_namespace(self, name: str, timeout: float = 30.0) -> Obj:
        """Create a namespace and wait until pods can be created in it."""
        ns = self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.wait_for_service_account(name, timeout)
        return ns

    def wait_for_pod(
        self,
        name: str,
        namespace: str = DEFAULT_NAMESPACE,
        predicate: Callable[[Obj], bool] = lambda _pod: True,
        what: str = "condition",
        timeout: float = 30.0,
    ) -> Obj:
        def check() -> Obj | None:
            pod = self.get_or_none("v1", "Pod", name, namespace)
            return pod if pod is not None and predicate(pod) else None

        return self.wait_for(f"pod {namespace}/{name}: {what}", check, timeout)

    def wait_for_pod_scheduled(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> Obj:
        return self.wait_for_pod(
            name, namespace, lambda p: bool(p["spec"].get("nodeName")), "bound to a node", timeout
        )

    def wait_for_pod_running(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> Obj:
        return self.wait_for_pod(
            name, namespace, lambda p: p.get("status", {}).get("phase") == "Running",
            "phase Running", timeout,
        )  # fmt: skip

    def wait_for_pod_gone(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> None:
        self.wait_for(
            f"pod {namespace}/{name} deleted",
            lambda: self.get_or_none("v1", "Pod", name, namespace) is None,
            timeout,
        )

    def wait_for_claim_allocated(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> Obj:
        def check() -> Obj | None:
            claim = self.get_or_none("resource.k8s.io/v1", "ResourceClaim", name, namespace)
            if claim is None:
                return None
            results = (
                claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results")
            )
            return claim if results else None

        return self.wait_for(f"ResourceClaim {namespace}/{name} allocated", check, timeout)

    def events_for(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> list[Obj]:
        """core/v1 Events about the object called ``name``."""
        return self.list_objects(
            "v1", "Event", namespace, field_selector=f"involvedObject.name={name}"
        )

    # ----------------------------------------------------------------- nodes

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
    ) -> Obj:
        """Create a Ready, schedulable Node object (no kubelet behind it)."""
        all_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        }
        self.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels}}
        )
        resources = {"cpu": "16", "memory": "64Gi", "pods": "110", **(allocatable or {})}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated node",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": self.version(),
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "kubeletside://0",
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "kubeProxyVersion": "",
            },
        }  # fmt: skip
        self.patch("v1", "Node", name, {"status": status}, subresource="status")
        node = self.get("v1", "Node", name)
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != _NOT_READY_TAINT]
        if kept != taints:
            node = self.patch("v1", "Node", name, {"spec": {"taints": kept or None}})
        return node

    def version(self) -> str:
        return str(cast(Obj, self.request("GET", "/version"))["gitVersion"])

    def start_kubelet_side(
        self,
        node_name: str,
        *,
        cdi_dir: Path | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        verbosity: int = 2,
        timeout: float = 30.0,
    ) -> KubeletSide:
        """Start the kubelet stand-in for an existing Node and wait until it
        is ready: pod informer synced and the start-up wipe of the node's
        ResourceSlices done (slices published afterwards stay)."""
        if node_name in self.kubelet_sides:
            raise ClusterError(f"a kubeletside for {node_name} is already running")
        root = self.workdir / "k" / node_name
        cdi = cdi_dir or (root / "cdi")
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
            f"kubeletside {node_name} ready", lambda: _http_ok(side.status_url + "/readyz"), timeout
        )
        return side

    def stop_kubelet_side(self, node_name: str) -> None:
        side = self.kubelet_sides.pop(node_name)
        side.stop()
        self._stopped.append(side.component)


def _http_ok(url: str | urllib.request.Request, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes: it runs nothing.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def processes_running(paths: Iterable[Path]) -> list[tuple[int, str]]:
    """Live processes whose executable is one of ``paths``."""
    wanted = {str(p.resolve()) for p in paths}
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = str((entry / "exe").readlink())
        except OSError:
            continue
        if exe.removesuffix(" (deleted)") in wanted and _pid_alive(int(entry.name)):
            found.append((int(entry.name), _cmdline(int(entry.name))))
    return found
