"""The API server configuration: kubeconfig shapes and the pod's service account."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.agent.apiclient import config as apiconfig
from neuron_dra.agent.apiclient.config import ApiConfig, ConfigError, TokenFile

SERVER = "https://10.0.0.1:6443"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key, usable as a CA and as a client certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl")
    directory = tmp_path_factory.mktemp("pki")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def kubeconfig(
    path: Path,
    cluster: dict[str, Any],
    user: dict[str, Any] | None = None,
    **top: Any,
) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "contexts": [
            {"name": "other", "context": {"cluster": "nope", "user": "nope"}},
            {"name": "ctx", "context": {"cluster": "c1", "user": "u1"}},
        ],
        "clusters": [{"name": "c1", "cluster": cluster}],
        "users": [{"name": "u1", "user": user or {}}],
    }
    doc.update(top)
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- kubeconfig --------------------------------------------------------------


def test_token_and_ca_file_relative_to_the_kubeconfig(
    tmp_path: Path, pki: tuple[Path, Path]
) -> None:
    (tmp_path / "certs").mkdir()
    shutil.copy(pki[0], tmp_path / "certs" / "ca.crt")
    path = kubeconfig(
        tmp_path / "kubeconfig",
        {"server": SERVER + "/", "certificate-authority": "certs/ca.crt"},
        {"token": "abc"},
    )
    config = apiconfig.load(path)
    assert config.server == SERVER
    assert config.ca_file == str(tmp_path / "certs" / "ca.crt")
    assert config.authorization() == "Bearer abc"
    assert config.verify
    context = config.ssl_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname


def test_inline_ca_and_client_certificate(tmp_path: Path, pki: tuple[Path, Path]) -> None:
    cert, key = pki
    path = kubeconfig(
        tmp_path / "kubeconfig",
        {"server": SERVER, "certificate-authority-data": b64(cert.read_bytes())},
        {
            "client-certificate-data": b64(cert.read_bytes()),
            "client-key-data": b64(key.read_bytes()),
        },
    )
    config = apiconfig.load(path)
    assert config.ca_data == cert.read_text()
    assert config.cert_data == cert.read_bytes()
    assert config.key_data == key.read_bytes()
    assert config.authorization() is None
    context = config.ssl_context()  # loads the inline certificate and key
    assert context is not None
    assert context.cert_store_stats()["x509_ca"] == 1


def test_client_certificate_files(tmp_path: Path, pki: tuple[Path, Path]) -> None:
    cert, key = pki
    shutil.copy(cert, tmp_path / "client.crt")
    shutil.copy(key, tmp_path / "client.key")
    path = kubeconfig(
        tmp_path / "kubeconfig",
        {"server": SERVER, "certificate-authority": str(cert)},
        {"client-certificate": "client.crt", "client-key": "client.key"},
    )
    config = apiconfig.load(path)
    assert (config.cert_file, config.key_file) == (
        str(tmp_path / "client.crt"),
        str(tmp_path / "client.key"),
    )
    assert config.ssl_context() is not None


def test_a_certificate_without_its_key_is_refused(tmp_path: Path, pki: tuple[Path, Path]) -> None:
    path = kubeconfig(
        tmp_path / "kubeconfig", {"server": SERVER}, {"client-certificate": str(pki[0])}
    )
    with pytest.raises(ConfigError, match=r"users\[u1\]\.user: a client certificate needs"):
        apiconfig.load(path)


def test_insecure_skip_tls_verify(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kubeconfig", {"server": SERVER, "insecure-skip-tls-verify": True})
    config = apiconfig.load(path)
    assert not config.verify
    context = config.ssl_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname


def test_tls_server_name_and_plain_http(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "a", {"server": SERVER, "tls-server-name": "kubernetes"})
    assert apiconfig.load(path).tls_server_name == "kubernetes"
    plain = apiconfig.load(kubeconfig(tmp_path / "b", {"server": "http://127.0.0.1:8080"}))
    assert plain.ssl_context() is None


def test_token_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one\n")
    path = kubeconfig(tmp_path / "kubeconfig", {"server": SERVER}, {"tokenFile": "token"})
    config = apiconfig.load(path)
    assert config.authorization() == "Bearer one"
    replacement = tmp_path / "token.new"
    replacement.write_text("two\n")
    replacement.replace(tmp_path / "token")  # as the kubelet swaps a projected token in
    assert config.authorization() == "Bearer two"


def test_token_file_is_read_again_after_a_minute(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    now = [0.0]
    source = TokenFile(token, clock=lambda: now[0])
    stat = token.stat()
    token.write_text("two")  # same size; the times put back: a change stat() cannot see
    os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    now[0] = 59.0
    assert source() == "Bearer one"
    now[0] = 60.0
    assert source() == "Bearer two"


def test_token_file_keeps_the_last_token_while_the_file_is_away(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    source = TokenFile(token)
    token.unlink()
    assert source() == "Bearer one"


def test_a_static_token_wins_over_a_token_file(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path / "kubeconfig", {"server": SERVER}, {"token": "t", "tokenFile": "missing"}
    )
    assert apiconfig.load(path).authorization() == "Bearer t"


def test_other_users_go_through_the_client_library(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path / "kubeconfig",
        {"server": SERVER, "insecure-skip-tls-verify": True},
        {"username": "admin", "password": "secret"},
    )
    config = apiconfig.load(path)
    assert config.server == SERVER
    assert not config.verify
    assert config.authorization() == "Basic " + b64(b"admin:secret")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"current-context": ""}, r"current-context: missing"),
        ({"current-context": "absent"}, r"contexts: no entry named 'absent'"),
        ({"contexts": {"ctx": {}}}, r"contexts: expected a list"),
        (
            {"clusters": [{"name": "c1", "cluster": {"server": 7}}]},
            r"clusters\[c1\]\.cluster\.server: expected a string",
        ),
        (
            {"clusters": [{"name": "c1", "cluster": {}}]},
            r"clusters\[c1\]\.cluster\.server: missing",
        ),
        (
            {"clusters": [{"name": "c1", "cluster": {"server": "10.0.0.1:6443"}}]},
            r"clusters\[c1\]\.cluster\.server: not an http\(s\) URL",
        ),
        (
            {
                "clusters": [
                    {
                        "name": "c1",
                        "cluster": {"server": SERVER, "certificate-authority-data": "not base64!"},
                    }
                ]
            },
            r"clusters\[c1\]\.cluster\.certificate-authority-data: not valid base64",
        ),
        (
            {
                "clusters": [
                    {"name": "c1", "cluster": {"server": SERVER, "insecure-skip-tls-verify": "yes"}}
                ]
            },
            r"clusters\[c1\]\.cluster\.insecure-skip-tls-verify: not a boolean",
        ),
        (
            {
                "clusters": [
                    {"name": "c1", "cluster": {"server": SERVER, "proxy-url": "http://proxy:3128"}}
                ]
            },
            r"clusters\[c1\]\.cluster\.proxy-url: not supported",
        ),
        (
            {"users": [{"name": "u1", "user": {"token": ["a"]}}]},
            r"users\[u1\]\.user\.token: expected a string",
        ),
    ],
)
def test_a_malformed_kubeconfig_names_the_file_and_the_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = kubeconfig(tmp_path / "kubeconfig", {"server": SERVER}, {"token": "t"}, **change)
    with pytest.raises(ConfigError, match=message) as raised:
        apiconfig.load(path)
    assert str(raised.value).startswith(f"{path}: ")


def test_a_file_that_is_no_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match=rf"^{path}: not a kubeconfig"):
        apiconfig.load(path)
    path.write_text("key: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"^{path}: not valid YAML"):
        apiconfig.load(path)
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'absent'}: cannot read"):
        apiconfig.load(tmp_path / "absent")


def test_a_kubeconfig_in_json_is_read_without_the_yaml_parser(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kubeconfig", {"server": SERVER}, {"token": "t"})
    as_json = tmp_path / "kubeconfig.json"
    as_json.write_text(json.dumps(yaml.safe_load(path.read_text())))
    probe = (
        "import sys; from pathlib import Path; "
        "from neuron_dra.agent.apiclient import config; "
        f"c = config.load(Path({str(as_json)!r})); "
        "print(c.server, 'yaml' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [SERVER, "False"]
    as_json.write_text('{"clusters": [')
    with pytest.raises(ConfigError, match=rf"^{as_json}: not valid JSON"):
        apiconfig.load(as_json)


# --- in-cluster --------------------------------------------------------------


@pytest.fixture
def service_account(tmp_path: Path, pki: tuple[Path, Path]) -> Path:
    shutil.copy(pki[0], tmp_path / "ca.crt")
    (tmp_path / "token").write_text("sa-token\n")
    return tmp_path


def test_in_cluster(service_account: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = apiconfig.load(None, in_cluster_dir=service_account, environ=environ)
    assert config.server == "https://10.96.0.1:443"
    assert config.ca_file == str(service_account / "ca.crt")
    assert config.authorization() == "Bearer sa-token"
    assert config.ssl_context() is not None
    # The kubelet rotates the bound token in place.
    (service_account / "token").write_text("rotated-token")
    assert config.authorization() == "Bearer rotated-token"


def test_in_cluster_ipv6(service_account: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    config = apiconfig.in_cluster(service_account, environ)
    assert config.server == "https://[fd00::1]:443"


def test_in_cluster_outside_a_pod(service_account: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"):
        apiconfig.in_cluster(service_account, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})


def test_in_cluster_without_token_or_ca(service_account: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    (service_account / "token").unlink()
    with pytest.raises(ConfigError, match=rf"{service_account / 'token'}: cannot read"):
        apiconfig.in_cluster(service_account, environ)
    (service_account / "token").write_text("")
    with pytest.raises(ConfigError, match="the token file is empty"):
        apiconfig.in_cluster(service_account, environ)
    (service_account / "ca.crt").unlink()
    with pytest.raises(ConfigError, match=rf"{service_account / 'ca.crt'}: .*CA file is missing"):
        apiconfig.in_cluster(service_account, environ)


def test_a_missing_ca_file_is_named(tmp_path: Path) -> None:
    config = ApiConfig(server=SERVER, ca_file=str(tmp_path / "absent.crt"))
    with pytest.raises(ConfigError, match=r"absent\.crt"):
        config.ssl_context()
