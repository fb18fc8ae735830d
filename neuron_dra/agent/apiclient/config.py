"""Where the API server is and how to authenticate to it, without the client library.

Two sources are read here directly: the pod's service account (in-cluster) and
kubeconfig files of the common shapes (the current context's cluster `server`,
`certificate-authority`/`-data`, `insecure-skip-tls-verify`, `tls-server-name`,
and its user's `token`/`tokenFile` and `client-certificate`/`client-key`
(+`-data`)). Importing the `kubernetes` package costs the node agent more
memory and start-up time than all of its own code, so it is imported only for
kubeconfig users this module does not read (exec plugins, auth providers,
username/password): see `_library_config`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_dra.agent.files.filestamp import Stamp, stamp

__all__ = [
    "IN_CLUSTER_DIR",
    "ApiConfig",
    "ConfigError",
    "TokenFile",
    "from_kubeconfig",
    "in_cluster",
    "load",
]

IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Bound service-account tokens are rotated in place by the kubelet (well before their
# hour is up); a change is seen at once, and a minute bounds a change stat() missed.
TOKEN_REREAD_S = 60.0

# The kubeconfig fields read here. A user entry with any other field (exec,
# auth-provider, username, ...) is handed to the client library's loader.
_USER_FIELDS = frozenset(
    {
        "token",
        "tokenFile",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
    }
)
# Fields that change nothing for this client.
_IGNORED_CLUSTER_FIELDS = frozenset({"extensions", "disable-compression"})

Authorization = Callable[[], "str | None"]


class ConfigError(ValueError):
    """No usable API server configuration: the message names the file and the field, in
    one line (the command line prints it as `neuron-dra: error: ...`)."""


def _no_authorization() -> str | None:
    return None


@dataclass(frozen=True)
class ApiConfig:
    """An API server address, its TLS settings and the Authorization header to send."""

    server: str  # scheme://host[:port], no trailing slash
    authorization: Authorization = _no_authorization
    ca_file: str | None = None
    ca_data: str | None = None  # PEM
    verify: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None  # PEM
    key_data: bytes | None = None  # PEM
    tls_server_name: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # sent with every request

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS settings as a context; None for a plain-HTTP server."""
        if not self.server.startswith("https://"):
            return None
        if self.verify:
            try:
                context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
            except (OSError, ssl.SSLError) as err:
                raise ConfigError(
                    f"certificate authority {self.ca_file or '(data)'}: {err}"
                ) from None
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file or self.cert_data:
            _load_client_cert(context, self)
        return context


class TokenFile:
    """A bearer token read from a file, read again when the file changes or a minute passed.

    A failed read keeps the last token: the kubelet swaps a projected token in by
    renaming, and a request is better sent with the old token than not at all.
    """

    def __init__(
        self,
        path: Path,
        *,
        reread_s: float = TOKEN_REREAD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._reread_s = reread_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: Stamp | None = None
        self._read_at = 0.0
        self._token = ""
        self._read()
        if not self._token:
            raise ConfigError(f"{path}: the token file is empty")

    def __call__(self) -> str:
        with self._lock:
            now = self._clock()
            if stamp(self._path) != self._stamp or now - self._read_at >= self._reread_s:
                with contextlib.suppress(ConfigError):
                    self._read()
            return f"Bearer {self._token}"

    def _read(self) -> None:
        # Before the read: a change in between makes the next stamp differ, not match.
        found = stamp(self._path)
        try:
            token = self._path.read_text().strip()
        except OSError as err:
            raise ConfigError(f"{self._path}: cannot read the token file: {err}") from None
        self._read_at = self._clock()
        self._stamp = found
        if token:
            self._token = token


def load(
    kubeconfig: Path | None,
    *,
    in_cluster_dir: Path = IN_CLUSTER_DIR,
    environ: Mapping[str, str] = os.environ,
) -> ApiConfig:
    """From a kubeconfig file, or the pod's service account when None."""
    if kubeconfig is None:
        return in_cluster(in_cluster_dir, environ)
    return from_kubeconfig(kubeconfig)


def _parsed(path: Path, text: str) -> Any:
    """A kubeconfig's document. JSON, which is YAML too, is read without the YAML
    parser: a pod of the DaemonSet reads its service account and never imports it, and
    neither does an agent given a kubeconfig in JSON."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError as err:
            raise ConfigError(f"{path}: not valid JSON: {err}") from None
    import yaml  # noqa: PLC0415

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None


def in_cluster(
    directory: Path = IN_CLUSTER_DIR, environ: Mapping[str, str] = os.environ
) -> ApiConfig:
    """The pod's service account: the API server's service address, token and CA."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
            "(not in a pod?); pass a kubeconfig"
        )
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    ca_file = directory / "ca.crt"
    if not ca_file.is_file():
        raise ConfigError(f"in-cluster: {ca_file}: the service account's CA file is missing")
    return ApiConfig(
        server=f"https://{host}:{port}",
        authorization=TokenFile(directory / "token"),
        ca_file=str(ca_file),
    )


