"""The control plane's PKI, written with the openssl CLI (the project depends on no
crypto package): the API server's serving certificate, which is also the clients' CA,
the service-account signing key, and the admin's static token."""

from __future__ import annotations

import subprocess
from pathlib import Path

ADMIN_USER = "e2e-admin"
SERVICE_IP = "10.96.0.1"  # the "kubernetes" Service: the first address of its range


def write_pki(pki: Path, ca_file: Path, token: str, address: str) -> None:
    """Write into `pki` the serving key, the service-account key pair and tokens.csv,
    and the serving certificate to `ca_file`; `address` is the API server's."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "7",
        "-subj",
        "/CN=kube-apiserver",
        "-addext",
        f"subjectAltName={subject_alt_names(address)}",
        "-keyout",
        str(pki / "serving.key"),
        "-out",
        str(ca_file),
    )
    _openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-out",
        str(pki / "sa.key"),
    )
    _openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    (pki / "tokens.csv").write_text(f'{token},{ADMIN_USER},e2e-admin-uid,"system:masters"\n')


def subject_alt_names(address: str) -> str:
    """The serving certificate's names: localhost, and where the API server listens
    elsewhere, that address and the names in-cluster clients dial."""
    names = ["IP:127.0.0.1", "DNS:localhost"]
    if address != "127.0.0.1":
        # In-cluster clients dial the "kubernetes" Service: its ClusterIP and names.
        names += [f"IP:{address}", f"IP:{SERVICE_IP}", "DNS:kubernetes.default.svc"]
    return ",".join(names)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)
