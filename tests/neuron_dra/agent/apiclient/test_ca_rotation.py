"""A certificate authority rotated in place: the next connection trusts the new one.

Two CAs made with openssl, an HTTPS server on loopback presenting a certificate of
the first, then (restarted on the same port) of the second, while the client's CA
file is rewritten in place, as the kubelet rewrites a projected ca.crt.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.agent.apiclient.kube import ApiConfig, ApiError, Kube

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def authority(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for 127.0.0.1."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        f"/CN={name}",
        "-keyout",
        f"{name}-ca.key",
        "-out",
        f"{name}-ca.crt",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
    )
    (directory / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{name}-ca.crt",
        "-CAkey",
        f"{name}-ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.crt",
    )
    return directory / f"{name}-ca.crt", directory / f"{name}.crt", directory / f"{name}.key"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"metadata": {"name": "n1", "uid": "u1"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


def serve(port: int, cert: Path, key: Path) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def two_authorities(tmp_path: Path) -> Iterator[tuple[Path, ...]]:
    yield (*authority(tmp_path, "old"), *authority(tmp_path, "new"))


def test_a_rotated_ca_bundle_is_read_for_the_next_connection(
    tmp_path: Path, two_authorities: tuple[Path, ...]
) -> None:
    old_ca, old_cert, old_key, new_ca, new_cert, new_key = two_authorities
    bundle = tmp_path / "ca.crt"
    bundle.write_bytes(old_ca.read_bytes())
    server = serve(0, old_cert, old_key)
    port = server.server_address[1]
    kube = Kube(ApiConfig(server=f"https://127.0.0.1:{port}", ca_file=str(bundle)))
    try:
        assert asyncio.run(kube.get_node("n1"))["metadata"]["uid"] == "u1"
        server.shutdown()
        server.server_close()
        server = serve(port, new_cert, new_key)
        # The server's certificate changed; until the bundle does, nothing verifies it.
        with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
            asyncio.run(kube.get_node("n1"))
        bundle.write_bytes(new_ca.read_bytes() + b"\n")  # in place, as the kubelet does
        assert asyncio.run(kube.get_node("n1"))["metadata"]["uid"] == "u1"
    finally:
        kube.close()
        server.shutdown()
        server.server_close()