def from_kubeconfig(path: Path) -> ApiConfig:
    """The current context of a kubeconfig file, YAML or JSON; relative paths are
    against its directory."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the kubeconfig: {err}") from None
    doc = _parsed(path, text)
    where = _Where(path)
    root = where.mapping(doc, "")
    current = where.string(root, "current-context")
    context = where.mapping(where.named(root, "contexts", current).get("context"), "context")
    cluster_name = where.string(context, "cluster", f"contexts[{current}].context")
    cluster = where.mapping(
        where.named(root, "clusters", cluster_name).get("cluster"), f"clusters[{cluster_name}]"
    )
    user_name = context.get("user") or ""
    user: dict[str, Any] = {}
    if user_name:
        user = where.mapping(
            where.named(root, "users", str(user_name)).get("user") or {}, f"users[{user_name}]"
        )
    if set(user) - _USER_FIELDS:
        return _library_config(path)
    return _native_config(
        where, f"clusters[{cluster_name}].cluster", cluster, f"users[{user_name}].user", user
    )


def _native_config(
    where: _Where, cluster_at: str, cluster: dict[str, Any], user_at: str, user: dict[str, Any]
) -> ApiConfig:
    unknown = (
        set(cluster)
        - _IGNORED_CLUSTER_FIELDS
        - {
            "server",
            "certificate-authority",
            "certificate-authority-data",
            "insecure-skip-tls-verify",
            "tls-server-name",
        }
    )
    if unknown:
        raise ConfigError(f"{where.path}: {cluster_at}.{sorted(unknown)[0]}: not supported")
    server = where.string(cluster, "server", cluster_at).rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise ConfigError(f"{where.path}: {cluster_at}.server: not an http(s) URL: {server!r}")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise ConfigError(f"{where.path}: {cluster_at}.insecure-skip-tls-verify: not a boolean")
    ca_data = where.data(cluster, "certificate-authority-data", cluster_at)
    authorization: Authorization = _no_authorization
    if user.get("token"):
        token = where.string(user, "token", user_at)
        authorization = lambda: f"Bearer {token}"  # noqa: E731
    elif user.get("tokenFile"):
        authorization = TokenFile(where.file(user, "tokenFile", user_at))
    cert_file = where.optional_file(user, "client-certificate", user_at)
    key_file = where.optional_file(user, "client-key", user_at)
    cert_data = where.data(user, "client-certificate-data", user_at)
    key_data = where.data(user, "client-key-data", user_at)
    if bool(cert_file or cert_data) != bool(key_file or key_data):
        raise ConfigError(
            f"{where.path}: {user_at}: a client certificate needs its key and a key its certificate"
        )
    tls_server_name = cluster.get("tls-server-name")
    return ApiConfig(
        server=server,
        authorization=authorization,
        ca_file=where.optional_file(cluster, "certificate-authority", cluster_at),
        ca_data=ca_data.decode() if ca_data else None,
        verify=not insecure,
        cert_file=cert_file,
        key_file=key_file,
        cert_data=cert_data,
        key_data=key_data,
        tls_server_name=str(tls_server_name) if tls_server_name else None,
    )


def _library_config(path: Path) -> ApiConfig:
    """Any other kubeconfig user, through the `kubernetes` package's loader.

    The library runs exec plugins and auth providers and turns username/password
    into basic auth; the server, CA, client certificate and Authorization header
    are taken from the configuration it fills. Its `refresh_api_key_hook` is
    called before every request (under a lock, as requests come from several
    threads), so a plugin's token is renewed when it expires.
    """
    try:
        from kubernetes import client, config  # noqa: PLC0415
    except ImportError:
        raise ConfigError(
            f"{path}: its user runs an exec plugin, an auth provider or a password, which "
            "needs the kubernetes package: pip install kubernetes (in a cluster, "
            "the plugin uses its service account and never needs it)"
        ) from None

    conf = client.Configuration()
    try:
        # The loader has no annotations; what it fills in is read back typed below.
        config.load_kube_config(str(path), client_configuration=conf)  # type: ignore[no-untyped-call]
    except Exception as err:  # the loader raises ConfigException, KeyError, ValueError...
        raise ConfigError(f"{path}: {err}") from None
    lock = threading.Lock()

    def authorization() -> str | None:
        with lock:
            value = conf.get_api_key_with_prefix("BearerToken", alias="authorization")
        return str(value) if value else None

    return ApiConfig(
        server=str(conf.host).rstrip("/"),
        authorization=authorization,
        ca_file=conf.ssl_ca_cert,
        verify=bool(conf.verify_ssl),
        cert_file=conf.cert_file,
        key_file=conf.key_file,
        tls_server_name=conf.tls_server_name,
    )


@dataclass(frozen=True)
class _Where:
    """Reads kubeconfig fields, naming the file and the field in every error."""

    path: Path

    def fail(self, at: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {at}: {problem}" if at else f"{self.path}: {problem}")

    def mapping(self, value: object, at: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(at, "expected a mapping" if at else "not a kubeconfig (no mapping)")
        return value

    def string(self, obj: dict[str, Any], key: str, at: str = "") -> str:
        name = f"{at}.{key}" if at else key
        value = obj.get(key)
        if value is None or value == "":
            raise self.fail(name, "missing")
        if not isinstance(value, str):
            raise self.fail(name, "expected a string")
        return value

    def named(self, root: dict[str, Any], section: str, name: str) -> dict[str, Any]:
        entries = root.get(section) or []
        if not isinstance(entries, list):
            raise self.fail(section, "expected a list")
        for entry in entries:
            if isinstance(entry, dict) and entry.get("name") == name:
                return entry
        raise self.fail(section, f"no entry named {name!r}")

    def file(self, obj: dict[str, Any], key: str, at: str) -> Path:
        file = Path(self.string(obj, key, at)).expanduser()
        return file if file.is_absolute() else self.path.parent / file

    def optional_file(self, obj: dict[str, Any], key: str, at: str) -> str | None:
        return str(self.file(obj, key, at)) if obj.get(key) else None

    def data(self, obj: dict[str, Any], key: str, at: str) -> bytes | None:
        if not obj.get(key):
            return None
        try:
            return base64.b64decode(self.string(obj, key, at), validate=True)
        except (binascii.Error, ValueError):
            raise self.fail(f"{at}.{key}", "not valid base64") from None


def _load_client_cert(context: ssl.SSLContext, config: ApiConfig) -> None:
    # The ssl module loads a certificate chain from files only; inline data goes
    # through a private temporary file that is removed once loaded.
    with tempfile.TemporaryDirectory(prefix="neuron-dra-tls-") as tmp:
        cert_file, key_file = config.cert_file, config.key_file
        if config.cert_data:
            cert_file = str(Path(tmp) / "client.crt")
            Path(cert_file).write_bytes(config.cert_data)
        if config.key_data:
            key_file = str(Path(tmp) / "client.key")
            Path(key_file).write_bytes(config.key_data)
        try:
            context.load_cert_chain(str(cert_file), key_file)
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(f"client certificate {cert_file}: {err}") from None
